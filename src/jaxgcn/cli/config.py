"""Arguments -> library configs, in one place: :class:`GCNConfig` (architecture),
:class:`TrainConfig`, :class:`Execution` and :class:`Grid` from the flags, the ``--aggregate-first``
rule, and the translation of a library error that names a config parameter (``lr=...``) to the flag
that sets it."""

from __future__ import annotations

import argparse
import re
from typing import Any

from jaxgcn.models import Execution, GCNConfig
from jaxgcn.sweep import Grid
from jaxgcn.train import TrainConfig, early_stopping_from

# Library parameter -> the flag that sets it (every field the CLI maps below, the engine's keyword
# arguments the CLI passes through, and the data and plot functions' parameters their errors name).
FLAGS = {
    "hidden": "--hidden", "layers": "--layers", "dropout": "--dropout", "bias": "--bias", "residual": "--residual",
    "layer_norm": "--layer-norm", "backend": "--backend", "dropout_rng": "--dropout-rng",
    "chunk_edges": "--chunk-edges", "aggregate_first": "--aggregate-first",
    "lr": "--lr", "weight_decay": "--weight-decay", "l2": "--l2", "epochs": "--epochs",
    "early_stopping": "--early-stopping", "window": "--window", "patience": "--patience",
    "clip_norm": "--clip-norm", "optimizer": "--optimizer",
    "n_devices": "--devices", "memory_budget": "--memory-budget", "n_splits": "--splits",
    # load_raw's data_dir; load_ogb's split (the OGB split folder: the CLI's --split is public/random,
    # which no library parameter of that name takes); plots' project_2d method, sweep_heatmap axes and held values
    "data_dir": "--data-dir", "split": "--ogb-split", "method": "--method", "x": "--x", "y": "--y",
    "fix": "--fix",
}
SWEPT = ("hidden", "layers", "dropout", "lr", "weight_decay", "optimizer")  # per configuration in a sweep
_PARAM = re.compile(r"^([a-z_][a-z0-9_]*)[=:]")


def to_flags(message: str) -> str:
    """A library message that begins with a config parameter (``lr=-1.0 must be ...``) gets the flag
    that sets it in front; any other message is returned as it is. :func:`jaxgcn.cli.main` applies
    it to every error it prints.

    >>> to_flags("lr=-1.0 must be a positive number")
    '--lr: lr=-1.0 must be a positive number'
    >>> to_flags("--lr inf: not a finite number")
    '--lr inf: not a finite number'
    """
    match = _PARAM.match(message)
    if match is None or match.group(1) not in FLAGS:
        return message
    return f"{FLAGS[match.group(1)]}: {message}"


def model_config(args: argparse.Namespace, **swept: Any) -> GCNConfig:
    """The architecture the flags describe (``swept``: one sweep configuration's values)."""
    pick = {k: swept.get(k, getattr(args, k)) for k in ("hidden", "layers", "dropout")}
    return GCNConfig(**pick, bias=args.bias, residual=args.residual, layer_norm=args.layer_norm)


def execution(args: argparse.Namespace, backend: str) -> Execution:
    """How the flags say to run (``--aggregate-first`` and the kernels are decided later, by the plan:
    :mod:`jaxgcn.plan`)."""
    return Execution(backend=backend, dropout_rng=args.dropout_rng, chunk_edges=args.chunk_edges)


def train_config(args: argparse.Namespace, **swept: Any) -> TrainConfig:
    """The training settings the flags describe (``swept``: one sweep configuration's values)."""
    pick = {k: swept.get(k, getattr(args, k)) for k in ("lr", "weight_decay", "optimizer")}
    return TrainConfig(**pick, l2=args.l2, epochs=args.epochs, clip_norm=args.clip_norm,
                       early_stopping=early_stopping_from(args.early_stopping, window=args.window,
                                                          patience=args.patience))


def configs(args: argparse.Namespace, backend: str, **swept: Any) -> tuple[GCNConfig, TrainConfig, Execution]:
    """The three configs (:func:`model_config`, :func:`train_config`, :func:`execution`); validates
    every value."""
    return model_config(args, **swept), train_config(args, **swept), execution(args, backend)


def grid(args: argparse.Namespace) -> Grid:
    """The sweep's grid: every list flag is one axis."""
    return Grid(**{k: getattr(args, k) for k in SWEPT})


def sweep_grid(args: argparse.Namespace) -> Grid:
    """The sweep's grid, every configuration of it validated before any work."""
    the_grid = grid(args)
    for swept in the_grid.configs():
        configs(args, "segment" if args.chunk_edges else "csr", **swept)
    return the_grid


def sweep_base(args: argparse.Namespace, backend: str) -> tuple[GCNConfig, TrainConfig, Execution]:
    """The configs a sweep's groups start from: the widest hidden and dropout, the first value of
    every other list."""
    first = {k: getattr(args, k)[0] for k in ("layers", "lr", "weight_decay", "optimizer")}
    return configs(args, backend, hidden=max(args.hidden), dropout=max(args.dropout), **first)
