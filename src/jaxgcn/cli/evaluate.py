"""``jaxgcn evaluate``: a saved model's accuracy, macro-F1, per-class metrics and confusion matrix.

The flags name the checkpoint and the data (:mod:`jaxgcn.cli.saved`); the scores and the JSON report
are :mod:`jaxgcn.app.inference`'s; this module prints them."""

from __future__ import annotations

import argparse

from jaxgcn.app import inference
from jaxgcn.cli.common import prelude
from jaxgcn.cli.saved import load_for_checkpoint
from jaxgcn.io.metrics import Classification


def describe(on: str, names: list[str], m: Classification) -> list[str]:
    """The lines evaluate prints: a summary, per-class precision/recall/support, the confusion matrix."""
    lines = [f"{on}: {m.n} nodes | accuracy {m.accuracy:.4f} | macro-F1 {m.macro_f1:.4f}",
             f"{'class':>12} {'precision':>9} {'recall':>7} {'support':>7}"]
    lines += [f"{names[c]:>12} {m.precision[c]:9.4f} {m.recall[c]:7.4f} {int(m.support[c]):7d}"
              for c in range(len(names))]
    lines.append("confusion matrix (rows: true class, columns: predicted):")
    # columns as wide as the longest class name up to 12 characters (a longer one is cut, with …)
    width = max(5, len(str(int(m.confusion.max(initial=0)))), *(min(len(n), 12) for n in names))
    heads = [n if len(n) <= width else n[:width - 1] + "…" for n in names]
    lines.append(f"{'':>12} " + " ".join(f"{h:>{width}}" for h in heads))
    lines += [f"{names[c]:>12} " + " ".join(f"{v:{width}d}" for v in m.confusion[c]) for c in range(len(names))]
    return lines


def run(args: argparse.Namespace) -> int:
    prelude(args)
    loaded = load_for_checkpoint(args, need_split=True)
    metrics = inference.score(loaded.ck, loaded.prepared, args.on, args.precision,
                              source=f"--checkpoint {args.checkpoint}")
    names = inference.class_names(loaded.ck)
    print("\n".join(describe(args.on, names, metrics)))
    if args.json is not None:
        inference.write_report(args.json, args.on, names, metrics, label=f"--json {args.json}")
    return 0
