"""``jaxgcn plot``: training curves (``--log``), node embeddings (``--checkpoint``), a sweep heatmap
(``--sweep-json``), drawn by :mod:`jaxgcn.io.plots`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax
import numpy as np

from jaxgcn.io import plots
from jaxgcn.cli.common import prelude
from jaxgcn.app.inference import class_names
from jaxgcn.cli.saved import checkpoint_model, load_for_checkpoint, logits


def _curves(args: argparse.Namespace) -> Path:
    if not args.log.is_file():
        raise ValueError(f"--log {args.log}: no such file; write it with `jaxgcn train --log {args.log}`")
    from jaxgcn.core.tasks import TITLES

    runs = plots.read_log(args.log, config_id=args.config_id, writer=f"`jaxgcn train --log {args.log.name}`")
    metric = plots.log_metric(args.log, config_id=args.config_id)
    return plots.training_curves(runs, args.out, title=args.title or f"training curves ({args.log.name}, "
                                 f"{len(runs)} run{'s' if len(runs) > 1 else ''})", metric=TITLES.get(metric, metric))


SWEEP_FILE = ('a file written by `jaxgcn sweep --json`: a JSON object whose "configurations" is a list of '
              "objects, one per configuration")


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def read_sweep(path: Path) -> list[dict]:
    """The ``configurations`` of a ``sweep --json`` file, or a one-line error naming the file, what
    it holds instead and what is expected (never a RecursionError or a TypeError)."""
    from jaxgcn.io.progress import TooDeep, log_record

    name = f"--sweep-json {path}"
    try:
        payload = log_record(path.read_text(encoding="utf-8"))
    except TooDeep as err:
        raise ValueError(f"{name}: JSON {err}; expected {SWEEP_FILE}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{name}: not JSON (line {err.lineno}, column {err.colno}: {err.msg}); expected "
                         f"{SWEEP_FILE}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{name}: cannot be read ({getattr(err, 'strerror', None) or err}); expected "
                         f"{SWEEP_FILE}") from None
    if not isinstance(payload, dict) or "configurations" not in payload:
        what = "an object without \"configurations\"" if isinstance(payload, dict) else _kind(payload)
        raise ValueError(f"{name}: holds {what}; expected {SWEEP_FILE}")
    configurations = payload["configurations"]
    if not isinstance(configurations, list):
        raise ValueError(f"{name}: \"configurations\" is {_kind(configurations)} "
                         f"({json.dumps(configurations)[:40]}); expected {SWEEP_FILE}")
    try:
        plots.check_configurations(configurations)
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from None
    return configurations


def _sweep(args: argparse.Namespace) -> Path:
    configurations = read_sweep(args.sweep_json)
    fix = dict(args.fix or ())
    cells = plots.sweep_cells(configurations, args.x, args.y, fix)
    over = cells[1]
    if over:  # a cell stands for several configurations: say which it took
        print(f"jaxgcn: note: each cell is the best val_acc_mean over {plots.best_over_text(over)}; hold one with "
              f"--fix {next(iter(over))}=VALUE", file=sys.stderr)
    return plots.sweep_heatmap(configurations, args.x, args.y, args.out, title=args.title, fix=fix, cells=cells)


def _embeddings(args: argparse.Namespace) -> Path:
    loaded = load_for_checkpoint(args, need_split=False)
    config, _ = checkpoint_model(loaded.ck)
    labels = np.asarray(loaded.prepared.data.labels)
    names = class_names(loaded.ck)
    label = getattr(args, "label", None)
    if labels.ndim == 2 and label is None:
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        raise ValueError(f"checkpoint {args.checkpoint}: a multi-label model ({labels.shape[1]} labels: {shown}) "
                         f"has no one class to colour each node by; colour by one label with --label NAME_OR_INDEX "
                         f"(e.g. --label {names[0]})")
    if labels.ndim == 1 and label is not None:
        raise ValueError(f"--label {label}: picks one label of a multi-label model, but the nodes here have one class "
                         f"each (their colours); drop --label" if (labels >= 0).any() else
                         f"--label {label}: the data gives no labels to colour by; pass the labels file with --labels")
    if label is not None:
        try:
            labels, names = plots.label_classes(labels, label, names)
        except ValueError as err:
            raise ValueError(f"--label: {err}") from None
    h = logits(loaded, embed=True)
    if not isinstance(h, jax.Array):  # a 1-layer model's "embedding" is its (sparse) input
        raise ValueError(f"checkpoint {args.checkpoint}: a {config.layers}-layer model has no hidden layer to plot")
    coloured = f", coloured by label {names[1]}" if label is not None else ""
    return plots.embeddings(np.asarray(h), labels, args.out, class_names=names, method=args.method,
                            title=args.title or f"{loaded.prepared.info['dataset']}: last hidden layer "
                            f"({config.hidden} units), {args.method.upper()}{coloured}")


KINDS = {"curves": ("--log", "log", _curves), "sweep": ("--sweep-json", "sweep_json", _sweep),
         "embeddings": ("--checkpoint", "checkpoint", _embeddings)}


def run(args: argparse.Namespace) -> int:
    prelude(args)
    flag, attr, draw = KINDS[args.kind]
    if getattr(args, attr) is None:
        raise ValueError(f"jaxgcn plot {args.kind} needs {flag}")
    print(f"wrote {draw(args)}")
    return 0
