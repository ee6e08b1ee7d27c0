"""``jaxgcn evaluate``: a saved model's accuracy, macro-F1, per-class metrics and confusion matrix (a
multi-label model's ROC-AUC, micro- and macro-F1, and per-label metrics): the task is the
checkpoint's, and labels of the other task's form are refused naming it.

The flags name the checkpoint and the data (:mod:`jaxgcn.cli.saved`); the scores and the JSON report
are :mod:`jaxgcn.app.inference`'s; this module prints them."""

from __future__ import annotations

import argparse

from jaxgcn.app import inference
from jaxgcn.cli.common import prelude
from jaxgcn.cli.saved import load_for_checkpoint
import numpy as np

from jaxgcn.io.metrics import Classification, LabelScores


def describe(on: str, names: list[str], m: Classification | LabelScores) -> list[str]:
    """The lines evaluate prints: a summary, per-class precision/recall/support, the confusion matrix
    (a multi-label model's: :func:`describe_labels`)."""
    if isinstance(m, LabelScores):
        return describe_labels(on, names, m)
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


def describe_labels(on: str, names: list[str], m: LabelScores) -> list[str]:
    """A multi-label model's lines: the mean ROC-AUC (over the labels it is defined for), micro- and
    macro-F1 at the threshold, then per label its ROC-AUC ("-": no positive or no negative target
    here), precision, recall, F1 and present targets."""
    lines = [f"{on}: {m.n} nodes, {len(names)} labels | ROC-AUC {m.mean_auc:.4f} ({m.labels_defined} of {len(names)} "
             f"labels have a positive and a negative target here) | at threshold {m.threshold:g}: micro-F1 "
             f"{m.micro_f1:.4f}, macro-F1 {m.macro_f1:.4f}",
             f"{'label':>12} {'ROC-AUC':>7} {'precision':>9} {'recall':>7} {'F1':>7} {'positive':>8} {'negative':>8}"]
    lines += [f"{names[k][:12]:>12} {'-' if np.isnan(m.auc[k]) else f'{m.auc[k]:.4f}':>7} {m.precision[k]:9.4f} "
              f"{m.recall[k]:7.4f} {m.f1[k]:7.4f} {int(m.positive[k]):8d} {int(m.negative[k]):8d}"
              for k in range(len(names))]
    return lines


def run(args: argparse.Namespace) -> int:
    prelude(args)
    loaded = load_for_checkpoint(args, need_split=True)
    metrics = inference.score(loaded.ck, loaded.prepared, args.on, args.precision,
                              source=f"--checkpoint {args.checkpoint}", threshold=args.threshold)
    names = inference.class_names(loaded.ck)
    print("\n".join(describe(args.on, names, metrics)))
    if args.json is not None:
        inference.write_report(args.json, args.on, names, metrics, label=f"--json {args.json}")
    return 0
