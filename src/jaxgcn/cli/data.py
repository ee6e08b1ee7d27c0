"""The flags -> :class:`jaxgcn.app.data.DataRequest`, and the data it names: read
(:func:`raw_graph`), prepared with its split (:func:`load`). The work is :mod:`jaxgcn.app.data`'s."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from jaxgcn.app import data as app_data
from jaxgcn.app.data import DataRequest, Loaded, Say, one_split, split_csv  # noqa: F401
from jaxgcn.datasets import RawGraph

CLEAR = "\r\033[K"  # a terminal's carriage return and erase-line: a status line is overwritten


def request(args: argparse.Namespace) -> DataRequest:
    """The data request the flags make (every data-taking command has the same data flags)."""
    synthetic = {"n_nodes": args.nodes, "n_classes": args.classes, "avg_degree": args.avg_degree,
                 "homophily": args.homophily}
    return DataRequest(
        dataset=args.dataset, edges=args.edges, features=args.features, labels=args.labels, data_dir=args.data_dir,
        ogb_split=args.ogb_split, data_root=args.data_root, progress=not getattr(args, "quiet", False),
        synthetic=synthetic, split=args.split, splits=args.splits, split_file=args.split_file,
        train_frac=args.train_frac, val_frac=args.val_frac, test_frac=args.test_frac, per_class=args.train_per_class,
        n_val=args.val, n_test=args.test, data_seed=args.data_seed, norm=args.norm, feature_norm=args.feature_norm,
        symmetrize=not args.no_symmetrize, reorder=args.reorder)


def raw_graph(args: argparse.Namespace, require_labels: bool = True, split: bool = True) -> RawGraph:
    """The graph the flags name, with the split they decide up front (:func:`jaxgcn.app.data.read`)."""
    return app_data.read(request(args), require_labels=require_labels, split=split)


def split_given(args: argparse.Namespace) -> bool:
    return request(args).split_given


def planetoid_splits(args: argparse.Namespace, raw: RawGraph) -> dict[str, Any]:
    return app_data.planetoid_splits(request(args), raw)


def _status(args: argparse.Namespace) -> Say | None:
    """On a terminal (and without --quiet), the phase being worked on, overwritten by what follows."""
    if not sys.stdout.isatty() or getattr(args, "quiet", False):
        return None
    return lambda msg: print(CLEAR + msg, end="", flush=True)


def load(args: argparse.Namespace, say: Say, *, backend: str | None = None, on_device: bool = True,
         two_classes: bool = True, raw: RawGraph | None = None, runs: int = 1) -> Loaded:
    """The data the flags name, prepared (:func:`jaxgcn.app.data.load`) for ``runs`` runs; ``backend``:
    instead of --backend (without either, the library's choice)."""
    if args.save_split is not None and args.splits > 1:
        raise ValueError(f"--save-split writes one split; --splits {args.splits} draws several")
    backend = backend or getattr(args, "backend", None)  # info and partition have no --backend
    options: dict[str, Any] = dict(on_device=on_device, two_classes=two_classes, raw=raw, runs=runs)
    if backend is not None:
        options["backend"] = backend
    status = _status(args)
    if status is None:
        return app_data.load(request(args), say, **options)
    try:
        return app_data.load(request(args), lambda msg: say(CLEAR + msg), status=status, **options)
    finally:
        print(CLEAR, end="", flush=True)
