"""Planetoid citation graphs (Cora, CiteSeer, PubMed) in the layout of Kipf's reference code.

The raw ``ind.<name>.*`` files are Python-2 pickles. They are treated as untrusted input: they are
read with :class:`RestrictedUnpickler`, which resolves only the handful of NumPy/SciPy/builtin
globals those files use and rebuilds sparse matrices itself, so a crafted file cannot run code.

The bundled ``data/<name>.npz`` files were produced once from the raw files by
``scripts/convert_planetoid.py`` and are what :func:`load_bundled` reads at run time.
"""

from __future__ import annotations

import io
import math
import pickle
import pickletools
import re
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from jaxgcn.datasets.base import RawGraph
from jaxgcn.datasets.readers import read_bytes, read_text
from jaxgcn.core.validate import check_compressed, check_graph_size, check_shape

_RAW_PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph")


class _CSRState:
    """Stand-in for a pickled ``scipy.sparse.csr_matrix``: records its state, executes nothing."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.state = state

    def to_csr(self, source: str) -> sp.csr_matrix:
        """The matrix, its pointers, indices and shape validated before SciPy reads them."""
        st = self.state
        if not isinstance(st, dict) or not all(k in st for k in ("data", "indices", "indptr")) or \
                ("_shape" not in st and "shape" not in st):
            raise ValueError(f"{source}: pickled sparse matrix lacks data/indices/indptr/shape")
        data, indices, indptr = (np.asarray(st[k]) for k in ("data", "indices", "indptr"))
        shape = check_shape(st.get("_shape", st.get("shape")), source)
        check_graph_size(shape[0], shape[1], source, what=f"shape {shape[0]:,} x {shape[1]:,}")
        check_compressed(indptr, indices, data, shape, source)
        return sp.csr_matrix((data, indices, indptr), shape=shape)


class _DefaultDict(dict):
    """Stand-in for ``collections.defaultdict`` (the graph files pickle one with factory ``list``)."""

    def __init__(self, *args: Any) -> None:
        super().__init__()


class _Array(np.ndarray):
    """The ndarray a pickle rebuilds, its state checked before NumPy allocates it: numbers only and
    exactly as many bytes as the file holds (a pickle cannot ask for a 10**13-element array)."""

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise pickle.UnpicklingError("malformed ndarray state")
        shape, dtype, _, raw = state[-4:]
        dtype = dtype.resolve() if isinstance(dtype, _DType) else dtype
        _check_array(shape, dtype, len(raw) if isinstance(raw, bytes | str) else -1)
        super().__setstate__((*state[:-3], dtype, *state[-2:]))


class _DType:
    """Stand-in for a pickled ``numpy.dtype``: its state (the byte order) checked, not handed to
    NumPy. ``np.dtype("f4")`` is NumPy's one float32 dtype, so the pickle's ``__setstate__`` on it
    would rewrite that dtype for the whole process; a malformed state crashed the interpreter."""

    def __init__(self, *args: Any) -> None:
        self.dtype = _dtype(*args)
        self.order = "="

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) < 2 or state[1] not in ("<", ">", "|", "="):
            raise pickle.UnpicklingError(f"malformed dtype state {state!r:.80}")
        self.order = state[1]

    def resolve(self) -> np.dtype:
        return self.dtype.newbyteorder(self.order) if self.order in "<>" else self.dtype


def _check_array(shape: Any, dtype: Any, n_bytes: int) -> None:
    """Refuse a pickled array that is not plain numbers or whose size is not ``n_bytes``."""
    if not isinstance(dtype, np.dtype) or dtype.hasobject or dtype.kind not in "biuf":
        raise pickle.UnpicklingError(f"array dtype {dtype!r} is not a plain numeric type")
    dims = shape if isinstance(shape, tuple) else (shape,)
    if not all(isinstance(d, int) and d >= 0 for d in dims):
        raise pickle.UnpicklingError(f"array shape {shape!r} is not a tuple of integers >= 0")
    need = math.prod(dims) * dtype.itemsize
    if need != n_bytes:
        raise pickle.UnpicklingError(f"an array of shape {shape} ({need:,} bytes of {dtype}) from {max(n_bytes, 0):,} "
                                     "bytes of data")


def _reconstruct(cls: Any, shape: Any, dtype: Any) -> np.ndarray:
    """``numpy.core.multiarray._reconstruct``: an empty array that ``__setstate__`` then fills
    (Planetoid's pickles pass shape (0,)); allocates nothing for a crafted shape."""
    if cls is not np.ndarray:
        raise pickle.UnpicklingError("only numpy.ndarray may be reconstructed")
    dtype = np.dtype(dtype) if isinstance(dtype, str | bytes) else dtype
    dtype = dtype.resolve() if isinstance(dtype, _DType) else dtype
    _check_array(shape, dtype, 0)
    return np.ndarray.__new__(_Array, shape, dtype)


def _dtype(*args: Any) -> np.dtype:
    """``numpy.dtype`` for plain numeric types only (no objects, no record or huge void types)."""
    try:
        dtype = np.dtype(*args)
    except (TypeError, ValueError) as exc:
        raise pickle.UnpicklingError(f"bad dtype {args!r}: {exc}") from None
    if dtype.hasobject or dtype.kind not in "biuf":
        raise pickle.UnpicklingError(f"dtype {dtype} is not a plain numeric type")
    return dtype


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that allows only the globals the Planetoid files need.

    Anything else (``os.system``, ``builtins.eval``, ...) raises ``pickle.UnpicklingError``; arrays
    are checked (numeric dtype, shape matching the stored bytes) before they are allocated.
    """

    _ALLOWED: dict[tuple[str, str], Any] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): _DType,
        ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
        ("scipy.sparse.csr", "csr_matrix"): _CSRState,
        ("scipy.sparse._csr", "csr_matrix"): _CSRState,
        ("collections", "defaultdict"): _DefaultDict,
        ("__builtin__", "list"): list,
        ("builtins", "list"): list,
    }

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"refusing to load global {module}.{name}: not one of the NumPy/SciPy types a "
                "Planetoid file uses"
            ) from None


def _plain(obj: Any) -> Any:
    """Checked arrays back to plain ndarrays."""
    return obj.view(np.ndarray) if isinstance(obj, np.ndarray) else obj


def _check_memo(data: bytes) -> None:
    """Refuse memo indices past the pickle's own opcode count, read without running the pickle: the
    C unpickler grows its memo table to the largest index it is handed, so one corrupted ``PUT``
    index asked for gigabytes (found by the fuzz test of tests/test_bad_inputs.py: 20-46 s each)."""
    ops = list(pickletools.genops(data))
    for op, arg, _ in ops:
        if op.name in _MEMO_OPS and isinstance(arg, int) and not 0 <= arg < len(ops):
            raise pickle.UnpicklingError(f"memo index {arg:,} of a pickle of {len(ops):,} opcodes")


_MEMO_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET"})


def safe_load_pickle(path: Path) -> Any:
    """Load one raw Planetoid pickle with :class:`RestrictedUnpickler` (latin1 for Python-2 bytes)."""
    data = read_bytes(path, "Planetoid")
    try:
        _check_memo(data)
        obj = RestrictedUnpickler(io.BytesIO(data), encoding="latin1").load()
    except Exception as exc:  # noqa: BLE001 - untrusted bytes: any failure means "not a readable pickle"
        raise ValueError(f"{path}: not a readable Planetoid pickle ({str(exc) or type(exc).__name__})") from None
    return obj.to_csr(str(path)) if isinstance(obj, _CSRState) else _plain(obj)


def _as_csr(obj: Any, path: Path) -> sp.csr_matrix:
    if isinstance(obj, sp.spmatrix | sp.sparray):
        return sp.csr_matrix(obj)
    if isinstance(obj, np.ndarray) and obj.ndim == 2:
        return sp.csr_matrix(obj)
    raise ValueError(f"{path}: expected a 2-D matrix, found {type(obj).__name__}")


def _labels_array(obj: Any, path: Path, rows: int) -> np.ndarray:
    """A one-hot label matrix [rows, classes]."""
    if not isinstance(obj, np.ndarray) or obj.ndim != 2 or obj.shape[0] != rows or obj.shape[1] == 0:
        shape = getattr(obj, "shape", type(obj).__name__)
        raise ValueError(f"{path}: expected one-hot labels of shape [{rows}, classes], found {shape}")
    return obj


def _find_prefix(data_dir: Path, name: str | None) -> tuple[Path, str]:
    if not data_dir.is_dir():
        raise ValueError(f"data_dir={data_dir}: not a directory; pass the folder holding ind.<name>.x etc.")
    if name is None:
        names = sorted(p.name[len("ind.") : -len(".graph")] for p in data_dir.glob("ind.*.graph"))
        if len(names) != 1:
            found = ", ".join(names) or "none"
            raise ValueError(
                f"data_dir={data_dir}: expected exactly one ind.<name>.graph file, found {found}; "
                "pass the dataset name (e.g. name='pubmed')"
            )
        name = names[0]
    missing = [f"ind.{name}.{p}" for p in (*_RAW_PARTS, "test.index") if not (data_dir / f"ind.{name}.{p}").is_file()]
    if missing:
        raise ValueError(f"data_dir={data_dir}: missing {', '.join(missing)}; a raw Planetoid "
                         "dataset needs ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}")
    return data_dir, name


def load_raw(data_dir: str | Path, name: str | None = None) -> RawGraph:
    """Read a raw Planetoid directory (``ind.<name>.*`` files) the way Kipf's ``load_data`` does.

    Test rows are put back at their node ids; test ids missing from the graph (CiteSeer's isolated
    nodes) get zero feature rows and label -1 (unlabelled). Train = the first ``len(y)`` nodes,
    val = the next 500, test = ``test.index``.

    Args:
        data_dir: folder with the raw files.
        name: dataset name inside the file names; inferred when the folder holds only one.

    Returns:
        A :class:`RawGraph` with the directed edge list exactly as the file lists it.
    """
    folder, name = _find_prefix(Path(data_dir), name)
    part = {p: safe_load_pickle(folder / f"ind.{name}.{p}") for p in _RAW_PARTS}
    file = {p: folder / f"ind.{name}.{p}" for p in (*_RAW_PARTS, "test.index")}
    test_idx = _read_test_index(file["test.index"])
    allx, tx = _as_csr(part["allx"], file["allx"]), _as_csr(part["tx"], file["tx"])
    ally = _labels_array(part["ally"], file["ally"], allx.shape[0])
    ty = _labels_array(part["ty"], file["ty"], tx.shape[0])
    if tx.shape[1] != allx.shape[1] or ty.shape[1] != ally.shape[1]:
        raise ValueError(f"{folder}: tx/ty have {tx.shape[1]} features / {ty.shape[1]} classes but allx/ally have "
                         f"{allx.shape[1]} / {ally.shape[1]}; the files are not one dataset")
    if test_idx.size != tx.shape[0]:
        raise ValueError(f"{file['test.index']}: {test_idx.size} test ids for the {tx.shape[0]} rows of "
                         f"{file['tx'].name}; give one id per test row")
    n_train = int(np.asarray(part["y"]).shape[0]) if isinstance(part["y"], np.ndarray) else -1
    if not 0 <= n_train <= allx.shape[0]:
        raise ValueError(f"{file['y']}: expected a label matrix with at most {allx.shape[0]} rows (the train nodes)")
    features, labels = _place_test_rows(allx, tx, ally, ty, test_idx, file["test.index"])

    graph = part["graph"]
    if not isinstance(graph, dict):
        raise ValueError(f"{file['graph']}: expected a dict of adjacency lists")
    try:
        src = np.fromiter((int(u) for u, vs in graph.items() for _ in vs), dtype=np.int64)
        dst = np.fromiter((int(v) for vs in graph.values() for v in vs), dtype=np.int64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"{file['graph']}: node ids must be integers in adjacency lists ({exc})") from None
    return RawGraph(
        name=name,
        senders=src,
        receivers=dst,
        features=features,
        labels=labels,
        splits={
            "train": np.arange(n_train),
            "val": np.arange(n_train, n_train + 500),
            "test": np.sort(test_idx),
        },
    )


def _read_test_index(path: Path) -> np.ndarray:
    """The test node ids, one non-negative integer per line."""
    lines = read_text(path, "test index").split("\n")
    ids = [line.strip() for line in lines if line.strip()]
    if not ids:
        raise ValueError(f"{path}: empty; it must list the test node ids, one integer per line")
    bad = next((i for i, line in enumerate(lines) if line.strip() and not re.fullmatch(r"\+?\d{1,18}", line.strip())),
               None)
    if bad is not None:
        raise ValueError(f"{path}: line {bad + 1}: {lines[bad].strip()[:40]!r} is not a node id (an integer >= 0 "
                         "below 10**18); the file lists one test node id per line")
    return np.array(ids, dtype=np.int64)


def _place_test_rows(allx: sp.csr_matrix, tx: sp.csr_matrix, ally: np.ndarray, ty: np.ndarray, test_idx: np.ndarray,
                     index_file: Path) -> tuple[sp.csr_matrix, np.ndarray]:
    """Kipf's ``load_data`` assembly, vectorized: tx's rows fill the range [min, max] of the test
    ids (gaps: CiteSeer's isolated test nodes, zero rows, label -1), after allx's rows; then the
    rows at the sorted ids move to the ids in file order (``features[test_idx] = features[sorted]``)."""
    test_sorted = np.sort(test_idx)
    lo, hi = int(test_sorted[0]), int(test_sorted[-1])
    n = allx.shape[0] + hi - lo + 1
    # the ids decide the node count: refuse one that asks for absurd memory before allocating
    check_graph_size(n, allx.shape[1], str(index_file), what=f"test id {hi:,} ({n:,} nodes)")
    if lo < 0 or hi >= n:
        raise ValueError(f"{index_file}: test ids span [{lo}, {hi}] but there are {n} nodes; test ids follow "
                         f"allx's {allx.shape[0]} rows")
    tx_coo = tx.tocoo()
    placed = sp.csr_matrix((tx_coo.data, (test_sorted[tx_coo.row] - lo, tx_coo.col)), shape=(hi - lo + 1, tx.shape[1]))
    source = np.arange(n)
    source[test_idx] = test_sorted
    features = sp.vstack([allx, placed], format="csr")[source]
    labels = np.full(n, -1, np.int32)
    labels[:allx.shape[0]] = np.where(ally.sum(1) > 0, ally.argmax(1), -1)
    labels[allx.shape[0] + test_sorted - lo] = np.where(ty.sum(1) > 0, ty.argmax(1), -1)
    return sp.csr_matrix(features, dtype=np.float32), labels[source]
