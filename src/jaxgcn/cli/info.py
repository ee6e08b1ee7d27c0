"""``jaxgcn info``: what the graph is and what preparing it did, the training memory estimate, and the
devices JAX sees."""

from __future__ import annotations

import argparse
from typing import Any

import jax
import scipy.sparse as sp

from jaxgcn.host import machine
from jaxgcn.io import outputs, reports
from jaxgcn.app.data import memory_estimate, split_note
from jaxgcn.cli import data
from jaxgcn.cli.common import prelude
from jaxgcn.cli.data import load, split_csv
from jaxgcn.core.models import PRECISION_MEANING
from jaxgcn.datasets.stats import dataset_stats, describe, feature_nonzeros
from jaxgcn.plan import precision_for


def precision_line(precision: dict[str, str]) -> str:
    """What ``--precision auto`` computes float32 matmuls in on this platform (``precision``: the
    ``--json``'s, ``{"auto": decided}``).

    >>> precision_line({"auto": "highest"})
    'precision: --precision auto gives highest here: float32 matmuls in full float32'
    """
    return f"precision: --precision auto gives {precision['auto']} here: float32 matmuls in " \
           f"{PRECISION_MEANING[precision['auto']]}"


def run(args: argparse.Namespace) -> int:
    prelude(args)
    raw = data.raw_graph(args)
    nnz, sparse = feature_nonzeros(raw.features), sp.issparse(raw.features)
    loaded = load(args, lambda msg: None, on_device=False, two_classes=False, raw=raw)
    del raw
    est = memory_estimate(loaded, args.hidden, nnz if sparse else None)
    devices = reports.devices_report()
    stats: dict[str, Any] = {**dataset_stats(loaded.prepared, nnz), "memory_estimate_bytes": est.total,
                             "devices": devices, "machine": machine.report(),
                             "precision": {"auto": precision_for("auto", jax.default_backend())}}
    print("\n".join(describe(stats)))
    note = split_note(data.request(args), loaded.prepared)
    if note:
        print(note)
    print(f"  training memory estimate (backend {loaded.prepared.backend}, hidden {args.hidden}): {est.describe()}")
    print(precision_line(stats["precision"]))
    print(machine.describe())
    print(reports.devices_line(devices))
    with outputs.Staged() as out:
        if args.json is not None:
            out.add(args.json, reports.json_text(stats), label=f"--json {args.json}")
        if args.save_split is not None:
            out.add(args.save_split, split_csv(loaded), label=f"--save-split {args.save_split}")
    return 0
