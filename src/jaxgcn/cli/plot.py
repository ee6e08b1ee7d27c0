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
from jaxgcn.cli.saved import checkpoint_model, load_for_checkpoint, logits


def _curves(args: argparse.Namespace) -> Path:
    if not args.log.is_file():
        raise ValueError(f"--log {args.log}: no such file; write it with `jaxgcn train --log {args.log}`")
    from jaxgcn.core.tasks import TITLES

    runs = plots.read_log(args.log, config_id=args.config_id)
    metric = plots.log_metric(args.log, config_id=args.config_id)
    return plots.training_curves(runs, args.out, title=args.title or f"training curves ({args.log.name}, "
                                 f"{len(runs)} run{'s' if len(runs) > 1 else ''})", metric=TITLES.get(metric, metric))


def _sweep(args: argparse.Namespace) -> Path:
    try:
        payload = json.loads(args.sweep_json.read_text())
        configurations = payload["configurations"]
    except (OSError, json.JSONDecodeError, KeyError) as err:
        raise ValueError(f"--sweep-json {args.sweep_json}: not a file written by `jaxgcn sweep --json` "
                         f"({type(err).__name__})") from None
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
    h = logits(loaded, embed=True)
    if not isinstance(h, jax.Array):  # a 1-layer model's "embedding" is its (sparse) input
        raise ValueError(f"checkpoint {args.checkpoint}: a {config.layers}-layer model has no hidden layer to plot")
    labels = np.asarray(loaded.prepared.data.labels)
    return plots.embeddings(np.asarray(h), labels, args.out, class_names=loaded.ck.meta.get("class_names"),
                            method=args.method, title=args.title or
                            f"{loaded.prepared.info['dataset']}: last hidden layer ({config.hidden} units), "
                            f"{args.method.upper()}")


KINDS = {"curves": ("--log", "log", _curves), "sweep": ("--sweep-json", "sweep_json", _sweep),
         "embeddings": ("--checkpoint", "checkpoint", _embeddings)}


def run(args: argparse.Namespace) -> int:
    prelude(args)
    flag, attr, draw = KINDS[args.kind]
    if getattr(args, attr) is None:
        raise ValueError(f"jaxgcn plot {args.kind} needs {flag}")
    print(f"wrote {draw(args)}")
    return 0
