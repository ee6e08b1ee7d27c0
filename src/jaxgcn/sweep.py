"""Hyperparameter grids × seeds × splits, run as few compiled programs as possible.

Learning rate, L2 factor, dropout and hidden width vary per run inside one program
(:mod:`jaxgcn.batched`); configurations that cannot share a program (another layer count, or
different widths with layer norm) form separate groups. A group too large for the memory budget
is split into chunks.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np

from jaxgcn.batched import RunSpec, fit_runs
from jaxgcn.memory import available_bytes, estimate
from jaxgcn.models import GCNConfig
from jaxgcn.outputs import write_atomic
from jaxgcn.propagate import graph_backend
from jaxgcn.train import TrainConfig, TrainData

GRID_KEYS = ("lr", "weight_decay", "dropout", "hidden", "layers", "optimizer")


@dataclasses.dataclass(frozen=True)
class Grid:
    """Lists of values to cross: every combination is one configuration.

    >>> len(Grid(lr=(0.01, 0.05), hidden=(16, 32, 64)).configs())
    6
    """

    lr: tuple[float, ...] = (0.01,)
    weight_decay: tuple[float, ...] = (5e-4,)
    dropout: tuple[float, ...] = (0.5,)
    hidden: tuple[int, ...] = (16,)
    layers: tuple[int, ...] = (2,)
    optimizer: tuple[str, ...] = ("adam",)

    def configs(self) -> list[dict[str, Any]]:
        values = [getattr(self, k) for k in GRID_KEYS]
        for key, vals in zip(GRID_KEYS, values):
            if not vals:
                raise ValueError(f"--{key.replace('_', '-')}: give at least one value")
        return [dict(zip(GRID_KEYS, combo)) for combo in itertools.product(*values)]


def estimate_bytes(data: TrainData, model_config: GCNConfig, n_runs: int, n_classes: int) -> int:
    """Peak bytes that ``n_runs`` runs of a batch add on top of the shared data: the per-run parts of
    :func:`jaxgcn.memory.estimate` (activations, message buffers, params with optimizer state)."""
    n, f = data.x.shape
    csr = data.graph.csr
    kwargs = dict(hidden=model_config.hidden, layers=model_config.layers,
                  backend=graph_backend(data.graph) if model_config.backend == "auto" else model_config.backend,
                  feature_nnz=int(data.x.nse) if hasattr(data.x, "nse") else None,
                  chunk_edges=model_config.chunk_edges, symmetric=csr is None or csr.symmetric)
    one = estimate(int(n), data.graph.n_edges, int(f), n_classes, runs=1, **kwargs)
    two = estimate(int(n), data.graph.n_edges, int(f), n_classes, runs=2, **kwargs)
    return (two.total - one.total) * n_runs


class Row(NamedTuple):
    """One configuration's summary over its runs."""

    config: dict[str, Any]
    n_runs: int
    val_mean: float
    val_std: float
    test_mean: float
    test_std: float
    epochs_mean: float
    runs: list[dict[str, Any]]


def _group_key(cfg: dict[str, Any], layer_norm: bool) -> tuple:
    """Configurations that can share one program: the same layer count and optimizer (the state's
    structure), and with layer norm the same width."""
    return (cfg["layers"], cfg["optimizer"], cfg["hidden"] if layer_norm else None)


def run_grid(
    data: TrainData,
    n_classes: int,
    grid: Grid,
    seeds: list[int],
    *,
    n_splits: int = 1,
    model_config: GCNConfig = GCNConfig(),
    config: TrainConfig = TrainConfig(),
    memory_budget: int | None = None,
    log: Callable[[str], None] | None = print,
    process_index: int = 0,
    process_count: int = 1,
    combine: Callable[[np.ndarray], np.ndarray] | None = None,
    progress: Any = None,
) -> list[Row]:
    """Run every configuration of ``grid`` for every seed and split; return rows sorted by mean
    validation accuracy (best first).

    ``data``'s masks are [n_splits, n_nodes] when ``n_splits`` > 1.

    In a job of ``process_count`` processes (``jax.distributed``), process ``process_index`` runs
    every ``process_count``-th run of each group on its own devices; ``combine`` sums the
    processes' [n_runs, 4] result arrays (each fills only its own rows), e.g. with
    ``multihost_utils.process_allgather(x).sum(0)``, so every process returns the whole table.
    ``progress`` (a :class:`jaxgcn.progress.Progress`) shows each chunk's epochs.
    """
    configs = grid.configs()
    budget = memory_budget or available_bytes() // 2
    groups: dict[tuple, list[int]] = {}
    for i, cfg in enumerate(configs):
        groups.setdefault(_group_key(cfg, model_config.layer_norm), []).append(i)
    ordered = sorted(groups.items(), key=lambda kv: kv[0][:2])
    every = [(i, seed, split) for _, members in ordered for i in members for seed in seeds for split in range(n_splits)]
    index = {run: j for j, run in enumerate(every)}
    results = np.zeros((len(every), 4))  # val_acc, test_acc, epochs_run, done
    for g, (key, members) in enumerate(ordered):
        runs = [(i, seed, split) for i in members for seed in seeds for split in range(n_splits)]
        runs = runs[process_index::process_count]
        if not runs:
            continue
        group_config = dataclasses.replace(model_config, layers=key[0],
                                           hidden=max(configs[i]["hidden"] for i in members))
        per_run_bytes = estimate_bytes(data, group_config, 1, n_classes)
        chunk = max(1, min(len(runs), budget // max(per_run_bytes, 1)))
        if chunk < len(runs) and log is not None:
            log(f"group {g + 1}: {len(runs)} runs need ~{per_run_bytes * len(runs) / 2**30:.1f} GiB, over the "
                f"{budget / 2**30:.1f} GiB budget: running {-(-len(runs) // chunk)} chunks of <= {chunk} runs")
        for start in range(0, len(runs), chunk):
            part = runs[start:start + chunk]
            if progress is not None:
                progress.start_slice(index[part[0]], f"group {g + 1}/{len(groups)}, {len(part)} runs")
            group_train = dataclasses.replace(config, optimizer=key[1])
            result = fit_runs(data, n_classes, _spec(configs, part), model_config=group_config, config=group_train,
                              log_every=progress.every if progress is not None else 0, progress=progress)
            for j, run in enumerate(part):
                results[index[run]] = (result.metrics["val_acc"][j], result.metrics["test_acc"][j],
                                       result.epochs_run[j], 1.0)
            if log is not None:
                log(f"group {g + 1}/{len(groups)} (layers {key[0]}, {key[1]}, padded hidden {group_config.hidden}): "
                    f"{len(part)} runs in one program | compile {result.compile_seconds:.1f}s | train "
                    f"{result.train_seconds:.1f}s | val mean {np.mean(result.metrics['val_acc']):.4f}")
    if combine is not None:
        results = np.asarray(combine(results))
    if not np.all(results[:, 3] == 1.0):
        raise RuntimeError(f"sweep: {int(np.sum(results[:, 3] != 1.0))} of {len(every)} runs have no result "
                           f"(process {process_index} of {process_count}; was every process's share combined?)")
    per_config: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(configs))}
    for (i, seed, split), (val, test, epochs, _) in zip(every, results):
        per_config[i].append({"seed": seed, "split": split, "val_acc": float(val), "test_acc": float(test),
                              "epochs_run": int(epochs)})
    rows = [_summarize(configs[i], per_config[i]) for i in range(len(configs))]
    return sorted(rows, key=lambda r: (-r.val_mean, -r.test_mean))


def _spec(configs: list[dict[str, Any]], part: list[tuple[int, int, int]]) -> RunSpec:
    def col(key: str, dtype: Any) -> np.ndarray:
        return np.asarray([configs[i][key] for i, _, _ in part], dtype)
    return RunSpec(np.asarray([s for _, s, _ in part], np.int64), col("lr", np.float32),
                   col("weight_decay", np.float32), col("dropout", np.float32), col("hidden", np.int32),
                   np.asarray([k for _, _, k in part], np.int32))


def _summarize(cfg: dict[str, Any], runs: list[dict[str, Any]]) -> Row:
    val = np.asarray([r["val_acc"] for r in runs])
    test = np.asarray([r["test_acc"] for r in runs])
    epochs = np.asarray([r["epochs_run"] for r in runs])
    return Row(cfg, len(runs), float(val.mean()), float(val.std()), float(test.mean()), float(test.std()),
               float(epochs.mean()), runs)


def format_table(rows: list[Row]) -> str:
    """The rows as a fixed-width table, best first, with the best configuration named below."""
    head = f"{'lr':>8s} {'wd':>8s} {'drop':>5s} {'hid':>4s} {'lay':>3s} {'opt':>8s} {'runs':>4s} " \
           f"{'val acc':>15s} {'test acc':>15s} {'epochs':>6s}"
    lines = [head, "-" * len(head)]
    for r in rows:
        c = r.config
        lines.append(f"{c['lr']:8g} {c['weight_decay']:8g} {c['dropout']:5g} {c['hidden']:4d} {c['layers']:3d} "
                     f"{c['optimizer']:>8s} {r.n_runs:4d} {r.val_mean:7.4f} ± {r.val_std:.4f} "
                     f"{r.test_mean:7.4f} ± {r.test_std:.4f} {r.epochs_mean:6.1f}")
    best = rows[0].config
    lines.append("best: " + ", ".join(f"{k}={best[k]:g}" if k != "optimizer" else f"{k}={best[k]}" for k in GRID_KEYS)
                 + f" (val {rows[0].val_mean:.4f}, test {rows[0].test_mean:.4f} ± {rows[0].test_std:.4f})")
    return "\n".join(lines)


def csv_text(rows: list[Row]) -> str:
    """One CSV row per configuration."""
    fields = [*GRID_KEYS, "n_runs", "val_acc_mean", "val_acc_std", "test_acc_mean", "test_acc_std", "epochs_mean"]
    f = io.StringIO(newline="")
    w = csv.writer(f)
    w.writerow(fields)
    for r in rows:
        w.writerow([*(r.config[k] for k in GRID_KEYS), r.n_runs, r.val_mean, r.val_std, r.test_mean,
                    r.test_std, r.epochs_mean])
    return f.getvalue()


def write_csv(rows: list[Row], path: Path) -> None:
    """One row per configuration (atomic write, :mod:`jaxgcn.outputs`)."""
    write_atomic(path, csv_text(rows))


def rows_to_json(rows: list[Row]) -> list[dict[str, Any]]:
    return [{**r.config, "n_runs": r.n_runs, "val_acc_mean": r.val_mean, "val_acc_std": r.val_std,
             "test_acc_mean": r.test_mean, "test_acc_std": r.test_std, "epochs_mean": r.epochs_mean,
             "runs": r.runs} for r in rows]
