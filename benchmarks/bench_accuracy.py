"""Test accuracy of the paper's GCN on every catalogue dataset at hand, each scored with its own
evaluation protocol, every run of a dataset in ONE compiled program.

    python benchmarks/bench_accuracy.py                                 # every bundled or cached dataset
    python benchmarks/bench_accuracy.py --datasets cora,shchur-cora --seeds 20
    JAXGCN_DATA=/data/jaxgcn python benchmarks/bench_accuracy.py --splits 5 --seeds-per-split 4
    python benchmarks/bench_accuracy.py --datasets pubmed --download     # fetch what is missing first
    python benchmarks/bench_accuracy.py --record docs/figures.json       # + write the figures the docs quote

Protocols (``jaxgcn datasets`` lists them): ``planetoid`` and ``ogb``: the one official split x
--seeds seeds; ``per-class-20-30`` (Shchur et al.): --splits random splits (split k drawn with seed
k) x --seeds-per-split seeds; ``wikics``: the first --splits official splits x --seeds-per-split
seeds. Settings are the library's defaults, which are Kipf & Welling's (TrainConfig, GCNConfig:
Adam 0.01, hidden 16, dropout 0.5, L2 5e-4 on the first layer, 200 epochs, Kipf's early stopping
on a window of 10, row-normalized features).

Nothing is downloaded unless --download is given: a dataset that is neither bundled nor cached
under --data-root ($JAXGCN_DATA, else the per-user cache) gets a line saying how to fetch it.
Prints a markdown table: test metric mean ± std over the runs (population std, as ``jaxgcn
train``), the seconds of the compiled runs ("train", compile excluded) and of the whole dataset
(load + parse + prepare + compile + train). The reference column is the published GCN number
(Kipf & Welling 2017, Table 2, Planetoid split) where one exists for the same protocol.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import NamedTuple

import jax
import numpy as np
from figure_record import add_record_arguments, figure, record

from jaxgcn.batched import BatchResult, entries_for, fit_runs
from jaxgcn.datasets import load_dataset, prepare, with_splits
from jaxgcn.datasets.catalogue import CATALOGUE, Dataset, lookup
from jaxgcn.datasets.download import data_root, is_cached
from jaxgcn.datasets.named import protocol_info, protocol_splits
from jaxgcn.core.models import Execution, GCNConfig
from jaxgcn.train import TrainConfig

# Kipf & Welling, Semi-Supervised Classification with Graph Convolutional Networks (ICLR 2017),
# Table 2, GCN row, Planetoid public split: test accuracy in percent.
REFERENCE = {"cora": 81.5, "citeseer": 70.3, "pubmed": 79.0}


class Row(NamedTuple):
    """One dataset's line of the table."""

    name: str
    protocol: str
    layout: str  # "splits x seeds"
    metric: str
    mean: float
    std: float
    train_seconds: float
    whole_seconds: float


def unavailable(entry: Dataset, root: str | None, download: bool) -> str | None:
    """Why ``entry`` is skipped (not trainable, or not cached and --download not given), else None."""
    if entry.task != "multi-class":
        return f"refused: {entry.task} ({entry.metric}; the GCN predicts one class per node)"
    if entry.bundled or download or is_cached(entry, root):
        return None
    known = [s.size for s in entry.sources if s.size is not None]
    size = f"{sum(known) / 1e6:,.1f} MB" if known else "size not published"
    if known and len(known) < len(entry.sources):
        size = f"over {size}: not every file's size is published"
    return f"needs `jaxgcn download {entry.name}` ({size})"


def runs_of(entry: Dataset, args: argparse.Namespace) -> tuple[int, int]:
    """``(splits, seeds per split)`` of the dataset's protocol."""
    if entry.protocol in ("planetoid", "ogb"):
        return 1, args.seeds
    return args.splits, args.seeds_per_split


def train_one(entry: Dataset, args: argparse.Namespace) -> tuple[BatchResult, int, int]:
    """Load, prepare and train every run of ``entry``'s protocol as one compiled program."""
    raw = load_dataset(entry.name, data_root=args.data_root, download=args.download, progress=False)
    prepared = prepare(raw, backend=args.backend)
    n_splits, n_seeds = runs_of(entry, args)
    if entry.protocol in ("per-class-20-30", "wikics"):
        # split k of per-class-20-30 is drawn with seed k (protocol_splits' seed + k), as `jaxgcn train --splits K`
        splits = protocol_splits(raw, entry.protocol, n_splits, seed=0)
        prepared = with_splits(prepared, splits, f"{entry.protocol} x {n_splits}")
    del raw
    seeds = list(range(n_seeds))
    entries = entries_for(seeds, model_config=GCNConfig(), config=TrainConfig(), splits=n_splits)
    # runs_per_device = every run: the whole protocol is one batch of one compiled program
    result = fit_runs(prepared.data, prepared.n_classes, entries, execution=Execution(backend=prepared.backend),
                      runs_per_device=len(entries))
    return result, n_splits, n_seeds


def measure(entry: Dataset, args: argparse.Namespace) -> Row:
    start = time.perf_counter()
    result, n_splits, n_seeds = train_one(entry, args)
    whole = time.perf_counter() - start
    test = 100 * np.asarray(result.metrics["test_acc"], np.float64)
    metric = protocol_info(entry.name).get("metric", entry.metric)
    return Row(entry.name, entry.protocol, f"{n_splits} x {n_seeds}", metric, float(test.mean()), float(test.std()),
               result.train_seconds, whole)


def table(rows: list[Row]) -> list[str]:
    metrics = " / ".join(dict.fromkeys(r.metric for r in rows))
    reference = any(r.name in REFERENCE for r in rows)
    head = ["dataset", "protocol", "splits x seeds", f"test {metrics} % (mean ± std)"]
    head += ["published GCN %"] if reference else []
    head += ["train s", "whole s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        cells = [r.name, r.protocol, r.layout, f"{r.mean:.2f} ± {r.std:.2f}"]
        if reference:
            cells.append(f"{REFERENCE[r.name]:.1f}" if r.name in REFERENCE else "—")
        cells += [f"{r.train_seconds:.1f}", f"{r.whole_seconds:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def row_figures(r: Row) -> dict[str, dict]:
    """One dataset's figures for ``--record``: test metric mean ± std (%), train and whole seconds."""
    return {f"accuracy.{r.name}.test_pct": figure(r.mean, "%", 2, std=r.std),
            f"accuracy.{r.name}.train_s": figure(r.train_seconds, "s", 1),
            f"accuracy.{r.name}.whole_s": figure(r.whole_seconds, "s", 1)}


def selected(names: str | None) -> list[Dataset]:
    if names is None:
        return list(CATALOGUE.values())
    entries = []
    for name in names.split(","):
        entry = lookup(name.strip())
        if entry is None:
            raise SystemExit(f"--datasets: {name.strip()!r} is not a catalogue name; choose from "
                             f"{', '.join(CATALOGUE)}")
        entries.append(entry)
    return entries


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", help="comma-separated catalogue names (default: the whole catalogue)")
    ap.add_argument("--data-root", help="dataset cache folder (default: $JAXGCN_DATA, else the per-user cache)")
    ap.add_argument("--download", action="store_true", help="download datasets that are not cached")
    ap.add_argument("--seeds", type=int, default=10, help="seeds on the one split of planetoid/ogb datasets")
    ap.add_argument("--splits", type=int, default=10, help="splits of per-class-20-30 and wikics datasets")
    ap.add_argument("--seeds-per-split", type=int, default=2, help="seeds on each of those splits")
    ap.add_argument("--backend", default="auto", help="propagation backend (auto, csr, segment, ...)")
    add_record_arguments(ap)
    args = ap.parse_args()

    print(f"paper settings (TrainConfig/GCNConfig defaults, Kipf early stopping), jax {jax.__version__}, "
          f"{len(jax.devices())} {jax.default_backend()} device(s), data root {data_root(args.data_root)}")
    rows, skipped = [], []
    for entry in selected(args.datasets):
        reason = unavailable(entry, args.data_root, args.download)
        if reason is not None:
            skipped.append(f"{entry.name}: {reason}")
            continue
        try:
            rows.append(measure(entry, args))
            print(f"{entry.name}: {rows[-1].layout} runs trained in {rows[-1].whole_seconds:.1f} s", flush=True)
        except (ValueError, MemoryError) as err:  # a dataset too large for this machine, a failed download
            skipped.append(f"{entry.name}: failed: {str(err)[:300]}")
    print()
    print("\n".join(table(rows)) if rows else "(no dataset trained)")
    if any(r.name in REFERENCE for r in rows):
        print("\npublished: Kipf & Welling 2017 (arXiv:1609.02907), Table 2, GCN, Planetoid public split")
    if skipped:
        print()
        print("\n".join(skipped))
    record(args.record, {key: fig for r in rows for key, fig in row_figures(r).items()}, append=args.record_append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
