"""An alias, for users' code: many runs as one program, under the name earlier releases gave it.

``jaxgcn.batched.fit_runs``, ``Entry``, ``entries_for``, ``BatchResult``, ... are re-exported from
:mod:`jaxgcn.training.runs`, and which runs share a program (``program_key``, ``program_of``) and
the run-mesh sizes (``runs_per_program``, ``run_mesh``, ...) from :mod:`jaxgcn.plan`, where each
has its one address. New code imports from
those modules, or the top-level names (``jaxgcn.fit_runs``, ``jaxgcn.Entry``, ...). No module of
the package imports this one (``tests/test_lint.py`` checks).
"""

from __future__ import annotations

from jaxgcn.plan import (  # noqa: F401
    MAX_RUNS_PER_DEVICE, ROW_FLOATS, program_key, program_of, run_mesh, runs_per_device_for, runs_per_program)
from jaxgcn.training.runs import (  # noqa: F401
    BatchResult, Entry, entries_for, fit_batch, fit_runs, init_params, run_inputs, unstack_params)
