"""``jaxgcn info``: what the graph is and what preparing it did, the training memory estimate, and the
devices JAX sees."""

from __future__ import annotations

import argparse
from typing import Any

import scipy.sparse as sp

from jaxgcn import outputs, reports
from jaxgcn.cli import data
from jaxgcn.cli.common import prelude
from jaxgcn.cli.data import Loaded, load, split_csv
from jaxgcn.datasets.stats import dataset_stats, describe, feature_nonzeros
from jaxgcn.memory import MemoryEstimate, estimate


def _estimate(loaded: Loaded, hidden: int, nnz: int, sparse: bool) -> MemoryEstimate:
    prepared = loaded.prepared
    info, graph = prepared.info, prepared.data.graph
    return estimate(info["n_nodes"], graph.n_edges, info["n_features"], prepared.n_classes, hidden=hidden,
                    backend=prepared.backend, feature_nnz=nnz if sparse else None,
                    symmetric=graph.csr is None or graph.csr.symmetric)


def run(args: argparse.Namespace) -> int:
    prelude(args)
    raw = data.raw_graph(args)
    nnz, sparse = feature_nonzeros(raw.features), sp.issparse(raw.features)
    loaded = load(args, lambda msg: None, backend="auto", on_device=False, two_classes=False, raw=raw)
    del raw
    est = _estimate(loaded, args.hidden, nnz, sparse)
    devices = reports.devices_report()
    stats: dict[str, Any] = {**dataset_stats(loaded.prepared, nnz), "memory_estimate_bytes": est.total,
                             "devices": devices}
    print("\n".join(describe(stats)))
    print(f"  training memory estimate (backend {loaded.prepared.backend}, hidden {args.hidden}): {est.describe()}")
    print(reports.devices_line(devices))
    with outputs.Staged() as out:
        if args.json is not None:
            out.add(args.json, reports.json_text(stats), label=f"--json {args.json}")
        if args.save_split is not None:
            out.add(args.save_split, split_csv(loaded), label=f"--save-split {args.save_split}")
    return 0
