"""Fused CSR × dense products on the CPU: an XLA FFI kernel built at install time or on first use.

XLA lowers a sparse product (gather + ``segment_sum``, or BCOO) to a gather that materializes one
message per stored entry, an ``[nnz, width]`` buffer written and read again: at 10M edges and
width 128 that is 5 GB per propagation, and on Cora's features with 100 stacked runs 315 MB per
pass. The kernel in ``kernels/spmm.cc`` accumulates each output row in place instead, on XLA's
intra-op thread pool. ``pip install`` builds it where a C++ compiler is found; otherwise (or for
another CPU or jaxlib) :mod:`jaxgcn.native.kernel_build` compiles it on first use, once per machine, with
the C++ compiler that builds Python extensions (``g++``/``c++``, or ``$CXX``) against the FFI
headers that jaxlib ships, and caches it in ``~/.cache/jaxgcn/native/kernels``
(``$JAXGCN_CACHE_DIR/kernels``). When no compiler is found, :func:`jaxgcn.native.csr.kernel_status` says why and
``backend="auto"`` keeps to the pure-XLA backends. A build that fails (with ``-march=native``, then
once without it) is remembered as ``libjaxgcn_spmm-<key>.failed`` beside the cache, so later
processes report it without compiling again; a new source, compiler or jaxlib is a new key and a
new attempt.

``JAXGCN_KERNEL_ISA=portable`` builds the kernel without its AVX-512 and AVX2 branches even where
the CPU has them, and ``avx2`` without the AVX-512 one (``native``, the default, takes the widest
that ``-march=native`` enables), so that one machine can test them all; :func:`kernel_isa` says
which the loaded library has, and :func:`kernel_counters` which regime its calls ran in.

The same library holds the per-run dense products of a batch of runs (:func:`jaxgcn.native.fused.run_matmul`:
``[n, R, H] x [H, R, C]``), which XLA computes either through transposes to ``[R, H, n]`` or as a
materialized ``[n, R, H, C]`` broadcast product.

The sparse product is differentiable in reverse mode, to any order, in ``b`` (the gradient is the
same kernel over the transposed pattern, precomputed on the host) and in the values (removed by
XLA when unused). Forward mode (``jax.jvp``) is not defined for it: training uses reverse mode.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import os
import subprocess
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from jaxgcn.host import machine
from jaxgcn.native import kernel_build
from jaxgcn.native.kernel_build import KernelBuildError  # noqa: F401 - its face

_TARGET = "jaxgcn_spmm"
_PAIR_TARGET = "jaxgcn_spmm_pair"
_T_TARGET = "jaxgcn_spmm_t"
DENSE_TARGET = "jaxgcn_run_dense"  # jaxgcn.native.fused's passes, registered here with the products
ADAM_TARGET = "jaxgcn_adam"
DROPOUT_TARGET = "jaxgcn_dropout"


class CSR(NamedTuple):
    """A sparse [n_rows, n_cols] matrix in CSR order plus its transposed pattern (a pytree).

    Attributes:
        indptr: [n_rows + 1] int32 row pointers.
        cols: [nnz] int32 column of each entry, row-major order.
        data: [nnz] float32 values.
        t_indptr: [n_cols + 1] int32 row pointers of the transpose, or None when the matrix equals
            its transpose (then the gradient reuses ``indptr``/``cols``/``data``).
        t_rows: [nnz] int32 row of each entry in the transposed (column-major) order, or None.
        t_perm: [nnz] int32, entry ``t`` of the transposed order is entry ``t_perm[t]``, or None.
    """

    indptr: Any
    cols: Any
    data: Any
    t_indptr: Any = None
    t_rows: Any = None
    t_perm: Any = None

    @property
    def shape(self) -> tuple[int, int]:
        n_cols = self.t_indptr.shape[0] - 1 if self.t_indptr is not None else self.indptr.shape[0] - 1
        return (int(self.indptr.shape[0] - 1), int(n_cols))

    @property
    def nse(self) -> int:
        return int(self.cols.shape[0])

    @property
    def symmetric(self) -> bool:
        return self.t_indptr is None


def _check_pattern(csr: sp.csr_matrix) -> None:
    """Refuse a CSR whose pointers or column indices are out of range (SciPy does not check a
    matrix built from raw arrays; the kernel would read outside ``b``)."""
    n_rows, n_cols = csr.shape
    indptr, cols = csr.indptr, csr.indices
    what = f"sparse matrix of shape {csr.shape} is malformed"
    if indptr.shape[0] != n_rows + 1 or indptr[0] != 0 or indptr[-1] != cols.shape[0] or np.any(np.diff(indptr) < 0):
        raise ValueError(f"{what}: its row pointers are not non-decreasing from 0 to {cols.shape[0]} "
                         "(rebuild it with scipy.sparse.csr_matrix((data, (rows, cols)), shape=...))")
    bad = np.flatnonzero((cols < 0) | (cols >= n_cols))
    if bad.size:
        raise ValueError(f"{what}: column index {int(cols[bad[0]])} is out of range [0, {n_cols}) "
                         f"({bad.size} such entries); fix the column indices or the shape")


def row_pointers(counts: Any) -> np.ndarray:
    """Host-side int64 row pointers ``[0, c0, c0 + c1, ...]`` of rows with ``counts`` entries each.

    >>> row_pointers(np.array([2, 0, 3])).tolist()
    [0, 2, 2, 5]
    """
    indptr = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr


def csr_from_scipy(matrix: Any, dtype: Any = np.float32, *, check_symmetric: bool = False) -> CSR:
    """Host-side :class:`CSR` (NumPy arrays) of a SciPy sparse matrix, duplicates summed.

    With ``check_symmetric`` a matrix equal to its transpose keeps no transposed copy.

    >>> m = csr_from_scipy(sp.csr_matrix(np.array([[0, 2.0], [3.0, 0]])))
    >>> m.shape, m.cols.tolist(), m.t_perm.tolist()
    ((2, 2), [1, 0], [1, 0])
    """
    csr = sp.csr_matrix(matrix, dtype=np.float64)
    if max(csr.shape) >= 2**31 or csr.nnz >= 2**31:
        raise ValueError(f"sparse matrix of shape {csr.shape} with {csr.nnz} entries overflows int32 indices; "
                         "split it into row blocks (docs/large-graphs.md, docs/distributed.md)")
    _check_pattern(csr)
    csr.sum_duplicates()
    csr.sort_indices()
    n_rows, n_cols = csr.shape
    data = csr.data.astype(dtype)
    if check_symmetric and n_rows == n_cols and (abs(csr - csr.T) > 1e-12 * max(1.0, abs(csr).max())).nnz == 0:
        # made exactly symmetric (the mean of two mirrored values, equal up to 1e-12): a product's
        # gradient over the rows (one run's scatter) and over the columns (the gather) then sum the
        # same float32 values, bit for bit
        csr = ((csr + csr.T) * 0.5).tocsr()
        csr.sum_duplicates()
        csr.sort_indices()
        return CSR(csr.indptr.astype(np.int32), csr.indices.astype(np.int32), csr.data.astype(dtype))
    rows = np.repeat(np.arange(n_rows, dtype=np.int32), np.diff(csr.indptr))
    t_perm = np.argsort(csr.indices, kind="stable").astype(np.int32)
    t_indptr = row_pointers(np.bincount(csr.indices, minlength=n_cols))
    return CSR(csr.indptr.astype(np.int32), csr.indices.astype(np.int32), data,
               t_indptr.astype(np.int32), rows[t_perm], t_perm)


# ----------------------------------------------------------------------------- building the kernel

# The library _load registered (its debug counters and ISA are read through it), or None.
_LIBRARY: ctypes.CDLL | None = None


@functools.lru_cache(maxsize=None)
def _load() -> tuple[bool, str]:
    """Build (once per machine) and register the kernel (once per process): (ok, reason)."""
    global _LIBRARY
    if os.environ.get("JAXGCN_NO_KERNELS"):
        return False, "disabled by JAXGCN_NO_KERNELS"
    path = kernel_build.prebuilt()  # built by pip install, for this CPU and jaxlib
    cxx = None if path is not None else kernel_build._compiler()
    if path is None and cxx is None:
        return False, kernel_build._NO_COMPILER
    try:
        path = path if cxx is None else kernel_build._build(cxx)
        lib = ctypes.cdll.LoadLibrary(str(path))
        jax.ffi.register_ffi_target(_TARGET, jax.ffi.pycapsule(lib.JaxgcnSpmm), platform="cpu")
        jax.ffi.register_ffi_target(DENSE_TARGET, jax.ffi.pycapsule(lib.JaxgcnRunDense), platform="cpu")
        jax.ffi.register_ffi_target(_PAIR_TARGET, jax.ffi.pycapsule(lib.JaxgcnSpmmPair), platform="cpu")
        jax.ffi.register_ffi_target(_T_TARGET, jax.ffi.pycapsule(lib.JaxgcnSpmmT), platform="cpu")
        jax.ffi.register_ffi_target(ADAM_TARGET, jax.ffi.pycapsule(lib.JaxgcnAdam), platform="cpu")
        jax.ffi.register_ffi_target(DROPOUT_TARGET, jax.ffi.pycapsule(lib.JaxgcnDropout), platform="cpu")
    except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as err:
        return False, str(err)
    lib.JaxgcnKernelCounterNames.restype = ctypes.c_char_p
    lib.JaxgcnKernelCounters.argtypes = [ctypes.POINTER(ctypes.c_int64)]
    lib.JaxgcnKernelIsa.restype = ctypes.c_int
    lib.JaxgcnSetTuning.argtypes = [ctypes.c_int64] * 3
    lib.JaxgcnTuning.argtypes = [ctypes.POINTER(ctypes.c_int64)]
    _LIBRARY = lib
    lib.JaxgcnSetTuning(*dataclasses.astuple(machine.tuning()))  # the machine's settings (jaxgcn.host.machine)
    return True, f"built with {cxx} in {path.parent}" if cxx is not None else f"built at install time, in {path.parent}"


def kernel_possible() -> bool:
    """Whether :func:`jaxgcn.native.csr.kernel_status` may succeed, decided without starting JAX (the CLI asks before
    it sets the CPU device count): the kernels are not disabled (``JAXGCN_NO_KERNELS``), a compiler
    is present, and the kernel builds and loads: it is compiled now if it is not cached (~5 s, once
    per machine), and a failure an earlier process recorded is read, not retried."""
    if os.environ.get("JAXGCN_NO_KERNELS"):
        return False
    path = kernel_build.prebuilt()
    cxx = None if path is not None else kernel_build._compiler()
    if path is None and cxx is None:
        return False
    try:
        ctypes.cdll.LoadLibrary(str(path or kernel_build._build(cxx)))  # dlopen only: registering it would start JAX
    except (OSError, RuntimeError, ValueError, subprocess.SubprocessError):
        return False
    return True


def _status() -> tuple[bool, str]:
    """(ok, reason): the kernel's own guard before it is called (:func:`require_kernel`). Whether it
    runs for a job is asked of :func:`kernel_status`, the one oracle, by the plan only."""
    if jax.default_backend() != "cpu":
        return False, f"the fused CSR kernel is for the CPU; this JAX runs on {jax.default_backend()}"
    return _load()


def kernel_status() -> tuple[bool, str]:
    """THE availability oracle: whether the C++ kernel can run here, and why not (it builds on the
    first call, ~5 s, once per machine; a JAX on another platform than the CPU never runs it). Only the
    plan asks it (:func:`jaxgcn.plan.kernel_available` is its face for the CLI); the kernel's own calls
    guard themselves (:func:`require_kernel`).

    >>> ok, reason = kernel_status()
    >>> isinstance(ok, bool) and isinstance(reason, str) and bool(reason)
    True
    """
    return _status()


# The refusal of backend csr where the kernel cannot run (its reason filled in): the plan's, and the kernel's own.
UNAVAILABLE = "backend='csr' needs the fused CPU kernel, which is unavailable: {}; use backend='segment' (or 'auto')"


def require_kernel() -> None:
    """Raise a clear error when the kernel is called but cannot run (the kernel's own guard: a job
    is refused earlier, by the plan, :func:`jaxgcn.plan.backend_for`)."""
    ok, reason = _status()
    if not ok:
        raise ValueError(UNAVAILABLE.format(reason))


def _loaded_library() -> ctypes.CDLL:
    """The kernel library this process registered (built and loaded first if need be)."""
    require_kernel()
    assert _LIBRARY is not None  # set by the _load that require_kernel ran
    return _LIBRARY


def kernel_isa() -> str:
    """Which branch of the kernel's masked loads and stores the loaded library was built with:
    ``"avx512"`` (``-march=native`` on an AVX-512 CPU), ``"avx2"`` (an AVX2 CPU, or
    ``JAXGCN_KERNEL_ISA=avx2`` on an AVX-512 one) or ``"portable"`` (any other CPU, or
    ``JAXGCN_KERNEL_ISA=portable``). Needs :func:`jaxgcn.native.csr.kernel_status`."""
    return {1: "avx512", 2: "avx2"}.get(_loaded_library().JaxgcnKernelIsa(), "portable")


def kernel_tuning() -> machine.Tuning:
    """The settings the loaded kernel runs with (:class:`jaxgcn.host.machine.Tuning`: those
    :func:`jaxgcn.host.machine.tuning` chose for this machine, unless :func:`set_kernel_tuning` changed
    them). Needs :func:`jaxgcn.native.csr.kernel_status`."""
    values = (ctypes.c_int64 * 3)()
    _loaded_library().JaxgcnTuning(values)
    return machine.Tuning(*map(int, values))


def set_kernel_tuning(tuning: machine.Tuning) -> None:
    """Run the kernel with these settings from now on (benchmarks try others; any settings compute
    the same sums). Needs :func:`jaxgcn.native.csr.kernel_status`."""
    if min(dataclasses.astuple(tuning)) <= 0:
        raise ValueError(f"kernel settings must be positive: {tuning}")
    _loaded_library().JaxgcnSetTuning(tuning.tile_bytes, tuning.product_cutoff, tuning.pass_cutoff)


def kernel_counters() -> dict[str, int]:
    """The kernel's debug counters, cumulative since the library was loaded or
    :func:`reset_kernel_counters` (the tests read which regime a call ran in from them; counting
    costs a few relaxed atomic adds per call). Needs :func:`jaxgcn.native.csr.kernel_status`.

    - ``calls``: sparse products (:func:`spmm`, its gradient, :func:`spmm_pair`); ``pair_calls``
      of them from :func:`spmm_pair`.
    - ``prefetch_calls``: products that prefetched rows of ``b`` (``b`` over :func:`kernel_tuning`'s
      ``tile_bytes``, half of L2).
    - ``chunked_calls``: products cut into several row chunks on the thread pool.
    - ``skip_calls``: products that left rows of ``b`` unread (its all-zero rows, in a gradient, or
      a test's mask); ``mask_calls``: of them with a mask; ``skipped_rows``: rows of ``b`` so flagged.
    - ``narrow_rows`` / ``blocked_rows`` / ``scalar_rows``: output rows summed in one vector
      register (one value column, ``W`` at most 16: a single run's hidden or output width) / in
      several (one value column, or ``W / V`` a multiple of 16) / in the loop for other widths.
    - ``dense_calls``: :func:`jaxgcn.native.fused.run_matmul` products, any direction; ``dense_skipped_rows``: all-zero
      rows of the incoming gradient that they skipped.
    - ``scatter_calls``: one run's gradients ``Aᵀ g`` computed by scattering the live rows of ``g``
      (one value column, ``g`` at most 16 wide); their skipped rows of ``g`` count in
      ``skipped_rows``, and they are not among ``calls``.
    - ``adam_calls``: optimizer steps of a params leaf (:func:`jaxgcn.native.fused.adam_leaf`).
    - ``dropout_calls``: hash dropouts of hidden activations and their gradients
      (:func:`jaxgcn.native.fused.hash_dropout`).
    """
    lib = _loaded_library()
    names = lib.JaxgcnKernelCounterNames().decode().split(",")
    values = (ctypes.c_int64 * len(names))()
    lib.JaxgcnKernelCounters(values)
    return dict(zip(names, map(int, values)))


def reset_kernel_counters() -> None:
    """Set every :func:`kernel_counters` counter to 0."""
    _loaded_library().JaxgcnResetKernelCounters()


# ----------------------------------------------------------------------------- the product

def _call(indptr: jax.Array, cols: jax.Array, vals: jax.Array, b: jax.Array, skip: bool,
          diag: jax.Array | None = None, skip_mask: jax.Array | None = None) -> jax.Array:
    """The raw kernel: ``(A + diag(diag)) @ b`` for the pattern ``indptr``/``cols``.

    Args:
        indptr: [n + 1] int32 row pointers.
        cols: [nnz] int32 column indices, each in [0, m).
        vals: [nnz, V] float32 values, V dividing W.
        b: [m, W] float32.
        skip: flag the all-zero rows of ``b`` and do not read them (a masked loss's gradient).
        diag: optional [n] float32 self-loop weights (square ``A`` only).
        skip_mask: for tests only: optional [m] bool, True for the rows of ``b`` the kernel must
            treat as zero without reading them, in place of the flags ``skip`` computes (so a test
            can fill them with NaN and see whether the kernel read them).

    Returns:
        [n, W] float32.
    """
    n = indptr.shape[0] - 1
    out = jax.ShapeDtypeStruct((n, b.shape[1]), jnp.float32)
    diag = jnp.zeros((0,), jnp.float32) if diag is None else diag.astype(jnp.float32)
    # the kernel's own convention: 1 = read the row, 0 = do not; empty = no mask
    read = jnp.zeros((0,), jnp.uint8) if skip_mask is None else jnp.logical_not(skip_mask).astype(jnp.uint8)
    return jax.ffi.ffi_call(_TARGET, out)(indptr, cols, vals, b, diag, read, skip_zero_rows=np.int64(skip))


def _entry_rows(indptr: jax.Array, nnz: int) -> jax.Array:
    """The row of each of the ``nnz`` entries of a CSR pattern (the gradients' values need it)."""
    return jnp.repeat(jnp.arange(indptr.shape[0] - 1, dtype=jnp.int32), jnp.diff(indptr), total_repeat_length=nnz)


@functools.partial(jax.custom_vjp, nondiff_argnums=(8,))
def _spmm(indptr, cols, t_indptr, t_rows, t_perm, vals, b, diag, skip):
    return _call(indptr, cols, vals, b, skip, diag)


def _spmm_fwd(indptr, cols, t_indptr, t_rows, t_perm, vals, b, diag, skip):
    # _spmm, not the raw call: higher-order reverse mode differentiates this rule too.
    out = _spmm(indptr, cols, t_indptr, t_rows, t_perm, vals, b, diag, skip)
    return out, (indptr, cols, t_indptr, t_rows, t_perm, vals, b, diag)


def _spmm_bwd(skip, res, g):
    indptr, cols, t_indptr, t_rows, t_perm, vals, b, diag = res
    # d b = A^T g (+ diag * g): the same product over the transposed pattern, itself differentiable
    # (its own transpose is the original pattern, reached through the inverse permutation; a
    # diagonal is its own transpose). The kernel skips the rows of g that are all zero (a loss
    # masked to the training nodes).
    if vals.shape[1] == 1 and g.shape[1] <= _SCATTER_WIDTH:  # one run: scatter g's live rows instead
        db = _spmm_t(indptr, cols, t_indptr, t_rows, t_perm, vals, g, diag)
    else:
        db = _transposed(indptr, cols, t_indptr, t_rows, t_perm, vals, g, diag)
    # d vals[k, r] = <g[row_k, r, :], b[col_k, r, :]> and d diag[i] = <g[i], b[i]>; dead code
    # unless they need a gradient.
    nnz, v = vals.shape
    rows = _entry_rows(indptr, nnz)
    prods = g[rows].reshape(nnz, v, -1) * b[cols].reshape(nnz, v, -1)
    d_diag = None if diag is None else jnp.sum(g * b, axis=1).astype(diag.dtype)
    return None, None, None, None, None, prods.sum(axis=-1), db, d_diag


_spmm.defvjp(_spmm_fwd, _spmm_bwd)


def _transposed(indptr, cols, t_indptr, t_rows, t_perm, vals, g, diag):
    """``(A + diag)^T g`` by the product over A's transposed pattern (A's own when it is symmetric),
    skipping g's all-zero rows: each output row sums its entries in row order, the diagonal last."""
    if t_indptr is None:  # the matrix is its own transpose
        return _spmm(indptr, cols, None, None, None, vals, g, diag, True)
    return _spmm_perm(indptr, cols, t_indptr, t_rows, t_perm, vals, g, diag)


@jax.custom_vjp
def _spmm_perm(indptr, cols, t_indptr, t_rows, t_perm, vals, g, diag):
    """``(A + diag)^T g`` over A's transposed pattern, whose entry t has A's values ``vals[t_perm[t]]``
    (gathered into its order: the kernel reading them in place through ``t_perm`` measured no
    faster, its reads of them then random). ``t_perm`` may keep only some of A's entries (a
    pattern cut to the rows of g that can be non-zero, :func:`jaxgcn.core.data.with_focus`): then the
    product is exact for such g only, and it has no second-order gradient."""
    return _call(t_indptr, t_rows, vals[t_perm], g, True, diag)


def _spmm_perm_fwd(indptr, cols, t_indptr, t_rows, t_perm, vals, g, diag):
    return _spmm_perm(indptr, cols, t_indptr, t_rows, t_perm, vals, g, diag), (indptr, cols, t_indptr, t_rows,
                                                                                 t_perm, vals, g, diag)


def _spmm_perm_bwd(res, h):
    # out = (A + diag)^T g: d g = (A + diag) h, d vals[t_perm[t]] = <h[row t], g[t_rows[t]]>, d diag = <g, h>
    indptr, cols, t_indptr, t_rows, t_perm, vals, g, diag = res
    if t_rows.shape[0] != cols.shape[0]:
        raise NotImplementedError("a product over a transposed pattern cut to some rows has no second-order "
                                  "gradient (jaxgcn.core.data.with_focus); differentiate the uncut features")
    dg = _spmm(indptr, cols, t_indptr, t_rows, t_perm, vals, h, diag, True)
    nnz, v = t_rows.shape[0], vals.shape[1]
    prods = h[_entry_rows(t_indptr, nnz)].reshape(nnz, v, -1) * g[t_rows].reshape(nnz, v, -1)
    d_vals = jnp.zeros_like(vals).at[t_perm].set(prods.sum(axis=-1), unique_indices=True)
    d_diag = None if diag is None else jnp.sum(g * h, axis=1).astype(diag.dtype)
    return None, None, None, None, None, d_vals, dg, d_diag


_spmm_perm.defvjp(_spmm_perm_fwd, _spmm_perm_bwd)


@jax.custom_vjp
def _rows(indptr, cols, t_indptr, t_rows, t_perm, vals, b):
    return _call(indptr, cols, vals, b, False)


def _rows_fwd(indptr, cols, t_indptr, t_rows, t_perm, vals, b):
    return _rows(indptr, cols, t_indptr, t_rows, t_perm, vals, b), (indptr, cols, t_indptr, t_rows, t_perm, vals)


def _rows_bwd(res, g):
    # d b only: the values are the graph's (not trained); the transposed pattern, never one run's
    # scatter, which would add each self-loop entry in its row's turn instead of last
    return None, None, None, None, None, None, _transposed(*res, g, None)


_rows.defvjp(_rows_fwd, _rows_bwd)

_SCATTER_WIDTH = 16  # the widest g that _spmm_t takes (one vector register)


@jax.custom_vjp
def _spmm_t(indptr, cols, t_indptr, t_rows, t_perm, vals, g, diag):
    """``(A + diag)^T g`` for one value column and ``g`` at most 16 wide, by the kernel's scatter of
    g's live rows (``jaxgcn_spmm_t``): the same numbers as the product over the transposed pattern
    (``t_indptr`` None: A is its own, exactly), without gathering the values into its order or
    branching on each entry's row of g."""
    out = jax.ShapeDtypeStruct(((indptr if t_indptr is None else t_indptr).shape[0] - 1, g.shape[1]), jnp.float32)
    d = jnp.zeros((0,), jnp.float32) if diag is None else diag
    return jax.ffi.ffi_call(_T_TARGET, out)(indptr, cols, vals, g, d)


def _spmm_t_fwd(indptr, cols, t_indptr, t_rows, t_perm, vals, g, diag):
    return _spmm_t(indptr, cols, t_indptr, t_rows, t_perm, vals, g, diag), (indptr, cols, t_indptr, t_rows,
                                                                             t_perm, vals, g, diag)


def _spmm_t_bwd(res, h):
    # out = A^T g (+ diag g): d g = A h (+ diag h), d vals[k] = <g[row_k], h[col_k]>, d diag = <g, h>
    indptr, cols, t_indptr, t_rows, t_perm, vals, g, diag = res
    dg = _spmm(indptr, cols, t_indptr, t_rows, t_perm, vals, h, diag, False)
    nnz = vals.shape[0]
    rows = _entry_rows(indptr, nnz)
    d_vals = jnp.sum(g[rows] * h[cols], axis=1, keepdims=True)
    d_diag = None if diag is None else jnp.sum(g * h, axis=1).astype(diag.dtype)
    return None, None, None, None, None, d_vals, dg, d_diag


_spmm_t.defvjp(_spmm_t_fwd, _spmm_t_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(8,))
def _given(indptr, cols, t_indptr, t_rows, t_perm, vals, b, product, skip):
    return product


def _given_fwd(indptr, cols, t_indptr, t_rows, t_perm, vals, b, product, skip):
    return product, (indptr, cols, t_indptr, t_rows, t_perm, vals, b, None)


def _given_bwd(skip, res, g):
    return (*_spmm_bwd(skip, res, g)[:7], None)


_given.defvjp(_given_fwd, _given_bwd)


def _operands(a: CSR, b: jax.Array, values: jax.Array | None) -> tuple[Any, ...]:
    """The arrays of one product, checked: ``a``'s pattern, the values [nnz, V], ``b`` as float32."""
    require_kernel()  # builds and registers it on first use; raises when it cannot run here
    vals = jnp.asarray(a.data, jnp.float32)[:, None] if values is None else values.astype(jnp.float32)
    if values is not None and a.symmetric:
        # the gradient of a symmetric pattern reuses it as its own transpose, which holds for a's own
        # values only: other values (a dropout mask per entry) are not symmetric in general
        raise ValueError("spmm: values replacing a's entries need a's transposed pattern for the gradient; "
                         "build the matrix with csr_from_scipy(..., check_symmetric=False)")
    if b.ndim != 2 or b.shape[1] % vals.shape[1]:
        raise ValueError(f"spmm: b has shape {b.shape}; its width must be a multiple of the {vals.shape[1]} "
                         "value columns")

    def arr(v: Any) -> jax.Array | None:
        return None if v is None else jnp.asarray(v)

    return arr(a.indptr), arr(a.cols), arr(a.t_indptr), arr(a.t_rows), arr(a.t_perm), vals, b.astype(jnp.float32)


def spmm_pair(a: CSR, b: jax.Array, values: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(a_values @ b, a @ b)`` from one pass over ``a`` and ``b``: the product with per-run
    ``values`` [nnz, R] (a training forward's dropout) and with ``a``'s own values (an evaluation
    forward), each [n, W]. Not differentiable itself: hand the first to :func:`spmm_given` in the
    step that differentiates it.
    """
    indptr, cols, _, _, _, vals, b = _operands(a, b, values)
    out = jax.ShapeDtypeStruct((indptr.shape[0] - 1, b.shape[1]), jnp.float32)
    return jax.ffi.ffi_call(_PAIR_TARGET, (out, out))(indptr, cols, vals, jnp.asarray(a.data, jnp.float32), b)


def spmm_given(a: CSR, b: jax.Array, values: jax.Array | None, product: jax.Array) -> jax.Array:
    """``product``, which the caller computed as ``spmm(a, b, values)`` (e.g. with :func:`spmm_pair`
    one step earlier), with the gradients of :func:`spmm`: the forward pass costs nothing and the
    backward pass is the transposed product, as if the product were computed here.
    """
    return _given(*_operands(a, b, values), product, False)


def spmm_rows(a: CSR, b: jax.Array) -> jax.Array:
    """``a @ b`` for ``a`` some rows of a propagation matrix with their self-loops as entries
    (:func:`jaxgcn.core.graph.focus_rows`), [K, W]: each row, and the gradient over ``a``'s transposed
    pattern, sums in the order the square product with its diagonal does (:func:`spmm` with
    ``diag``), so the rows are that product's rows, bit for bit. ``a``'s values get no gradient."""
    if a.t_indptr is None:
        raise ValueError("spmm_rows: the rows need their transposed pattern (jaxgcn.core.graph.focus_rows builds it)")
    return _rows(*_operands(a, b, None))


def spmm(a: CSR, b: jax.Array, values: jax.Array | None = None, *, diag: jax.Array | None = None) -> jax.Array:
    """``a @ b`` with the fused kernel, for one matrix or R matrices that share ``a``'s pattern.

    Args:
        a: [n, m] :class:`CSR` (device or host arrays).
        b: [m, W] dense float32 matrix. With R value columns, ``b`` holds R blocks of ``W / R``
            columns and block ``r`` is multiplied by matrix ``r``.
        values: optional [nnz, R] values replacing ``a.data`` (per-run dropout of the same
            features); ``None`` uses ``a.data``.
        diag: optional [n] weights of a diagonal added to a square ``a`` (``(a + diag(d)) @ b``):
            a graph's self-loops, summed after each row's other entries inside the kernel.

    Returns:
        [n, W] float32.

    >>> m = csr_from_scipy(sp.csr_matrix(np.array([[0, 2.0], [3.0, 0]])))
    >>> spmm(m, jnp.array([[1.0], [10.0]])).tolist() if _status()[0] else [[20.0], [3.0]]
    [[20.0], [3.0]]
    """
    if diag is not None and (a.shape[0] != a.shape[1] or diag.shape != (a.shape[0],)):
        raise ValueError(f"spmm: diag has shape {diag.shape}; it needs a square matrix (here {a.shape}) and "
                         "one weight per row")
    return _spmm(*_operands(a, b, values), None if diag is None else jnp.asarray(diag, jnp.float32), False)


def spmm_xla(a: CSR, b: jax.Array) -> jax.Array:
    """``a @ b`` in pure XLA: gather the rows of ``b`` per entry, scale, and a sorted segment sum into
    the rows. It materializes an [nnz, width] buffer, but runs on any device (GPU, TPU) and under
    any transformation; autodiff gives its gradient.

    >>> m = csr_from_scipy(sp.csr_matrix(np.array([[0, 2.0], [3.0, 0]])))
    >>> spmm_xla(m, jnp.array([[1.0], [10.0]])).tolist()
    [[20.0], [3.0]]
    """
    indptr, cols = jnp.asarray(a.indptr), jnp.asarray(a.cols)
    n, nnz = indptr.shape[0] - 1, cols.shape[0]
    rows = jnp.repeat(jnp.arange(n, dtype=jnp.int32), jnp.diff(indptr), total_repeat_length=nnz)
    msgs = jnp.asarray(a.data, b.dtype)[:, None] * b[cols]
    return jax.ops.segment_sum(msgs, rows, num_segments=n, indices_are_sorted=True)


def csr_matmul(a: CSR, b: jax.Array) -> jax.Array:
    """``a @ b`` with the fused kernel where it runs (CPU with a compiler), else :func:`spmm_xla`."""
    if _status()[0]:
        return spmm(a, b.astype(jnp.float32)).astype(b.dtype)
    return spmm_xla(a, b)
