"""Planetoid citation graphs (Cora, CiteSeer, PubMed) in the layout of Kipf's reference code.

The raw ``ind.<name>.*`` files are Python-2 pickles. They are treated as untrusted input: they are
read with :class:`RestrictedUnpickler`, which resolves only the handful of NumPy/SciPy/builtin
globals those files use and rebuilds sparse matrices itself, so a crafted file cannot run code.

The bundled ``data/<name>.npz`` files were produced once from the raw files by
``scripts/convert_planetoid.py`` and are what :func:`load_bundled` reads at run time.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from jaxgcn.datasets.base import RawGraph

_RAW_PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph")


class _CSRState:
    """Stand-in for a pickled ``scipy.sparse.csr_matrix``: records its state, executes nothing."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.state = state

    def to_csr(self, source: str) -> sp.csr_matrix:
        st = self.state
        try:
            shape = tuple(int(v) for v in st.get("_shape", st.get("shape")))
            data, indices, indptr = (np.asarray(st[k]) for k in ("data", "indices", "indptr"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{source}: pickled sparse matrix lacks data/indices/indptr/shape") from exc
        return sp.csr_matrix((data, indices, indptr), shape=shape)


class _DefaultDict(dict):
    """Stand-in for ``collections.defaultdict`` (the graph files pickle one with factory ``list``)."""

    def __init__(self, *args: Any) -> None:
        super().__init__()


def _reconstruct(cls: Any, shape: Any, dtype: Any) -> np.ndarray:
    if cls is not np.ndarray:
        raise pickle.UnpicklingError("only numpy.ndarray may be reconstructed")
    return np.ndarray.__new__(np.ndarray, shape, dtype)


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that allows only the globals the Planetoid files need.

    Anything else (``os.system``, ``builtins.eval``, ...) raises ``pickle.UnpicklingError``.
    """

    _ALLOWED: dict[tuple[str, str], Any] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
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


def safe_load_pickle(path: Path) -> Any:
    """Load one raw Planetoid pickle with :class:`RestrictedUnpickler` (latin1 for Python-2 bytes)."""
    try:
        obj = RestrictedUnpickler(io.BytesIO(path.read_bytes()), encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: not a readable Planetoid pickle ({exc})") from exc
    return obj.to_csr(str(path)) if isinstance(obj, _CSRState) else obj


def _as_csr(obj: Any, path: Path) -> sp.csr_matrix:
    if isinstance(obj, sp.spmatrix | sp.sparray):
        return sp.csr_matrix(obj)
    if isinstance(obj, np.ndarray) and obj.ndim == 2:
        return sp.csr_matrix(obj)
    raise ValueError(f"{path}: expected a 2-D matrix, found {type(obj).__name__}")


def _find_prefix(data_dir: Path, name: str | None) -> tuple[Path, str]:
    if not data_dir.is_dir():
        raise ValueError(f"--data-dir {data_dir}: not a directory; pass the folder holding ind.<name>.x etc.")
    if name is None:
        names = sorted(p.name[len("ind.") : -len(".graph")] for p in data_dir.glob("ind.*.graph"))
        if len(names) != 1:
            found = ", ".join(names) or "none"
            raise ValueError(
                f"--data-dir {data_dir}: expected exactly one ind.<name>.graph file, found {found}; "
                "pass the dataset name (e.g. --dataset pubmed)"
            )
        name = names[0]
    missing = [f"ind.{name}.{p}" for p in (*_RAW_PARTS, "test.index") if not (data_dir / f"ind.{name}.{p}").is_file()]
    if missing:
        raise ValueError(f"--data-dir {data_dir}: missing {', '.join(missing)}; a raw Planetoid "
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
    index_file = folder / f"ind.{name}.test.index"
    try:
        test_idx = np.loadtxt(index_file, dtype=np.int64, ndmin=1)
    except ValueError as exc:
        raise ValueError(f"{index_file}: expected one integer node id per line ({exc})") from exc
    allx, tx = _as_csr(part["allx"], folder), _as_csr(part["tx"], folder)
    ally, ty = np.asarray(part["ally"]), np.asarray(part["ty"])
    n_train = int(np.asarray(part["y"]).shape[0])

    test_sorted = np.sort(test_idx)
    lo, hi = int(test_sorted[0]), int(test_sorted[-1])
    tx_full = sp.lil_matrix((hi - lo + 1, tx.shape[1]), dtype=np.float32)
    tx_full[test_sorted - lo] = tx
    ty_full = np.zeros((hi - lo + 1, ty.shape[1]), dtype=ty.dtype)
    ty_full[test_sorted - lo] = ty
    features = sp.vstack([allx, sp.csr_matrix(tx_full)]).tolil()
    onehot = np.vstack([ally, ty_full])
    features[test_idx] = features[test_sorted]
    onehot[test_idx] = onehot[test_sorted]
    labels = np.where(onehot.sum(1) > 0, onehot.argmax(1), -1).astype(np.int32)

    graph = part["graph"]
    if not isinstance(graph, dict):
        raise ValueError(f"{folder / f'ind.{name}.graph'}: expected a dict of adjacency lists")
    src = np.fromiter((int(u) for u, vs in graph.items() for _ in vs), dtype=np.int64)
    dst = np.fromiter((int(v) for vs in graph.values() for v in vs), dtype=np.int64)
    return RawGraph(
        name=name,
        senders=src,
        receivers=dst,
        features=sp.csr_matrix(features, dtype=np.float32),
        labels=labels,
        splits={
            "train": np.arange(n_train),
            "val": np.arange(n_train, n_train + 500),
            "test": test_sorted,
        },
    )
