"""Many training runs as ONE compiled program, batched along the feature axis.

The forward pass is :func:`jaxgcn.models.apply_runs`, the same one a single run uses: runs are
stacked *inside* the feature axis (activations ``[n_nodes, n_runs, width]``, weights
``[in_dim, n_runs, out_dim]``), so one propagation with ``n_runs * width``-wide rows serves every
run (``jax.vmap`` of a gather + ``segment_sum`` model measured slower on CPU than a loop). The
optimizer is the single run's (:func:`jaxgcn.train.optimizer_factory`), vmapped over the run axis.

Each run keeps its own PRNG stream (identical to a single run with the same key: same init, same
dropout masks), its own learning rate, L2 factor, dropout rate, hidden width and split masks, and
its own early stopping (per-run masks freeze a run once it has stopped). A run is described by an
:class:`Entry` (its configs, seed and split); the runs of one program share everything else
(:func:`program_of`), the hidden width included.

:func:`jaxgcn.train.make_runner` is the single-run reference this module is tested against.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxgcn import hyper
from jaxgcn.compiler import jit
from jaxgcn.diagnostics import divergence_message
from jaxgcn.data import with_focus
from jaxgcn.layers import Params
from jaxgcn.models import Execution, GCNConfig, RunInputs, gcn, make_run_inputs
from jaxgcn.plan import batch_mesh, planned, slice_size
from jaxgcn.progress import runs_line
from jaxgcn.data import TrainData
from jaxgcn.training.axes import run_axis
from jaxgcn.training.config import DIVERGED, RUNNING, STOPPED_EARLY, Patience, TrainConfig, TrainingDiverged
from jaxgcn.training.loop import COMPILED, Chunk, Compiled, drive, progress_hook, signature
from jaxgcn.training.state import BatchState, state_axes
from jaxgcn.training.step import make_batch_runner

class Entry(NamedTuple):
    """One run: its full configs, its seed and its split (THE per-run description: the CLI, the
    sweep and a library caller all describe runs this way).

    Runs whose configs differ only in ``train.lr``, ``train.weight_decay`` and ``model.dropout``
    (and in seed and split) share one compiled program (:func:`program_of`); ``split`` indexes the
    stacked split masks of the data (0 when there is one split).
    """

    model: GCNConfig
    train: TrainConfig
    seed: int
    split: int = 0


def entries_for(seeds: Sequence[int], *, model_config: GCNConfig = GCNConfig(), config: TrainConfig = TrainConfig(),
                splits: int = 1) -> list[Entry]:
    """Every seed on every split of one configuration, split by split (the order in which
    ``jaxgcn train --seeds N --splits K`` reports its runs).

    >>> [(e.seed, e.split) for e in entries_for([3, 4], splits=2)]
    [(3, 0), (4, 0), (3, 1), (4, 1)]
    """
    return [Entry(model_config, config, int(seed), split) for split in range(splits) for seed in seeds]


def program_key(entry: Entry) -> tuple[GCNConfig, TrainConfig]:
    """The configs of the program an entry runs in: its own, with the per-run fields (learning
    rate, weight decay, dropout: those :data:`jaxgcn.hyper.PER_RUN` says vary) set to their
    defaults, since they are inputs of the compiled program
    (:class:`jaxgcn.models.RunInputs`). Entries with equal keys share one program; any other
    difference (hidden width, epochs, L2 scope, ...) separates them. Runs of several widths could
    share one program padded to the widest, but then every run costs the widest: a 16/32/64 grid
    on Cora took 114 s padded to 64 and far less as one program per width (compiling one is ~1 s).

    >>> a, b = Entry(GCNConfig(dropout=0.1), TrainConfig(lr=0.05), 0), Entry(GCNConfig(), TrainConfig(), 1)
    >>> program_key(a) == program_key(b), program_key(a) == program_key(b._replace(model=GCNConfig(hidden=32)))
    (True, False)
    """
    return hyper.blank(entry.model, "model"), hyper.blank(entry.train, "train")


def program_of(entries: Sequence[Entry]) -> tuple[GCNConfig, TrainConfig]:
    """The one program's configs of ``entries`` (:func:`program_key`), or a ValueError naming the
    first field in which two of them differ (group them first: :func:`jaxgcn.sweep.run_entries`)."""
    if not entries:
        raise ValueError("entries: give at least one run")
    key = program_key(entries[0])
    for j, entry in enumerate(entries):
        other = program_key(entry)
        if other == key:
            continue
        for name, mine, theirs in (("model", key[0], other[0]), ("train", key[1], other[1])):
            for field in dataclasses.fields(mine):
                a, b = getattr(mine, field.name), getattr(theirs, field.name)
                if a != b:
                    raise ValueError(f"entries[0] and entries[{j}] differ in {name}.{field.name} ({a!r} vs {b!r}): "
                                     f"one program shares everything but {', '.join(hyper.varying())}, seed and "
                                     "split; "
                                     "run them as separate groups (jaxgcn.sweep.run_entries does)")
    return key


def run_inputs(entries: Sequence[Entry]) -> RunInputs:
    """The device-side per-run inputs of a batch: every input :data:`jaxgcn.hyper.PER_RUN` declares,
    read from each entry (:func:`jaxgcn.models.make_run_inputs`)."""
    each = [hyper.values_of(e.model, e.train, e) for e in entries]
    return make_run_inputs(**{name: [run[name] for run in each] for name in each[0]})


def _seeds(entries: Sequence[Entry]) -> np.ndarray:
    return np.asarray([e.seed for e in entries], np.int64)


# --- init and the batched training run ------------------------------------------------------------


def init_params(config: GCNConfig, entries: Sequence[Entry], n_features: int, n_classes: int) -> Params:
    """Stacked params: each run initialized exactly as a single run of its seed (``config``: the
    program's model, :func:`program_of`), stacked along the run axis."""
    init = jit(_init_stacked, static_argnums=(0, 1, 2))
    return init(config, n_features, n_classes, jnp.asarray(_seeds(entries), jnp.int32))


def _init_stacked(config: GCNConfig, n_features: int, n_classes: int, seeds: jax.Array) -> Params:
    model = gcn(config)
    keys = jax.vmap(lambda s: jax.random.split(jax.random.key(s))[0])(seeds)
    stacked = jax.vmap(lambda k: model.init(k, n_features, n_classes))(keys)
    return jax.tree.map(lambda leaf: jnp.moveaxis(leaf, 0, 1) if leaf.ndim == 3 else leaf, stacked)


# --- the host-side driver ---------------------------------------------------------------------------


class BatchResult(NamedTuple):
    """Outcome of a batch of runs (host NumPy, one entry per run).

    Attributes:
        entries: the runs.
        metrics: ``{"train_acc", "val_acc", "test_acc", ...}`` -> [R] of the final (or best) params.
        epochs_run: [R]. stopped_early: [R] bool.
        history: ``{"loss", "train_acc", "val_loss", "val_acc"}`` -> [R, epochs] (NaN after a run stopped).
        params: stacked final params (see :func:`unstack_params`).
        compile_seconds, train_seconds: wall times of compiling and of running the batch.
        restored_epoch: with ``patience`` early stopping, [R] the epoch (1-based) whose params each
            run returns (its best validation accuracy); ``None`` otherwise.
    """

    entries: list[Entry]
    metrics: dict[str, np.ndarray]
    epochs_run: np.ndarray
    stopped_early: np.ndarray
    history: dict[str, np.ndarray]
    params: Params
    compile_seconds: float
    train_seconds: float
    restored_epoch: np.ndarray | None = None


def _shard_runs(tree: Any, mesh: jax.sharding.Mesh | None, axes: Any = 0) -> Any:
    """Place each leaf's run axis on the mesh's ``runs`` axis (no-op without a mesh)."""
    if mesh is None:
        return tree

    def put(leaf: jax.Array, axis: int | None) -> jax.Array:
        spec = [None] * leaf.ndim
        if axis is not None:
            spec[axis] = "runs"
        return jax.device_put(leaf, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec)))
    return jax.tree.map(put, tree, axes) if not isinstance(axes, int) else jax.tree.map(lambda a: put(a, axes), tree)


def _replicate(tree: Any, mesh: jax.sharding.Mesh | None) -> Any:
    if mesh is None:
        return tree
    return jax.device_put(tree, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))


def _padded(entries: Sequence[Entry], multiple: int) -> list[Entry]:
    """Repeat the last run so the run count divides evenly over the devices (extra runs dropped later)."""
    return [*entries, *[entries[-1]] * ((-len(entries)) % multiple)]


def _state_shardings(state: BatchState, config: TrainConfig, mesh: jax.sharding.Mesh | None) -> Any:
    """Shardings that keep every run-axis leaf of a :class:`BatchState` split over ``runs`` (so the
    while loop's output can be fed back in), the shared Adam count and epoch counter replicated."""
    if mesh is None:
        return None
    axes = BatchState(runs=state_axes(config, state.runs.params), step=None)

    def spec(leaf: Any, axis: int | None) -> jax.sharding.NamedSharding | None:
        if leaf is None:
            return None
        parts = [None] * leaf.ndim
        if axis is not None:
            parts[axis] = "runs"
        return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*parts))
    return jax.tree.map(spec, state, axes, is_leaf=lambda x: x is None)


def compile_batch(model_config: GCNConfig, config: TrainConfig, execution: Execution, params: Params,
                  data: TrainData, runs: RunInputs, seeds: jax.Array, mesh: Any) -> tuple[Compiled, BatchState]:
    """Compile a batch's programs (once per configuration, shapes and mesh, in the one cache of
    :mod:`jaxgcn.training.loop`) and return them with the initial state; ``execution`` planned
    for ``data`` (:func:`jaxgcn.plan.planned`)."""
    execution = planned(execution, data.graph)
    key = ("runs", model_config, config, execution, signature(data), jax.tree.structure(params),
           tuple(leaf.shape for leaf in jax.tree.leaves(params)), mesh)
    if key in COMPILED:
        compiled = COMPILED[key]._replace(compile_seconds=0.0)
        return compiled, compiled.init(params, seeds, runs)
    start = time.perf_counter()
    runner = make_batch_runner(model_config, config, execution)
    shardings = _state_shardings(jax.eval_shape(runner.init, params, seeds, runs), config, mesh)
    init = jit(runner.init, out_shardings=shardings).lower(params, seeds, runs).compile()
    state = init(params, seeds, runs)
    run_until = jit(runner.run_until, donate_argnums=0, out_shardings=shardings) \
        .lower(state, data, runs, jnp.int32(0)).compile()
    evaluate = jit(runner.evaluate).lower(params, data, runs).compile()
    final = jit(runner.final_params).lower(state).compile()
    COMPILED[key] = Compiled(init, run_until, evaluate, final, time.perf_counter() - start)
    return COMPILED[key], state


def fit_runs(
    data: TrainData,
    n_classes: int,
    entries: Sequence[Entry],
    *,
    execution: Execution = Execution(),
    log_every: int = 0,
    log: Callable[[str], None] | None = None,
    n_devices: int | None = None,
    runs_per_device: int | None = None,
    progress: Any = None,
    checkpoint_every: int | None = None,
    on_checkpoint: Callable[[int, BatchState], None] | None = None,
    resume: Callable[[int, BatchState], BatchState | None] | None = None,
) -> BatchResult:
    """Train every run of ``entries`` with one compiled program (see the module docstring).

    The entries share one program (:func:`program_of`: they differ only in learning rate, weight
    decay, dropout, seed and split). With more than one device visible the run axis is sharded over
    them (``n_devices`` limits how many). The runs are executed in slices of ``runs_per_device *
    devices`` runs (default :func:`jaxgcn.plan.runs_per_device_for` the hidden width); every slice
    has the same shapes (the last one is padded), so the program is compiled once and executed
    ``ceil(runs / slice)`` times. Progress, when ``log_every`` > 0, is one line per chunk: the
    epoch, runs still training, mean val accuracy.

    Checkpoints are per slice: ``on_checkpoint(first, state)`` receives the state of the slice
    whose first run is ``first`` every ``checkpoint_every`` epochs and when it ends;
    ``resume(first, template)`` returns a saved state of that slice (or None: start it afresh).

    Raises:
        ValueError: the entries do not share one program.
        TrainingDiverged: a run's loss became NaN/inf (the message names the runs and the causes).
    """
    entries = list(entries)
    model_config, config = program_of(entries)
    execution = planned(execution, data.graph)  # the backend and the kernels decided once (jaxgcn.plan)
    n = len(entries)
    size = slice_size(n, model_config.hidden, execution, n_devices, data.graph, runs_per_device)
    data = with_focus(data, model_config.layers)
    options = _Options(model_config, config, execution, log_every, log, n_devices, progress, checkpoint_every,
                       on_checkpoint, resume)
    if n <= size:
        return _fit_slice(data, n_classes, entries, options)
    parts = []
    for start in range(0, n, size):
        part = entries[start:start + size]
        if log is not None and log_every > 0:
            log(f"runs {start + 1}-{start + len(part)} of {n}")
        if progress is not None:
            progress.start_slice(start, f"runs {start + 1}-{start + len(part)} of {n}")
        parts.append(_fit_slice(data, n_classes, _padded(part, size), options, keep=len(part), first=start))
    return _concat_results(entries, parts)


def fit_batch(data: TrainData, n_classes: int, entries: Sequence[Entry], **options: Any) -> BatchResult:
    """Every run of ``entries`` in ONE execution of one compiled program (:func:`fit_runs` with one
    slice; the same keyword arguments)."""
    return fit_runs(data, n_classes, entries, runs_per_device=max(1, len(entries)), **options)


class _Options(NamedTuple):
    """What every slice of one :func:`fit_runs` call shares."""

    model_config: GCNConfig
    config: TrainConfig
    execution: Execution
    log_every: int
    log: Callable[[str], None] | None
    n_devices: int | None
    progress: Any
    checkpoint_every: int | None
    on_checkpoint: Callable[[int, BatchState], None] | None
    resume: Callable[[int, BatchState], BatchState | None] | None


def _concat_results(entries: list[Entry], parts: list[BatchResult]) -> BatchResult:
    def cat(get: Callable[[BatchResult], Any]) -> Any:
        return np.concatenate([get(p) for p in parts])
    return BatchResult(
        entries=entries,
        metrics={k: cat(lambda p, k=k: p.metrics[k]) for k in parts[0].metrics},
        epochs_run=cat(lambda p: p.epochs_run),
        stopped_early=cat(lambda p: p.stopped_early),
        history={k: cat(lambda p, k=k: p.history[k]) for k in parts[0].history},
        params=jax.tree.map(lambda *leaves: jnp.concatenate(leaves, axis=run_axis(leaves[0])),
                            *(p.params for p in parts)),
        compile_seconds=sum(p.compile_seconds for p in parts),
        train_seconds=sum(p.train_seconds for p in parts),
        restored_epoch=None if parts[0].restored_epoch is None else cat(lambda p: p.restored_epoch),
    )


def _fit_slice(data: TrainData, n_classes: int, entries: list[Entry], options: _Options, keep: int | None = None,
               first: int = 0) -> BatchResult:
    """One slice of :func:`fit_runs` in ONE execution of its program. ``keep`` drops trailing runs
    from the result (the padding); ``first`` is the index of the slice's first run among all
    runs, what the checkpoint hooks receive."""
    n_runs = len(entries) if keep is None else keep
    config = options.config
    compiled, state, data, runs = _start(options, entries, data, n_classes)
    run_until, evaluate, final, compile_s = compiled[1:]
    saved = None if options.resume is None else options.resume(first, state)
    if saved is not None:  # uncommitted arrays: the program places them over its mesh as its own output
        state = saved
        if options.progress is not None:
            options.progress.resumed(int(state.step))
    start = time.perf_counter()

    def view(s: BatchState) -> tuple[int, dict[str, np.ndarray], np.ndarray]:
        history = {k: np.asarray(v)[:n_runs] for k, v in s.runs.history.items()}
        return int(s.step), history, np.asarray(s.runs.reason)[:n_runs]

    log_every = options.log_every
    hooks = _hooks(n_runs, options.log if log_every > 0 else None, options.progress, options.on_checkpoint, first)
    state, seen = drive(lambda s, stop: run_until(s, data, runs, jnp.int32(stop)), state, view, epochs=config.epochs,
                        chunk=options.checkpoint_every or (log_every if log_every > 0 else config.epochs), hooks=hooks)
    _raise_if_diverged(entries, data, state, seen.reason)
    params = final(state)
    metrics = {k: np.asarray(v)[:n_runs] for k, v in evaluate(params, data, runs).items()}
    epochs = np.asarray(state.runs.epoch)[:n_runs]
    history = {k: np.asarray(v)[:n_runs] for k, v in state.runs.history.items()}
    params = jax.tree.map(lambda leaf: jnp.take(leaf, jnp.arange(n_runs), axis=run_axis(leaf)), params)
    restored = np.asarray(state.runs.best_epoch)[:n_runs] if isinstance(config.early_stopping, Patience) else None
    return BatchResult(entries[:n_runs], metrics, epochs, seen.reason == STOPPED_EARLY, history, params, compile_s,
                       time.perf_counter() - start, restored)


def _start(options: _Options, entries: list[Entry], data: TrainData,
           n_classes: int) -> tuple[Compiled, BatchState, TrainData, RunInputs]:
    """A slice's compiled programs, initial state, and data and run inputs placed on its mesh (the
    runs padded to a multiple of its devices)."""
    model_config, config, execution, progress = options.model_config, options.config, options.execution, \
        options.progress
    mesh = batch_mesh(len(entries), execution, options.n_devices, data.graph)
    padded = _padded(entries, mesh.size if mesh is not None else 1)
    params = init_params(model_config, padded, data.x.shape[1], n_classes)
    params = _shard_runs(params, mesh, jax.tree.map(run_axis, params))
    runs = _shard_runs(run_inputs(padded), mesh)
    seeds = _shard_runs(jnp.asarray(_seeds(padded), jnp.int32), mesh)
    data = _replicate(data, mesh)
    if progress is not None:
        progress.compiling()
    compiled, state = compile_batch(model_config, config, execution, params, data, runs, seeds, mesh)
    if progress is not None:
        progress.compiled(compiled.compile_seconds)
    return compiled, state, data, runs


def _hooks(n_runs: int, log: Callable[[str], None] | None, progress: Any,
           on_checkpoint: Callable[[int, BatchState], None] | None, first: int) -> list[Any]:
    """A batch's hooks: one log line per chunk (the epoch, runs still training, mean validation
    accuracy), the progress display, and its slice's checkpoints (at every chunk, the last
    included: a resumed job skips a finished slice; none once a run of the slice diverged)."""
    def log_runs(_: Any, seen: Chunk) -> None:
        val = seen.history["val_acc"][:, seen.epoch - 1]
        log(runs_line(seen.epoch, int(np.sum(seen.reason == RUNNING)), n_runs,
                      float(np.nanmean(val)) if np.any(np.isfinite(val)) else float("nan")))

    hooks: list[Any] = [log_runs] if log is not None else []
    if progress is not None:
        hooks.append(progress_hook(progress))
    if on_checkpoint is not None:
        # a diverged run's NaN/inf state never replaces the slice's last good checkpoint
        hooks.append(lambda s, seen: None if np.any(seen.reason == DIVERGED) else on_checkpoint(first, s))
    return hooks


def _raise_if_diverged(entries: list[Entry], data: TrainData, state: BatchState, reason: np.ndarray) -> None:
    """:class:`TrainingDiverged` naming the runs whose loss became NaN/inf (the first one's seed
    and learning rate, and the likely causes)."""
    if not np.any(reason == DIVERGED):
        return
    bad = np.flatnonzero(reason == DIVERGED)
    worst = entries[int(bad[0])]
    raise TrainingDiverged(f"run(s) {bad.tolist()} (seed {worst.seed}, lr {worst.train.lr:g}): "
                           + divergence_message(data, worst.train, int(np.asarray(state.runs.epoch)[int(bad[0])])))


def unstack_params(params: Params, run: int) -> Params:
    """The params of one run, in the single-run layout."""
    return jax.tree.map(lambda leaf: jnp.take(leaf, run, axis=run_axis(leaf)), params)
