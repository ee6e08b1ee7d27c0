"""Many training runs as ONE compiled program, batched along the feature axis.

The forward pass is :func:`jaxgcn.models.apply_runs`, the same one a single run uses: runs are
stacked *inside* the feature axis (activations ``[n_nodes, n_runs, width]``, weights
``[in_dim, n_runs, out_dim]``), so one propagation with ``n_runs * width``-wide rows serves every
run (``jax.vmap`` of a gather + ``segment_sum`` model measured slower on CPU than a loop). The
optimizer is the single run's (:func:`jaxgcn.train.optimizer_factory`), vmapped over the run axis.

Each run keeps its own PRNG stream (identical to a single run with the same key: same init, same
dropout masks), its own learning rate, L2 factor, dropout rate, hidden width and split masks, and
its own early stopping (per-run masks freeze a run once it has stopped). Hidden widths below the
widest one are zero-padded; padded units receive zero gradients and Adam leaves them at exactly
zero, so a padded run equals the unpadded model of its width.

:func:`jaxgcn.train.make_runner` is the single-run reference this module is tested against.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

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

class RunSpec(NamedTuple):
    """Per-run settings of a batch of R runs (host arrays, length R).

    Attributes:
        seed: PRNG seed of each run (``jax.random.key(seed)``, as a single run would use).
        lr, weight_decay, dropout: per-run hyperparameters.
        hidden: per-run hidden width (<= the model config's ``hidden``, which is the padded width).
        split: index into the batch's stacked split masks (0 when there is one split).
    """

    seed: np.ndarray
    lr: np.ndarray
    weight_decay: np.ndarray
    dropout: np.ndarray
    hidden: np.ndarray
    split: np.ndarray

    @property
    def n_runs(self) -> int:
        return int(np.asarray(self.seed).shape[0])


def make_specs(seeds: list[int], *, lr: float = 0.01, weight_decay: float = 5e-4, dropout: float = 0.5,
               hidden: int = 16, split: int = 0) -> RunSpec:
    """A :class:`RunSpec` for several seeds of one configuration."""
    r = len(seeds)
    return RunSpec(np.asarray(seeds, np.int64), np.full(r, lr, np.float32), np.full(r, weight_decay, np.float32),
                   np.full(r, dropout, np.float32), np.full(r, hidden, np.int32), np.full(r, split, np.int32))


def concat_specs(specs: list[RunSpec]) -> RunSpec:
    return RunSpec(*(np.concatenate(parts) for parts in zip(*specs)))


def run_inputs(spec: RunSpec) -> RunInputs:
    """The device-side per-run inputs of a batch (:func:`jaxgcn.models.make_run_inputs`)."""
    return make_run_inputs(dropout=spec.dropout, hidden=spec.hidden, lr=spec.lr, weight_decay=spec.weight_decay,
                           split=spec.split)


# --- init and the batched training run ------------------------------------------------------------


def _pad_to(leaf: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return jnp.pad(leaf, [(0, t - s) for s, t in zip(leaf.shape, shape)])


def init_params(config: GCNConfig, spec: RunSpec, n_features: int, n_classes: int) -> Params:
    """Stacked params: each run initialized exactly as a single run of its seed and width, then
    zero-padded to ``config.hidden`` and stacked along the run axis."""
    hidden = np.asarray(spec.hidden)
    if hidden.max() > config.hidden:
        raise ValueError(f"a run has hidden width {hidden.max()} > the padded width {config.hidden}")
    if config.layer_norm and np.any(hidden != config.hidden):
        raise ValueError("layer norm needs every run of a batch to have the same hidden width")
    init = jit(_init_stacked, static_argnums=(0, 1, 2, 3))
    return init(config, tuple(int(h) for h in hidden), n_features, n_classes, jnp.asarray(spec.seed, jnp.int32))


def _init_stacked(config: GCNConfig, hidden: tuple[int, ...], n_features: int, n_classes: int,
                  seeds: jax.Array) -> Params:
    widths = np.asarray(hidden)
    full = jax.eval_shape(lambda: gcn(config).init(jax.random.key(0), n_features, n_classes))
    order, groups = [], []
    for width in np.unique(widths):
        idx = np.flatnonzero(widths == width)
        model = gcn(dataclasses.replace(config, hidden=int(width)))
        keys = jax.vmap(lambda s: jax.random.split(jax.random.key(s))[0])(seeds[idx])
        group = jax.vmap(lambda k, m=model: m.init(k, n_features, n_classes))(keys)
        groups.append(jax.tree.map(lambda g, f: _pad_to(g, (g.shape[0], *f.shape)), group, full))
        order.append(idx)
    inverse = np.argsort(np.concatenate(order))
    stacked = jax.tree.map(lambda *g: jnp.concatenate(g, axis=0)[inverse], *groups)
    return jax.tree.map(lambda leaf: jnp.moveaxis(leaf, 0, 1) if leaf.ndim == 3 else leaf, stacked)


# --- the host-side driver ---------------------------------------------------------------------------


class BatchResult(NamedTuple):
    """Outcome of a batch of runs (host NumPy, one entry per run).

    Attributes:
        spec: the runs.
        metrics: ``{"train_acc", "val_acc", "test_acc", ...}`` -> [R] of the final (or best) params.
        epochs_run: [R]. stopped_early: [R] bool.
        history: ``{"loss", "train_acc", "val_loss", "val_acc"}`` -> [R, epochs] (NaN after a run stopped).
        params: stacked final params (see :func:`unstack_params`).
        compile_seconds, train_seconds: wall times of compiling and of running the batch.
        restored_epoch: with ``patience`` early stopping, [R] the epoch (1-based) whose params each
            run returns (its best validation accuracy); ``None`` otherwise.
    """

    spec: RunSpec
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


def _pad_spec(spec: RunSpec, multiple: int) -> RunSpec:
    """Repeat the last run so the run count divides evenly over the devices (extra runs dropped later)."""
    extra = (-spec.n_runs) % multiple
    return spec if extra == 0 else RunSpec(*(np.concatenate([a, np.repeat(a[-1:], extra)]) for a in spec))


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
    spec: RunSpec,
    *,
    model_config: GCNConfig = GCNConfig(),
    execution: Execution = Execution(),
    config: TrainConfig = TrainConfig(),
    log_every: int = 0,
    log: Callable[[str], None] | None = None,
    n_devices: int | None = None,
    runs_per_device: int | None = None,
    progress: Any = None,
    checkpoint_every: int | None = None,
    on_checkpoint: Callable[[int, BatchState], None] | None = None,
    resume: Callable[[int, BatchState], BatchState | None] | None = None,
) -> BatchResult:
    """Train every run of ``spec`` with one compiled program (see the module docstring).

    The runs are executed in slices of ``runs_per_device * devices`` runs (default
    :func:`runs_per_device_for` the model's hidden width); every slice has the same shapes (the
    last one is padded), so the program is compiled once and executed ``ceil(runs / slice)``
    times. Checkpoints are per slice: ``on_checkpoint(first, state)`` receives the state of the
    slice whose first run is ``first`` every ``checkpoint_every`` epochs and when it ends;
    ``resume(first, template)`` returns a saved state of that slice (or None: start it afresh).
    Other arguments as :func:`fit_batch`.
    """
    execution = planned(execution, data.graph)  # the backend and the kernels decided once (jaxgcn.plan)
    size = slice_size(spec.n_runs, model_config.hidden, execution, n_devices, data.graph, runs_per_device)
    saving = dict(checkpoint_every=checkpoint_every, on_checkpoint=on_checkpoint, resume=resume)
    if spec.n_runs <= size:
        return fit_batch(data, n_classes, spec, model_config=model_config, execution=execution, config=config,
                         log_every=log_every, log=log, n_devices=n_devices, progress=progress, **saving)
    parts = []
    for start in range(0, spec.n_runs, size):
        part = RunSpec(*(a[start:start + size] for a in spec))
        if log is not None and log_every > 0:
            log(f"runs {start + 1}-{start + part.n_runs} of {spec.n_runs}")
        if progress is not None:
            progress.start_slice(start, f"runs {start + 1}-{start + part.n_runs} of {spec.n_runs}")
        parts.append(fit_batch(data, n_classes, _pad_spec(part, size), model_config=model_config,
                               execution=execution, config=config,
                               log_every=log_every, log=log, n_devices=n_devices, keep=part.n_runs,
                               progress=progress, first=start, **saving))
    return _concat_results(spec, parts)


def _concat_results(spec: RunSpec, parts: list[BatchResult]) -> BatchResult:
    def cat(get: Callable[[BatchResult], Any]) -> Any:
        return np.concatenate([get(p) for p in parts])
    return BatchResult(
        spec=spec,
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


def fit_batch(
    data: TrainData,
    n_classes: int,
    spec: RunSpec,
    *,
    model_config: GCNConfig = GCNConfig(),
    execution: Execution = Execution(),
    config: TrainConfig = TrainConfig(),
    log_every: int = 0,
    log: Callable[[str], None] | None = None,
    n_devices: int | None = None,
    keep: int | None = None,
    progress: Any = None,
    first: int = 0,
    checkpoint_every: int | None = None,
    on_checkpoint: Callable[[int, BatchState], None] | None = None,
    resume: Callable[[int, BatchState], BatchState | None] | None = None,
) -> BatchResult:
    """Train every run of ``spec`` in ONE execution of one compiled program.

    The per-run learning rate, L2 factor, dropout and hidden width come from ``spec`` (see
    :func:`make_specs`, whose defaults are the paper's), not from ``config.lr``,
    ``config.weight_decay``, ``model_config.dropout``; ``model_config.hidden`` is the padded width
    (>= every ``spec.hidden``). With more than one
    device visible the run axis is sharded over them (``n_devices`` limits how many). Progress,
    when ``log_every`` > 0, is one line per chunk: the epoch, runs still training, mean val accuracy.

    ``keep`` drops trailing runs from the result (padding added by :func:`fit_runs`); ``first``
    is the index of the batch's first run in :func:`fit_runs`'s runs, what the checkpoint hooks
    (as :func:`fit_runs`) receive.

    Raises:
        TrainingDiverged: a run's loss became NaN/inf (the message names the runs and the causes).
    """
    n_runs = spec.n_runs if keep is None else keep
    execution = planned(execution, data.graph)
    data = with_focus(data)
    compiled, state, data, runs = _start(model_config, config, execution, spec, data, n_classes, n_devices, progress)
    run_until, evaluate, final, compile_s = compiled[1:]
    saved = None if resume is None else resume(first, state)
    if saved is not None:  # uncommitted arrays: the program places them over its mesh as its own output
        state = saved
    start = time.perf_counter()

    def view(s: BatchState) -> tuple[int, dict[str, np.ndarray], np.ndarray]:
        history = {k: np.asarray(v)[:n_runs] for k, v in s.runs.history.items()}
        return int(s.step), history, np.asarray(s.runs.reason)[:n_runs]

    hooks = _hooks(n_runs, log if log_every > 0 else None, progress, on_checkpoint, first)
    state, seen = drive(lambda s, stop: run_until(s, data, runs, jnp.int32(stop)), state, view, epochs=config.epochs,
                        chunk=checkpoint_every or (log_every if log_every > 0 else config.epochs), hooks=hooks)
    _raise_if_diverged(spec, config, data, state, seen.reason)
    params = final(state)
    metrics = {k: np.asarray(v)[:n_runs] for k, v in evaluate(params, data, runs).items()}
    epochs = np.asarray(state.runs.epoch)[:n_runs]
    history = {k: np.asarray(v)[:n_runs] for k, v in state.runs.history.items()}
    params = jax.tree.map(lambda leaf: jnp.take(leaf, jnp.arange(n_runs), axis=run_axis(leaf)), params)
    restored = np.asarray(state.runs.best_epoch)[:n_runs] if isinstance(config.early_stopping, Patience) else None
    return BatchResult(RunSpec(*(a[:n_runs] for a in spec)), metrics, epochs, seen.reason == STOPPED_EARLY, history,
                       params, compile_s, time.perf_counter() - start, restored)


def _start(model_config: GCNConfig, config: TrainConfig, execution: Execution, spec: RunSpec, data: TrainData,
           n_classes: int, n_devices: int | None, progress: Any) -> tuple[Compiled, BatchState, TrainData, RunInputs]:
    """A batch's compiled programs, initial state, and data and run inputs placed on its mesh (the
    runs padded to a multiple of its devices)."""
    mesh = batch_mesh(spec.n_runs, execution, n_devices, data.graph)
    padded = _pad_spec(spec, mesh.size if mesh is not None else 1)
    params = init_params(model_config, padded, data.x.shape[1], n_classes)
    params = _shard_runs(params, mesh, jax.tree.map(run_axis, params))
    runs = _shard_runs(run_inputs(padded), mesh)
    seeds = _shard_runs(jnp.asarray(padded.seed, jnp.int32), mesh)
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
    included: a resumed job skips a finished slice)."""
    def log_runs(_: Any, seen: Chunk) -> None:
        val = seen.history["val_acc"][:, seen.epoch - 1]
        log(runs_line(seen.epoch, int(np.sum(seen.reason == RUNNING)), n_runs,
                      float(np.nanmean(val)) if np.any(np.isfinite(val)) else float("nan")))

    hooks: list[Any] = [log_runs] if log is not None else []
    if progress is not None:
        hooks.append(progress_hook(progress))
    if on_checkpoint is not None:
        hooks.append(lambda s, seen: on_checkpoint(first, s))
    return hooks


def _raise_if_diverged(spec: RunSpec, config: TrainConfig, data: TrainData, state: BatchState,
                       reason: np.ndarray) -> None:
    """:class:`TrainingDiverged` naming the runs whose loss became NaN/inf (the first one's seed
    and learning rate, and the likely causes)."""
    if not np.any(reason == DIVERGED):
        return
    bad = np.flatnonzero(reason == DIVERGED)
    worst = int(bad[0])
    one = dataclasses.replace(config, lr=float(spec.lr[worst]))
    raise TrainingDiverged(f"run(s) {bad.tolist()} (seed {int(spec.seed[worst])}, lr {float(spec.lr[worst]):g}): "
                           + divergence_message(data, one, int(np.asarray(state.runs.epoch)[worst])))


def unstack_params(params: Params, run: int, hidden: int | None = None) -> Params:
    """The params of one run, in the single-run layout, cut to its hidden width when given."""
    def take(leaf: jax.Array) -> jax.Array:
        return jnp.take(leaf, run, axis=run_axis(leaf))
    single = jax.tree.map(take, params)
    if hidden is None:
        return single
    out = {}
    n_layers = len(single)
    for i in range(n_layers):
        layer = dict(single[f"layer_{i}"])
        for k in ("w", "w_res"):
            if k in layer:
                w = layer[k]
                layer[k] = w[: (hidden if i > 0 else w.shape[0]), : (hidden if i < n_layers - 1 else w.shape[1])]
        for k in ("b",):
            if k in layer and i < n_layers - 1:
                layer[k] = layer[k][:hidden]
        if "ln" in layer:
            layer["ln"] = {k: v[:hidden] for k, v in layer["ln"].items()}
        out[f"layer_{i}"] = layer
    return out
