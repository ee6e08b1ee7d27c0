"""Large-graph file layouts: OGB's raw node-property directories and SciPy/NumPy array files.

Both read with NumPy's C parsers (``np.loadtxt`` on gzip streams, ``np.load`` with
``allow_pickle=False``), never row by row in Python, and every problem is reported with the file
and, where NumPy gives them, the row and column.
"""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from jaxgcn.datasets.base import RawGraph
from jaxgcn.datasets.readers import read_npy, read_npz, read_sparse_npz
from jaxgcn.datasets.splits import planetoid_split

OGB_SPLIT_FILES = {"train": "train.csv.gz", "val": "valid.csv.gz", "test": "test.csv.gz"}


def _read_csv_gz(path: Path, dtype: Any, columns: int | None = None) -> np.ndarray:
    """A header-less gzip CSV of numbers, as OGB ships them, into a 2-D array."""
    if path.is_dir():
        raise ValueError(f"{path}: is a directory; give the file itself")
    if not path.is_file():
        raise ValueError(f"{path}: file not found")
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            arr = np.loadtxt(f, delimiter=",", dtype=dtype, ndmin=2)
    except UnicodeDecodeError:
        raise ValueError(f"{path}: does not decompress to UTF-8 text; OGB files are gzip-compressed CSV") from None
    except (ValueError, OSError, EOFError, zlib.error) as err:
        # loadtxt counts rows from 0 and columns from 1: say "line" and count from 1 like editors do
        msg = re.sub(r"at row (\d+), column (\d+)\.?", lambda m: f"at line {int(m.group(1)) + 1}, column {m.group(2)}",
                     str(err)).rstrip(".")
        raise ValueError(f"{path}: {msg}; the file must hold comma-separated numbers, no header") from None
    if columns is not None and arr.size and arr.shape[1] != columns:
        raise ValueError(f"{path}: rows have {arr.shape[1]} columns, expected {columns}")
    return arr


def _pick_split(root: Path, split: str | None) -> Path:
    names = sorted(p.name for p in (root / "split").iterdir() if p.is_dir()) if (root / "split").is_dir() else []
    if not names:
        raise ValueError(f"{root}: no split/<name>/ folder with train/valid/test.csv.gz; OGB node-property "
                         "datasets ship one: copy split/ from the dataset's download (or save the graph as npz:DIR "
                         "arrays, whose split is optional)")
    if split is None:
        if len(names) > 1:
            raise ValueError(f"split=None: {root}/split holds several splits ({', '.join(names)}); name the one "
                             "to use")
        split = names[0]
    if split not in names:
        raise ValueError(f"split={split!r}: {root}/split has no such folder; it has {', '.join(names)}")
    return root / "split" / split


def load_ogb(root: str | Path, *, split: str | None = None) -> RawGraph:
    """Read an OGB node-property dataset in its raw layout (e.g. ``ogbn_arxiv/``).

    Expected files: ``raw/edge.csv.gz`` (``src,dst`` per line), ``raw/node-label.csv.gz`` (one label
    per line; empty or NaN marks an unlabelled node), optional ``raw/node-feat.csv.gz`` (one feature
    row per node; absent: one-hot node ids), optional ``raw/num-node-list.csv.gz`` (the node
    count), and ``split/<name>/{train,valid,test}.csv.gz`` (node ids).
    """
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"ogb:{root}: not a directory; pass the dataset folder that holds raw/ and split/")
    raw = root / "raw"
    edges = _read_csv_gz(raw / "edge.csv.gz", np.int64, columns=2)
    labels_f = _read_csv_gz(raw / "node-label.csv.gz", np.float64)[:, 0]
    n_nodes = labels_f.shape[0]
    if (raw / "num-node-list.csv.gz").is_file():
        counts = _read_csv_gz(raw / "num-node-list.csv.gz", np.int64).ravel()
        if counts.size != 1:
            raise ValueError(f"{raw / 'num-node-list.csv.gz'}: {counts.size} graphs; node classification needs one")
        if int(counts[0]) != n_nodes:
            raise ValueError(f"{raw / 'node-label.csv.gz'}: {n_nodes} labels for {int(counts[0])} nodes "
                             f"(num-node-list.csv.gz); one label per node is needed")
    if edges.size and (edges.min() < 0 or edges.max() >= n_nodes):
        bad = int(np.argmax((edges < 0).any(axis=1) | (edges >= n_nodes).any(axis=1)))
        raise ValueError(f"{raw / 'edge.csv.gz'}: line {bad + 1} has node id {edges[bad].tolist()} outside "
                         f"[0, {n_nodes}); ids must index the node-label rows")
    if (raw / "node-feat.csv.gz").is_file():
        features = _read_csv_gz(raw / "node-feat.csv.gz", np.float32)
        if features.shape[0] != n_nodes:
            raise ValueError(f"{raw / 'node-feat.csv.gz'}: {features.shape[0]} rows for {n_nodes} nodes")
    else:
        features = sp.identity(n_nodes, dtype=np.float32, format="csr")
    labelled = np.isfinite(labels_f)
    bad = labelled & ((labels_f < 0) | (labels_f != np.round(labels_f)) | (labels_f >= 2**31 - 1))
    if np.any(bad):
        row = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{raw / 'node-label.csv.gz'}: line {row + 1} holds {labels_f[row]}, not a class id >= 0")
    labels = np.where(labelled, labels_f, -1).astype(np.int32)
    folder = _pick_split(root, split)
    splits = {k: _read_csv_gz(folder / f, np.int64).ravel() for k, f in OGB_SPLIT_FILES.items()}
    return RawGraph(f"ogb:{root.name}", edges[:, 0], edges[:, 1], features, labels, splits)


def load_arrays(root: str | Path, *, seed: int = 0) -> RawGraph:
    """Read a graph saved as arrays: ``adjacency.npz`` (``scipy.sparse.save_npz``; entry ``[i, j]``
    is an edge j -> i), ``features.npy`` (dense, row i = node i) or ``features.npz`` (SciPy sparse),
    ``labels.npy`` (int, -1 = unlabelled) and optional ``splits.npz`` (arrays ``train``, ``val``,
    ``test`` of node ids; absent: a Planetoid-style random split drawn with ``seed``).
    """
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"npz:{root}: not a directory; pass the folder that holds adjacency.npz, features and "
                         "labels.npy")
    adj = read_sparse_npz(root / "adjacency.npz", "adjacency", square=True).tocoo()
    if (root / "features.npy").is_file():
        features = read_npy(root / "features.npy", "features")
        if features.ndim != 2 or features.dtype.kind not in "biuf":
            raise ValueError(f"{root / 'features.npy'}: shape {features.shape} dtype {features.dtype}; expected "
                             "[nodes, features] numbers")
    elif (root / "features.npz").is_file():
        features = read_sparse_npz(root / "features.npz", "features")
    else:
        raise ValueError(f"{root}: no features.npy or features.npz")
    labels = read_npy(root / "labels.npy", "labels")
    n = adj.shape[0]
    if features.shape[0] != n or labels.shape != (n,):
        raise ValueError(f"{root}: adjacency has {n} nodes but features have {features.shape[0]} rows and labels "
                         f"shape {labels.shape}; all three must describe the same nodes")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{root / 'labels.npy'}: dtype {labels.dtype}; labels must be integers (-1 = unlabelled)")
    if labels.size and (labels.min() < -1 or labels.max() >= 2**31 - 1):
        bad = int(labels[(labels < -1) | (labels >= 2**31 - 1)][0])
        raise ValueError(f"{root / 'labels.npy'}: label {bad} is not a class id (0, 1, ...) or -1 (unlabelled)")
    labels = labels.astype(np.int32)
    if (root / "splits.npz").is_file():
        z = read_npz(root / "splits.npz", "splits")
        missing = [k for k in ("train", "val", "test") if k not in z]
        if missing:
            raise ValueError(f"{root / 'splits.npz'}: missing arrays {missing}; it needs train, val and test")
        wrong = [k for k in ("train", "val", "test") if z[k].ndim != 1 or (z[k].size and z[k].dtype.kind not in "iu")]
        if wrong:
            raise ValueError(f"{root / 'splits.npz'}: {', '.join(wrong)} must be 1-D arrays of integer node ids")
        splits = {k: np.asarray(z[k], np.int64) for k in ("train", "val", "test")}
    else:
        splits = planetoid_split(labels, seed=seed)
    weights = adj.data if not np.all(adj.data == 1) else None
    return RawGraph(f"npz:{root.name}", adj.col.astype(np.int64), adj.row.astype(np.int64), features, labels,
                    splits, weights)
