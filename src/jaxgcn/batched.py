"""Many training runs as ONE compiled program: the face of :mod:`jaxgcn.training.runs`, every
name where it always was (``jaxgcn.batched.fit_runs``, ...)."""

from __future__ import annotations

from jaxgcn.training.runs import (  # noqa: F401
    MAX_RUNS_PER_DEVICE, ROW_FLOATS, BatchResult, RunSpec, compile_batch, concat_specs, fit_batch, fit_runs,
    init_params, make_specs, run_inputs, run_mesh, runs_per_device_for, runs_per_program, unstack_params)
