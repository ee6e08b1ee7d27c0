"""Dataset loaders and the host-side preparation that turns files into device arrays.

Data flows one way: files -> :class:`RawGraph` (NumPy/SciPy) -> :func:`prepare` (validation,
cleaning, normalization, once, on the host) -> :class:`~jaxgcn.core.data.TrainData` on the device.

This package's face imports nothing heavy: ``jaxgcn --help`` reads the catalogue
(:mod:`~jaxgcn.datasets.catalogue`) without importing JAX. Every other name below is looked up in
:mod:`~jaxgcn.datasets.loading` on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from jaxgcn.datasets.catalogue import available

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and readers
    from jaxgcn.datasets.loading import (  # noqa: F401
        BUNDLED, FEATURE_NORMS, Prepared, RawGraph, load_bundled, load_dataset, load_protocol, load_raw,
        normalize_features, planetoid_split, prepare, synthetic, with_random_splits, with_splits)

__all__ = [
    "BUNDLED", "FEATURE_NORMS", "Prepared", "RawGraph", "available", "load_bundled", "load_dataset",
    "load_protocol", "load_raw", "normalize_features", "planetoid_split", "prepare", "synthetic",
    "with_random_splits", "with_splits",
]


def __getattr__(name: str) -> Any:
    """A name of :mod:`~jaxgcn.datasets.loading` (imported now, with JAX), or a submodule it imported."""
    if name.startswith("__"):
        raise AttributeError(name)
    loading = importlib.import_module("jaxgcn.datasets.loading")
    if name in globals():  # a submodule (named, ogb, ...) that importing loading brought in
        return globals()[name]
    try:
        value = globals()[name] = getattr(loading, name)  # looked up once
    except AttributeError:
        raise AttributeError(f"module 'jaxgcn.datasets' has no attribute {name!r}") from None
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
