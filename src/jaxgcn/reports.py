"""The JSON reports that ``jaxgcn train``, ``sweep`` and ``evaluate`` write with ``--json``.

Every schema is built here, from typed results, so the keys a report holds have one definition:
:func:`train_report` (one run, a batch of seeds/splits, or one sharded run), :func:`sweep_report`
(a grid) and :func:`evaluation_report` (a saved model's metrics).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, NamedTuple, Sequence

import numpy as np

from jaxgcn.metrics import Classification


class RunSummary(NamedTuple):
    """The outcome of one training run (one seed on one split)."""

    seed: int
    split: int
    test_acc: float
    val_acc: float
    epochs_run: int
    stopped_early: bool
    restored_epoch: int | None = None  # patience early stopping: the epoch whose params the run returns


GRAPH_REPORT = ("input_edges", "duplicates_merged", "self_loops_found", "edges_symmetrized", "isolated_nodes")


def json_text(payload: dict[str, Any]) -> str:
    """The text a report file holds: indented JSON and a final newline."""
    return json.dumps(payload, indent=2) + "\n"


def dataset_report(info: dict[str, Any], backend: str) -> dict[str, Any]:
    """What every training report says about the data: ``info`` of :func:`jaxgcn.datasets.prepare`."""
    return {
        "dataset": info["dataset"], "n_nodes": info["n_nodes"], "n_edges": info["n_edges"],
        "n_features": info["n_features"], "n_classes": info["n_classes"], "backend": backend,
        "split": info.get("split", "public"), "split_sizes": info["split_sizes"],
        "graph_report": {k: info[k] for k in GRAPH_REPORT},
        **({"protocol": info["protocol"], "metric": info["metric"]} if "protocol" in info else {}),
    }


def train_report(data: dict[str, Any], config: dict[str, Any], runs: Sequence[RunSummary], n_splits: int,
                 compile_seconds: float, train_seconds: float, *, details: dict[str, Any] | None = None,
                 distributed: dict[str, Any] | None = None) -> dict[str, Any]:
    """``train --json``: the data, the config, every run and their mean/std.

    Args:
        data: :func:`dataset_report`.
        config: ``{"model": ..., "train": ..., "norm": ..., "feature_norm": ...}``.
        runs: one :class:`RunSummary` per run.
        n_splits: the number of splits the runs cover.
        compile_seconds, train_seconds: the timings.
        details: further keys of a single run (its metrics and per-epoch history).
        distributed: the layout of a sharded run.
    """
    test = np.array([r.test_acc for r in runs])
    val = np.array([r.val_acc for r in runs])
    report = {
        **data, "config": config, "seeds": sorted({r.seed for r in runs}), "splits": n_splits,
        "runs": [r._asdict() for r in runs],
        "test_acc": test.tolist(), "test_acc_mean": float(test.mean()), "test_acc_std": float(test.std()),
        "val_acc": val.tolist(), "val_acc_mean": float(val.mean()),
        "epochs_run": [r.epochs_run for r in runs], "stopped_early": [r.stopped_early for r in runs],
        "restored_epoch": [r.restored_epoch for r in runs],
        **(details or {}),
        "compile_seconds": compile_seconds, "train_seconds": train_seconds,
    }
    if distributed is not None:
        report["distributed"] = distributed
    return report


def config_report(model_config: Any, train_config: Any, norm: str, feature_norm: str,
                  execution: Any = None) -> dict[str, Any]:
    """The ``config`` of a training report: the three config dataclasses (architecture, training,
    execution) and the data normalizations."""
    report = {"model": dataclasses.asdict(model_config), "train": dataclasses.asdict(train_config),
              "norm": norm, "feature_norm": feature_norm}
    if execution is not None:
        report["execution"] = dataclasses.asdict(execution)
    return report


def sweep_report(data: dict[str, Any], grid: Any, train_config: Any, seeds: list[int], n_splits: int,
                 configurations: list[dict[str, Any]]) -> dict[str, Any]:
    """``sweep --json``: the data, the grid, the settings every configuration shares and each
    configuration's runs (``configurations``: :func:`jaxgcn.sweep.rows_to_json`, best first)."""
    swept = dataclasses.asdict(grid)
    fixed = {k: v for k, v in dataclasses.asdict(train_config).items() if k not in swept}
    return {**data, "seeds": seeds, "splits": n_splits, "grid": swept, "fixed": fixed,
            "best": configurations[0], "configurations": configurations}


def evaluation_report(on: str, class_names: list[str], metrics: Classification) -> dict[str, Any]:
    """``evaluate --json``: the scored nodes, accuracy, macro-F1 and the per-class metrics."""
    return {"on": on, "nodes": metrics.n, "accuracy": metrics.accuracy, "macro_f1": metrics.macro_f1,
            "classes": class_names, "precision": metrics.precision.tolist(), "recall": metrics.recall.tolist(),
            "f1": metrics.f1.tolist(), "confusion": metrics.confusion.tolist()}
