"""An alias, for users' code: the training engine under the name earlier releases gave it.

Every name here is re-exported from the module that defines it, and has one address there:

- :mod:`jaxgcn.training.config`: ``TrainConfig``, ``Kipf``, ``Patience``, ``TrainingDiverged``, the
  end reasons (``RUNNING`` ... ``DIVERGED``);
- :mod:`jaxgcn.training.losses`: ``masked_cross_entropy``, ``masked_accuracy``, ``l2_penalty``, ...;
- :mod:`jaxgcn.training.optim`: ``optimizer_factory``, ``make_optimizer``;
- :mod:`jaxgcn.training.state`: ``RunState``, ``init_run_state``, ``should_stop_early``, ...;
- :mod:`jaxgcn.training.step`: ``make_runner``, ``make_batch_runner``, ``Runner``, ``Collective``;
- :mod:`jaxgcn.training.loop`: ``fit``, ``FitResult``, ``drive``, the compile cache, the hooks;
- :mod:`jaxgcn.core.layers` (the run axis), :mod:`jaxgcn.core.data` (``TrainData``), :mod:`jaxgcn.core.diagnostics`.

``from jaxgcn.train import fit`` keeps working; new code imports from those modules, or the
top-level names (``jaxgcn.fit``, ``jaxgcn.TrainConfig``, ...). No module of the package imports
this one (``tests/test_lint.py`` checks), so each name has one address inside it.
"""

from __future__ import annotations

from jaxgcn.core.data import TrainData, with_focus  # noqa: F401
from jaxgcn.core.diagnostics import (  # noqa: F401
    adjacency_cause, adjacency_of, adjacency_scale, divergence_hint, divergence_message, likely_causes, row_sums_of)
from jaxgcn.core.layers import insert_axes, run_axes, run_axis, select_running, unstacked_shapes  # noqa: F401
from jaxgcn.training.config import (  # noqa: F401
    DIVERGED, FINISHED, L2_SCOPES, OPTIMIZERS, RUNNING, STOPPED_EARLY, Kipf, Patience, TrainConfig, TrainingDiverged,
    early_stopping_from)
from jaxgcn.training.loop import (  # noqa: F401
    COMPILED, Chunk, Compiled, FitResult, Hook, Layout, WithRuns, compile, compile_runner, drive, fit,
    fit_result, log_hook, progress_hook, run, signature, single_program, single_view)
from jaxgcn.training.losses import (  # noqa: F401
    l2_covers, l2_penalty, masked_accuracy, masked_cross_entropy, masked_sums, per_run_l2)
from jaxgcn.training.optim import make_optimizer, optimizer_factory, standard_promotion  # noqa: F401
from jaxgcn.training.state import (  # noqa: F401
    BatchState, Evaluation, RunState, RunsView, axes_of_state, init_run_state, optimizer_axes, record_epoch, run_keys,
    runs_of, should_stop_early, state_axes)
from jaxgcn.training.step import (  # noqa: F401
    LOCAL, BatchRunner, Collective, Runner, make_batch_runner, make_runner)
