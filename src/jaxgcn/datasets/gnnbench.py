"""Shchur et al.'s gnn-benchmark ``.npz`` graphs ("Pitfalls of Graph Neural Network Evaluation",
arXiv:1811.05868; github.com/shchur/gnn-benchmark, ``gnnbench/data/io.py``): Cora, CiteSeer,
PubMed, Cora-Full, Amazon Computers/Photo and Coauthor CS/Physics in one format.

An archive holds a SciPy CSR adjacency as ``adj_data/adj_indices/adj_indptr/adj_shape``, features
as CSR ``attr_data/attr_indices/attr_indptr/attr_shape`` or a dense ``attr_matrix``, labels as an
int array ``labels`` or a CSR ``labels_data/...`` one-hot matrix, and optional ``node_names``,
``class_names`` (unicode arrays). Only those arrays are read (``allow_pickle=False``); others
(``attr_names``, ``attr_text``, ``metadata``) are skipped unread.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from jaxgcn.datasets.base import RawGraph
from jaxgcn.datasets.readers import read_npz
from jaxgcn.datasets.splits import per_class_split
from jaxgcn.core.validate import check_compressed, check_graph_size, check_shape

PARTS = ("data", "indices", "indptr", "shape")
KEYS = ({f"{m}_{p}" for m in ("adj", "attr", "labels") for p in PARTS}
        | {"attr_matrix", "labels", "node_names", "class_names"})


def _csr(z: dict[str, np.ndarray], prefix: str, name: str) -> sp.csr_matrix:
    """The CSR matrix stored as ``<prefix>_data/_indices/_indptr/_shape``, its structure checked."""
    missing = [f"{prefix}_{p}" for p in PARTS if f"{prefix}_{p}" not in z]
    if missing:
        raise ValueError(f"{name}: lacks the arrays {', '.join(missing)} of the {prefix} matrix; a gnn-benchmark "
                         f"archive stores it as {', '.join(f'{prefix}_{p}' for p in PARTS)}")
    source = f"{name}: {prefix}_*"
    shape = check_shape(z[f"{prefix}_shape"].tolist() if z[f"{prefix}_shape"].ndim == 1 else z[f"{prefix}_shape"],
                        source)
    check_compressed(z[f"{prefix}_indptr"], z[f"{prefix}_indices"], z[f"{prefix}_data"], shape, source)
    return sp.csr_matrix((z[f"{prefix}_data"], z[f"{prefix}_indices"], z[f"{prefix}_indptr"]), shape=shape)


def _labels(z: dict[str, np.ndarray], n: int, name: str) -> np.ndarray:
    """[n] int32 class ids from ``labels`` or a one-hot CSR ``labels_*``; an empty row is -1."""
    if "labels" in z:
        labels = z["labels"]
        if labels.ndim != 1 or labels.shape[0] != n or (labels.size and labels.dtype.kind not in "iu"):
            raise ValueError(f"{name}: labels have shape {labels.shape} and dtype {labels.dtype}; expected {n} "
                             "integer class ids, one per node of adj_shape")
        if labels.size and (labels.min() < -1 or labels.max() >= 2**31 - 1):
            raise ValueError(f"{name}: label {int(labels[(labels < -1) | (labels >= 2**31 - 1)][0])} is not a class "
                             "id (0, 1, ...) or -1 (unlabelled)")
        return labels.astype(np.int32)
    if "labels_data" not in z:
        raise ValueError(f"{name}: no labels (neither a labels array nor labels_data/indices/indptr/shape); "
                         "node classification needs one class per node")
    onehot = _csr(z, "labels", name)
    onehot.eliminate_zeros()
    per_row = np.diff(onehot.indptr)
    if onehot.shape[0] != n:
        raise ValueError(f"{name}: labels_shape {onehot.shape} has {onehot.shape[0]} rows for {n} nodes")
    if np.any(per_row > 1):
        row = int(np.argmax(per_row > 1))
        raise ValueError(f"{name}: node {row} has {int(per_row[row])} labels: a multi-label dataset; jaxgcn's GCN "
                         "predicts one class per node")
    labels = np.full(n, -1, np.int32)
    labels[per_row == 1] = onehot.indices[onehot.indptr[:-1][per_row == 1]]
    return labels


def _features(z: dict[str, np.ndarray], n: int, name: str) -> sp.csr_matrix | None:
    """[n, features] float32 CSR from ``attr_*`` or ``attr_matrix``; None when the file has neither."""
    if "attr_data" in z:
        features = _csr(z, "attr", name)
    elif "attr_matrix" in z:
        dense = z["attr_matrix"]
        if dense.ndim != 2 or dense.dtype.kind not in "biuf":
            raise ValueError(f"{name}: attr_matrix has shape {dense.shape} and dtype {dense.dtype}; expected "
                             "[nodes, features] numbers")
        features = sp.csr_matrix(dense)
    else:
        return None
    if features.shape[0] != n:
        raise ValueError(f"{name}: the features have {features.shape[0]} rows for the {n} nodes of adj_shape; both "
                         "must describe the same nodes")
    check_graph_size(n, features.shape[1], name)
    return features.astype(np.float32)


def _subgraph(keep: np.ndarray, adj: sp.csr_matrix, x: sp.csr_matrix | None, labels: np.ndarray,
              names: np.ndarray | None) -> tuple:
    return (adj[keep][:, keep], None if x is None else x[keep], labels[keep],
            None if names is None else names[keep])


def _largest_component(adj: sp.csr_matrix) -> np.ndarray:
    """[n] bool: the nodes of the largest weakly connected component (gnn-benchmark's standardize)."""
    _, comp = connected_components(adj, directed=True, connection="weak")
    return comp == np.argmax(np.bincount(comp))


def _drop_small_classes(labels: np.ndarray, need: int, class_names: list[str] | None
                        ) -> tuple[np.ndarray, np.ndarray, list[str] | None]:
    """gnn-benchmark's ``remove_underrepresented_classes``: the nodes to keep (classes of more than
    ``need`` nodes, and unlabelled nodes), the labels renumbered 0..k-1, and the kept class names."""
    counts = np.bincount(labels[labels >= 0], minlength=len(class_names or ()))
    small = np.flatnonzero((counts > 0) & (counts <= need))
    if small.size == 0:
        return np.ones(labels.shape, bool), labels, class_names
    kept = np.flatnonzero(counts > need)
    keep = ~np.isin(labels, small)
    new_id = np.full(counts.size, -1, np.int32)
    new_id[kept] = np.arange(kept.size, dtype=np.int32)
    relabelled = np.where(labels >= 0, new_id[np.maximum(labels, 0)], -1).astype(np.int32)
    names = None if class_names is None else [class_names[c] for c in kept if c < len(class_names)]
    return keep, relabelled, names


def load_gnnbench(path: str | Path, name: str, *, largest_component: bool = False) -> RawGraph:
    """Read a gnn-benchmark archive (``path`` is the ``.npz`` or the folder holding ``<name>.npz``).

    Entry ``[i, j]`` of the adjacency is an edge i -> j (as stored: ``prepare`` symmetrizes).
    Features become a float32 CSR matrix, labels int32. As gnn-benchmark's ``get_dataset`` does for
    cora_full, the nodes of classes with 50 or fewer nodes (``remove_underrepresented_classes``:
    20 train + 30 val per class) are removed and the other classes renumbered; on the shipped Cora,
    CiteSeer, Amazon and Coauthor files every class is larger, so nothing changes there. The split
    is :func:`~jaxgcn.datasets.splits.per_class_split` with seed 0 (20 train / 30 val per class).

    ``largest_component=True`` keeps only the largest connected component first, as the paper's
    ``standardize_graph: true`` does (Table 1: Cora 2,485 nodes, CiteSeer 2,110); by default the
    whole file is read (Cora 2,708 nodes, CiteSeer 3,312).
    """
    path = Path(path)
    file = path / f"{name}.npz" if path.is_dir() else path
    where = f"gnn-benchmark file {file}"
    z = read_npz(file, "gnn-benchmark", keys=KEYS,
                 fix="download it again from github.com/shchur/gnn-benchmark (data/npz/)")
    adj = _csr(z, "adj", where)
    if adj.shape[0] != adj.shape[1]:
        raise ValueError(f"{where}: adj_shape {adj.shape} is not square; an adjacency matrix is nodes x nodes")
    n = adj.shape[0]
    check_graph_size(n, 0, where, what=f"adj_shape {n:,} x {n:,}")
    features, labels = _features(z, n, where), _labels(z, n, where)
    names = z.get("node_names")
    if names is not None and names.shape != (n,):
        raise ValueError(f"{where}: node_names has shape {names.shape}, expected ({n},): one name per node")
    class_names = [str(c) for c in z["class_names"].ravel()] if "class_names" in z else None
    if class_names is not None and labels.size and labels.max() >= len(class_names):
        raise ValueError(f"{where}: label {int(labels.max())} but class_names has {len(class_names)} names; "
                         "the file is inconsistent: download it again")
    if largest_component:
        adj, features, labels, names = _subgraph(_largest_component(adj), adj, features, labels, names)
    keep, labels, class_names = _drop_small_classes(labels, 20 + 30, class_names)
    if not keep.all():
        adj, features, labels, names = _subgraph(keep, adj, features, labels, names)
        if largest_component:  # as gnn-benchmark re-standardizes after removing classes
            adj, features, labels, names = _subgraph(_largest_component(adj), adj, features, labels, names)
    if features is None:  # gnn-benchmark allows a graph without attributes: one-hot node ids, as load_ogb does
        features = sp.identity(adj.shape[0], dtype=np.float32, format="csr")
    coo = adj.tocoo()
    weights = None if np.all(coo.data == 1) else coo.data.astype(np.float32)
    splits = per_class_split(labels, seed=0, class_names=class_names)
    node_ids = None if names is None else names.astype(str)
    return RawGraph(name, coo.row.astype(np.int64), coo.col.astype(np.int64), features, labels, splits, weights,
                    class_names, node_ids)
