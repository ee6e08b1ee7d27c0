"""The host side of training: the one compile cache (:func:`compile`), :func:`drive` (the one host
loop, with hooks), :func:`run` (the one host driver: a run or a batch slice from its program) and
:func:`fit`."""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxgcn.host.compiler import jit
from jaxgcn.core.data import TrainData
from jaxgcn.core.diagnostics import divergence_message
from jaxgcn.core.layers import Params
from jaxgcn.core.models import Execution, GCNConfig, RunInputs, precision_scope
from jaxgcn.plan import Plan, concrete, focused, require_decided
from jaxgcn.io.progress import Chunk, Hook, log_hook, progress_hook, runs_line
from jaxgcn.core.results import BatchResult, FitResult, fit_result, take_runs  # noqa: F401 - re-exported
from jaxgcn.training.config import DIVERGED, Patience, RUNNING, STOPPED_EARLY, TrainConfig, TrainingDiverged
from jaxgcn.training.state import RunState
from jaxgcn.training.step import make_batch_runner


class WithRuns(NamedTuple):
    """A compiled program with its argument ``at``, the run's settings, bound (what
    :func:`compile_runner` returns: ``init(key, data)``, ``run_until(state, data, stop)``,
    ``evaluate(params, data)``)."""

    program: Any  # jax.stages.Compiled
    runs: RunInputs
    at: int = 2

    def __call__(self, *args: Any) -> Any:
        return self.program(*args[:self.at], self.runs, *args[self.at:])

    def as_text(self) -> str:
        return self.program.as_text()


class Compiled(NamedTuple):
    """A program: AOT-compiled runner functions for one configuration and one data signature,
    called alike for one run and for a batch: ``init(..., runs)``, ``run_until(state, data, runs,
    stop)``, ``evaluate(params, data, runs)``; ``final_params(state)`` picks fields (no program)."""

    init: Callable[..., Any]
    run_until: Callable[..., Any]
    evaluate: Callable[..., Any]
    final_params: Callable[..., Params]
    compile_seconds: float


COMPILED: dict[Any, Compiled] = {}


def signature(data: TrainData) -> Any:
    leaves, treedef = jax.tree.flatten(data)
    return treedef, tuple((leaf.shape, str(leaf.dtype)) for leaf in leaves)


def compile(key: Any, runner: Any, init_args: tuple, data: Any, *, shardings: Any = None,
            progress: Any = None, execution: Execution | None = None) -> Compiled:
    """THE compile cache of every path (one run, a batch's slices, the graph sharded): the
    :class:`Compiled` program of ``runner`` (a batch's or one run's :class:`Runner`), once per
    ``key`` (the configuration, the data's signature, the mesh). ``init_args`` are what ``init``
    takes, the run inputs last; ``run_until`` and ``evaluate`` are lowered for the state's shapes
    and dtypes, placed by ``shardings`` (a batch's run axis over its mesh; None: uncommitted, so a
    sharded run's programs replicate it over their mesh). ``progress`` sees the compile phase. The programs
    are traced in the decided ``execution``'s matmul precision (:func:`jaxgcn.core.models.precision_scope`;
    None, or ``default``: JAX's), which ``key`` holds with the execution."""
    if progress is not None:
        progress.compiling()
    if key in COMPILED:
        program = COMPILED[key]._replace(compile_seconds=0.0)
    else:
        start = time.perf_counter()
        runs = init_args[-1]
        with precision_scope(execution):
            init = jit(runner.init, out_shardings=shardings).lower(*init_args).compile()
            state = _placed(jax.eval_shape(runner.init, *init_args), shardings)
            run_until = jit(runner.run_until, donate_argnums=0, out_shardings=shardings) \
                .lower(state, data, runs, jnp.int32(0)).compile()
            evaluate = jit(runner.evaluate).lower(runner.final_params(state), data, runs).compile()
        program = COMPILED[key] = Compiled(init, run_until, evaluate, runner.final_params, time.perf_counter() - start)
    if progress is not None:
        progress.compiled(program.compile_seconds)
    return program


def _placed(shapes: Any, shardings: Any) -> Any:
    """The state's shapes and dtypes, each with its sharding (as the state ``init`` returns is placed)."""
    if shardings is None:
        return shapes
    return jax.tree.map(lambda s, sharding: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), shapes,
                        shardings)


def single_program(model_config: GCNConfig, config: TrainConfig, data: TrainData, n_classes: int,
                   execution: Execution = Execution(), progress: Any = None) -> tuple[Compiled, RunInputs]:
    """One run's program (:func:`compile`) and its settings (host values), for an ``execution`` the
    plan decided (:func:`jaxgcn.plan.concrete`; an undecided one is refused)."""
    execution = require_decided(execution)
    cache_key = (model_config, config, execution, n_classes, signature(data))
    runner = make_batch_runner(model_config, config, execution, one=(data.x.shape[1], n_classes))
    runs = jax.tree.map(np.asarray, runner.inputs())
    return compile(cache_key, runner, (jax.random.key(0), data, runs), data, progress=progress,
                   execution=execution), runs


def compile_runner(model_config: GCNConfig, config: TrainConfig, data: TrainData, n_classes: int,
                   execution: Execution | Plan = Execution()) -> Compiled:
    """One run's program (:func:`single_program`) with the run's settings bound: ``init(key, data)``,
    ``run_until(state, data, stop)``, ``evaluate(params, data)``."""
    program, runs = single_program(model_config, config, data, n_classes, concrete(execution, data.graph))
    return program._replace(init=WithRuns(program.init, runs), run_until=WithRuns(program.run_until, runs),
                            evaluate=WithRuns(program.evaluate, runs))


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


def single_view(state: RunState) -> tuple[int, dict[str, np.ndarray], np.ndarray]:
    """``view`` of :func:`drive` for one run's :class:`RunState`."""
    return int(state.epoch), {k: np.asarray(v) for k, v in state.history.items()}, np.asarray([int(state.reason)])


class Layout(NamedTuple):
    """How :func:`run` reads a state: ``n`` None for ONE run's own :class:`RunState` (no run axis:
    what a single run's checkpoints hold), else a batch's :class:`BatchState` of which the first
    ``n`` runs are kept (a slice's padding dropped)."""

    n: int | None = None

    def view(self, state: Any) -> tuple[int, dict[str, np.ndarray], np.ndarray]:
        if self.n is None:
            return single_view(state)
        history = {k: np.asarray(v)[:self.n] for k, v in state.runs.history.items()}
        return int(state.step), history, np.asarray(state.runs.reason)[:self.n]

    def runs(self, state: Any) -> RunState:
        """The records of the kept runs, on a run axis (host arrays; params left out)."""
        one = self.n is None
        st = state if one else state.runs
        take = (lambda v: np.asarray(v)[None]) if one else (lambda v: np.asarray(v)[:self.n])
        return st._replace(params=None, opt_state=None, best_params=None, key=None, val_window=None,
                           epoch=take(st.epoch), reason=take(st.reason), best_epoch=take(st.best_epoch),
                           history={k: take(v) for k, v in st.history.items()})

    def host(self, params: Params, evaluation: Any) -> tuple[Params, dict[str, np.ndarray]]:
        """The kept runs' params (one run's as host NumPy, a batch's stacked) and metrics [n]."""
        if self.n is None:
            return jax.tree.map(np.asarray, params), {k: np.asarray(v)[None] for k, v in evaluation._asdict().items()}
        params = take_runs(params, jnp.arange(self.n))
        return params, {k: np.asarray(v)[:self.n] for k, v in evaluation.items()}


def run(program: Compiled, state: Any, data: Any, runs: RunInputs, layout: Layout, config: TrainConfig, *,
        diverged: Callable[[np.ndarray, int], str], log: Callable[[str], None] | None = None, log_every: int = 0,
        progress: Any = None, checkpoint_every: int | None = None,
        checkpoint: Callable[[Any], None] | None = None) -> BatchResult:
    """THE host driver of every run (:func:`fit`, each slice of :func:`jaxgcn.training.runs.fit_runs`,
    :func:`jaxgcn.distributed.fit_sharded`), from its program and its (fresh or restored) state:
    the hooks (:func:`hooks`), :func:`drive`, the divergence check (``diverged(bad_runs, epoch of
    the first)`` words the :class:`TrainingDiverged`), the final evaluation and the host results."""
    start = time.perf_counter()
    chunk = checkpoint_every or (log_every if log_every > 0 or layout.n is None else config.epochs)
    state, seen = drive(lambda s, stop: program.run_until(s, data, runs, jnp.int32(stop)), state, layout.view,
                        epochs=config.epochs, chunk=chunk,
                        hooks=hooks(layout, layout.view(state)[0], log if log_every > 0 else None, log_every, progress,
                                    checkpoint))
    records = layout.runs(state)
    bad = np.flatnonzero(seen.reason == DIVERGED)
    if bad.size:
        raise TrainingDiverged(diverged(bad, int(records.epoch[bad[0]])))
    final = program.final_params(state)
    params, metrics = layout.host(final, program.evaluate(final, data, runs))
    restored = records.best_epoch if isinstance(config.early_stopping, Patience) else None
    return BatchResult([], metrics, records.epoch, seen.reason == STOPPED_EARLY, records.history, params,
                       program.compile_seconds, time.perf_counter() - start, restored)


def hooks(layout: Layout, since: int, log: Callable[[str], None] | None, log_every: int, progress: Any,
          checkpoint: Callable[[Any], None] | None) -> list[Hook]:
    """The hooks of :func:`run`, after each chunk: the log lines (one run's epoch lines after epoch
    ``since``, a resumed run's restored epochs not logged again; a batch's line of runs still
    training), the progress display, and the checkpoints (one run's while it runs; a batch slice's
    at every chunk, the last included, so a resumed job skips a finished slice; never once a run
    diverged: a NaN/inf state never replaces the last good checkpoint)."""
    out: list[Hook] = []
    if log is not None:
        out.append(log_hook(log, log_every, since) if layout.n is None else runs_log_hook(log, layout.n))
    if progress is not None:
        if since:  # a display of one's own need not know of resuming (Progress does)
            progress.resumed(since)
        out.append(progress_hook(progress))
    if checkpoint is not None and layout.n is None:
        out.append(lambda s, seen: checkpoint(s) if seen.reason[0] == RUNNING else None)
    elif checkpoint is not None:
        out.append(lambda s, seen: None if np.any(seen.reason == DIVERGED) else checkpoint(s))
    return out


def runs_log_hook(log: Callable[[str], None], n_runs: int) -> Hook:
    """A batch's log line per chunk: the epoch, runs still training, mean validation accuracy."""
    def hook(_: Any, seen: Chunk) -> None:
        val = seen.history["val_acc"][:, seen.epoch - 1]
        log(runs_line(seen.epoch, int(np.sum(seen.reason == RUNNING)), n_runs,
                      float(np.nanmean(val)) if np.any(np.isfinite(val)) else float("nan")))
    return hook


def fit(
    data: TrainData,
    n_classes: int,
    *,
    model_config: GCNConfig = GCNConfig(),
    execution: Execution | Plan = Execution(),
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

    ``execution``: the plan the application resolved (:func:`jaxgcn.plan.resolve`), or a request the
    plan decides here, once (:func:`jaxgcn.plan.concrete`).

    With ``checkpoint_every`` K, ``on_checkpoint(state)`` receives the whole run state (params,
    Adam moments, PRNG key, early-stopping window, history) every K epochs; ``resume(template)``
    returns a saved state to continue from instead of a fresh one. The epochs are the same
    compiled computation whatever the chunking, so a resumed run equals an uninterrupted one.

    ``progress`` (a :class:`jaxgcn.io.progress.Progress`) receives the compile phase and the history
    after every chunk of ``log_every`` epochs (bar, plain lines, ``--log`` JSON lines).

    Raises:
        TrainingDiverged: the loss became NaN/inf; the message names the likely causes.
    """
    key = jax.random.key(0) if key is None else key
    plan, execution = execution, concrete(execution, data.graph)  # the request decided once: backend, ops
    data = focused(data, model_config.layers, execution, plan)  # and what the ops precompute (once per job)
    program, runs = single_program(model_config, config, data, n_classes, execution, progress)
    state = program.init(key, data, runs)
    if resume is not None:
        state = resume(state)
    return fit_result(run(program, state, data, runs, Layout(), config, log=log, log_every=log_every,
                          progress=progress, checkpoint_every=checkpoint_every, checkpoint=on_checkpoint,
                          diverged=lambda bad, epoch: divergence_message(data, config, epoch)))
