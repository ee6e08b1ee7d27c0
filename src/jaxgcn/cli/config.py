"""Arguments -> library configs, in one place: :class:`GCNConfig` (architecture),
:class:`TrainConfig`, :class:`Execution` and :class:`Grid` from the flags, the ``--aggregate-first``
rule. (Which flag sets a library parameter that an error names: :mod:`jaxgcn.cli.errors`.)"""

from __future__ import annotations

import argparse
from typing import Any

from jaxgcn.core.hyper import GRID_KEYS, grid_keys_of
from jaxgcn.core.models import Execution, GCNConfig
from jaxgcn.sweep import Grid
from jaxgcn.training.config import TrainConfig, early_stopping_from


def model_config(args: argparse.Namespace, **swept: Any) -> GCNConfig:
    """The architecture the flags describe (``swept``: one sweep configuration's values)."""
    pick = {k: swept.get(k, getattr(args, k)) for k in grid_keys_of("model")}
    return GCNConfig(**pick, bias=args.bias, residual=args.residual, layer_norm=args.layer_norm)


def execution(args: argparse.Namespace, backend: str) -> Execution:
    """How the flags say to run (``--aggregate-first`` and the kernels are decided later, by the plan:
    :mod:`jaxgcn.plan`)."""
    return Execution(backend=backend, dropout_rng=args.dropout_rng, chunk_edges=args.chunk_edges,
                     precision=args.precision)


def train_config(args: argparse.Namespace, **swept: Any) -> TrainConfig:
    """The training settings the flags describe (``swept``: one sweep configuration's values)."""
    pick = {k: swept.get(k, getattr(args, k)) for k in grid_keys_of("train")}
    return TrainConfig(**pick, l2=args.l2, epochs=args.epochs, clip_norm=args.clip_norm, task=args.task,
                       early_stopping=early_stopping_from(args.early_stopping, window=args.window,
                                                          patience=args.patience))


def configs(args: argparse.Namespace, backend: str, **swept: Any) -> tuple[GCNConfig, TrainConfig, Execution]:
    """The three configs (:func:`model_config`, :func:`train_config`, :func:`execution`); validates
    every value."""
    return model_config(args, **swept), train_config(args, **swept), execution(args, backend)


def grid(args: argparse.Namespace) -> Grid:
    """The sweep's grid: every list flag is one axis."""
    return Grid(**{k: getattr(args, k) for k in GRID_KEYS})


def sweep_grid(args: argparse.Namespace) -> Grid:
    """The sweep's grid, every configuration of it validated before any work."""
    the_grid = grid(args)
    for swept in the_grid.configs():
        configs(args, "segment" if args.chunk_edges else "csr", **swept)
    return the_grid


def sweep_base(args: argparse.Namespace, backend: str) -> tuple[GCNConfig, TrainConfig, Execution]:
    """The configs a sweep's groups start from: the widest hidden and dropout, the first value of
    every other list."""
    first = {k: getattr(args, k)[0] for k in GRID_KEYS if k not in ("hidden", "dropout")}
    return configs(args, backend, hidden=max(args.hidden), dropout=max(args.dropout), **first)
