"""A training job with the graph's rows sharded over every device of the job (``shard_graph``, or
``distributed`` over processes: :mod:`jaxgcn.distributed`): the layout, its memory estimate, the
run with its checkpoints (the state is replicated: process 0 writes it, every process restores
it). Notes go to ``say``; nothing here prints."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import jax

from jaxgcn import distributed
from jaxgcn.host import memory
from jaxgcn.store import checkpoint
from jaxgcn.app import saving
from jaxgcn.app.data import PARTITIONED, Loaded, Say, load, one_split
from jaxgcn.app.job import Job, Outcome
from jaxgcn.core.layers import is_sparse
from jaxgcn.host.memory import MemoryEstimate
from jaxgcn.core.models import Execution, GCNConfig
from jaxgcn import plan as planner
from jaxgcn.plan import compile_note, exchange_for, fallback_note, require_sharded, with_first_layer
from jaxgcn.io.reports import RunSummary


class Layout(NamedTuple):
    """The data as the devices will hold it, and how they exchange rows."""

    loaded: Loaded  # from partition files: a stand-in with the saved info (no host copy of the data)
    sharded: Any  # distributed.ShardedData, or None until the host data is sharded
    data: Any  # the host TrainData to shard (None for partition files)
    execution: Execution  # aggregate-first resolved
    stats: dict[str, Any]  # distributed.partition_stats
    exchange: str
    n_edges: int
    feature_nnz: int | None
    files: Any = None  # partition files: their recorded names, sizes and SHA-256s (meta["files"])
    n_parts: int = 1
    estimate: MemoryEstimate | None = None


def refuse(job: Job) -> None:
    """What a sharded run cannot do, refused before any work."""
    if job.n_runs > 1:
        raise ValueError(f"--shard-graph trains one model on one graph; for --seeds {job.seeds} / --splits "
                         f"{job.data.splits} use `jaxgcn sweep --distributed` (the runs are spread over processes)")
    require_sharded(job.execution)


def _from_partitions(job: Job, mesh: Any, model_config: GCNConfig, execution: Execution, say: Say) -> Layout:
    """partitioned:DIR: each process reads only its own devices' blocks."""
    r = job.data
    given = [flag for flag, value in (("--edges", r.edges), ("--split-file", r.split_file),
                                      ("--train-frac", r.train_frac)) if value is not None]
    if given or r.split != "public":
        raise ValueError(f"--dataset {r.dataset}: the graph, features and split are fixed when the "
                         f"partitions are written; drop {', '.join(given) or '--split'} (give them to "
                         "`jaxgcn partition`)")
    directory = Path(r.dataset[len(PARTITIONED):]).expanduser()
    sharded, meta = distributed.load_partitions(directory, mesh)
    info = {**meta["info"], "n_edges_directed": meta["n_edges"], "sparse_features": meta["sparse_features"]}
    say(f"{directory}: {meta['n_nodes']} nodes in {meta['parts']} parts written for {meta['exchange']}; this "
        f"process read {len(distributed.runtime.own_parts(mesh))} of them")
    prepared = SimpleNamespace(info=info, n_classes=int(info["n_classes"]), backend="csr")
    execution = with_first_layer(execution, job.aggregate, model_config.hidden, sharded.n_features,
                                 dense=not info["sparse_features"])
    # the features' non-zeros are not known without every block; the estimate counts sparse features as dense
    return Layout(Loaded(prepared, None), sharded, None, execution, meta["stats"], sharded.exchange,
                  info["n_edges_directed"], None, meta["files"])


def _from_data(job: Job, n_parts: int, model_config: GCNConfig, execution: Execution, say: Say) -> Layout:
    loaded = load(job.data, say, backend=job.execution.backend, on_device=False)
    if note := fallback_note(job.execution.backend, loaded.prepared.backend):
        say(note)  # no plan here (the blocks are CSR products): the one line of jaxgcn.plan's note
    data = one_split(loaded.prepared.data)
    execution = with_first_layer(execution, job.aggregate, model_config.hidden, int(data.x.shape[1]),
                                 dense=not is_sparse(data.x))
    stats = distributed.partition_stats(data.graph, n_parts)
    return Layout(loaded, None, data, execution, stats, exchange_for(job.exchange, stats), data.graph.n_edges,
                  int(data.x.nse) if hasattr(data.x, "nse") else None)


def _estimate(layout: Layout, model_config: GCNConfig, say: Say) -> MemoryEstimate:
    info, stats, n_parts = layout.loaded.prepared.info, layout.stats, layout.n_parts
    rows = stats["halo_rows"] if layout.exchange == "halo" else stats["all_gather_rows"]
    est = memory.estimate_sharded(info["n_nodes"], layout.n_edges, info["n_features"],
                                  layout.loaded.prepared.n_classes, parts=n_parts, exchange_rows=rows,
                                  hidden=model_config.hidden, layers=model_config.layers,
                                  feature_nnz=layout.feature_nnz, device=planner.current_platform() != "cpu")
    say(f"{n_parts} device(s) in {jax.process_count()} process(es) | {stats['rows_per_device']} nodes per device | "
        f"{100 * stats['cut_fraction']:.1f}% of edges cross a border | {layout.exchange}: {rows} rows received per "
        f"propagation (all_gather {stats['all_gather_rows']}, halo {stats['halo_rows']})")
    room = memory.budget()
    say(f"memory estimate per device {est.describe()}; {'host ' if room.where is None else ''}{room.describe()}")
    return est


def saved_facts(job: Job, layout: Layout) -> dict[str, Any]:
    """What the checkpoints record about the data: as one device's, with the fingerprint of the host
    data, or (partition files, no host copy) of the partition files' recorded SHA-256s."""
    own = layout.data is not None
    out = saving.facts(job, layout.loaded, fingerprint=False, split=own)
    if own:
        out["fingerprint"] = checkpoint.data_fingerprint(layout.data)
    else:
        digest = hashlib.sha256(json.dumps(layout.files, sort_keys=True).encode()).hexdigest()
        out["fingerprint"] = {part: digest for part in checkpoint.FINGERPRINT_PARTS}
    return out


def run(job: Job, say: Say, *, writer: bool, progress: Any = None, log_every: int = 0) -> Outcome:
    """Train one model with the graph's rows sharded over the job's devices; ``writer``: whether
    this process writes the checkpoints (process 0). The outcome's ``sharded`` is the
    :class:`Layout` (with its device count and memory estimate)."""
    refuse(job)
    model_config, train_config = job.model, job.train
    mesh = distributed.node_mesh(job.devices)
    n_parts = mesh.devices.size
    if job.data.source == "partitions":
        layout = _from_partitions(job, mesh, model_config, job.execution, say)
    else:
        layout = _from_data(job, n_parts, model_config, job.execution, say)
    layout = layout._replace(n_parts=n_parts)
    layout = layout._replace(estimate=_estimate(layout, model_config, say))
    if deep := compile_note(model_config):
        say(deep)
    resolved = planner.sharded(layout.execution, layout.estimate)  # what the engine runs: one plan
    lists = resolved.execution.ops.block_lists is not None  # an accelerator's blocks: neighbour lists
    sharded = layout.sharded if layout.data is None else distributed.shard_data(
        layout.data, mesh, exchange=layout.exchange, lists=lists)
    facts = saved_facts(job, layout) if job.save is not None or job.resume is not None else None
    # recorded as asked (the backend), with the precision decided: what the run computed in
    configs = (model_config, train_config, dataclasses.replace(layout.execution, precision=resolved.precision))
    hooks: dict[str, Any] = {}
    resumed = 0
    if facts is not None:
        # the layout (devices, exchange) is a setting: each device draws its dropout masks from its index
        hooks, resumed = saving.fit_hooks(job, layout.loaded, *configs, facts, say,
                                 layout={"devices": n_parts, "exchange": layout.exchange})
        if not writer:
            hooks.pop("on_checkpoint", None)
    res = distributed.fit_sharded(sharded, layout.loaded.prepared.n_classes, model_config=model_config,
                                  execution=resolved, config=train_config, key=jax.random.key(job.seed),
                                  log_every=log_every, log=None, progress=progress, **hooks)
    m = res.metrics
    runs = [RunSummary(job.seed, 0, m["test_acc"], m["val_acc"], res.epochs_run, res.stopped_early,
                       res.restored_epoch)]
    return Outcome(runs, res.compile_seconds, res.train_seconds, res.history["loss"], res, None, layout.loaded,
                   *configs, facts, sharded=layout, resumed_epoch=resumed)
