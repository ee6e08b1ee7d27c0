"""``jaxgcn evaluate``: a saved model's accuracy, macro-F1, per-class metrics and confusion matrix."""

from __future__ import annotations

import argparse

import numpy as np

from jaxgcn import outputs, reports
from jaxgcn.cli.common import prelude
from jaxgcn.cli.saved import ForCheckpoint, load_for_checkpoint, logits
from jaxgcn.metrics import Classification, classification


def score(loaded: ForCheckpoint, on: str) -> Classification:
    """The saved model's metrics on the ``on`` nodes (a split, or every labelled node)."""
    predicted = np.asarray(logits(loaded)).argmax(axis=1)
    d = loaded.prepared.data
    labels = np.asarray(d.labels)
    mask = {"test": d.test_mask, "val": d.val_mask, "train": d.train_mask}.get(on)
    chosen = labels >= 0 if mask is None else (np.asarray(mask).reshape(-1, labels.size)[0] > 0)
    return classification(labels[chosen], predicted[chosen], loaded.ck.meta["n_classes"])


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
    metrics = score(loaded, args.on)
    k = loaded.ck.meta["n_classes"]
    names = loaded.ck.meta["class_names"] or [str(c) for c in range(k)]
    print("\n".join(describe(args.on, names, metrics)))
    if args.json is not None:
        outputs.write_atomic(args.json, reports.json_text(reports.evaluation_report(args.on, names, metrics)),
                             label=f"--json {args.json}")
    return 0
