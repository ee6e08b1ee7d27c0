"""Losses, metrics, the optimizer, and the compiled training run with early stopping.

One training run is a pure function of its inputs. The epochs run inside a ``lax.while_loop``
(compiled once, called in chunks so the host can print progress between chunks); each epoch is
one training step (dropout on) followed by one evaluation pass (dropout off) that feeds the
early-stopping rule. Early stopping is expressed with masks and a best-params carry, never a
Python ``break``, so the same code can later be ``vmap``-ed over runs.
"""

from __future__ import annotations

# The face of :mod:`jaxgcn.training`: every name under the module it always lived in.
from jaxgcn.data import TrainData, with_focus  # noqa: F401
from jaxgcn.diagnostics import (  # noqa: F401
    adjacency_cause, adjacency_of, adjacency_scale, divergence_hint, divergence_message, likely_causes, row_sums_of)
from jaxgcn.training.axes import insert_axes, run_axes, run_axis, select_running, unstacked_shapes  # noqa: F401
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
