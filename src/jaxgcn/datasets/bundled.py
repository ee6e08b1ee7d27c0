"""The Planetoid datasets shipped inside the package as compressed npz (no pickle, no network)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from jaxgcn.datasets.base import RawGraph

DATA_DIR = Path(__file__).resolve().parent / "data"
BUNDLED = ("cora", "citeseer")


def save_npz(raw: RawGraph, path: Path) -> None:
    """Write a :class:`RawGraph` with sparse features as one compressed npz (pickle-free)."""
    feats = sp.csr_matrix(raw.features, dtype=np.float32)
    feats.sort_indices()
    meta = {"name": raw.name, "class_names": raw.class_names}
    np.savez_compressed(
        path,
        senders=raw.senders.astype(np.int32),
        receivers=raw.receivers.astype(np.int32),
        feat_data=feats.data,
        feat_indices=feats.indices.astype(np.int32),
        feat_indptr=feats.indptr.astype(np.int64),
        feat_shape=np.asarray(feats.shape, dtype=np.int64),
        labels=raw.labels.astype(np.int32),
        **{f"split_{k}": v.astype(np.int32) for k, v in raw.splits.items()},
        meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
    )


def load_bundled(name: str) -> RawGraph:
    """Load a bundled dataset (``cora`` or ``citeseer``) as a :class:`RawGraph`."""
    if name not in BUNDLED:
        raise ValueError(f"unknown bundled dataset {name!r}; choose one of {', '.join(BUNDLED)}")
    with np.load(DATA_DIR / f"{name}.npz", allow_pickle=False) as f:
        meta = json.loads(f["meta"].tobytes().decode())
        feats = sp.csr_matrix((f["feat_data"], f["feat_indices"], f["feat_indptr"]),
                              shape=tuple(int(v) for v in f["feat_shape"]))
        return RawGraph(
            name=meta["name"],
            senders=f["senders"].astype(np.int64),
            receivers=f["receivers"].astype(np.int64),
            features=feats,
            labels=f["labels"],
            splits={k: f[f"split_{k}"].astype(np.int64) for k in ("train", "val", "test")},
            class_names=meta.get("class_names"),
        )
