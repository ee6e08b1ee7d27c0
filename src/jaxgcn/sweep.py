"""Hyperparameter grids × seeds × splits, run as few compiled programs as possible.

A grid is lowered to a list of entries (:func:`lower`), each the full configs of ONE run plus its
seed and split (:class:`jaxgcn.training.runs.Entry`), and the entries are run (:func:`run_entries`):
learning rate, L2 factor and dropout vary per run inside one program (:mod:`jaxgcn.training.runs`);
entries whose configs differ in anything else (hidden width, layer count, optimizer, epochs, ...)
form separate groups (:func:`jaxgcn.plan.program_key`). A group too large for the memory
budget is split into chunks.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np

from jaxgcn.core import hyper
from jaxgcn.host.memory import available_bytes, device_budget
from jaxgcn.core.models import Execution, GCNConfig
from jaxgcn.io.outputs import write_atomic
from jaxgcn.plan import Plan, batch_bytes, concrete, program_key, slice_size
from jaxgcn.core.data import TrainData
from jaxgcn.core.layers import is_sparse
from jaxgcn.training.config import TrainConfig
from jaxgcn.training.runs import Entry, fit_runs

# the axes, in the order of the table and CSV columns: declared with the per-run inputs (jaxgcn.core.hyper)
GRID_KEYS = hyper.GRID_KEYS


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


class Outcome(NamedTuple):
    """How one entry's run ended."""

    val_acc: float
    test_acc: float
    epochs_run: int


# Where each grid value is written: the model's config or the training config.
_MODEL_KEYS = hyper.grid_keys_of("model")
_TRAIN_KEYS = hyper.grid_keys_of("train")


def lower(
    grid: Grid,
    seeds: list[int],
    n_splits: int = 1,
    *,
    model_config: GCNConfig = GCNConfig(),
    config: TrainConfig = TrainConfig(),
) -> list[Entry]:
    """``grid`` crossed with ``seeds`` and splits ``0 .. n_splits - 1``: one entry per run, in the
    order of :meth:`Grid.configs`, then seed, then split. Each entry's configs are copies of
    ``model_config`` and ``config`` with that configuration's values written in (``lr``,
    ``weight_decay``, ``optimizer`` into the :class:`TrainConfig`; ``dropout``, ``hidden``,
    ``layers`` into the :class:`GCNConfig`), validated by their constructors.

    >>> entries = lower(Grid(lr=(0.01, 0.05), layers=(2, 3)), [0, 1], 2)
    >>> len(entries), entries[0].train.lr, entries[-1].train.lr, entries[-1].model.layers, entries[-1][2:]
    (16, 0.01, 0.05, 3, (1, 1))
    """
    if not seeds:
        raise ValueError("seeds: give at least one seed")
    if n_splits < 1:
        raise ValueError(f"n_splits={n_splits}: a sweep needs at least 1 split")
    entries = []
    for values in grid.configs():
        model = dataclasses.replace(model_config, **{k: values[k] for k in _MODEL_KEYS})
        train = dataclasses.replace(config, **{k: values[k] for k in _TRAIN_KEYS})
        entries.extend(Entry(model, train, seed, split) for seed in seeds for split in range(n_splits))
    return entries


def grid_values(entry: Entry) -> dict[str, Any]:
    """The :data:`GRID_KEYS` values of an entry, read back from its configs.

    >>> grid_values(lower(Grid(hidden=(32,)), [0])[0])["hidden"]
    32
    """
    where = {**{k: entry.model for k in _MODEL_KEYS}, **{k: entry.train for k in _TRAIN_KEYS}}
    return {k: getattr(where[k], k) for k in GRID_KEYS}


def group_configs(entries: list[Entry]) -> list[dict[str, Any]]:
    """The program axes (:data:`jaxgcn.core.hyper.PROGRAM_AXES`) of each group, in the order
    :func:`run_entries` runs them: what tells one sweep's groups apart (a saved sweep records it
    with each finished group's results, and a resume checks it against the group at that key).

    >>> group_configs(lower(Grid(hidden=(32, 16), layers=(3, 2)), [0]))[:2]
    [{'hidden': 32, 'layers': 2, 'optimizer': 'adam'}, {'hidden': 16, 'layers': 2, 'optimizer': 'adam'}]
    """
    return [{k: grid_values(entries[members[0]])[k] for k in hyper.PROGRAM_AXES}
            for members in _groups(entries).values()]


def run_entries(
    data: TrainData,
    n_classes: int,
    entries: list[Entry],
    *,
    execution: Execution | Plan = Execution(),
    memory_budget: int | None = None,
    log: Callable[[str], None] | None = print,
    process_index: int = 0,
    process_count: int = 1,
    combine: Callable[[np.ndarray], np.ndarray] | None = None,
    progress: Any = None,
    chunks: list[int] | None = None,
    store: Any = None,
    log_every: int = 0,
) -> list[Outcome]:
    """Run every entry; return their outcomes in the order of ``entries``.

    Entries with equal :func:`program_key` (same layer count, hidden width, optimizer, ...) run in one
    compiled program (:func:`jaxgcn.training.runs.fit_runs`); groups run fewest layers first, then by optimizer
    name. A group over ``memory_budget`` bytes (default: half the free memory) runs in chunks
    (``chunks``: the runs per chunk of each group, as :func:`chunk_sizes` gives them; a resumed sweep
    keeps those it started with). ``data``'s masks are [n_splits, n_nodes] when there is more than one split.

    In a job of ``process_count`` processes (``jax.distributed``), process ``process_index`` runs
    every ``process_count``-th entry of each group on its own devices; ``combine`` sums the
    processes' [n_entries, 4] result arrays (each fills only its own rows), e.g. with
    ``multihost_utils.process_allgather(x).sum(0)``, so every process returns every outcome.
    ``progress`` (a :class:`jaxgcn.io.progress.Progress`) shows each chunk's epochs. Every program runs
    as ``execution`` says (the :class:`jaxgcn.plan.Plan` the application resolved, or a request the
    plan decides here, once: backend, ops, dropout stream, first-layer order, shared by all entries).

    ``log`` gets a line when each group starts and one when each of its chunks ends; with
    ``log_every`` > 0 (``jaxgcn sweep``) a group also says, before its program compiles (the
    silent seconds of a group), how many configurations and runs it trains; without a
    ``progress`` display its epochs every ``log_every`` (train's plain lines); and, on one
    process, when it ends, its time and best configuration (:func:`group_summary`).

    ``store`` (one process only) keeps a sweep's progress: ``store.kept(first, n)`` gives a group's
    [n, 3] results kept from an earlier, interrupted sweep (None: train it), ``store.hooks(first)``
    the ``fit_runs`` checkpoint keyword arguments of the chunk whose first run (in the result
    order) is ``first``, and ``store.finish(first, results)`` records a trained group
    (:class:`jaxgcn.app.sweep.Store`).
    """
    if store is not None and process_count > 1:
        raise ValueError("store: a sweep's progress is kept by a one-process sweep only")
    runs_as = execution if isinstance(execution, Plan) else None  # a Plan hands fit_runs its row plans (plan.focused)
    execution = concrete(execution, data.graph)  # the plan's decided execution, or the request decided once
    groups = _groups(entries)
    row = {j: r for r, j in enumerate(j for members in groups.values() for j in members)}  # result array rows
    budget = None if chunks is not None else memory_budget or _free() // 2
    sizes = chunks if chunks is not None else chunk_sizes(data, n_classes, entries, execution=execution,
                                                          memory_budget=budget)
    results = np.zeros((len(entries), 4))  # val_acc, test_acc, epochs_run, done
    for g, ((model, train), members) in enumerate(groups.items()):
        mine = members[process_index::process_count]
        if not mine:
            continue
        rows = [row[j] for j in mine]
        kept = None if store is None else store.kept(rows[0], len(rows))
        if kept is not None:
            results[rows, :3] = kept
            if log is not None:
                log(f"group {g + 1}/{len(groups)} (layers {model.layers}, {train.optimizer}, hidden {model.hidden}): "
                    f"{len(rows)} run{'s' if len(rows) != 1 else ''} kept from the interrupted sweep")
        else:
            results[rows, :3] = _run_group(data, n_classes, [entries[j] for j in mine], rows, model, train,
                                           execution, name=(g + 1, len(groups)), chunk=sizes[g], budget=budget,
                                           log=log, progress=progress, store=store, runs_as=runs_as,
                                           log_every=log_every, summary=process_count == 1)
        results[rows, 3] = 1.0
    if combine is not None:
        results = np.asarray(combine(results))
    if not np.all(results[:, 3] == 1.0):
        raise RuntimeError(f"sweep: {int(np.sum(results[:, 3] != 1.0))} of {len(entries)} runs have no result "
                           f"(process {process_index} of {process_count}; was every process's share combined?)")
    return [Outcome(float(v), float(t), int(e)) for v, t, e, _ in (results[row[j]] for j in range(len(entries)))]


def _free() -> int:
    """The free bytes a sweep's chunks are sized on: the accelerator's where JAX runs on one, else the host's."""
    room = device_budget()
    return room.free if room is not None else available_bytes()


def _groups(entries: list[Entry]) -> dict[tuple[GCNConfig, TrainConfig], list[int]]:
    """Entry indices by :func:`program_key`: fewest layers first, then by optimizer name, then in
    order of first appearance."""
    groups: dict[tuple[GCNConfig, TrainConfig], list[int]] = {}
    for j, entry in enumerate(entries):
        groups.setdefault(program_key(entry), []).append(j)
    return dict(sorted(groups.items(), key=lambda kv: (kv[0][0].layers, kv[0][1].optimizer)))


def chunk_sizes(data: TrainData, n_classes: int, entries: list[Entry], *, execution: Execution = Execution(),
                memory_budget: int | None = None) -> list[int]:
    """The runs per chunk of each group (in the order :func:`run_entries` runs them): as many as fit
    in ``memory_budget`` bytes (default: half the free memory), the whole group when it fits."""
    budget = memory_budget or _free() // 2
    sizes = []
    for (model, _), members in _groups(entries).items():
        per_run_bytes = batch_bytes(data, model, 1, n_classes, execution)
        sizes.append(max(1, min(len(members), budget // max(per_run_bytes, 1))))
    return sizes


def layout(data: TrainData, entries: list[Entry], chunks: list[int], *,
           execution: Execution = Execution()) -> dict[str, list[int]]:
    """Where each group starts, and each ``fit_runs`` slice, in the result order of
    :func:`run_entries` (one process): the keys under which a saved sweep keeps its progress."""
    groups, slices, first = [], [], 0
    for ((model, _), members), chunk in zip(_groups(entries).items(), chunks):
        groups.append(first)
        for start in range(0, len(members), chunk):
            n = min(chunk, len(members) - start)
            size = slice_size(n, model.hidden, execution, None, data.graph, None,
                              None if is_sparse(data.x) else int(data.x.shape[1]))
            slices.extend(first + start + s for s in range(0, n, size))
        first += len(members)
    return {"groups": groups, "slices": slices}


def _run_group(data: TrainData, n_classes: int, group: list[Entry], rows: list[int], model: GCNConfig,
               train: TrainConfig, execution: Execution, *, name: tuple[int, int], chunk: int, budget: int | None,
               log: Callable[[str], None] | None, progress: Any, store: Any,
               runs_as: Plan | None = None, log_every: int = 0, summary: bool = False) -> np.ndarray:
    """[len(group), 3] val_acc, test_acc, epochs_run of one program's entries (``rows``: their rows
    in the result array, which the progress display and the store count in), in chunks of ``chunk``
    runs (what fits in ``budget`` bytes; None: the chunks a resumed sweep started with). ``runs_as``:
    the :class:`~jaxgcn.plan.Plan` ``execution`` was decided by, which each chunk runs as (its row plans
    taken, not built again: :func:`jaxgcn.plan.focused`); ``log_every`` and ``summary``: the group's
    progress lines (:func:`run_entries`)."""
    g, n_groups = name
    started = time.perf_counter()
    detail = log if log_every > 0 else None
    if chunk < len(group) and log is not None:
        need = batch_bytes(data, model, 1, n_classes, execution) * len(group) / 2**30
        over = f"the {budget / 2**30:.1f} GiB budget" if budget is not None else "the budget the sweep started with"
        log(f"group {g}: {len(group)} runs need ~{need:.1f} GiB, over {over}: running {-(-len(group) // chunk)} "
            f"chunks of <= {chunk} runs")
    if log is not None and progress is None:  # a bar names the group itself
        log(f"group {g}/{n_groups} (layers {model.layers}, {train.optimizer}, hidden {model.hidden}): training "
            f"{len(group)} run{'s' if len(group) != 1 else ''}")
    out = np.zeros((len(group), 3))
    for start in range(0, len(group), chunk):
        part = group[start:start + chunk]
        if detail is not None:
            detail(f"group {g}/{n_groups}: {_configurations(part)}; compiling its program ...")
        if progress is not None:
            progress.start_slice(rows[start], f"group {g}/{n_groups}, {len(part)} runs")
        hooks = {} if store is None else store.hooks(rows[start])
        every = progress.every if progress is not None else log_every if detail is not None else 0
        result = fit_runs(data, n_classes, part, execution=execution if runs_as is None else runs_as,
                          log_every=every, log=detail if progress is None else None, progress=progress, **hooks)
        out[start:start + len(part)] = np.stack([result.metrics["val_acc"], result.metrics["test_acc"],
                                                 result.epochs_run], axis=1)
        if log is not None:
            log(f"group {g}/{n_groups} (layers {model.layers}, {train.optimizer}, hidden {model.hidden}): "
                f"{len(part)} runs in one program | compile {result.compile_seconds:.1f}s | train "
                f"{result.train_seconds:.1f}s | val mean {np.mean(result.metrics['val_acc']):.4f}")
    if detail is not None and summary:
        detail(group_summary((g, n_groups), group, out[:, 0], time.perf_counter() - started))
    if store is not None:
        store.finish(rows[0], out)
    return out


_PER_RUN_KEYS = tuple(k for k in GRID_KEYS if k not in hyper.PROGRAM_AXES)  # what differs within a group


def _configurations(part: list[Entry]) -> str:
    """``2 configurations x 3 runs = 6 runs``: what one chunk of a group trains."""
    n = len({tuple(grid_values(e).values()) for e in part})
    each = len(part) // n
    return (f"{n} configuration{'s' if n != 1 else ''} x {each} run{'s' if each != 1 else ''} = "
            f"{len(part)} run{'s' if len(part) != 1 else ''}")


def group_summary(name: tuple[int, int], group: list[Entry], val: np.ndarray, seconds: float) -> str:
    """The line that ends group ``name`` (its number, of how many): its wall time and its best
    configuration by mean validation score over its runs (``val``: [len(group)]), named by the axes
    that differ within a group (learning rate, L2 factor, dropout).

    >>> entries = lower(Grid(lr=(0.01, 0.05)), [0, 1])
    >>> group_summary((1, 2), entries, np.array([0.5, 0.7, 0.8, 0.8]), 3.21)
    'group 1/2 done in 3.2s | best val mean 0.8000: lr 0.05, weight_decay 0.0005, dropout 0.5 (2 runs)'
    """
    scores: dict[tuple[Any, ...], list[float]] = {}
    for entry, v in zip(group, val):
        values = grid_values(entry)
        scores.setdefault(tuple(values[k] for k in _PER_RUN_KEYS), []).append(float(v))
    best = max(scores, key=lambda k: np.mean(scores[k]))  # of equal means, the first in the grid's order
    named = ", ".join(f"{k} {v:g}" for k, v in zip(_PER_RUN_KEYS, best))
    runs = len(scores[best])
    return (f"group {name[0]}/{name[1]} done in {seconds:.1f}s | best val mean {np.mean(scores[best]):.4f}: "
            f"{named} ({runs} run{'s' if runs != 1 else ''})")


def run_grid(
    data: TrainData,
    n_classes: int,
    grid: Grid,
    seeds: list[int],
    *,
    n_splits: int = 1,
    model_config: GCNConfig = GCNConfig(),
    config: TrainConfig = TrainConfig(),
    execution: Execution | Plan = Execution(),
    memory_budget: int | None = None,
    log: Callable[[str], None] | None = print,
    process_index: int = 0,
    process_count: int = 1,
    combine: Callable[[np.ndarray], np.ndarray] | None = None,
    progress: Any = None,
    chunks: list[int] | None = None,
    store: Any = None,
    log_every: int = 0,
) -> list[Row]:
    """Run every configuration of ``grid`` for every seed and split; return rows sorted by mean
    validation accuracy (best first): :func:`lower`, then :func:`run_entries` (whose docstring
    describes the other arguments), summarized per configuration.

    ``data``'s masks are [n_splits, n_nodes] when ``n_splits`` > 1.
    """
    entries = lower(grid, seeds, n_splits, model_config=model_config, config=config)
    outcomes = run_entries(data, n_classes, entries, execution=execution, memory_budget=memory_budget, log=log,
                           process_index=process_index, process_count=process_count, combine=combine,
                           progress=progress, chunks=chunks, store=store, log_every=log_every)
    per_config = len(seeds) * n_splits  # lower's order: configuration, then seed, then split
    rows = []
    for start in range(0, len(entries), per_config):
        runs = [{"seed": e.seed, "split": e.split, "val_acc": o.val_acc, "test_acc": o.test_acc,
                 "epochs_run": o.epochs_run}
                for e, o in zip(entries[start:start + per_config], outcomes[start:start + per_config])]
        rows.append(_summarize(grid_values(entries[start]), runs))
    return sorted(rows, key=lambda r: (-r.val_mean, -r.test_mean))


def _summarize(cfg: dict[str, Any], runs: list[dict[str, Any]]) -> Row:
    val = np.asarray([r["val_acc"] for r in runs])
    test = np.asarray([r["test_acc"] for r in runs])
    epochs = np.asarray([r["epochs_run"] for r in runs])
    return Row(cfg, len(runs), float(val.mean()), float(val.std()), float(test.mean()), float(test.std()),
               float(epochs.mean()), runs)


def _spread(mean: float, std: float, n_runs: int) -> str:
    """``0.8130 ± 0.0040`` over several runs; one run has no spread: ``0.8130`` (padded to the width)."""
    return f"{mean:7.4f} ± {std:.4f}" if n_runs > 1 else f"{mean:7.4f}" + " " * 9


def _number(value: float) -> str:
    """A mean or std of float32 metrics as CSV text, to 6 significant digits (float32 holds about
    7): ``0.813``, not ``0.8130000233650208``; whole numbers (epochs) without a fraction.

    >>> _number(0.8130000233650208), _number(0.003999996185302734), _number(174.0), _number(174.5)
    ('0.813', '0.004', '174', '174.5')
    """
    return f"{value:.6g}"


METRIC_HEADS = {"accuracy": "acc", "rocauc": "ROC-AUC", "micro_f1": "micro-F1"}  # the table's column words


def format_table(rows: list[Row], metric: str = "accuracy") -> str:
    """The rows as a fixed-width table, best first, with the best configuration named below (one
    run per configuration: no ± spread; epochs as integers where the mean is whole); ``metric``: the
    task's (:attr:`jaxgcn.core.tasks.Task.metric`), named in the val and test columns."""
    word = METRIC_HEADS.get(metric, metric)
    head = f"{'lr':>8s} {'wd':>8s} {'drop':>5s} {'hid':>4s} {'lay':>3s} {'opt':>8s} {'runs':>4s} " \
           f"{'val ' + word:>15s} {'test ' + word:>15s} {'epochs':>6s}"
    lines = [head, "-" * len(head)]
    for r in rows:
        c = r.config
        lines.append(f"{c['lr']:8g} {c['weight_decay']:8g} {c['dropout']:5g} {c['hidden']:4d} {c['layers']:3d} "
                     f"{c['optimizer']:>8s} {r.n_runs:4d} {_spread(r.val_mean, r.val_std, r.n_runs)} "
                     f"{_spread(r.test_mean, r.test_std, r.n_runs)} "
                     + (f"{r.epochs_mean:6.0f}" if float(r.epochs_mean).is_integer() else f"{r.epochs_mean:6.1f}"))
    best = rows[0].config
    lines.append("best: " + ", ".join(f"{k}={best[k]:g}" if k != "optimizer" else f"{k}={best[k]}" for k in GRID_KEYS)
                 + f" (val {rows[0].val_mean:.4f}, test {rows[0].test_mean:.4f}"
                 + (f" ± {rows[0].test_std:.4f})" if rows[0].n_runs > 1 else ")"))
    return "\n".join(lines)


def csv_text(rows: list[Row]) -> str:
    """One CSV row per configuration; the metrics' means and stds to 6 significant digits (they
    are float32 results: the digits beyond are noise)."""
    fields = [*GRID_KEYS, "n_runs", "val_acc_mean", "val_acc_std", "test_acc_mean", "test_acc_std", "epochs_mean"]
    f = io.StringIO(newline="")
    w = csv.writer(f)
    w.writerow(fields)
    for r in rows:
        w.writerow([*(r.config[k] for k in GRID_KEYS), r.n_runs,
                    *map(_number, (r.val_mean, r.val_std, r.test_mean, r.test_std, r.epochs_mean))])
    return f.getvalue()


def write_csv(rows: list[Row], path: Path) -> None:
    """One row per configuration (atomic write, :mod:`jaxgcn.io.outputs`)."""
    write_atomic(path, csv_text(rows))


def rows_to_json(rows: list[Row]) -> list[dict[str, Any]]:
    return [{**r.config, "n_runs": r.n_runs, "val_acc_mean": r.val_mean, "val_acc_std": r.val_std,
             "test_acc_mean": r.test_mean, "test_acc_std": r.test_std, "epochs_mean": r.epochs_mean,
             "runs": r.runs} for r in rows]
