"""``jaxgcn predict``: a saved model's class and class probabilities per node, as CSV; a multi-label
model's labels over ``--threshold`` and each label's probability. The task is the checkpoint's,
whatever labels come with the data (new nodes need none).

The flags name the checkpoint and the data (:mod:`jaxgcn.cli.saved`); the CSV is
:func:`jaxgcn.app.inference.predictions_csv`; this module writes it to ``--out`` or stdout."""

from __future__ import annotations

import argparse
import contextlib
import sys

from jaxgcn.io import outputs
from jaxgcn.app import inference
from jaxgcn.cli.common import prelude
from jaxgcn.cli.saved import load_for_checkpoint
from jaxgcn.cli.values import STDOUT


def predictions_csv(args: argparse.Namespace) -> tuple[str, int]:
    """The CSV text of every node of the flags' data under the flags' checkpoint, and the number of nodes."""
    loaded = load_for_checkpoint(args, need_split=False)
    return inference.predictions_csv(loaded.ck, loaded.prepared, loaded.node_ids, args.precision,
                                     threshold=args.threshold, source=f"--checkpoint {args.checkpoint}")


def run(args: argparse.Namespace) -> int:
    prelude(args)
    if str(args.out) == STDOUT:  # the CSV alone on stdout (for a pipe); every note goes to stderr
        with contextlib.redirect_stdout(sys.stderr):
            text, n = predictions_csv(args)
        sys.stdout.write(text)
        sys.stdout.flush()
        return 0
    text, n = predictions_csv(args)
    outputs.write_atomic(args.out, text, label=f"--out {args.out}")
    print(f"wrote {n} predictions to {args.out}")
    return 0
