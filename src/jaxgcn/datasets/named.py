"""Catalogue datasets by name: fetched once (``download``), parsed once (``parsed``), and the splits
of their evaluation protocol."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jaxgcn.datasets.base import RawGraph
from jaxgcn.datasets.bundled import load_bundled
from jaxgcn.datasets.catalogue import Dataset, lookup, refuse_unsupported
from jaxgcn.datasets.download import DownloadError, dataset_dir, fetch, is_cached
from jaxgcn.datasets.parsed import cached
from jaxgcn.datasets.splits import per_class_split

PARSED = "parsed.npz"
OGB_METRIC = {"accuracy": "acc"}  # the name OGB's Evaluator reports the metric under


def _parse(entry: Dataset, folder: Path) -> RawGraph:
    first = folder / entry.sources[0].filename
    if entry.format == "planetoid":
        from jaxgcn.datasets.planetoid import load_raw

        raw = load_raw(folder, entry.stem)
    elif entry.format == "gnnbench":
        from jaxgcn.datasets.gnnbench import load_gnnbench

        raw = load_gnnbench(first, entry.name)
    elif entry.format == "wikics":
        from jaxgcn.datasets.wikics import load_wikics

        raw = load_wikics(first)
    elif entry.format in ("ogb", "ogb-bin"):
        from jaxgcn.datasets.ogb import load_ogb

        raw = load_ogb(folder / entry.stem)
    else:
        raise ValueError(f"dataset {entry.name}: unknown format {entry.format!r} in the catalogue")
    return raw._replace(name=entry.name)


def load_named(entry: Dataset, *, root: str | Path | None = None, download: bool = True,
               progress: bool = True) -> RawGraph:
    """The catalogue dataset ``entry``: bundled, or from the cache (parsed once), downloading the
    files first when they are not cached and ``download`` allows it."""
    refuse_unsupported(entry)
    if entry.bundled:
        return load_bundled(entry.name)
    folder = dataset_dir(entry, root)
    if not is_cached(entry, root):
        if not download:
            raise DownloadError(f"dataset {entry.name}: not in the cache {folder}; run `jaxgcn download "
                                f"{entry.name}` (or point --data-root / $JAXGCN_DATA at a folder that holds it)")
        parsed: list[RawGraph] = []  # what fetch's check parsed (a first download is parsed once)
        fetch(entry, root, progress=progress, check=lambda f: parsed.append(_parse(entry, f)))
        if parsed:
            return cached(folder / PARSED, [folder / s.filename for s in entry.sources], lambda: parsed[0],
                          min_bytes=0)
    sources = [folder / s.filename for s in entry.sources]
    return cached(folder / PARSED, sources, lambda: _parse(entry, folder), min_bytes=0)


def protocol_of(name: str) -> str | None:
    """The evaluation protocol of a catalogue dataset (None: not a catalogue name)."""
    entry = lookup(name)
    return entry.protocol if entry is not None else None


def protocol_splits(raw: RawGraph, protocol: str, n_splits: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """The ``n_splits`` splits of ``protocol`` for ``raw`` (node ids in the input's numbering).

    ``per-class-20-30``: split k drawn with seed ``seed + k``; ``wikics``: the first ``n_splits``
    official splits; ``planetoid``/``ogb``: the one split the dataset ships.
    """
    if protocol == "per-class-20-30":
        return [per_class_split(raw.labels, 20, 30, seed=seed + k, class_names=raw.class_names)
                for k in range(n_splits)]
    official = list(raw.official_splits or (raw.splits,))
    if n_splits > len(official):
        raise ValueError(f"--splits {n_splits}: dataset {raw.name} ships {len(official)} official split(s) "
                         f"({protocol} protocol); give at most {len(official)}, or --split random for drawn ones")
    return official[:n_splits]


def protocol_name(protocol: str, n_splits: int, seed: int = 0) -> str:
    """How reports name ``n_splits`` splits of a protocol with several (``per-class-20-30``,
    ``wikics``).

    >>> protocol_name("per-class-20-30", 10)
    '20/30 per class, rest test (seed 0..9)'
    """
    if protocol == "wikics":
        return f"WikiCS official {'1' if n_splits == 1 else f'1..{n_splits}'}"
    last = seed + n_splits - 1
    return f"20/30 per class, rest test (seed {seed}{'' if n_splits == 1 else f'..{last}'})"


def protocol_info(name: str) -> dict[str, str]:
    """``{"protocol", "metric"}`` of a catalogue dataset for reports (OGB's metric under OGB's name:
    ``acc`` for ogbn-arxiv), or ``{}`` for other datasets."""
    entry = lookup(name)
    if entry is None:
        return {}
    return {"protocol": entry.protocol, "metric": f"ogb:{OGB_METRIC.get(entry.metric, entry.metric)}"
            if entry.protocol == "ogb" else entry.metric}
