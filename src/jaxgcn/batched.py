"""Many training runs as ONE compiled program: the face of :mod:`jaxgcn.training.runs`, every
name where it always was (``jaxgcn.batched.fit_runs``, ...)."""

from __future__ import annotations

from jaxgcn.plan import MAX_RUNS_PER_DEVICE, ROW_FLOATS, run_mesh, runs_per_device_for, runs_per_program  # noqa: F401
from jaxgcn.training.runs import (  # noqa: F401
    BatchResult, Entry, entries_for, fit_batch, fit_runs, init_params, program_key, program_of,
    run_inputs, unstack_params)
