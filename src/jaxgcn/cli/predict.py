"""``jaxgcn predict``: a saved model's class and class probabilities per node, as CSV."""

from __future__ import annotations

import argparse
import contextlib
import sys

import jax
import numpy as np

from jaxgcn import outputs
from jaxgcn.cli.common import prelude
from jaxgcn.cli.saved import ForCheckpoint, load_for_checkpoint, logits
from jaxgcn.cli.values import STDOUT



def predictions_csv(loaded: ForCheckpoint) -> tuple[str, int]:
    """``node,label,prob_<class>...`` CSV text of every node, and the number of nodes."""
    meta = loaded.ck.meta
    probs = np.asarray(jax.nn.softmax(logits(loaded), axis=-1))
    names = meta["class_names"] or [str(k) for k in range(meta["n_classes"])]
    ids = loaded.node_ids if loaded.node_ids is not None else np.arange(probs.shape[0]).astype(str)
    pred = np.asarray(names, dtype=object)[probs.argmax(axis=1)]
    body = np.column_stack([ids.astype(str), pred.astype(str), np.char.mod("%.6f", probs).astype(str)])
    text = "node,label," + ",".join(f"prob_{n}" for n in names) + "\n" + "\n".join(",".join(row) for row in body) + "\n"
    return text, probs.shape[0]


def run(args: argparse.Namespace) -> int:
    prelude(args)
    if str(args.out) == STDOUT:  # the CSV alone on stdout (for a pipe); every note goes to stderr
        with contextlib.redirect_stdout(sys.stderr):
            text, n = predictions_csv(load_for_checkpoint(args, need_split=False))
        sys.stdout.write(text)
        sys.stdout.flush()
        return 0
    text, n = predictions_csv(load_for_checkpoint(args, need_split=False))
    outputs.write_atomic(args.out, text, label=f"--out {args.out}")
    print(f"wrote {n} predictions to {args.out}")
    return 0
