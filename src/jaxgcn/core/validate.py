"""Host-side checks of untrusted arrays, before anything trusts them: the structure of sparse
matrices (index ranges, pointer arrays, shapes) and sizes that would allocate absurd memory.

SciPy's C++ routines, XLA's gathers and the fused CSR kernel read indices without bounds checks,
so there a bad index is a crash or silent garbage; here it is one ValueError that names the
source, the offending value, where it sits and the fix. Every loader calls these on what it read,
and :func:`jaxgcn.datasets.prepare` and :func:`jaxgcn.core.layers.sparse_features` call them again on
whatever a library user built by hand.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.sparse as sp

from jaxgcn.host.memory import GiB, available_bytes

# Lower bounds of what preparing and training hold per node and per input feature, used to refuse
# a size before it is allocated (a crafted matrix shape, a node id of 10**13, a feature index of
# 2**40). Per node: the float64 diagonal, two int64 degree counts, labels, three float32 split
# masks and the CSR row pointers, ~60 bytes. Per feature: the first layer's [features, 16] float32
# weights with their gradient, two Adam moments, best copy and update, 6 x 16 x 4 = 384 bytes.
BYTES_PER_NODE = 64
BYTES_PER_FEATURE = 384
INT32_MAX = 2**31 - 1  # node, feature and entry indices are int32 on the device


def is_json(value: Any, types: tuple[type, ...]) -> bool:
    """Whether a JSON value has one of ``types`` (JSON true is not an int; an int is a float)."""
    if isinstance(value, bool):
        return bool in types
    return isinstance(value, types) or (float in types and isinstance(value, int))


def human_bytes(n: float) -> str:
    """``n`` bytes as GiB, or TiB when that reads better.

    >>> human_bytes(3 * 2**30), human_bytes(5 * 2**40)
    ('3.0 GiB', '5.0 TiB')
    """
    return f"{n / GiB:,.1f} GiB" if n < 1024 * GiB else f"{n / 2**40:,.1f} TiB"


def check_allocation(n_bytes: int, source: str, what: str, fix: str) -> None:
    """Refuse ``what`` when it needs more than the memory available now, before allocating it."""
    available = available_bytes()
    if n_bytes > available:
        raise ValueError(f"{source}: {what} would need at least {human_bytes(n_bytes)}, more than the "
                         f"{human_bytes(available)} available; {fix}")


def check_graph_size(n_nodes: int, n_features: int, source: str, *, what: str = "") -> None:
    """Refuse node and feature counts that overflow the device's int32 indices or cannot fit;
    ``what`` names where the counts come from (a shape, a node id, a feature index).

    >>> check_graph_size(2708, 1433, "cora")
    >>> check_graph_size(10**13, 1, "x.npz", what="shape 10**13 x 1")
    Traceback (most recent call last):
    ...
    ValueError: x.npz: shape 10**13 x 1 means 10,000,000,000,000 nodes, more than the 2,147,483,647 ...
    """
    what = what or f"{n_nodes:,} nodes x {n_features:,} features"
    for count, name in ((n_nodes, "nodes"), (n_features, "features")):
        if count > INT32_MAX:
            raise ValueError(f"{source}: {what} means {count:,} {name}, more than the {INT32_MAX:,} that int32 indices "
                             f"address; check the {'node ids' if name == 'nodes' else 'feature indices'} and shape")
    check_allocation(n_nodes * BYTES_PER_NODE + n_features * BYTES_PER_FEATURE, source, what,
                     "check the node ids, feature indices and shape (ids must count from 0 without large gaps)")


def _index_array(values: Any, name: str, source: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ValueError(f"{source}: {name} must be a 1-D integer array, found dtype {arr.dtype} shape {arr.shape}")
    return arr


def _check_range(idx: np.ndarray, bound: int, name: str, source: str, shape: tuple[int, int]) -> None:
    if idx.size == 0:
        return
    lo, hi = idx.min(), idx.max()
    if lo < 0 or hi >= bound:
        k = int(np.flatnonzero((idx < 0) | (idx >= bound))[0])
        raise ValueError(f"{source}: {name} index {int(idx[k])} (stored entry {k}) is outside [0, {bound}) of the "
                         f"{shape[0]} x {shape[1]} matrix; indices must be >= 0 and below the {name} count "
                         "(fix the indices or the shape)")


def check_shape(shape: Any, source: str) -> tuple[int, int]:
    """A matrix shape as two non-negative Python ints."""
    dims = list(np.asarray(shape, dtype=object).ravel()) if np.ndim(shape) <= 1 else []
    if len(dims) != 2 or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims):
        raise ValueError(f"{source}: shape {shape!r} must be two integers >= 0 (rows, columns)")
    return int(dims[0]), int(dims[1])


def check_values(data: Any, n: int, source: str) -> np.ndarray:
    """Stored values: ``n`` real numbers (bool, integer or float)."""
    arr = np.asarray(data)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{source}: {arr.shape[0] if arr.ndim == 1 else arr.shape} stored values for {n} indices; "
                         "a sparse matrix needs one value per index")
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{source}: values of dtype {arr.dtype}; sparse values must be real numbers "
                         "(bool, int, float)")
    return arr


def check_compressed(indptr: Any, indices: Any, data: Any, shape: Any, source: str, *, kind: str = "csr") -> None:
    """Validate the arrays of a CSR (``kind="csr"``: pointers over rows, column indices) or CSC
    matrix: ``indptr`` has ``n + 1`` entries, starts at 0, never decreases and ends at the number
    of indices; every index is in range; one value per index.

    >>> check_compressed([0, 1, 2], [1, 0], [1.0, 2.0], (2, 2), "m")
    >>> check_compressed([0, 1, 2], [1, 5], [1.0, 2.0], (2, 2), "m")
    Traceback (most recent call last):
    ...
    ValueError: m: column index 5 (stored entry 1) is outside [0, 2) of the 2 x 2 matrix; ...
    """
    rows, cols = check_shape(shape, source)
    major, minor = (rows, cols) if kind == "csr" else (cols, rows)
    major_name, minor_name = ("row", "column") if kind == "csr" else ("column", "row")
    ptr = _index_array(indptr, "indptr", source)
    idx = _index_array(indices, "indices", source)
    if ptr.shape[0] != major + 1:
        raise ValueError(f"{source}: indptr has {ptr.shape[0]} entries; a {kind.upper()} matrix with {major} "
                         f"{major_name}s needs {major + 1}")
    if int(ptr[0]) != 0:
        raise ValueError(f"{source}: indptr starts at {int(ptr[0])}, not 0")
    if int(ptr[-1]) != idx.shape[0]:
        raise ValueError(f"{source}: indptr ends at {int(ptr[-1])} but there are {idx.shape[0]} stored indices; "
                         "the last pointer must equal the number of entries")
    drops = np.flatnonzero(ptr[1:] < ptr[:-1])
    if drops.size:
        i = int(drops[0])
        raise ValueError(f"{source}: indptr decreases at {major_name} {i} ({int(ptr[i])} -> {int(ptr[i + 1])}); "
                         "pointers must never decrease")
    check_values(data, idx.shape[0], source)
    _check_range(idx, minor, minor_name, source, (rows, cols))


def check_coordinates(row: Any, col: Any, data: Any, shape: Any, source: str) -> None:
    """Validate the arrays of a COO matrix: equal lengths, every (row, column) in range."""
    rows, cols = check_shape(shape, source)
    r, c = _index_array(row, "row", source), _index_array(col, "col", source)
    if r.shape != c.shape:
        raise ValueError(f"{source}: {r.shape[0]} row indices but {c.shape[0]} column indices")
    check_values(data, r.shape[0], source)
    _check_range(r, rows, "row", source, (rows, cols))
    _check_range(c, cols, "column", source, (rows, cols))


def check_sparse(matrix: Any, source: str) -> None:
    """Validate a SciPy sparse matrix or array before SciPy, XLA or the kernel reads its indices
    (SciPy checks only pointer lengths on construction, not index ranges).

    >>> m = sp.csr_matrix(np.eye(2))
    >>> check_sparse(m, "m")
    >>> m.indices[1] = -3
    >>> check_sparse(m, "m")
    Traceback (most recent call last):
    ...
    ValueError: m: column index -3 (stored entry 1) is outside [0, 2) of the 2 x 2 matrix; ...
    """
    if not sp.issparse(matrix):
        raise ValueError(f"{source}: expected a SciPy sparse matrix, found {type(matrix).__name__}")
    shape = check_shape(matrix.shape, source)
    fmt = matrix.format
    if fmt in ("csr", "csc"):
        check_compressed(matrix.indptr, matrix.indices, matrix.data, shape, source, kind=fmt)
    elif fmt == "bsr":
        r, c = matrix.blocksize
        check_compressed(matrix.indptr, matrix.indices, np.zeros(len(matrix.indices)), (shape[0] // r, shape[1] // c),
                         f"{source} (blocks of {r} x {c})")
    elif fmt == "coo":
        check_coordinates(matrix.row, matrix.col, matrix.data, shape, source)
    else:  # lil, dok, dia: SciPy builds these through its own checked methods; convert and check
        check_sparse(matrix.tocoo(), source)


def check_npy_declared(fp: Any, size: int, source: str) -> None:
    """The header of the .npy stream ``fp`` (``size`` bytes in all) declares no more data than the
    bytes after it: arrays are never allocated from a header alone (a crafted header can declare
    terabytes). ``fp`` is left after the header."""
    import numpy.lib.format as fmt

    try:
        version = fmt.read_magic(fp)
        shape, _, dtype = (fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0)(fp)
    except (ValueError, EOFError, SyntaxError) as err:
        raise ValueError(f"{source}: not a readable .npy array ({str(err)[:120]})") from None
    need, available = math.prod(int(d) for d in shape) * dtype.itemsize, size - fp.tell()
    if need > available:
        raise ValueError(f"{source}: its header declares {human_bytes(need)} of data but {available:,} bytes follow "
                         "it; the file is corrupted or was not written by jaxgcn")


def check_npz_declared(source: Any, name: str) -> None:
    """Every member of the .npz ``source`` (a path or a binary file object) passes
    :func:`check_npy_declared` against the member's size. A file that is not a zip raises
    ``zipfile.BadZipFile`` (the callers word it)."""
    import zipfile

    with zipfile.ZipFile(source) as archive:
        for info in archive.infolist():
            with archive.open(info) as member:
                check_npy_declared(member, info.file_size, f"{name} member {info.filename}")
