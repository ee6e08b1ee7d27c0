"""Your own graph from generic files: an edge list, node features and node labels.

- edges: CSV with a header naming ``src`` and ``dst`` (and optionally ``weight``), or a header-less
  whitespace-separated edge list (``src dst [weight]`` per line);
- features (optional): dense CSV (``node,f0,f1,...``), sparse triplets CSV (``node,feature,value``),
  ``.npy`` (row i = node i) or a SciPy ``.npz`` matrix; absent -> one-hot node identity features;
- labels: CSV ``node,label``; labels may be integers or names (names are kept as class names, in
  sorted order); nodes without a row are unlabelled and never used in a split.

Node ids may be integers or strings; they are compared as text after trimming spaces, so the same
id names the same node in all three files. With a features file, every node of the graph must have
features: an edge or label naming a node absent from it is an error (nodes are never created
silently). Files are parsed with NumPy's C reader (``np.loadtxt``), not row by row in Python.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from jaxgcn.datasets.base import RawGraph


def _lines_hint(err: Exception) -> str:
    # loadtxt counts rows from 0 (after skipped ones) and columns from 1
    return re.sub(r"\.$", "", str(err))


def _read(path: Path, what: str) -> tuple[list[str] | None, np.ndarray, str | None]:
    """``(header, [rows, cols] str array, delimiter)`` of a text table; the header is the first
    line when it is not all numbers."""
    if not path.is_file():
        raise ValueError(f"{what} file {path}: not found")
    with open(path, encoding="utf-8") as f:
        first = f.readline()
    if not first.strip():
        raise ValueError(f"{what} file {path}: empty (no rows)")
    delim = "," if "," in first else None
    cells = [c.strip() for c in (first.split(",") if delim else first.split())]
    header = cells if any(not _is_number(c) for c in cells) and delim else None
    try:
        with warnings.catch_warnings():  # "input contained no data": reported below, as an error
            warnings.simplefilter("ignore", UserWarning)
            table = np.loadtxt(path, dtype=str, delimiter=delim, skiprows=1 if header else 0, ndmin=2,
                               comments=None, encoding="utf-8")
    except ValueError as err:
        raise ValueError(f"{what} file {path}: {_lines_hint(err)}; every row needs the same number of "
                         "columns") from None
    if table.size == 0:
        raise ValueError(f"{what} file {path}: no data rows below the header")
    return header, np.char.strip(table), delim


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _numbers(values: np.ndarray, path: Path, what: str, first_line: int, column: int = 0) -> np.ndarray:
    """Parse a str column/block to float64; name the line and column of the first bad cell."""
    try:
        return values.astype(np.float64)
    except ValueError:
        flat = values.reshape(values.shape[0], -1)
        for i, row in enumerate(flat):
            for j, cell in enumerate(row):
                if not _is_number(cell):
                    raise ValueError(f"{what} file {path}: line {first_line + i}, column {column + j + 1}: "
                                     f"{str(cell)!r} is not a number") from None
        raise


def _columns(header: list[str] | None, path: Path, what: str, required: tuple[str, ...],
             optional: tuple[str, ...] = ()) -> dict[str, int]:
    if header is None:
        raise ValueError(f"{what} file {path}: no header line; the first line must name the columns "
                         f"{','.join(required)}")
    index = {name.lower(): i for i, name in enumerate(header)}
    missing = [c for c in required if c not in index]
    if missing:
        raise ValueError(f"{what} file {path}: header {','.join(header)} lacks column(s) {', '.join(missing)}; "
                         f"expected {','.join(required + optional)}")
    return {c: index[c] for c in required + optional if c in index}


def _no_duplicates(ids: np.ndarray, path: Path, what: str, first_line: int) -> None:
    uniq, first, counts = np.unique(ids, return_index=True, return_counts=True)
    if np.any(counts > 1):
        k = int(np.argmax(counts > 1))
        second = np.flatnonzero(ids == uniq[k])[1]
        raise ValueError(f"{what} file {path}: node {str(uniq[k])!r} appears twice (lines {first_line + first[k]} and "
                         f"{first_line + second}); give each node one row")


def read_edges(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int]:
    """``(src ids, dst ids, weights or None, line number of the first row)`` from an edge file."""
    path = Path(path)
    header, table, delim = _read(path, "edges")
    line0 = 2 if header else 1
    if header is not None:
        cols = _columns(header, path, "edges", ("src", "dst"), ("weight",))
        src, dst = table[:, cols["src"]], table[:, cols["dst"]]
        w = table[:, cols["weight"]] if "weight" in cols else None
        w_col = cols.get("weight", 0)
    else:
        if table.shape[1] not in (2, 3):
            raise ValueError(f"edges file {path}: {table.shape[1]} columns; a header-less edge list has "
                             "'src dst' or 'src dst weight' per line (or give a CSV header src,dst[,weight])")
        src, dst = table[:, 0], table[:, 1]
        w = table[:, 2] if table.shape[1] == 3 else None
        w_col = 2
    weights = None
    if w is not None:
        weights = _numbers(w, path, "edges", line0, w_col)
        bad = np.flatnonzero(~np.isfinite(weights) | (weights < 0))
        if bad.size:
            raise ValueError(f"edges file {path}: line {line0 + bad[0]}: weight {w[bad[0]]} must be finite and >= 0")
    return src, dst, weights, line0


def read_features(path: str | Path) -> tuple[np.ndarray | None, Any]:
    """``(node ids or None, [n, F] features)``: ids are None for .npy/.npz (row i = node i)."""
    path = Path(path)
    if path.suffix == ".npy":
        if not path.is_file():
            raise ValueError(f"features file {path}: not found")
        try:
            x = np.load(path, allow_pickle=False)
        except ValueError as err:
            raise ValueError(f"features file {path}: not a NumPy array file ({err})") from None
        if x.ndim != 2:
            raise ValueError(f"features file {path}: shape {x.shape}; expected [nodes, features]")
        return None, _finite(x.astype(np.float32), path)
    if path.suffix == ".npz":
        if not path.is_file():
            raise ValueError(f"features file {path}: not found")
        try:
            x = sp.load_npz(path).tocsr().astype(np.float32)
        except (ValueError, OSError) as err:
            raise ValueError(f"features file {path}: not a SciPy sparse .npz ({err})") from None
        _finite(x.data, path)
        return None, x
    header, table, _ = _read(path, "features")
    if header is None:
        raise ValueError(f"features file {path}: no header; use node,f0,f1,... (dense) or "
                         "node,feature,value (sparse triplets)")
    names = [h.lower() for h in header]
    if names[:1] != ["node"]:
        raise ValueError(f"features file {path}: the first column is {str(header[0])!r}; it must be 'node' "
                         "(node,f0,f1,... or node,feature,value)")
    if names == ["node", "feature", "value"]:
        return _triplets(path, table)
    ids = table[:, 0]
    _no_duplicates(ids, path, "features", 2)
    x = _numbers(table[:, 1:], path, "features", 2, 1).astype(np.float32)
    return ids, _finite(x, path, 2)


def _triplets(path: Path, table: np.ndarray) -> tuple[np.ndarray, sp.csr_matrix]:
    ids, rows = np.unique(table[:, 0], return_inverse=True)
    # Reorder to first appearance so the node order follows the file.
    first = np.full(ids.size, table.shape[0])
    np.minimum.at(first, rows, np.arange(table.shape[0]))
    order = np.argsort(first, kind="stable")
    new_row = np.empty(ids.size, np.int64)
    new_row[order] = np.arange(ids.size)
    values = _numbers(table[:, 2], path, "features", 2, 2)
    feat = _numbers(table[:, 1], path, "features", 2, 1)
    if np.any(feat < 0) or np.any(feat != np.round(feat)):
        i = int(np.flatnonzero((feat < 0) | (feat != np.round(feat)))[0])
        raise ValueError(f"features file {path}: line {i + 2}, column 2: feature index {str(table[i, 1])!r} must be an "
                         "integer >= 0")
    key = new_row[rows] * (int(feat.max()) + 1) + feat.astype(np.int64)
    uniq, first_pos, counts = np.unique(key, return_index=True, return_counts=True)
    if np.any(counts > 1):
        k = int(first_pos[np.argmax(counts > 1)])
        raise ValueError(f"features file {path}: node {str(table[k, 0])!r} feature {table[k, 1]} appears twice; "
                         "give each (node, feature) pair one row")
    x = sp.csr_matrix((values.astype(np.float32), (new_row[rows], feat.astype(np.int64))),
                      shape=(ids.size, int(feat.max()) + 1))
    _finite(x.data, path)
    return ids[order], x


def _finite(x: np.ndarray, path: Path, line0: int | None = None) -> np.ndarray:
    """Refuse NaN/inf features, naming where: the CSV line and column, the array row and column,
    or the stored value of a sparse matrix."""
    bad = np.argwhere(~np.isfinite(x))
    if bad.size:
        if x.ndim == 2 and line0 is not None:
            where = f"line {int(bad[0][0]) + line0}, column {int(bad[0][1]) + 2}"
        elif x.ndim == 2:
            where = f"row {int(bad[0][0])}, column {int(bad[0][1])}"
        else:
            where = f"stored value {int(bad[0][0])}"
        raise ValueError(f"features file {path}: NaN or inf at {where}; impute or drop those values first")
    return x


def read_labels(path: str | Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(node ids, class ids, class names)``; names sorted (numerically when all are integers)."""
    path = Path(path)
    header, table, _ = _read(path, "labels")
    cols = _columns(header, path, "labels", ("node", "label"))
    ids, labels = table[:, cols["node"]], table[:, cols["label"]]
    _no_duplicates(ids, path, "labels", 2)
    empty = np.flatnonzero(labels == "")
    if empty.size:
        raise ValueError(f"labels file {path}: line {empty[0] + 2} has an empty label; leave unlabelled nodes out")
    names, classes = np.unique(labels, return_inverse=True)  # sorted as text
    if all(_is_int(n) for n in names):  # integer labels: class k is label k's rank by value
        order = np.argsort(names.astype(np.int64), kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        names, classes = names[order], rank[classes]
    return ids, classes.astype(np.int32), [str(n) for n in names]


def _is_int(text: str) -> bool:
    return bool(re.fullmatch(r"[+-]?\d+", text))


def load_files(edges: str | Path, features: str | Path | None = None, labels: str | Path | None = None,
               *, name: str | None = None) -> RawGraph:
    """Read a graph from generic files into a :class:`RawGraph` (no split yet: ``splits`` is empty;
    draw one with :func:`~jaxgcn.datasets.splits.planetoid_split` or read a split file)."""
    src, dst, weights, edge_line0 = read_edges(edges)
    if labels is not None:
        label_ids, classes, class_names = read_labels(labels)
    else:  # prediction on an unlabelled graph
        label_ids, classes, class_names = np.zeros(0, str), np.zeros(0, np.int32), None
    if features is not None:
        feat_ids, x = read_features(features)
        n = x.shape[0]
        node_ids = feat_ids if feat_ids is not None else np.arange(n).astype(str)
        order = np.argsort(node_ids, kind="stable")
        sorted_ids = node_ids[order]

        def index(ids: np.ndarray, what: str, path: Any, line0: int = 2) -> np.ndarray:
            pos = np.clip(np.searchsorted(sorted_ids, ids), 0, n - 1)
            missing = np.flatnonzero(sorted_ids[pos] != ids)
            if missing.size:
                raise ValueError(f"{what} file {path}: node {str(ids[missing[0]])!r} (line {missing[0] + line0}) has no row in "
                                 f"the features file {features}; add its features or drop it (nodes are not created "
                                 "implicitly)")
            return order[pos]
    else:
        node_ids = np.unique(np.concatenate([src, dst, label_ids]))
        n = node_ids.size
        x = sp.identity(n, dtype=np.float32, format="csr")

        def index(ids: np.ndarray, what: str, path: Any, line0: int = 2) -> np.ndarray:
            return np.searchsorted(node_ids, ids)

    s, d = index(src, "edges", edges, edge_line0), index(dst, "edges", edges, edge_line0)
    lab = np.full(n, -1, np.int32)
    lab[index(label_ids, "labels", labels)] = classes
    return RawGraph(name or Path(edges).stem, s.astype(np.int64), d.astype(np.int64), x, lab, {}, weights,
                    class_names, node_ids)
