"""Large-graph file layouts: OGB's raw node-property directories (CSV or binary) and SciPy/NumPy
array files.

Both read with NumPy's C parsers (``np.loadtxt`` on gzip streams, ``np.load`` with
``allow_pickle=False``), never row by row in Python, and every problem is reported with the file
and, where NumPy gives them, the row and column.
"""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path
from typing import Any, NamedTuple

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


class _OgbArrays(NamedTuple):
    """What one raw layout holds, before the checks both layouts share."""

    edges: np.ndarray  # [n_edges, 2] int64 src, dst
    labels: np.ndarray  # [n_nodes, n_label_columns] float64, NaN = unlabelled
    features: np.ndarray | None  # [n_nodes, n_features] float32
    n_nodes: int | None  # the declared node count (num-node-list / num_nodes_list), if any
    files: dict[str, str]  # "edges" | "labels" | "features" | "nodes" -> the file, for messages
    row: str = "line"  # what a row of the edge and label tables is called in messages
    edge_features: np.ndarray | None = None  # [n_edges, k] float32 (edge-feat.csv.gz), when no node features


def _read_csv_layout(raw: Path) -> _OgbArrays:
    """OGB's CSV layout: ``edge.csv.gz``, ``node-label.csv.gz``, ``node-feat.csv.gz``, ``num-node-list.csv.gz``."""
    edges = _read_csv_gz(raw / "edge.csv.gz", np.int64, columns=2)
    labels = _read_csv_gz(raw / "node-label.csv.gz", np.float64)
    n_nodes = None
    if (raw / "num-node-list.csv.gz").is_file():
        counts = _read_csv_gz(raw / "num-node-list.csv.gz", np.int64).ravel()
        if counts.size != 1:
            raise ValueError(f"{raw / 'num-node-list.csv.gz'}: {counts.size} graphs; node classification needs one")
        n_nodes = int(counts[0])
    feat, edge_feat = raw / "node-feat.csv.gz", raw / "edge-feat.csv.gz"
    features = _read_csv_gz(feat, np.float32) if feat.is_file() else None
    per_edge = _read_csv_gz(edge_feat, np.float32) if features is None and edge_feat.is_file() else None
    edges = edges.reshape(-1, 2)
    if per_edge is not None and per_edge.shape[0] != edges.shape[0]:
        raise ValueError(f"{edge_feat}: {per_edge.shape[0]} rows for the {edges.shape[0]} edges of "
                         f"{raw / 'edge.csv.gz'}; one feature row per edge is needed")
    files = {"edges": "edge.csv.gz", "labels": "node-label.csv.gz", "features": "node-feat.csv.gz",
             "nodes": "num-node-list.csv.gz"}
    return _OgbArrays(edges, labels, features, n_nodes, {k: str(raw / f) for k, f in files.items()},
                      edge_features=per_edge)


def incident_edge_mean(edges: np.ndarray, edge_features: np.ndarray, n_nodes: int) -> np.ndarray:
    """Node features from edge features: each node's mean over the edges it is an end of (an edge listed
    once counts for both its ends; a node without edges gets zeros). OGB's GCN example for
    ogbn-proteins does this (``data.x = data.adj_t.mean(dim=1)`` over the symmetrized adjacency whose
    values are the 8 edge features: snap-stanford/ogb, examples/nodeproppred/proteins/gnn.py).

    >>> incident_edge_mean(np.array([[0, 1], [1, 2]]), np.array([[2.0], [4.0]], np.float32), 4).ravel().tolist()
    [2.0, 3.0, 4.0, 0.0]
    """
    ends = np.concatenate([edges[:, 0], edges[:, 1]])
    sums = np.zeros((n_nodes, edge_features.shape[1]), np.float64)
    np.add.at(sums, ends, np.concatenate([edge_features, edge_features]))
    counts = np.bincount(ends, minlength=n_nodes)
    return (sums / np.maximum(counts, 1)[:, None]).astype(np.float32)


def _binary_array(arrays: dict[str, np.ndarray], key: str, file: Path, ndim: int) -> np.ndarray:
    if key not in arrays:
        raise ValueError(f"{file}: lacks the array {key!r}; OGB's binary layout (ogb/io/read_graph_raw.py, "
                         f"read_binary_graph_raw) stores it; it has {', '.join(sorted(arrays)) or 'no arrays'}")
    arr = arrays[key]
    if arr.ndim != ndim or (arr.size and arr.dtype.kind not in "biuf"):
        raise ValueError(f"{file}: array {key!r} has shape {arr.shape} and dtype {arr.dtype}; expected a "
                         f"{ndim}-D array of numbers")
    return arr


def _read_binary_layout(raw: Path) -> _OgbArrays:
    """OGB's binary layout (ogbn-papers100M): ``data.npz`` (``edge_index`` [2, E],
    ``num_nodes_list``, ``num_edges_list``, optional ``node_feat`` [N, F]; other ``node_*`` and
    ``edge_*`` arrays such as ``node_year`` are not used) and ``node-label.npz`` (``node_label``)."""
    data_file, label_file = raw / "data.npz", raw / "node-label.npz"
    data = read_npz(data_file, "OGB data")
    edge_index = _binary_array(data, "edge_index", data_file, 2)
    if edge_index.shape[0] != 2 or edge_index.dtype.kind not in "iu":
        raise ValueError(f"{data_file}: edge_index has shape {edge_index.shape} and dtype {edge_index.dtype}; "
                         "expected [2, n_edges] integer node ids (row 0 sources, row 1 targets)")
    n_nodes = _binary_array(data, "num_nodes_list", data_file, 1)
    n_edges = _binary_array(data, "num_edges_list", data_file, 1)
    if n_nodes.size != 1 or n_edges.size != 1:
        raise ValueError(f"{data_file}: num_nodes_list holds {n_nodes.size} graphs; node classification needs one")
    if int(n_edges[0]) != edge_index.shape[1]:
        raise ValueError(f"{data_file}: num_edges_list says {int(n_edges[0])} edges but edge_index holds "
                         f"{edge_index.shape[1]}; the file is damaged: download it again")
    features = _binary_array(data, "node_feat", data_file, 2).astype(np.float32) if "node_feat" in data else None
    label_arrays = read_npz(label_file, "OGB labels")
    labels = label_arrays.get("node_label")
    labels = _binary_array(label_arrays, "node_label", label_file, 1 if labels is not None and labels.ndim == 1 else 2)
    files = {"edges": f"{data_file} (edge_index)", "labels": str(label_file), "features": f"{data_file} (node_feat)",
             "nodes": f"{data_file} (num_nodes_list)"}
    return _OgbArrays(edge_index.T.astype(np.int64), labels.reshape(labels.shape[0], -1).astype(np.float64), features,
                      int(n_nodes[0]), files, row="entry")


def multilabel_targets(labels: np.ndarray, file: str, row_word: str) -> np.ndarray:
    """[n_nodes, n_labels] float32 targets (1, 0; NaN = missing) from a table of several 0/1 columns;
    a missing target is -1 (integer or float tables) or NaN (float tables), as the docs say."""
    labels = np.asarray(labels, np.float64)
    labels = np.where(labels == -1, np.nan, labels)
    bad = ~np.isnan(labels) & (labels != 0) & (labels != 1)
    if np.any(bad):
        row, col = (int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{file}: {row_word} {row + 1}, label column {col + 1} holds {labels[row, col]}; "
                         "several label columns are multi-label targets: 1, 0, or missing (empty, NaN or -1)")
    return labels.astype(np.float32)


def _single_label(labels: np.ndarray, file: str, row_word: str) -> np.ndarray:
    """[n_nodes] int32 class ids (-1 where NaN) from a one-column label table; several columns are a
    multi-label table (:func:`multilabel_targets`)."""
    if labels.shape[1] != 1:
        return multilabel_targets(labels, file, row_word)
    labels = labels[:, 0]
    labelled = np.isfinite(labels)
    bad = labelled & ((labels < 0) | (labels != np.round(labels)) | (labels >= 2**31 - 1))
    if np.any(bad):
        row = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{file}: {row_word} {row + 1} holds {labels[row]}, not a class id >= 0")
    return np.where(labelled, labels, -1).astype(np.int32)


def load_ogb(root: str | Path, *, split: str | None = None) -> RawGraph:
    """Read an OGB node-property dataset in its raw layout (e.g. ``ogbn_arxiv/``), CSV or binary.

    CSV layout (most datasets): ``raw/edge.csv.gz`` (``src,dst`` per line), ``raw/node-label.csv.gz``
    (one label per line; empty or NaN marks an unlabelled node), optional ``raw/node-feat.csv.gz``
    (one feature row per node; absent: each node's mean of ``raw/edge-feat.csv.gz`` over its edges,
    :func:`incident_edge_mean`, as OGB's GCN example for ogbn-proteins computes it, else one-hot node
    ids) and ``raw/num-node-list.csv.gz`` (the node count). Binary layout (ogbn-papers100M; used when
    ``raw/edge.csv.gz`` is absent):
    ``raw/data.npz`` and ``raw/node-label.npz`` (see :func:`_read_binary_layout`), read with
    ``allow_pickle=False``. Both: ``split/<name>/{train,valid,test}.csv.gz`` (node ids).

    A label table of several 0/1 columns (ogbn-proteins' 112 binary tasks) is a multi-label task
    (:class:`jaxgcn.core.tasks.MultiLabel`): its targets stay [n_nodes, n_labels], NaN where missing.
    """
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"ogb:{root}: not a directory; pass the dataset folder that holds raw/ and split/")
    raw = root / "raw"
    if (raw / "edge.csv.gz").is_file():
        arrays = _read_csv_layout(raw)
    elif (raw / "data.npz").is_file():
        arrays = _read_binary_layout(raw)
    else:
        raise ValueError(f"{raw}: neither edge.csv.gz (OGB's CSV layout) nor data.npz (its binary layout, e.g. "
                         "ogbn-papers100M); pass the dataset folder as downloaded, with raw/ and split/")
    labels = _single_label(arrays.labels, arrays.files["labels"], arrays.row)
    n_nodes, edges = labels.shape[0], arrays.edges
    if arrays.n_nodes is not None and arrays.n_nodes != n_nodes:
        raise ValueError(f"{arrays.files['labels']}: {n_nodes} labels for {arrays.n_nodes} nodes "
                         f"({arrays.files['nodes']}); one label per node is needed")
    if edges.size and (edges.min() < 0 or edges.max() >= n_nodes):
        bad = int(np.argmax((edges < 0).any(axis=1) | (edges >= n_nodes).any(axis=1)))
        raise ValueError(f"{arrays.files['edges']}: {arrays.row} {bad + 1} has node id {edges[bad].tolist()} outside "
                         f"[0, {n_nodes}); ids must index the node-label rows")
    features = arrays.features
    if features is None and arrays.edge_features is not None:  # ogbn-proteins: its edges carry the features
        features = incident_edge_mean(edges, arrays.edge_features, n_nodes)
    elif features is None:
        features = sp.identity(n_nodes, dtype=np.float32, format="csr")
    elif features.shape[0] != n_nodes:
        raise ValueError(f"{arrays.files['features']}: {features.shape[0]} rows for {n_nodes} nodes")
    folder = _pick_split(root, split)
    splits = {k: _read_csv_gz(folder / f, np.int64).ravel() for k, f in OGB_SPLIT_FILES.items()}
    return RawGraph(f"ogb:{root.name}", edges[:, 0], edges[:, 1], features, labels, splits)


def load_arrays(root: str | Path, *, seed: int = 0, train_per_class: int = 20, n_val: int = 500,
                n_test: int = 1000) -> RawGraph:
    """Read a graph saved as arrays: ``adjacency.npz`` (``scipy.sparse.save_npz``; entry ``[i, j]``
    is an edge j -> i), ``features.npy`` (dense, row i = node i) or ``features.npz`` (SciPy sparse),
    ``labels.npy`` (int, -1 = unlabelled; or [nodes, labels] multi-label targets 1/0, -1 or NaN where
    missing) and optional ``splits.npz`` (arrays ``train``, ``val``,
    ``test`` of node ids; absent: a Planetoid-style random split drawn with ``seed``, of
    ``train_per_class`` nodes per class, ``n_val`` and ``n_test``, as far as the labels allow).
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
    if labels.ndim == 2 and labels.shape[0] == n and labels.dtype.kind in "biuf":
        return _multilabel_arrays(root, adj, features, multilabel_targets(labels, str(root / "labels.npy"), "row"))
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
        splits = _read_splits(root)
    else:
        splits = planetoid_split(labels, per_class=train_per_class, n_val=n_val, n_test=n_test, seed=seed)
    return _array_graph(root, adj, features, labels, splits)


def _array_graph(root: Path, adj: sp.coo_matrix, features: Any, labels: np.ndarray,
                 splits: dict[str, np.ndarray]) -> RawGraph:
    """The :class:`RawGraph` of ``npz:DIR``'s checked arrays (``adjacency.npz`` entry ``[i, j]``: edge j -> i)."""
    weights = adj.data if not np.all(adj.data == 1) else None
    return RawGraph(f"npz:{root.name}", adj.col.astype(np.int64), adj.row.astype(np.int64), features, labels,
                    splits, weights)


def _read_splits(root: Path) -> dict[str, np.ndarray]:
    z = read_npz(root / "splits.npz", "splits")
    missing = [k for k in ("train", "val", "test") if k not in z]
    if missing:
        raise ValueError(f"{root / 'splits.npz'}: missing arrays {missing}; it needs train, val and test")
    wrong = [k for k in ("train", "val", "test") if z[k].ndim != 1 or (z[k].size and z[k].dtype.kind not in "iu")]
    if wrong:
        raise ValueError(f"{root / 'splits.npz'}: {', '.join(wrong)} must be 1-D arrays of integer node ids")
    splits = {k: np.asarray(z[k], np.int64) for k in ("train", "val", "test")}
    for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
        shared = np.flatnonzero(np.isin(splits[a], splits[b]))
        if shared.size:
            count = np.unique(splits[a][shared]).size
            raise ValueError(f"{root / 'splits.npz'}: {a} and {b} share {count} node(s), the first node "
                             f"{int(splits[a][shared[0]])}; a node belongs to one set: remove it from all but one")
    return splits


def _multilabel_arrays(root: Path, adj: sp.coo_matrix, features: Any, labels: np.ndarray) -> RawGraph:
    """``npz:DIR`` whose ``labels.npy`` is [n, n_labels]: a multi-label graph, whose split
    ``splits.npz`` must give (a per-class split has no classes to draw from)."""
    if features.shape[0] != adj.shape[0]:
        raise ValueError(f"{root}: adjacency has {adj.shape[0]} nodes but features have {features.shape[0]} rows; "
                         "both must describe the same nodes")
    if not (root / "splits.npz").is_file():
        raise ValueError(f"{root}: labels.npy holds {labels.shape[1]} label columns (a multi-label graph) and there "
                         "is no splits.npz; give the split as splits.npz (train, val, test node ids)")
    return _array_graph(root, adj, features, labels, _read_splits(root))
