"""The per-run inputs of a compiled program, declared once (:data:`PER_RUN`), and the grid of a sweep.

A compiled training program takes each run's learning rate, weight decay and dropout rate as
inputs, so runs that differ only in them share the program; it also takes each run's hidden width
and split. Each is one row of :data:`PER_RUN`: its name (the field of its config), which config
holds it, whether the runs of one program may differ in it, and the device columns it becomes.
Everything else is derived from the table: :class:`jaxgcn.core.models.RunInputs` (its fields),
:func:`jaxgcn.core.models.make_run_inputs`, a batch's and a single run's inputs
(:func:`jaxgcn.training.runs.run_inputs`, :meth:`jaxgcn.training.step.Step.inputs`) and which
fields :func:`jaxgcn.plan.program_key` sets aside. Adding a per-run hyperparameter (say a
momentum in :class:`jaxgcn.train.TrainConfig`) is one row here; its reader (the optimizer) then
finds it as ``runs.momentum``.

:data:`GRID_KEYS` (the axes of ``jaxgcn sweep``, in the order of its table and CSV columns) lives
here too, because the CLI and :mod:`jaxgcn.io.plots` read it without importing JAX: this module
imports NumPy only.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np


def keep_threshold(rate: float) -> int:
    """The uint32 threshold a hash value must reach to be kept: ``rate * 2**32``, on the host.

    >>> keep_threshold(0.5), keep_threshold(0.0)
    (2147483648, 0)
    """
    return min(int(round(float(rate) * 2.0**32)), 2**32 - 1)


class Column(NamedTuple):
    """One device array of :class:`jaxgcn.core.models.RunInputs`: its field, dtype, and each run's
    entry from its host value."""

    field: str
    dtype: Any
    convert: Callable[[Any], Any]


class PerRun(NamedTuple):
    """One per-run input of a compiled program.

    Attributes:
        name: its field in the config that holds it (and its name as a keyword of
            :func:`jaxgcn.core.models.make_run_inputs`).
        holder: ``"model"`` (:class:`jaxgcn.core.models.GCNConfig`), ``"train"``
            (:class:`jaxgcn.train.TrainConfig`) or ``"entry"`` (the :class:`jaxgcn.batched.Entry`
            itself).
        varies: True when the runs of one program may differ in it (:func:`blank` sets it aside
            from the program's configs); False when it is part of the program (the forward pass
            still reads it per run).
        columns: the device arrays it becomes (dropout: a hash threshold and a scale).
    """

    name: str
    holder: str
    varies: bool
    columns: tuple[Column, ...]


PER_RUN: tuple[PerRun, ...] = (
    PerRun("lr", "train", True, (Column("lr", np.float32, float),)),
    PerRun("weight_decay", "train", True, (Column("weight_decay", np.float32, float),)),
    PerRun("dropout", "model", True, (Column("keep_threshold", np.uint32, keep_threshold),
                                      Column("keep_scale", np.float32, lambda rate: np.float32(1.0 - float(rate))))),
    # a program's runs share their width (padding them to the widest cost every run the widest);
    # the dropout hash reads it per run all the same
    PerRun("hidden", "model", False, (Column("hidden", np.int32, int),)),
    PerRun("split", "entry", True, (Column("split", np.int32, int),)),
)
"""THE per-run inputs (see the module docstring); their columns, in order, are the fields of
:class:`jaxgcn.core.models.RunInputs`."""


def varying() -> tuple[str, ...]:
    """The names of the configs' fields in which the runs of one program may differ.

    >>> varying()
    ('lr', 'weight_decay', 'dropout')
    """
    return tuple(p.name for p in PER_RUN if p.varies and p.holder != "entry")


# The axes of a sweep: the hyperparameters its runs vary inside one program, then the settings that
# make programs of their own. This order is the sweep's table and CSV columns.
PROGRAM_AXES = {"hidden": "model", "layers": "model", "optimizer": "train"}
GRID_KEYS: tuple[str, ...] = (*varying(), *PROGRAM_AXES)
"""The axes of ``jaxgcn sweep`` (:class:`jaxgcn.sweep.Grid`), in the order of its outputs."""


def grid_keys_of(holder: str) -> tuple[str, ...]:
    """The :data:`GRID_KEYS` that the ``holder`` config (``"model"`` or ``"train"``) holds.

    >>> grid_keys_of("model"), grid_keys_of("train")
    (('dropout', 'hidden', 'layers'), ('lr', 'weight_decay', 'optimizer'))
    """
    holders = {**{p.name: p.holder for p in PER_RUN}, **PROGRAM_AXES}
    return tuple(k for k in GRID_KEYS if holders[k] == holder)


def blank(config: Any, holder: str) -> Any:
    """``config`` (the ``holder`` config of a run) with every field its runs may vary inside one
    program set to the class default: what the runs of one program have in common."""
    fields = {p.name: getattr(type(config), p.name) for p in PER_RUN if p.holder == holder and p.varies}
    return dataclasses.replace(config, **fields)


def values_of(model: Any, train: Any, entry: Any = None) -> dict[str, Any]:
    """One run's host value of every :data:`PER_RUN` input, read from its configs (and its entry;
    without one, the inputs an entry holds are left out: each is then 0)."""
    sources = {"model": model, "train": train, "entry": entry}
    return {p.name: getattr(sources[p.holder], p.name) for p in PER_RUN if sources[p.holder] is not None}


@functools.lru_cache(maxsize=None)
def inputs_type(table: tuple[PerRun, ...]) -> type:
    """The NamedTuple of a table's columns (one class per table: :class:`jaxgcn.core.models.RunInputs`
    is the one of :data:`PER_RUN`)."""
    return NamedTuple("RunInputs", [(c.field, "jax.Array") for p in table for c in p.columns])  # type: ignore[misc]


def host_columns(values: dict[str, Sequence[Any]]) -> dict[str, np.ndarray]:
    """Each column of :data:`PER_RUN` as a host array [R], from each input's per-run values by its
    name (an input left out is 0 for every run).

    >>> {k: v.tolist() for k, v in host_columns({"dropout": [0.5], "lr": [0.01]}).items()}["keep_scale"]
    [0.5]
    """
    unknown = sorted(set(values) - {p.name for p in PER_RUN})
    if unknown:
        raise TypeError(f"{unknown[0]!r} is not a per-run input; the per-run inputs: {[p.name for p in PER_RUN]}")
    if not values:
        raise TypeError(f"give the per-run values of at least one of {[p.name for p in PER_RUN]}")
    lengths = {name: len(v) for name, v in values.items()}
    r = next(iter(lengths.values()))
    if any(n != r for n in lengths.values()):
        raise ValueError(f"per-run values of different lengths {lengths}: give every input one value per run")
    columns = {}
    for p in PER_RUN:
        given = values.get(p.name)
        for c in p.columns:
            entries = [c.convert(v) for v in given] if given is not None else [c.convert(0)] * r
            columns[c.field] = np.asarray(entries, c.dtype)
    return columns
