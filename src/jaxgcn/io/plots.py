"""PNG figures of a run (matplotlib, headless ``Agg`` backend; ``pip install 'jaxgcn[plot]'``).

- :func:`training_curves`: loss and accuracies against epoch from a ``--log`` file, the
  early-stopping epoch marked, mean ± one standard deviation over runs when there are several;
- :func:`embeddings`: the learned node embeddings (the last hidden layer) in 2-D, PCA by default
  or t-SNE with scikit-learn installed, coloured by class — the classic GCN picture;
- :func:`sweep_heatmap`: mean validation accuracy over two hyperparameters of a sweep JSON, the
  other swept ones held at a value (``fix``) or the best taken over them, which the title says.

Every figure is written atomically (a temporary file renamed into place) at a fixed pixel size
(``size`` inches × 100 dpi).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from jaxgcn.core.hyper import GRID_KEYS
from jaxgcn.io.progress import TooDeep, log_record

DPI = 100


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ValueError("plots need matplotlib: pip install 'jaxgcn[plot]' (or pip install matplotlib)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, out: str | os.PathLike) -> Path:
    from io import BytesIO

    from jaxgcn.io.outputs import write_atomic

    buf = BytesIO()
    fig.savefig(buf, dpi=DPI, format="png")
    return write_atomic(out, buf.getvalue())


def _mixed_runs(path: str | os.PathLike, seen: list[str | None], settings: dict[str | None, Any]) -> str:
    """The message for a log whose lines come from trainings of different settings: each
    configuration's id and the settings in which they differ."""
    known = [settings.get(tag) for tag in seen]
    keys = dict.fromkeys(k for s in known if isinstance(s, dict) for k in s)
    differ = [k for k in keys if len({json.dumps(s.get(k), sort_keys=True, default=str)
                                      for s in known if isinstance(s, dict)}) > 1]

    def shown(tag: str | None, s: Any) -> str:
        if tag is None:
            return "lines without a config_id (an older jaxgcn)"
        if not isinstance(s, dict):
            return f"{tag} (settings not recorded)"
        return f"{tag} ({', '.join(f'{k} {s.get(k)}' for k in differ) or 'same settings'})"
    first = next((tag for tag in seen if tag is not None), "ID")
    return (f"{path}: holds the runs of {len(seen)} trainings with different settings: "
            f"{'; '.join(shown(t, s) for t, s in zip(seen, known))}; plot one with --config-id {first}, or "
            "train each configuration into its own --log file")


LOG_VALUES = ("loss", "train_acc", "val_loss", "val_acc")  # numbers, or null where a run had none


def _whole_number(rec: dict[str, Any], key: str, where: str, fix: str) -> int:
    """``rec[key]`` (run, epoch, stopped_early_at) as an int; a value that is no finite whole number
    (``Infinity``, ``1.5``, ``"3"``) is a one-line error naming the field and the value as written."""
    value = rec[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value != int(value):
        raise ValueError(f"{where}: field {key!r} is {json.dumps(value)[:40]}, not a whole number; {fix}")
    return int(value)


def _check_values(rec: dict[str, Any], where: str, fix: str) -> None:
    """The metric fields of a log line are numbers or null (a JSON string there is no curve)."""
    for key in LOG_VALUES:
        value = rec.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"{where}: field {key!r} is {json.dumps(value)[:40]}, not a number; {fix}")


def _json_report(path: str | os.PathLike) -> bool:
    """Whether the file is one JSON document (a ``--json`` report, written indented), not JSON lines."""
    try:
        if os.path.getsize(path) > 2**26:
            return False
        with open(path) as f:
            return isinstance(log_record(f.read()), dict)
    except (OSError, ValueError):
        return False


def read_log(path: str | os.PathLike, config_id: str | None = None, *,
             writer: str = "Progress(log_file=...)") -> dict[int, dict[str, np.ndarray]]:
    """A ``--log`` JSON-lines file -> {run: {"epoch", "loss", "train_acc", "val_loss", "val_acc"
    [, "stopped_early_at"]}} (arrays). A later block of lines for the same run (a second training
    of the same settings appended to the file) replaces it. Lines of trainings with different
    settings (their ``config_id``, see :mod:`jaxgcn.io.progress`) are refused, naming the settings
    that differ, unless ``config_id`` picks the runs of one of them. ``writer``: what writes such a
    file, for the messages (the command line names ``jaxgcn train --log FILE``)."""
    fix = f"give the JSON-lines file that {writer} writes"
    runs: dict[int, list[dict[str, Any]]] = {}
    stops: dict[int, int] = {}
    settings: dict[str | None, Any] = {}
    seen: list[str | None] = []  # the config ids of the lines, in order of appearance
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = log_record(line)
                tag = rec.get("config_id")
                if "settings" in rec:
                    settings[tag] = rec["settings"]
                    continue
                if "metric" in rec:  # what train_acc/val_acc hold (log_metric)
                    continue
                if tag not in seen:
                    seen.append(tag)
                if config_id is not None and tag != config_id:
                    continue
                where = f"{path}, line {number}"
                if "stopped_early_at" in rec:
                    stops[_whole_number(rec, "run", where, fix)] = _whole_number(rec, "stopped_early_at", where, fix)
                    continue
                run, epoch = _whole_number(rec, "run", where, fix), _whole_number(rec, "epoch", where, fix)
                _check_values(rec, where, fix)
            except (KeyError, TypeError, ValueError, AttributeError) as err:  # JSONDecodeError is a ValueError
                if str(err).startswith(f"{path}, line"):
                    raise
                if isinstance(err, json.JSONDecodeError) and _json_report(path):
                    raise ValueError(f"{path}: one JSON document (a report, such as `jaxgcn train --json` writes), "
                                     f"not a training log of one JSON line per epoch; {fix}") from None
                why = f"{err}: " if isinstance(err, TooDeep) else ""
                raise ValueError(f"{path}, line {number}: not a jaxgcn training-log record ({why}"
                                 f"{line.strip()[:60]!r}); {fix}") from None
            rows = runs.setdefault(run, [])
            if rows and epoch <= rows[-1]["epoch"]:
                rows.clear()  # a new training appended to the same file
                stops.pop(run, None)
            rows.append(rec)
    if config_id is not None and config_id not in seen:
        ids = ", ".join(str(tag) for tag in seen if tag is not None) or "none"
        raise ValueError(f"{path}: no line has config_id {config_id}; give one of its config ids ({ids})")
    if config_id is None and len(seen) > 1:
        raise ValueError(_mixed_runs(path, seen, settings))
    if not runs:
        first = f"Progress(log_file={str(path)!r})" if writer.startswith("Progress(") else writer
        raise ValueError(f"{path}: no records; train with {first} first")
    keys = ("epoch", *LOG_VALUES)
    out = {run: {k: np.array([np.nan if r.get(k) is None else r[k] for r in rows], np.float64) for k in keys}
           for run, rows in sorted(runs.items())}
    for run, epoch in stops.items():
        if run in out:
            out[run]["stopped_early_at"] = np.array([epoch])
    return out


def log_metric(path: str | os.PathLike, config_id: str | None = None) -> str:
    """The metric a ``--log`` file's ``train_acc``/``val_acc`` hold: its ``{"metric": ...}`` line (of
    ``config_id``'s runs when given), ``"accuracy"`` where it has none (a single-label run's)."""
    with open(path) as f:
        for line in f:
            if '"metric"' in line:
                rec = log_record(line)
                if isinstance(rec, dict) and isinstance(rec.get("metric"), str) and \
                        (config_id is None or rec.get("config_id") == config_id):
                    return rec["metric"]
    return "accuracy"


def training_curves(runs: dict[int, dict[str, np.ndarray]], out: str | os.PathLike, *,
                    title: str = "training curves", size: tuple[float, float] = (10, 4),
                    metric: str = "accuracy") -> Path:
    """Loss (left) and ``metric`` (right, its name in words: accuracy, ROC-AUC, ...) against epoch;
    mean ± std band over runs; a dashed line at the early-stopping epoch (the mean over the runs that
    stopped early, their range in the legend)."""
    import warnings

    plt = _pyplot()
    epochs = np.unique(np.concatenate([r["epoch"] for r in runs.values()]))
    stops = [int(r["stopped_early_at"][0]) for r in runs.values() if "stopped_early_at" in r]

    def stacked(key: str) -> np.ndarray:
        table = np.full((len(runs), epochs.size), np.nan)
        for i, r in enumerate(runs.values()):
            table[i, np.searchsorted(epochs, r["epoch"])] = r[key]
        return table

    fig, axes = plt.subplots(1, 2, figsize=size)
    loss = "cross-entropy" if metric == "accuracy" else "loss"
    for ax, pairs, label in ((axes[0], (("loss", "train loss"), ("val_loss", "val loss")), loss),
                             (axes[1], (("train_acc", f"train {metric}"), ("val_acc", f"val {metric}")), metric)):
        for key, name in pairs:
            with warnings.catch_warnings():  # epochs where every run had stopped are all-NaN columns
                warnings.simplefilter("ignore", RuntimeWarning)
                table = stacked(key)
                mean, std = np.nanmean(table, 0), np.nanstd(table, 0)
            line, = ax.plot(epochs, mean, label=name + (f" (mean of {len(runs)})" if len(runs) > 1 else ""))
            if len(runs) > 1:
                ax.fill_between(epochs, mean - std, mean + std, color=line.get_color(), alpha=0.2)
        if stops:
            where = f"epoch {stops[0]}" if len(set(stops)) == 1 else f"epochs {min(stops)}-{max(stops)}"
            ax.axvline(float(np.mean(stops)), color="grey", linestyle="--", linewidth=1,
                       label=f"early stopping ({len(stops)} of {len(runs)} runs, {where})" if len(runs) > 1
                       else f"early stopping at {where}")
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[1].set_ylim(0, 1.02)
    fig.suptitle(title)
    fig.tight_layout()
    path = _save(fig, out)
    plt.close(fig)
    return path


def project_2d(h: np.ndarray, method: str = "pca", seed: int = 0) -> np.ndarray:
    """[n, d] -> [n, 2]: the top two principal components, or t-SNE (scikit-learn) for ``tsne``."""
    h = np.asarray(h, np.float64)
    if method == "pca":
        centred = h - h.mean(0)
        _, _, vt = np.linalg.svd(centred, full_matrices=False)
        out = centred @ vt[:2].T
        return np.pad(out, ((0, 0), (0, 2 - out.shape[1])))
    if method == "tsne":
        try:
            from sklearn.manifold import TSNE
        except ImportError:
            raise ValueError("method='tsne' needs scikit-learn (pip install scikit-learn); method='pca' needs "
                             "nothing more") from None
        return TSNE(n_components=2, random_state=seed, init="pca").fit_transform(h)
    raise ValueError(f"method={method!r} must be pca or tsne")


def label_classes(targets: np.ndarray, label: str | int,
                  names: list[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """One label of multi-label ``targets`` [n, L] (1, 0; NaN missing) as classes to colour by: 1 where
    a node has it, 0 where it has not, -1 where its target is missing; and the two classes' names.

    ``label``: the label's name in ``names`` (a name wins over an index), or its column (0 = the first).

    >>> label_classes(np.array([[1, 0], [np.nan, 1]]), "pop", ["rock", "pop"])
    (array([0, 1]), ['not pop', 'pop'])
    """
    targets = np.asarray(targets)
    n_labels = targets.shape[1]
    names = list(names) if names is not None and len(names) == n_labels else [str(k) for k in range(n_labels)]
    text = str(label)
    if text in names:
        k = names.index(text)
    elif text.isdigit() and int(text) < n_labels:
        k = int(text)
    else:
        shown = ", ".join(names[:10]) + (", ..." if n_labels > 10 else "")
        raise ValueError(f"label={text!r} is not a label of the model; give one of its {n_labels} label names "
                         f"({shown}) or a column from 0 to {n_labels - 1}")
    column = np.asarray(targets[:, k], np.float64)
    classes = np.where(np.isnan(column), -1, column > 0.5).astype(np.int64)
    return classes, [f"not {names[k]}", names[k]]


def embeddings(h: np.ndarray, labels: np.ndarray, out: str | os.PathLike, *, class_names: list[str] | None = None,
               method: str = "pca", title: str = "node embeddings", size: tuple[float, float] = (7, 6),
               label: str | int | None = None) -> Path:
    """Scatter of the 2-D projection of the embeddings ``h`` [n, d], one colour per class
    (``labels`` [n] < 0: unlabelled, grey). Multi-label ``labels`` [n, L] (1, 0; NaN missing) are
    coloured by one ``label`` (its name in ``class_names`` or its column, :func:`label_classes`): the
    nodes that have it, those that have not, and those whose target is missing."""
    labels = np.asarray(labels)
    if labels.ndim == 2:
        if label is None:
            raise ValueError(f"labels: {labels.shape[1]} labels per node (a multi-label task) give no one class to "
                             "colour a node by; pass label=NAME_OR_INDEX to colour the nodes by one of them")
        labels, class_names = label_classes(labels, label, class_names)
    elif label is not None:
        raise ValueError(f"label={label!r} picks one label of multi-label targets; these labels are one class per "
                         "node, which colour the nodes: leave label out")
    labels = labels.astype(np.int64)
    plt = _pyplot()
    xy = project_2d(h, method)
    fig, ax = plt.subplots(figsize=size)
    unl = labels < 0
    if unl.any():
        ax.scatter(xy[unl, 0], xy[unl, 1], s=3, c="lightgrey", label="missing" if label is not None else "unlabelled")
    cmap = plt.get_cmap("tab10" if labels.max(initial=0) < 10 else "tab20")
    for c in np.unique(labels[~unl]).tolist():
        pick = labels == c
        name = class_names[c] if class_names and c < len(class_names) else str(c)
        ax.scatter(xy[pick, 0], xy[pick, 1], s=4, color=cmap(c % cmap.N), label=name)
    ax.set_xlabel(f"{method.upper()} 1")
    ax.set_ylabel(f"{method.upper()} 2")
    ax.set_title(title)
    ax.legend(fontsize=7, markerscale=3, loc="best")
    fig.tight_layout()
    path = _save(fig, out)
    plt.close(fig)
    return path


def _value_text(value: Any) -> str:
    """A swept value as the sweep's table writes it (``0.01``, ``0.0005``, ``adam``)."""
    return value if isinstance(value, str) else f"{value:g}"


def _swept_value(configurations: list[dict[str, Any]], key: str, text: str) -> Any:
    """The value of ``key`` among the configurations that ``text`` names (``--fix key=text``)."""
    values = sorted({c[key] for c in configurations}, key=str)
    for value in values:
        if str(value) == text or (not isinstance(value, str) and _number(text) == value):
            return value
    shown = ", ".join(_value_text(v) for v in values)
    raise ValueError(f"fix={key}={text}: the sweep has no configuration with {key} {text}; its values: {shown}")


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def check_configurations(configurations: list[Any], metric: str = "val_acc_mean") -> None:
    """Refuse configurations a heatmap cannot draw, naming the first bad one (counted from 1): each an
    object with ``metric`` (a number, or null for a configuration that did not finish) and the swept
    hyperparameters of the first, each a number or a string, one kind per hyperparameter."""
    if not configurations:
        raise ValueError("the sweep has no configurations")
    first = configurations[0] if isinstance(configurations[0], dict) else {}
    swept = [k for k in GRID_KEYS if k in first]
    kinds: dict[str, tuple[str, int]] = {}
    for i, c in enumerate(configurations, 1):
        if not isinstance(c, dict):
            raise ValueError(f"configuration {i} is {json.dumps(c)[:40]}, not an object of hyperparameters and "
                             f"{metric}")
        missing = [k for k in (*swept, metric) if k not in c]
        if missing:
            raise ValueError(f"configuration {i} lacks {', '.join(missing)}; every configuration of a sweep --json "
                             f"file names its hyperparameters ({', '.join(swept)}) and {metric}")
        value = c[metric]
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"configuration {i}: {metric} is {json.dumps(value)[:40]}, not a number")
        for k in swept:
            v = c[k]
            kind = "name" if isinstance(v, str) else "number" if isinstance(v, (int, float)) else None
            if kind is None or kinds.setdefault(k, (kind, i))[0] != kind:
                seen = f"; configuration {kinds[k][1]} gives a {kinds[k][0]}" if kind is not None else ""
                raise ValueError(f"configuration {i}: {k} is {json.dumps(v)[:40]}, not a number or a name as a "
                                 f"sweep writes it{seen}")


def sweep_cells(configurations: list[dict[str, Any]], x: str, y: str,
                fix: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], dict[str, list[Any]]]:
    """The configurations a (``x``, ``y``) heatmap of a sweep draws, and what each cell is the best over.

    Args:
        configurations: the ``configurations`` of a ``jaxgcn sweep --json`` file.
        x, y: the swept hyperparameters on the axes.
        fix: ``{name: value}`` of other swept hyperparameters to hold (``plot sweep --fix name=value``).

    Returns:
        the configurations kept, and ``{name: values}`` of the other swept hyperparameters that
        still take several values among them: a cell is the best of its configurations over those.
    """
    check_configurations(configurations)
    known = [k for k in GRID_KEYS if k in configurations[0]]
    for param, key in (("x", x), ("y", y)):
        if key not in configurations[0]:
            raise ValueError(f"{param}={key!r} is not a swept hyperparameter; choose from {known}")
    kept = configurations
    for key, text in (fix or {}).items():
        if key not in known or key in (x, y):
            raise ValueError(f"fix={key}={text}: {key!r} is not a swept hyperparameter off the axes; "
                             f"choose from {[k for k in known if k not in (x, y)]}")
        value = _swept_value(configurations, key, text)
        kept = [c for c in kept if c[key] == value]
    over = {k: sorted({c[k] for c in kept}, key=str) for k in known if k not in (x, y)}
    return kept, {k: v for k, v in over.items() if len(v) > 1}


def best_over_text(over: dict[str, list[Any]]) -> str:
    """``"dropout (0.3, 0.5)"``: the hyperparameters a heatmap cell takes the best over, with their values."""
    return " and ".join(f"{k} ({', '.join(_value_text(v) for v in vals)})"
                        for k, vals in over.items())


def sweep_heatmap(configurations: list[dict[str, Any]], x: str, y: str, out: str | os.PathLike, *,
                  metric: str = "val_acc_mean", title: str | None = None, fix: dict[str, str] | None = None,
                  size: tuple[float, float] = (7, 5),
                  cells: tuple[list[dict[str, Any]], dict[str, list[Any]]] | None = None) -> Path:
    """``metric`` of the sweep's configurations for each (``x``, ``y``) pair, as an annotated heatmap.

    Configurations that other swept hyperparameters tell apart are held to ``fix`` (``{name:
    value}``); where some still vary a cell is the best of its configurations, and the title says
    over what (:func:`sweep_cells`; ``cells``: what it returned for these arguments, when the
    caller has it already)."""
    configurations, over = cells if cells is not None else sweep_cells(configurations, x, y, fix)  # checked first
    plt = _pyplot()
    xs = sorted({c[x] for c in configurations})
    ys = sorted({c[y] for c in configurations})
    grid = np.full((len(ys), len(xs)), np.nan)
    for c in configurations:
        if c[metric] is None:  # a configuration without a score (it diverged): an empty cell, not a zero
            continue
        i, j = ys.index(c[y]), xs.index(c[x])
        grid[i, j] = c[metric] if np.isnan(grid[i, j]) else max(grid[i, j], c[metric])
    fig, ax = plt.subplots(figsize=size)
    im = ax.imshow(grid, cmap="viridis", origin="lower", aspect="auto")
    ax.set_xticks(range(len(xs)), [_value_text(v) for v in xs])
    ax.set_yticks(range(len(ys)), [_value_text(v) for v in ys])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    for i in range(len(ys)):
        for j in range(len(xs)):
            if np.isfinite(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.3f}", ha="center", va="center", fontsize=8,
                        color="white" if grid[i, j] < np.nanmean(grid) else "black")
    fig.colorbar(im, ax=ax, label=metric.replace("_", " "))
    held = ", ".join(f"{k}={v}" for k, v in (fix or {}).items())
    ax.set_title(title or f"{metric.replace('_', ' ')} by {x} and {y}" + (f", {held}" if held else "")
                 + (f"\n(best over {best_over_text(over)})" if over else ""), fontsize=10)
    fig.tight_layout()
    path = _save(fig, out)
    plt.close(fig)
    return path
