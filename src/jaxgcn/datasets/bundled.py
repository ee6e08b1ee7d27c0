"""The Planetoid datasets shipped inside the package as compressed npz (no pickle, no network),
in the layout of :mod:`jaxgcn.datasets.parsed` (written by ``scripts/convert_planetoid.py``)."""

from __future__ import annotations

from pathlib import Path

from jaxgcn.datasets.base import RawGraph
from jaxgcn.datasets.parsed import load_raw_npz

DATA_DIR = Path(__file__).resolve().parent / "data"
BUNDLED = ("cora", "citeseer")


def load_bundled(name: str) -> RawGraph:
    """Load a bundled dataset (``cora`` or ``citeseer``) as a :class:`RawGraph`."""
    if name not in BUNDLED:
        raise ValueError(f"unknown bundled dataset {name!r}; choose one of {', '.join(BUNDLED)}")
    return load_raw_npz(DATA_DIR / f"{name}.npz")
