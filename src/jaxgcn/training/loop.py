"""The host side of training: the one compile cache, :func:`drive` (the one host loop, with hooks),
:func:`run_one` (one run from its compiled programs) and :func:`fit`."""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxgcn.compiler import jit
from jaxgcn.data import TrainData, with_focus
from jaxgcn.diagnostics import divergence_message
from jaxgcn.layers import Params
from jaxgcn.models import Execution, GCNConfig, RunInputs
from jaxgcn.plan import planned
from jaxgcn.progress import epoch_line
from jaxgcn.training.config import DIVERGED, Patience, RUNNING, STOPPED_EARLY, TrainConfig, TrainingDiverged
from jaxgcn.training.state import Evaluation, RunState
from jaxgcn.training.step import Runner, make_runner


class WithRuns(NamedTuple):
    """A compiled :class:`Runner` function with its last argument, the run's settings, bound."""

    program: Any  # jax.stages.Compiled
    runs: RunInputs

    def __call__(self, *args: Any) -> Any:
        return self.program(*args, self.runs)

    def as_text(self) -> str:
        return self.program.as_text()


class Compiled(NamedTuple):
    """AOT-compiled :class:`Runner` functions for one configuration and one data signature."""

    init: Callable[..., RunState]
    run_until: Callable[..., RunState]
    evaluate: Callable[..., Evaluation]
    final_params: Callable[..., Params]
    compile_seconds: float


COMPILED: dict[Any, Compiled] = {}


def signature(data: TrainData) -> Any:
    leaves, treedef = jax.tree.flatten(data)
    return treedef, tuple((leaf.shape, str(leaf.dtype)) for leaf in leaves)


def compile_programs(runner: Runner, key: jax.Array, init_data: Any, data: Any) -> Compiled:
    """AOT-compile a :class:`Runner`'s functions for ``data``, with the run's settings
    (``runner.inputs()``, host values, the same on every process) bound as their last argument:
    runs that differ only in lr, weight decay or dropout share one program. ``init_data`` is the
    second argument ``init`` is called with (a single run's data, a sharded run's ``None``; either
    ``init`` reads only the key); ``run_until`` and ``evaluate`` are lowered for the state's shapes and dtypes, with no
    placement: the state ``init`` returns is uncommitted, so a sharded run's programs replicate it
    over their mesh."""
    start = time.perf_counter()
    runs = jax.tree.map(np.asarray, runner.inputs())
    init = jit(runner.init).lower(key, init_data, runs).compile()
    state = jax.eval_shape(runner.init, key, init_data, runs)
    run_until = jit(runner.run_until, donate_argnums=0).lower(state, data, jnp.int32(0), runs).compile()
    evaluate = jit(runner.evaluate).lower(state.params, data, runs).compile()
    return Compiled(WithRuns(init, runs), WithRuns(run_until, runs), WithRuns(evaluate, runs), runner.final_params,
                    time.perf_counter() - start)


def compile_runner(model_config: GCNConfig, config: TrainConfig, data: TrainData, n_classes: int,
                   execution: Execution = Execution()) -> Compiled:
    """Compile (once per configuration and data shapes; cached) the functions of a training run, with
    ``execution`` planned for ``data`` (:func:`jaxgcn.plan.planned`)."""
    execution = planned(execution, data.graph)
    cache_key = (model_config, config, execution, n_classes, signature(data))
    if cache_key in COMPILED:
        return COMPILED[cache_key]._replace(compile_seconds=0.0)
    runner = make_runner(model_config, config, data.x.shape[1], n_classes, execution)
    COMPILED[cache_key] = compile_programs(runner, jax.random.key(0), data, data)
    return COMPILED[cache_key]


class FitResult(NamedTuple):
    """Outcome of one training run (host values).

    Attributes:
        params: the final params (best params for ``patience`` early stopping).
        metrics: loss/accuracy per split of ``params`` (dropout off).
        epochs_run: epochs trained.
        stopped_early: whether the early-stopping rule ended the run.
        history: ``{"loss", "train_acc", "val_loss", "val_acc"}`` -> [epochs_run] NumPy arrays.
        compile_seconds: time spent compiling (0 when the program was cached).
        train_seconds: wall time of the epochs and the final evaluation.
        restored_epoch: with ``patience`` early stopping, the epoch (1-based) whose params
            ``params`` are (the best validation accuracy); ``None`` otherwise.
    """

    params: Params
    metrics: dict[str, float]
    epochs_run: int
    stopped_early: bool
    history: dict[str, np.ndarray]
    compile_seconds: float
    train_seconds: float
    restored_epoch: int | None = None


class Chunk(NamedTuple):
    """What the host sees after each compiled chunk of epochs (the hooks' argument).

    Attributes:
        epoch: epochs done (by the furthest run).
        history: ``{"loss", "train_acc", "val_loss", "val_acc"}`` -> [epochs] or [runs, epochs] (NaN
            where a run has not, or no longer, trained).
        reason: [runs] why each run ended (``RUNNING`` while it trains); [1] for a single run.
        seconds: wall time since the first chunk started.
    """

    epoch: int
    history: dict[str, np.ndarray]
    reason: np.ndarray
    seconds: float


Hook = Callable[[Any, Chunk], None]  # (the device state after the chunk, what it shows)


def drive(step: Callable[[Any, int], Any], state: Any, view: Callable[[Any], tuple[int, dict, np.ndarray]], *,
          epochs: int, chunk: int, hooks: list[Hook]) -> tuple[Any, Chunk]:
    """THE host loop of every path (single, batched, sharded): run the compiled loop in chunks of
    ``chunk`` epochs, ``step(state, stop_epoch) -> state``, until no run is running; after each
    chunk call every hook (log lines, progress bar, JSON lines, TensorBoard, checkpoints).
    ``view(state) -> (epoch, history, reason)`` reads the state back to the host."""
    start = time.perf_counter()
    while True:
        epoch = view(state)[0]
        state = step(state, min(epoch + max(chunk, 1), epochs))
        seen = Chunk(*view(state), time.perf_counter() - start)
        if seen.epoch <= epoch and np.any(seen.reason == RUNNING):
            # the compiled loop ended a chunk without an epoch while runs still train: looping on
            # would never end (a loop condition or a stop mask that misreads the runs' states)
            raise RuntimeError(f"training made no progress at epoch {epoch}: {int(np.sum(seen.reason == RUNNING))} "
                               "run(s) still running but the compiled loop advanced no epoch (a jaxgcn bug; "
                               "please report it)")
        for hook in hooks:
            hook(state, seen)
        if not np.any(seen.reason == RUNNING):
            return state, seen


def log_hook(log: Callable[[str], None], every: int, since: int = 0) -> Hook:
    """A hook that logs :func:`jaxgcn.progress.epoch_line` for every ``every``-th epoch of one run
    after epoch ``since`` (a resumed run's restored epochs are not logged again)."""
    shown = [since]

    def hook(_: Any, seen: Chunk) -> None:
        rows = seen.history
        for e in range(shown[0] + 1, seen.epoch + 1):
            if e % every == 0:
                log(epoch_line(e, *(float(rows[k][e - 1]) for k in ("loss", "train_acc", "val_acc"))))
        shown[0] = seen.epoch
    return hook


def progress_hook(progress: Any) -> Hook:
    """A hook that feeds a :class:`jaxgcn.progress.Progress` (bar or lines, ``--log``, TensorBoard)."""
    return lambda _, seen: progress.epochs(seen.epoch, seen.history, seen.seconds)


def single_view(state: RunState) -> tuple[int, dict[str, np.ndarray], np.ndarray]:
    """``view`` of :func:`drive` for one run's :class:`RunState`."""
    return int(state.epoch), {k: np.asarray(v) for k, v in state.history.items()}, np.asarray([int(state.reason)])


def fit(
    data: TrainData,
    n_classes: int,
    *,
    model_config: GCNConfig = GCNConfig(),
    execution: Execution = Execution(),
    config: TrainConfig = TrainConfig(),
    key: jax.Array | None = None,
    log_every: int = 20,
    log: Callable[[str], None] | None = print,
    checkpoint_every: int | None = None,
    on_checkpoint: Callable[[RunState], None] | None = None,
    resume: Callable[[RunState], RunState] | None = None,
    progress: Any = None,
) -> FitResult:
    """Train one GCN; print ``Epoch  20 | loss ... | train ... | val ...`` every ``log_every`` epochs.

    With ``checkpoint_every`` K, ``on_checkpoint(state)`` receives the whole run state (params,
    Adam moments, PRNG key, early-stopping window, history) every K epochs; ``resume(template)``
    returns a saved state to continue from instead of a fresh one. The epochs are the same
    compiled computation whatever the chunking, so a resumed run equals an uninterrupted one.

    ``progress`` (a :class:`jaxgcn.progress.Progress`) receives the compile phase and the history
    after every chunk of ``log_every`` epochs (bar, plain lines, ``--log`` JSON lines).

    Raises:
        TrainingDiverged: the loss became NaN/inf; the message names the likely causes.
    """
    key = jax.random.key(0) if key is None else key
    execution = planned(execution, data.graph)  # the backend and the kernels decided once (jaxgcn.plan)
    data = with_focus(data, model_config.layers)
    if progress is not None:
        progress.compiling()
    compiled = compile_runner(model_config, config, data, n_classes, execution)
    if progress is not None:
        progress.compiled(compiled.compile_seconds)
    state = compiled.init(key, data)
    if resume is not None:
        state = resume(state)
    return run_one(compiled, data, state, config, compile_seconds=compiled.compile_seconds, log_every=log_every,
                   log=log, checkpoint_every=checkpoint_every, on_checkpoint=on_checkpoint, progress=progress,
                   diverged=lambda epoch: divergence_message(data, config, epoch))


def run_one(compiled: Compiled, data: Any, state: RunState, config: TrainConfig, *, compile_seconds: float,
            log_every: int, log: Callable[[str], None] | None, checkpoint_every: int | None,
            on_checkpoint: Callable[[RunState], None] | None, progress: Any,
            diverged: Callable[[int], str]) -> FitResult:
    """THE host side of one run, from its compiled programs and its (fresh or restored) state:
    hooks (log lines, progress, checkpoints every ``checkpoint_every`` epochs while it runs),
    :func:`drive`, the divergence check (``diverged(epoch)`` words it), the final evaluation and
    the :class:`FitResult` with host NumPy params. :func:`fit` and sharded training
    (:func:`jaxgcn.distributed.fit_sharded`) both end here."""
    start = time.perf_counter()
    since = int(state.epoch)  # 0, or the epoch a resumed run continues from
    hooks: list[Hook] = []
    if log is not None and log_every > 0:
        hooks.append(log_hook(log, log_every, since))
    if progress is not None:
        if since:  # a display of one's own need not know of resuming (Progress does)
            progress.resumed(since)
        hooks.append(progress_hook(progress))
    if on_checkpoint is not None:
        hooks.append(lambda s, seen: on_checkpoint(s) if seen.reason[0] == RUNNING else None)
    state, seen = drive(lambda s, stop: compiled.run_until(s, data, jnp.int32(stop)), state, single_view,
                        epochs=config.epochs, chunk=checkpoint_every or log_every, hooks=hooks)
    epoch, reason = seen.epoch, int(seen.reason[0])
    if reason == DIVERGED:
        raise TrainingDiverged(diverged(epoch))
    params = compiled.final_params(state)
    metrics = {k: float(v) for k, v in compiled.evaluate(params, data)._asdict().items()}
    history = {k: np.asarray(v)[:epoch] for k, v in state.history.items()}
    restored = int(state.best_epoch) if isinstance(config.early_stopping, Patience) else None
    return FitResult(jax.tree.map(np.asarray, params), metrics, epoch, reason == STOPPED_EARLY, history,
                     compile_seconds, time.perf_counter() - start, restored)
