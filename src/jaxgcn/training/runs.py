"""Many training runs as ONE compiled program, batched along the feature axis.

The forward pass is :func:`jaxgcn.core.models.apply_runs`, the same one a single run uses: runs are
stacked *inside* the feature axis (activations ``[n_nodes, n_runs, width]``, weights
``[in_dim, n_runs, out_dim]``), so one propagation with ``n_runs * width``-wide rows serves every
run (``jax.vmap`` of a gather + ``segment_sum`` model measured slower on CPU than a loop). The
optimizer is the single run's (:func:`jaxgcn.train.optimizer_factory`), vmapped over the run axis.

Each run keeps its own PRNG stream (identical to a single run with the same key: same init, same
dropout masks), its own learning rate, L2 factor, dropout rate, hidden width and split masks, and
its own early stopping (per-run masks freeze a run once it has stopped). A run is described by an
:class:`Entry` (its configs, seed and split); the runs of one program share everything else
(:func:`program_of`), the hidden width included.

:func:`jaxgcn.training.loop.fit` (one run, through the same runner builder) is the reference this
module is tested against.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxgcn.core import hyper
from jaxgcn.host.compiler import jit
from jaxgcn.core.diagnostics import runs_divergence_message
from jaxgcn.core.layers import is_sparse
from jaxgcn.core.layers import Params, run_axes
from jaxgcn.core.models import Execution, GCNConfig, RunInputs, gcn, make_run_inputs
from jaxgcn.plan import (Plan, batch_mesh, concrete, focused, on_runs, program_of, replicated, require_decided,
                         run_shardings, slice_size)
from jaxgcn.core.data import TrainData
from jaxgcn.core.results import BatchResult, concat_results, unstack_params  # noqa: F401 - unstack_params: its old address
from jaxgcn.training.config import TrainConfig
from jaxgcn.training.loop import Compiled, Layout, compile, run, signature  # noqa: F401
from jaxgcn.training.state import BatchState, run_keys, state_axes
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


def run_inputs(entries: Sequence[Entry]) -> RunInputs:
    """The device-side per-run inputs of a batch: every input :data:`jaxgcn.core.hyper.PER_RUN` declares,
    read from each entry (:func:`jaxgcn.core.models.make_run_inputs`)."""
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
    keys = jax.vmap(lambda s: run_keys(s)[0])(seeds)  # THE seed-to-key rule
    stacked = jax.vmap(lambda k: model.init(k, n_features, n_classes))(keys)
    return jax.tree.map(lambda leaf: jnp.moveaxis(leaf, 0, 1) if leaf.ndim == 3 else leaf, stacked)


# --- the host-side driver ---------------------------------------------------------------------------


def _padded(entries: Sequence[Entry], multiple: int) -> list[Entry]:
    """Repeat the last run so the run count divides evenly over the devices (extra runs dropped later)."""
    return [*entries, *[entries[-1]] * ((-len(entries)) % multiple)]


def _state_shardings(state: BatchState, config: TrainConfig, mesh: jax.sharding.Mesh | None) -> Any:
    """Shardings that keep every run-axis leaf of a :class:`BatchState` split over ``runs`` (so the
    while loop's output can be fed back in), the shared Adam count and epoch counter replicated."""
    if mesh is None:
        return None
    return run_shardings(state, BatchState(runs=state_axes(config, state.runs.params), step=None), mesh)


def fit_runs(
    data: TrainData,
    n_classes: int,
    entries: Sequence[Entry],
    *,
    execution: Execution | Plan = Execution(),
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
    epoch, runs still training, mean val accuracy. ``execution``: the plan the application resolved
    (:func:`jaxgcn.plan.resolve`), or a request the plan decides here, once.

    Checkpoints are per slice: ``on_checkpoint(first, state)`` receives the state of the slice
    whose first run is ``first`` every ``checkpoint_every`` epochs and when it ends;
    ``resume(first, template)`` returns a saved state of that slice (or None: start it afresh).

    Raises:
        ValueError: the entries do not share one program.
        TrainingDiverged: a run's loss became NaN/inf (the message names the runs and the causes).
    """
    entries = list(entries)
    model_config, config = program_of(entries)
    plan, execution = execution, concrete(execution, data.graph)  # the request decided once: backend, ops
    size = slice_size(len(entries), model_config.hidden, execution, n_devices, data.graph, runs_per_device,
                      None if is_sparse(data.x) else int(data.x.shape[1]))
    data = focused(data, model_config.layers, execution, plan)  # and what the ops precompute (once per job)
    options = _Options(model_config, config, execution, log_every, log, n_devices, progress, checkpoint_every,
                       on_checkpoint, resume)
    parts = [_slice(data, n_classes, entries, first, size, options) for first in range(0, len(entries), size)]
    return parts[0] if len(parts) == 1 else concat_results(entries, parts)


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


def _slice(data: TrainData, n_classes: int, entries: list[Entry], first: int, size: int,
           options: _Options) -> BatchResult:
    """The slice of :func:`fit_runs` whose first run is ``first``, in ONE execution of its program
    through the one host driver (:func:`jaxgcn.training.loop.run`). One of several slices is
    announced and padded to ``size`` runs (every slice one shape, the padding dropped from the
    result); its checkpoints are the slice's (``first``)."""
    part = entries[first:first + size]
    if len(entries) > size:
        label = f"runs {first + 1}-{first + len(part)} of {len(entries)}"
        if options.log is not None and options.log_every > 0:
            options.log(label)
        if options.progress is not None:
            options.progress.start_slice(first, label)
    padded = _padded(part, size) if len(entries) > size else part
    program, state, data, runs = _start(options, padded, data, n_classes)
    saved = None if options.resume is None else options.resume(first, state)
    state = state if saved is None else saved  # uncommitted: the program places it over its mesh as its own output
    save = None if options.on_checkpoint is None else functools.partial(options.on_checkpoint, first)
    done = run(program, state, data, runs, Layout(len(part)), options.config, log=options.log,
               log_every=options.log_every, progress=options.progress, checkpoint_every=options.checkpoint_every,
               checkpoint=save, diverged=lambda bad, epoch: runs_divergence_message(padded, data, bad, epoch))
    return done._replace(entries=part)


def _start(options: _Options, entries: list[Entry], data: TrainData,
           n_classes: int) -> tuple[Compiled, BatchState, TrainData, RunInputs]:
    """A slice's program (:func:`jaxgcn.training.loop.compile`, once per configuration, shapes and
    mesh), its initial state, and its data and run inputs placed on its mesh (the runs padded to a
    multiple of its devices)."""
    model_config, config, execution = options.model_config, options.config, require_decided(options.execution)
    mesh = batch_mesh(len(entries), execution, options.n_devices, data.graph)
    padded = _padded(entries, mesh.size if mesh is not None else 1)
    params = init_params(model_config, padded, data.x.shape[1], n_classes)
    params = on_runs(params, mesh, run_axes(params))
    runs = on_runs(run_inputs(padded), mesh)
    seeds = on_runs(jnp.asarray(_seeds(padded), jnp.int32), mesh)
    data = replicated(data, mesh)
    runner = make_batch_runner(model_config, config, execution)
    shardings = _state_shardings(jax.eval_shape(runner.init, params, seeds, runs), config, mesh)
    key = ("runs", model_config, config, execution, signature(data), jax.tree.structure(params),
           tuple(leaf.shape for leaf in jax.tree.leaves(params)), mesh)
    program = compile(key, runner, (params, seeds, runs), data, shardings=shardings, progress=options.progress,
                      execution=execution)
    return program, program.init(params, seeds, runs), data, runs
