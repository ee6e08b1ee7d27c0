"""``jaxgcn datasets``: the datasets ``--dataset`` accepts."""

from __future__ import annotations

import argparse

from jaxgcn.datasets import available


def run(args: argparse.Namespace) -> int:
    for name, description in available():
        print(f"{name:24s} {description}")
    return 0
