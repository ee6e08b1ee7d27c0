"""The JSON reports that ``jaxgcn train``, ``sweep`` and ``evaluate`` write with ``--json``.

Every schema is built here, from typed results, so the keys a report holds have one definition:
:func:`train_report` (one run, a batch of seeds/splits, or one sharded run), :func:`sweep_report`
(a grid) and :func:`evaluation_report` (a saved model's metrics); :func:`run_record` is the
``record`` key of train and sweep reports (versions, platform, devices, command line, options, date,
data fingerprint; docs/reproducibility.md) and :func:`record_differences` compares two of them.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import platform
from typing import Any, NamedTuple, Sequence

import numpy as np

from jaxgcn.host import machine
from jaxgcn.io.metrics import Classification, LabelScores


class RunSummary(NamedTuple):
    """The outcome of one training run (one seed on one split)."""

    seed: int
    split: int
    test_acc: float
    val_acc: float
    epochs_run: int
    stopped_early: bool
    restored_epoch: int | None = None  # patience early stopping: the epoch whose params the run returns


def restored_line(runs: list[RunSummary], metric: str = "accuracy") -> str | None:
    """With patience early stopping, which epoch's params the runs returned (``None`` otherwise);
    ``metric``: the task's metric in words (what ``val_acc`` holds).

    >>> restored_line([RunSummary(0, 0, 0.81, 0.795, 150, True, 100)])
    'patience: restored the params of epoch 100 (best validation accuracy 0.7950)'
    >>> restored_line([RunSummary(0, 0, 0.81, 0.795, 150, True, 100)], "ROC-AUC")
    'patience: restored the params of epoch 100 (best validation ROC-AUC 0.7950)'
    """
    epochs = [r.restored_epoch for r in runs if r.restored_epoch is not None]
    if not epochs:
        return None
    val = float(np.mean([r.val_acc for r in runs]))
    if len(runs) == 1:
        return f"patience: restored the params of epoch {epochs[0]} (best validation {metric} {val:.4f})"
    span = f"{min(epochs)}" if min(epochs) == max(epochs) else f"{min(epochs)}-{max(epochs)}"
    return (f"patience: restored each run's params of its best validation {metric} (epochs {span}; mean best "
            f"validation {metric} {val:.4f})")


# The spread over runs that the summaries and reports give: the population std (divided by the number
# of runs, NumPy's default), named where it is shown ("std_ddof" in the JSON reports).
STD_DDOF = 0
STD_NAME = "population std"

GRAPH_REPORT = ("input_edges", "duplicates_merged", "self_loops_found", "edges_symmetrized", "isolated_nodes")


def json_text(payload: dict[str, Any]) -> str:
    """The text a report file holds: indented JSON and a final newline."""
    return json.dumps(payload, indent=2) + "\n"


def dataset_report(info: dict[str, Any], backend: str, precision: str | None = None) -> dict[str, Any]:
    """What every training report says about the data: ``info`` of :func:`jaxgcn.datasets.prepare`, and
    how it was computed on: the propagation ``backend`` and the float32 matmul ``precision`` decided
    (:func:`jaxgcn.plan.precision_for`; None: not reported)."""
    return {
        "dataset": info["dataset"], "n_nodes": info["n_nodes"], "n_edges": info["n_edges"],
        "n_features": info["n_features"], "n_classes": info["n_classes"], "backend": backend,
        **({} if precision is None else {"precision": precision}),
        "split": info.get("split", "public"), "split_sizes": info["split_sizes"],
        "graph_report": {k: info[k] for k in GRAPH_REPORT},
        **({"protocol": info["protocol"], "metric": info["metric"]} if "protocol" in info else {}),
    }


def train_report(data: dict[str, Any], config: dict[str, Any], runs: Sequence[RunSummary], n_splits: int,
                 compile_seconds: float, train_seconds: float, *, details: dict[str, Any] | None = None,
                 distributed: dict[str, Any] | None = None, record: dict[str, Any] | None = None) -> dict[str, Any]:
    """``train --json``: the data, the config, every run and their mean/std (the population std:
    ``"std_ddof": 0``).

    Args:
        data: :func:`dataset_report`.
        config: ``{"model": ..., "train": ..., "norm": ..., "feature_norm": ...}``.
        runs: one :class:`RunSummary` per run.
        n_splits: the number of splits the runs cover.
        compile_seconds, train_seconds: the timings.
        details: further keys of a single run (its metrics and per-epoch history).
        distributed: the layout of a sharded run.
        record: :func:`run_record`, under the key ``record``.
    """
    test = np.array([r.test_acc for r in runs])
    val = np.array([r.val_acc for r in runs])
    report = {
        **data, "config": config, "seeds": sorted({r.seed for r in runs}), "splits": n_splits,
        "runs": [r._asdict() for r in runs],
        "test_acc": test.tolist(), "test_acc_mean": float(test.mean()),
        "test_acc_std": float(test.std(ddof=STD_DDOF)), "std_ddof": STD_DDOF,
        "val_acc": val.tolist(), "val_acc_mean": float(val.mean()),
        "epochs_run": [r.epochs_run for r in runs], "stopped_early": [r.stopped_early for r in runs],
        "restored_epoch": [r.restored_epoch for r in runs],
        **(details or {}),
        "compile_seconds": compile_seconds, "train_seconds": train_seconds,
    }
    if distributed is not None:
        report["distributed"] = distributed
    if record is not None:
        report["record"] = record
    return report


def config_report(model_config: Any, train_config: Any, norm: str, feature_norm: str,
                  execution: Any = None) -> dict[str, Any]:
    """The ``config`` of a training report: the three config dataclasses (architecture, training,
    execution) and the data normalizations."""
    report = {"model": dataclasses.asdict(model_config), "train": dataclasses.asdict(train_config),
              "norm": norm, "feature_norm": feature_norm}
    if execution is not None:
        from jaxgcn.core.models import record  # the models import JAX: only where an execution is reported

        report["execution"] = record(execution)
    return report


def sweep_report(data: dict[str, Any], grid: Any, train_config: Any, seeds: list[int], n_splits: int,
                 configurations: list[dict[str, Any]], record: dict[str, Any] | None = None) -> dict[str, Any]:
    """``sweep --json``: the data, the grid, the settings every configuration shares and each
    configuration's runs (``configurations``: :func:`jaxgcn.sweep.rows_to_json`, best first), and
    the :func:`run_record`."""
    swept = dataclasses.asdict(grid)
    fixed = {k: v for k, v in dataclasses.asdict(train_config).items() if k not in swept}
    return {**data, "seeds": seeds, "splits": n_splits, "grid": swept, "fixed": fixed,
            "best": configurations[0], "configurations": configurations, "std_ddof": STD_DDOF,
            **({"record": record} if record is not None else {})}


def evaluation_report(on: str, class_names: list[str], metrics: Classification | LabelScores) -> dict[str, Any]:
    """``evaluate --json``: the scored nodes, accuracy, macro-F1 and the per-class metrics; a multi-label
    model's mean ROC-AUC (over the labels where it is defined), micro- and macro-F1 at its threshold and
    the per-label metrics (``auc`` null where undefined)."""
    if isinstance(metrics, LabelScores):
        return {"on": on, "nodes": metrics.n, "task": "multilabel", "rocauc": metrics.mean_auc,
                "labels_defined": metrics.labels_defined, "micro_f1": metrics.micro_f1,
                "macro_f1": metrics.macro_f1, "threshold": metrics.threshold, "labels": class_names,
                "auc": [None if np.isnan(a) else float(a) for a in metrics.auc],
                "precision": metrics.precision.tolist(), "recall": metrics.recall.tolist(), "f1": metrics.f1.tolist(),
                "positive": metrics.positive.tolist(), "negative": metrics.negative.tolist()}
    return {"on": on, "nodes": metrics.n, "accuracy": metrics.accuracy, "macro_f1": metrics.macro_f1,
            "classes": class_names, "precision": metrics.precision.tolist(), "recall": metrics.recall.tolist(),
            "f1": metrics.f1.tolist(), "confusion": metrics.confusion.tolist()}


# What a run record (``--json``'s "record") names the versions of; Python is added as "python".
RECORDED_PACKAGES = ("jaxgcn", "jax", "jaxlib", "numpy", "scipy", "optax")


def versions() -> dict[str, str | None]:
    """The installed versions of :data:`RECORDED_PACKAGES` and Python (``None``: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {}
    for name in RECORDED_PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    found["python"] = platform.python_version()
    return found


def devices_report() -> dict[str, Any]:
    """The devices JAX sees: their count, and the platform, kind and name of each."""
    import jax

    seen = [{"platform": d.platform, "kind": d.device_kind, "name": str(d)} for d in jax.devices()]
    return {"count": len(seen), "process_count": jax.process_count(), "devices": seen}


def devices_line(devices: dict[str, Any]) -> str:
    """One line for :func:`devices_report`: each group of alike devices as ``N x platform (kind)``, the
    names standing in for a kind that only repeats the platform (CPUs).

    >>> cpu = {"platform": "cpu", "kind": "cpu", "name": "TFRT_CPU_0"}
    >>> devices_line({"count": 1, "devices": [cpu]})
    'devices: 1 x cpu (TFRT_CPU_0)'
    >>> gpu = {"platform": "gpu", "kind": "NVIDIA H200", "name": "cuda:0"}
    >>> devices_line({"count": 2, "devices": [gpu, {**gpu, "name": "cuda:1"}]})
    'devices: 2 x gpu (NVIDIA H200)'
    """
    groups: dict[tuple[str, str], list[str]] = {}
    for d in devices["devices"]:
        groups.setdefault((d["platform"], d["kind"]), []).append(d["name"])
    parts = []
    for (plat, kind), names in groups.items():
        shown = kind if kind.lower() != plat.lower() else ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
        parts.append(f"{len(names)} x {plat} ({shown})")
    return "devices: " + "; ".join(parts)


def run_record(command: str, argv: list[str], options: dict[str, Any],
               fingerprint: dict[str, str] | None) -> dict[str, Any]:
    """The ``record`` key of ``train/sweep --json``: what reproduces the run and what it ran on.

    Args:
        command: the ``jaxgcn`` command (``train``, ``sweep``).
        argv: the command line as given (program name first).
        options: every parsed option, by its name in the parser (``weight_decay``), as JSON values.
        fingerprint: :func:`jaxgcn.store.checkpoint.data_fingerprint` of the prepared data (``None`` where
            no process holds the whole data: partition files).
    """
    return {"format": 1, "command": command, "argv": list(argv), "options": options,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "versions": versions(), "platform": {"platform": platform.platform(), "machine": platform.machine()},
            "devices": devices_report(), "machine": machine.report(), "data_sha256": fingerprint}


def record_differences(recorded: dict[str, Any], here: dict[str, Any]) -> dict[str, list[str]]:
    """What differs between a run record and this run's (both :func:`run_record`): ``versions``
    (``"jax 0.10.2 recorded, 0.10.3 here"``), ``data`` (the fingerprint parts that differ, or why
    they cannot be compared) and ``devices``. Empty lists: a match.

    >>> a = {"versions": {"jax": "0.10.2"}, "data_sha256": {"graph": "1"}, "devices": {"devices": []}}
    >>> b = {"versions": {"jax": "0.10.3"}, "data_sha256": {"graph": "2"}, "devices": {"devices": []}}
    >>> record_differences(a, b)
    {'versions': ['jax 0.10.2 recorded, 0.10.3 here'], 'data': ['graph'], 'devices': []}
    """
    old_v, new_v = recorded.get("versions") or {}, here.get("versions") or {}
    changed = [f"{k} {old_v.get(k)} recorded, {new_v.get(k)} here" for k in dict.fromkeys([*old_v, *new_v])
               if old_v.get(k) != new_v.get(k)]
    old_fp, new_fp = recorded.get("data_sha256"), here.get("data_sha256")
    if not old_fp or not new_fp:
        data = ["no fingerprint " + ("recorded" if not old_fp else "here")]
    else:
        data = [k for k in dict.fromkeys([*old_fp, *new_fp]) if old_fp.get(k) != new_fp.get(k)]
    kinds = [[(d.get("platform"), d.get("kind")) for d in (r.get("devices") or {}).get("devices", [])]
             for r in (recorded, here)]
    devices = [] if kinds[0] == kinds[1] else [f"{devices_line(recorded['devices'])[9:]} recorded, "
                                               f"{devices_line(here['devices'])[9:]} here"]
    return {"versions": changed, "data": data, "devices": devices}
