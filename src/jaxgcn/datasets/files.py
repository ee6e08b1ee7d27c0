"""Your own graph from generic files: an edge list, node features and node labels.

- edges: CSV with a header naming ``src`` and ``dst`` (and optionally ``weight``), or a
  whitespace-separated edge list (``src dst [weight]`` per line, optionally under a ``src dst`` header);
- features (optional): dense CSV (``node,f0,f1,...``), sparse triplets CSV (``node,feature,value``),
  ``.npy`` (row i = node i) or a SciPy ``.npz`` matrix; absent -> one-hot node identity features;
- labels: CSV ``node,label``; labels may be integers or names (names are kept as class names, in
  sorted order); nodes without a row are unlabelled and never used in a split. Several labels per
  node (a multi-label task, :class:`jaxgcn.core.tasks.MultiLabel`): ``node,labels`` with one row per
  (node, label) pair, or ``node,<label1>,<label2>,...`` with a 1/0/empty cell per node and label
  (see :func:`read_labels`); the targets are then [n, L] float32, NaN where missing.

Node ids may be integers or strings; they are compared as text after trimming spaces, so the same
id names the same node in all three files. With a features file, every node of the graph must have
features: an edge or label naming a node absent from it is an error (nodes are never created
silently). Files are parsed with NumPy's C reader (``np.loadtxt``), not row by row in Python, after
:mod:`jaxgcn.datasets.readers` has checked the bytes: UTF-8 text (a byte-order mark, Windows line
ends, blank lines and double quotes around cells are accepted), cells short enough to parse, and
every error reported with the file's line number.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp

from jaxgcn.datasets.base import RawGraph
from jaxgcn.datasets.readers import Table, is_number, read_npy, read_sparse_npz, read_table
from jaxgcn.core.validate import check_allocation, check_graph_size

F32_MAX = float(np.finfo(np.float32).max)


def _numbers(values: np.ndarray, table: Table, column: int = 0) -> np.ndarray:
    """Parse a str column/block to float64; name the line and column of the first bad cell."""
    try:
        return values.astype(np.float64)
    except ValueError:
        flat = values.reshape(values.shape[0], -1)
        for i, row in enumerate(flat):
            for j, cell in enumerate(row):
                if not is_number(cell):
                    raise ValueError(f"{table.name}: line {table.line(i)}, column {column + j + 1}: "
                                     f"{str(cell)!r} is not a number") from None
        raise


def _columns(table: Table, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, int]:
    if table.header is None:
        raise ValueError(f"{table.name}: no header line; the first line must name the columns "
                         f"{','.join(required)}")
    index = {name.lower(): i for i, name in enumerate(table.header)}
    missing = [c for c in required if c not in index]
    if missing:
        raise ValueError(f"{table.name}: header {','.join(table.header)} lacks column(s) {', '.join(missing)}; "
                         f"expected {','.join(required + optional)}")
    return {c: index[c] for c in required + optional if c in index}


def _no_duplicates(ids: np.ndarray, table: Table, hint: str = "") -> None:
    uniq, first, counts = np.unique(ids, return_index=True, return_counts=True)
    if np.any(counts > 1):
        k = int(np.argmax(counts > 1))
        second = np.flatnonzero(ids == uniq[k])[1]
        raise ValueError(f"{table.name}: node {str(uniq[k])!r} appears twice (lines {table.line(int(first[k]))} and "
                         f"{table.line(int(second))}); give each node one row{hint}")


def read_edges(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int]:
    """``(src ids, dst ids, weights or None, line number of the first row)`` from an edge file."""
    src, dst, weights, table = _read_edges(path)
    return src, dst, weights, table.line(0)


def _read_edges(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, Table]:
    table = read_table(Path(path), "edges")
    cells = table.cells
    if table.header is not None:
        cols = _columns(table, ("src", "dst"), ("weight",))
        src, dst = cells[:, cols["src"]], cells[:, cols["dst"]]
        w = cells[:, cols["weight"]] if "weight" in cols else None
        w_col = cols.get("weight", 0)
    else:
        if cells.shape[1] not in (2, 3):
            raise ValueError(f"{table.name}: {cells.shape[1]} columns; a header-less edge list has "
                             "'src dst' or 'src dst weight' per line (or give a CSV header src,dst[,weight])")
        src, dst = cells[:, 0], cells[:, 1]
        w = cells[:, 2] if cells.shape[1] == 3 else None
        w_col = 2
    weights = None
    if w is not None:
        weights = _numbers(w, table, w_col)
        bad = np.flatnonzero(~np.isfinite(weights) | (weights < 0) | (weights > F32_MAX))
        if bad.size:
            k = int(bad[0])
            why = "overflows float32 (largest 3.4e38); rescale the weights" if np.isfinite(weights[k]) and \
                weights[k] > 0 else "must be finite and >= 0"
            raise ValueError(f"{table.name}: line {table.line(k)}: weight {w[k]} {why}")
    return src, dst, weights, table


def read_features(path: str | Path) -> tuple[np.ndarray | None, Any]:
    """``(node ids or None, [n, F] features)``: ids are None for .npy/.npz (row i = node i)."""
    path = Path(path)
    if path.suffix == ".npy":
        return None, _dense_array(read_npy(path, "features"), path)
    if path.suffix == ".npz":
        x = read_sparse_npz(path, "features")
        _not_empty(x.shape, path)
        x = sp.csr_matrix((_in_float32(x.data, path), x.indices, x.indptr), shape=x.shape)
        _finite(x.data, path)
        return None, x
    table = read_table(path, "features")
    if table.header is None:
        raise ValueError(f"{table.name}: no header; use node,f0,f1,... (dense) or "
                         "node,feature,value (sparse triplets)")
    names = [h.lower() for h in table.header]
    if names[:1] != ["node"]:
        raise ValueError(f"{table.name}: the first column is {str(table.header[0])!r}; it must be 'node' "
                         "(node,f0,f1,... or node,feature,value)")
    if names == ["node", "feature", "value"]:
        return _triplets(table)
    if len(names) < 2:
        raise ValueError(f"{table.name}: only a node column; give at least one feature column (node,f0,...) "
                         "or leave out --features for one-hot node ids")
    ids = table.cells[:, 0]
    _no_duplicates(ids, table)
    x = _numbers(table.cells[:, 1:], table, 1)
    return ids, _finite(_in_float32(x, path, table), path, table)


def _not_empty(shape: tuple[int, ...], path: Path) -> None:
    if shape[0] == 0 or shape[1] == 0:
        raise ValueError(f"features file {path}: shape {tuple(shape)} has no {'rows' if shape[0] == 0 else 'columns'}; "
                         "give one row per node and at least one feature column")


def _dense_array(x: np.ndarray, path: Path) -> np.ndarray:
    """A .npy features array: 2-D, numeric, non-empty, finite float32."""
    if x.ndim != 2:
        raise ValueError(f"features file {path}: shape {x.shape}; expected [nodes, features]")
    if x.dtype.kind not in "biuf":
        raise ValueError(f"features file {path}: dtype {x.dtype}; features must be numbers")
    _not_empty(x.shape, path)
    return _finite(_in_float32(x, path), path)


def _in_float32(x: np.ndarray, path: Path, table: Table | None = None, column: int = 2) -> np.ndarray:
    """float32, refusing finite values that overflow it (they would become inf); ``table``: a CSV's
    values, ``column`` the file column of ``x``'s first."""
    if x.dtype.kind == "f" and x.dtype.itemsize > 4:
        big = np.argwhere(np.isfinite(x) & (np.abs(x) > F32_MAX))
        if big.size:
            at = tuple(int(i) for i in big[0])
            raise ValueError(f"features file {path}: value {float(x[at]):g} at {_where(at, table, column)} overflows "
                             "float32 (largest 3.4e38); rescale the features")
    return x.astype(np.float32)


def _where(at: tuple[int, ...], table: Table | None, column: int = 2) -> str:
    """A bad value's place: the CSV line and column, or the array's row and column."""
    if table is not None:
        return f"line {table.line(at[0])}" + (f", column {at[1] + column}" if len(at) == 2 else f", column {column}")
    return f"row {at[0]}, column {at[1]}" if len(at) == 2 else f"stored value {at[0]}"


def _triplets(table: Table) -> tuple[np.ndarray, sp.csr_matrix]:
    cells = table.cells
    ids, rows = np.unique(cells[:, 0], return_inverse=True)
    # Reorder to first appearance so the node order follows the file.
    first = np.full(ids.size, cells.shape[0])
    np.minimum.at(first, rows, np.arange(cells.shape[0]))
    order = np.argsort(first, kind="stable")
    new_row = np.empty(ids.size, np.int64)
    new_row[order] = np.arange(ids.size)
    values = _numbers(cells[:, 2], table, 2)
    feat = _numbers(cells[:, 1], table, 1)
    bad = np.flatnonzero((feat < 0) | (feat != np.round(feat)))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{table.name}: line {table.line(i)}, column 2: feature index {str(cells[i, 1])!r} must be "
                         "an integer >= 0")
    k = int(np.argmax(feat))
    check_graph_size(ids.size, int(feat[k]) + 1, table.name,
                     what=f"feature index {cells[k, 1]} on line {table.line(k)} (a column per index up to it)")
    key = new_row[rows] * (int(feat[k]) + 1) + feat.astype(np.int64)
    uniq, first_pos, counts = np.unique(key, return_index=True, return_counts=True)
    if np.any(counts > 1):
        k = int(first_pos[np.argmax(counts > 1)])
        raise ValueError(f"{table.name}: node {str(cells[k, 0])!r} feature {cells[k, 1]} appears twice; "
                         "give each (node, feature) pair one row")
    x = sp.csr_matrix((_in_float32(values, table.path, table, 3), (new_row[rows], feat.astype(np.int64))),
                      shape=(ids.size, int(feat[k]) + 1))
    _finite(x.data, table.path)
    return ids[order], x


def _finite(x: np.ndarray, path: Path, table: Table | None = None) -> np.ndarray:
    """Refuse NaN/inf features, naming where: the CSV line and column, the array row and column,
    or the stored value of a sparse matrix."""
    bad = np.argwhere(~np.isfinite(x))
    if bad.size:
        where = _where(tuple(int(i) for i in bad[0]), table if x.ndim == 2 else None)
        raise ValueError(f"features file {path}: NaN or inf at {where}; impute or drop those values first")
    return x


class Labels(NamedTuple):
    """A labels file as read by :func:`_read_labels`.

    Attributes:
        ids: [m] node ids (text), each once.
        targets: [m] int32 class ids (``node,label``), or [m, L] float32 targets (1, 0; NaN missing).
        names: the class or label names (index = class id or label column).
        table: the file's table, for messages.
        rows: [m] the table row of each id (its first), for messages.
    """

    ids: np.ndarray
    targets: np.ndarray
    names: list[str]
    table: Table
    rows: np.ndarray


LABEL_FORMS = ("node,label (one class per node), node,labels (several labels per node: one row per node and label) "
               "or node,<label1>,<label2>,... (a 1/0 column per label)")


def read_labels(path: str | Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(node ids, targets, names)`` of a labels CSV in one of three forms:

    - ``node,label``: one row per node; ``targets`` are [m] int32 class ids, ``names`` the classes,
      sorted (numerically when all are integers);
    - ``node,labels``: several labels per node, one row per (node, label) pair (a cell may also hold
      several names separated by spaces, as ``jaxgcn predict`` writes them; an empty cell lists a node
      with none of the labels); ``targets`` are [m, L] float32: 1 for a node's listed labels, 0 for
      the others; ``names`` the labels, sorted as classes are;
    - ``node,<label1>,<label2>,...`` (two or more columns, no ``label``/``labels``): a cell per node
      and label holding 1, 0 or nothing (unknown: NaN in ``targets`` [m, L]); ``names`` the headers.
    """
    found = _read_labels(path)
    return found.ids, found.targets, found.names


def _read_labels(path: str | Path) -> Labels:
    table = read_table(Path(path), "labels")
    if table.header is None:
        raise ValueError(f"{table.name}: no header line; the first line must name the columns: {LABEL_FORMS}")
    names = [h.lower() for h in table.header]
    for word in ("node", "label", "labels"):
        if names.count(word) > 1:
            at = [i + 1 for i, h in enumerate(names) if h == word]
            raise ValueError(f"{table.name}: line {table.skip}: the header names column {word!r} twice (columns "
                             f"{at[0]} and {at[1]}); give each column one name")
    if "node" not in names:
        raise ValueError(f"{table.name}: header {','.join(table.header)} lacks column(s) node; expected {LABEL_FORMS}")
    node = names.index("node")
    others = [i for i in range(len(names)) if i != node]
    kinds = [i for i in others if names[i] in ("label", "labels")]
    if kinds and len(others) > 1:
        extra = [i for i in others if i != kinds[0]]
        named = ",".join(table.header[i] for i in extra[:3]) + (",..." if len(extra) > 3 else "")
        raise ValueError(f"{table.name}: line {table.skip}, column {extra[0] + 1}: the header {','.join(table.header)} "
                         f"has a {names[kinds[0]]!r} column and other columns ({named}); give {LABEL_FORMS}, not a "
                         "mix (drop the other columns)")
    if kinds:
        return (_one_label if names[kinds[0]] == "label" else _label_rows)(table, node, kinds[0])
    if len(others) < 2:
        raise ValueError(f"{table.name}: header {','.join(table.header)} lacks column(s) label; expected "
                         f"{LABEL_FORMS}")
    return _label_columns(table, node, others)


def _one_label(table: Table, node: int, column: int) -> Labels:
    """``node,label``: one class per node."""
    ids, labels = table.cells[:, node], table.cells[:, column]
    _no_duplicates(ids, table, hint=", or name the column labels (node,labels) for several labels per node, one row "
                                    "per node and label")
    empty = np.flatnonzero(labels == "")
    if empty.size:
        raise ValueError(f"{table.name}: line {table.line(int(empty[0]))} has an empty label; leave unlabelled "
                         "nodes out")
    names, classes = _sorted_names(labels)
    return Labels(ids, classes.astype(np.int32), names, table, np.arange(ids.size))


def _sorted_names(labels: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The distinct names of ``labels`` sorted as text, or by value when all are integers, and the
    index of each entry's name."""
    names, index = np.unique(labels, return_inverse=True)  # sorted as text
    if all(_is_int(n) for n in names):  # integer labels: class k is label k's rank by value
        order = np.array(sorted(range(names.size), key=lambda i: int(names[i])), np.int64)
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        names, index = names[order], rank[index]
    return [str(n) for n in names], index.reshape(-1)


def _label_rows(table: Table, node: int, column: int) -> Labels:
    """``node,labels``: one row per (node, label) pair (a cell may name several labels, separated by
    spaces; an empty one lists a node with none); each listed node's targets: 1 for its labels, 0 else."""
    cells = table.cells[:, column]
    ids, node_of = np.unique(table.cells[:, node], return_inverse=True)
    rows = np.full(ids.size, table.cells.shape[0])
    np.minimum.at(rows, node_of, np.arange(node_of.size))
    if np.any(np.char.find(cells, " ") >= 0):  # predict's form: the names in a cell separated by spaces
        parts = [cell.split() for cell in cells.tolist()]
        row_of = np.repeat(np.arange(cells.size), [len(p) for p in parts])
        given = np.array([name for p in parts for name in p], dtype=str)
    else:
        row_of = np.flatnonzero(cells != "")
        given = cells[row_of]
    if given.size == 0:
        raise ValueError(f"{table.name}: every cell of the labels column is empty, so no node has a label; list each "
                         "node's labels, one row per node and label")
    names, label_of = _sorted_names(given)
    check_allocation(4 * ids.size * len(names), table.name, f"{ids.size:,} nodes x {len(names):,} labels",
                     "give fewer distinct labels")
    key = node_of[row_of].astype(np.int64) * len(names) + label_of
    uniq, counts = np.unique(key, return_counts=True)
    if np.any(counts > 1):
        dup = np.flatnonzero(key == uniq[np.argmax(counts > 1)])[:2]  # its first two places in ``given``
        first, second = (table.line(int(r)) for r in row_of[dup])
        where = f"lines {first} and {second}" if first != second else f"line {first}"
        raise ValueError(f"{table.name}: node {str(ids[node_of[row_of[dup[0]]]])!r} has label {str(given[dup[0]])!r} "
                         f"twice ({where}); list each (node, label) pair once")
    targets = np.zeros((ids.size, len(names)), np.float32)
    targets[node_of[row_of], label_of] = 1.0
    return Labels(ids, targets, names, table, rows)


def _label_columns(table: Table, node: int, columns: list[int]) -> Labels:
    """``node,<label1>,<label2>,...``: a 1/0/empty cell per node and label."""
    names = [table.header[i] for i in columns]
    for j, name in enumerate(names):
        if name == "" or name in names[:j]:
            why = "has no name" if name == "" else f"repeats the label name {name!r}"
            raise ValueError(f"{table.name}: line {table.skip}, column {columns[j] + 1}: the header's column {why}; "
                             "name each label column once")
    ids = table.cells[:, node]
    _no_duplicates(ids, table)
    block = table.cells[:, columns]
    targets = np.full(block.shape, np.nan, np.float32)
    targets[block == "1"] = 1.0
    targets[block == "0"] = 0.0
    other = np.argwhere(np.isnan(targets) & (block != ""))
    if other.size:  # other spellings of 1 and 0 ("1.0", "0.0"); anything else is refused
        values = {cell: _target(cell) for cell in np.unique(block[other[:, 0], other[:, 1]]).tolist()}
        for i, j in other:
            value = values[block[i, j]]
            if value is None:
                raise ValueError(f"{table.name}: line {table.line(int(i))}, column {columns[j] + 1} (label "
                                 f"{names[j]!r}): {str(block[i, j])!r} is not 1, 0 or empty; a label column holds 1 "
                                 "(the node has the label), 0 (it has not) or nothing (unknown); one class per node "
                                 "is a header node,label")
            targets[i, j] = value
    if np.all(np.isnan(targets)):
        raise ValueError(f"{table.name}: every cell of the {len(names)} label columns is empty, so no node has a "
                         "target; give 1 or 0 where a node's label is known")
    return Labels(ids, targets, names, table, np.arange(ids.size))


def _target(cell: str) -> float | None:
    """A label cell's target: 1.0 or 0.0 for a number equal to 1 or 0, else None."""
    if not is_number(cell):
        return None
    value = float(cell)
    return value if value in (0.0, 1.0) else None


def _is_int(text: str) -> bool:
    return bool(re.fullmatch(r"[+-]?\d+", text))


def load_files(edges: str | Path, features: str | Path | None = None, labels: str | Path | None = None,
               *, name: str | None = None) -> RawGraph:
    """Read a graph from generic files into a :class:`RawGraph` (no split yet: ``splits`` is empty;
    draw one with :func:`~jaxgcn.datasets.splits.planetoid_split` or read a split file)."""
    src, dst, weights, edge_table = _read_edges(edges)
    found = _read_labels(labels) if labels is not None else None  # None: prediction on an unlabelled graph
    label_ids = found.ids if found is not None else np.zeros(0, str)
    if features is not None:
        feat_ids, x = read_features(features)
        n = x.shape[0]
        node_ids = feat_ids if feat_ids is not None else np.arange(n).astype(str)
        order = np.argsort(node_ids, kind="stable")
        sorted_ids = node_ids[order]

        def index(ids: np.ndarray, table: Table, rows: np.ndarray | None = None) -> np.ndarray:
            pos = np.clip(np.searchsorted(sorted_ids, ids), 0, n - 1)
            missing = np.flatnonzero(sorted_ids[pos] != ids)
            if missing.size:
                k = int(missing[0])
                line = table.line(k if rows is None else int(rows[k]))
                raise ValueError(f"{table.name}: node {str(ids[k])!r} (line {line}) has no row in "
                                 f"the features file {features}; add its features or drop it (nodes are not created "
                                 "implicitly)")
            return order[pos]
    else:
        node_ids = np.unique(np.concatenate([src, dst, label_ids]))
        n = node_ids.size
        check_graph_size(n, n, f"edges file {edges}", what=f"one-hot features for {n:,} nodes")
        x = sp.identity(n, dtype=np.float32, format="csr")

        def index(ids: np.ndarray, table: Table, rows: np.ndarray | None = None) -> np.ndarray:
            return np.searchsorted(node_ids, ids)

    s, d = index(src, edge_table), index(dst, edge_table)
    lab, class_names = np.full(n, -1, np.int32), None
    if found is not None:
        if found.targets.ndim == 2:  # several labels per node: a node the file does not list has no target (NaN)
            lab = np.full((n, found.targets.shape[1]), np.nan, np.float32)
        lab[index(found.ids, found.table, found.rows)] = found.targets
        class_names = found.names
    return RawGraph(name or Path(edges).stem, s.astype(np.int64), d.astype(np.int64), x, lab, {}, weights,
                    class_names, node_ids)
