"""``train --shard-graph`` / ``--distributed``: one full-graph run with the rows sharded over every
device of the job (:mod:`jaxgcn.distributed`); only process 0 prints the summary and writes."""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import jax

from jaxgcn import checkpoint, distributed, memory, outputs, reports
from jaxgcn.cli import checkpointing, records
from jaxgcn.cli.common import Say
from jaxgcn.cli.config import configs
from jaxgcn.cli.data import Loaded, load, one_split, split_csv
from jaxgcn.cli.partition import exchange as resolve_exchange
from jaxgcn.cli.runtime import is_writer
from jaxgcn.layers import is_sparse
from jaxgcn.memory import MemoryEstimate
from jaxgcn.models import Execution, GCNConfig
from jaxgcn.plan import require_kernel, with_first_layer
from jaxgcn.progress import Progress
from jaxgcn.reports import RunSummary, restored_line
from jaxgcn.train import TrainConfig

PARTITIONED = "partitioned:"


class Layout(NamedTuple):
    """The data as the devices will hold it, and how they exchange rows."""

    loaded: Loaded  # from partition files: a stand-in with the saved info (no host copy of the data)
    sharded: Any  # distributed.ShardedData, or None until the host data is sharded
    data: Any  # the host TrainData to shard (None for partition files)
    model_config: GCNConfig
    execution: Execution  # --aggregate-first resolved
    stats: dict[str, Any]  # distributed.partition_stats
    exchange: str
    n_edges: int
    feature_nnz: int | None
    files: Any = None  # partition files: their recorded names, sizes and SHA-256s (meta["files"])


def _refuse(args: argparse.Namespace) -> None:
    if args.seeds > 1 or args.splits > 1:
        raise ValueError(f"--shard-graph trains one model on one graph; for --seeds {args.seeds} / --splits "
                         f"{args.splits} use `jaxgcn sweep --distributed` (the runs are spread over processes)")
    if args.backend not in ("auto", "csr") or args.chunk_edges is not None:
        raise ValueError(f"--shard-graph aggregates each row block as a CSR product (the fused kernel on a CPU, "
                         f"XLA on a GPU); drop --backend {args.backend}"
                         + (" and --chunk-edges" if args.chunk_edges else ""))
    if args.backend == "csr":
        require_kernel()


def _from_partitions(args: argparse.Namespace, mesh: Any, model_config: GCNConfig, execution: Execution,
                     say: Say) -> Layout:
    """--dataset partitioned:DIR: each process reads only its own devices' blocks."""
    given = [flag for flag, value in (("--edges", args.edges), ("--split-file", args.split_file),
                                      ("--train-frac", args.train_frac), ("--save-split", args.save_split))
             if value is not None]
    if given or args.split != "public":
        raise ValueError(f"--dataset {args.dataset}: the graph, features and split are fixed when the "
                         f"partitions are written; drop {', '.join(given) or '--split'} (give them to "
                         "`jaxgcn partition`)")
    directory = Path(args.dataset[len(PARTITIONED):]).expanduser()
    sharded, meta = distributed.load_partitions(directory, mesh)
    info = {**meta["info"], "n_edges_directed": meta["n_edges"], "sparse_features": meta["sparse_features"]}
    say(f"{directory}: {meta['n_nodes']} nodes in {meta['parts']} parts written for {meta['exchange']}; this "
        f"process read {len(distributed.runtime.own_parts(mesh))} of them")
    prepared = SimpleNamespace(info=info, n_classes=int(info["n_classes"]), backend="csr")
    execution = with_first_layer(execution, args.aggregate_first, model_config.hidden, sharded.n_features,
                            dense=not info["sparse_features"])
    # the features' non-zeros are not known without every block; the estimate counts sparse features as dense
    return Layout(Loaded(prepared, None), sharded, None, model_config, execution, meta["stats"], sharded.exchange,
                  info["n_edges_directed"], None, meta["files"])


def _from_data(args: argparse.Namespace, n_parts: int, model_config: GCNConfig, execution: Execution,
               say: Say) -> Layout:
    loaded = load(args, say, on_device=False)
    data = one_split(loaded.prepared.data)
    execution = with_first_layer(execution, args.aggregate_first, model_config.hidden, int(data.x.shape[1]),
                                 dense=not is_sparse(data.x))
    stats = distributed.partition_stats(data.graph, n_parts)
    return Layout(loaded, None, data, model_config, execution, stats, resolve_exchange(args.exchange, stats),
                  data.graph.n_edges, int(data.x.nse) if hasattr(data.x, "nse") else None)


def _estimate(layout: Layout, n_parts: int, say: Say) -> MemoryEstimate:
    info, stats = layout.loaded.prepared.info, layout.stats
    rows = stats["halo_rows"] if layout.exchange == "halo" else stats["all_gather_rows"]
    est = memory.estimate_sharded(info["n_nodes"], layout.n_edges, info["n_features"],
                                  layout.loaded.prepared.n_classes, parts=n_parts, exchange_rows=rows,
                                  hidden=layout.model_config.hidden, layers=layout.model_config.layers,
                                  feature_nnz=layout.feature_nnz)
    say(f"{n_parts} device(s) in {jax.process_count()} process(es) | {stats['rows_per_device']} nodes per device | "
        f"{100 * stats['cut_fraction']:.1f}% of edges cross a border | {layout.exchange}: {rows} rows received per "
        f"propagation (all_gather {stats['all_gather_rows']}, halo {stats['halo_rows']})")
    say(f"memory estimate per device {est.describe()}; host {memory.available_bytes() / 2**30:.1f} GiB available")
    return est


def saved_facts(args: argparse.Namespace, layout: Layout) -> dict[str, Any]:
    """What the checkpoints record about the data: as one device's, with the fingerprint of the host
    data, or (partition files, no host copy) of the partition files' recorded SHA-256s."""
    own = layout.data is not None
    out = checkpointing.facts(args, layout.loaded, fingerprint=False, split=own)
    if own:
        out["fingerprint"] = checkpoint.data_fingerprint(layout.data)
    else:
        digest = hashlib.sha256(json.dumps(layout.files, sort_keys=True).encode()).hexdigest()
        out["fingerprint"] = {part: digest for part in checkpoint.FINGERPRINT_PARTS}
    return out


def _hooks(args: argparse.Namespace, layout: Layout, train_config: TrainConfig, n_parts: int, writer: bool,
           facts: dict[str, Any] | None, say: Say) -> dict[str, Any]:
    """--checkpoint-every/--resume: the state is replicated, so it is one run's; every process
    restores it and runs the same chunks, process 0 writes it. The layout (devices, exchange)
    is a setting: each device draws its dropout masks from its index."""
    if args.checkpoint_every is None and args.resume is None:
        return {}
    hooks = checkpointing.fit_hooks(args, layout.loaded, layout.model_config, train_config, layout.execution,
                                    facts, say,
                                    layout={"devices": n_parts, "exchange": layout.exchange})
    if not writer:
        hooks.pop("on_checkpoint", None)
    return hooks


def _fit(args: argparse.Namespace, layout: Layout, sharded: Any, train_config: TrainConfig, n_parts: int,
         writer: bool, facts: dict[str, Any] | None, say: Say) -> Any:
    hooks = _hooks(args, layout, train_config, n_parts, writer, facts, say)
    progress = Progress(train_config.epochs, every=args.log_every, quiet=args.quiet or not writer,
                        log_file=args.log if writer else None, tensorboard=args.tensorboard if writer else None,
                        seeds=[args.seed])
    try:
        return distributed.fit_sharded(sharded, layout.loaded.prepared.n_classes, model_config=layout.model_config,
                                       execution=layout.execution, config=train_config, key=jax.random.key(args.seed),
                                       log_every=args.log_every,
                                       log=None, progress=progress, **hooks)
    finally:
        progress.done()


def _report(args: argparse.Namespace, layout: Layout, train_config: TrainConfig, res: Any, summary: RunSummary,
            n_parts: int, est: MemoryEstimate, record: dict[str, Any] | None) -> dict[str, Any]:
    prepared, m = layout.loaded.prepared, res.metrics
    return reports.train_report(
        reports.dataset_report(prepared.info, prepared.backend),
        reports.config_report(layout.model_config, train_config, args.norm, args.feature_norm, layout.execution),
        [summary], 1,
        res.compile_seconds, res.train_seconds,
        details={"metrics": m, "history": {k: v.tolist() for k, v in res.history.items()}},
        distributed={"processes": jax.process_count(), "devices": n_parts, "exchange": layout.exchange,
                     "partition": layout.stats, "memory_estimate_per_device": est.parts},
        record=record)


def _write(args: argparse.Namespace, layout: Layout, train_config: TrainConfig, res: Any, report: dict[str, Any],
           facts: dict[str, Any] | None, say: Say) -> None:
    """Everything appears, or (on an error) nothing."""
    own = layout.data is not None  # partitions hold no host copy of the whole data
    with outputs.Staged() as out:
        if args.json is not None:
            out.add(args.json, reports.json_text(report), label=f"--json {args.json}")
        if args.save_split is not None and own:
            out.add(args.save_split, split_csv(layout.loaded), label=f"--save-split {args.save_split}")
        if args.save is not None:
            checkpoint.save(args.save, res.params, model_config=layout.model_config, train_config=train_config,
                            execution=layout.execution, info=layout.loaded.prepared.info, epoch=res.epochs_run,
                            metrics=res.metrics, extra=checkpointing.result_facts(res),
                            **facts)
            say(f"saved the model to {args.save}")


def run(args: argparse.Namespace, say: Say) -> int:
    """Train one model with the graph's rows sharded over the job's devices."""
    _refuse(args)
    writer = is_writer()
    say = say if writer else (lambda msg: None)
    model_config, train_config, execution = configs(args, "csr")
    mesh = distributed.node_mesh(args.devices)
    n_parts = mesh.devices.size
    if args.dataset.startswith(PARTITIONED):
        layout = _from_partitions(args, mesh, model_config, execution, say)
    else:
        layout = _from_data(args, n_parts, model_config, execution, say)
    est = _estimate(layout, n_parts, say)
    sharded = layout.sharded if layout.data is None else distributed.shard_data(layout.data, mesh,
                                                                                  exchange=layout.exchange)
    facts = saved_facts(args, layout) if args.save is not None or args.resume is not None else None
    res = _fit(args, layout, sharded, train_config, n_parts, writer, facts, say)
    if not writer:
        return 0
    m = res.metrics
    print(f"test accuracy {m['test_acc']:.4f} | val {m['val_acc']:.4f} | epochs {res.epochs_run} | "
          f"{n_parts} devices, {layout.exchange} | compile {res.compile_seconds:.2f}s | train "
          f"{res.train_seconds:.2f}s ({1e3 * res.train_seconds / res.epochs_run:.2f} ms/epoch)")
    summary = RunSummary(args.seed, 0, m["test_acc"], m["val_acc"], res.epochs_run, res.stopped_early,
                         res.restored_epoch)
    restored = restored_line([summary])
    if restored is not None:
        print(restored)
    record = records.for_run(args, layout.data)  # partition files: no host copy, no fingerprint
    _write(args, layout, train_config, res, _report(args, layout, train_config, res, summary, n_parts, est, record),
           facts, say)
    return 0
