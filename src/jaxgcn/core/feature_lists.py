"""The ``lists`` layout of sparse input features: the first layer's product ``drop(X)_r · W_r`` as gathers.

On an accelerator a sparse product is a scatter (BCOO's, or ``segment_sum`` over the non-zeros), which
runs there about 20x slower than a gather (:mod:`jaxgcn.core.gather`), and dense features make each
run of a batch drop its own dense copy of X: 100 Cora seeds wrote and read 388M floats (1.55 GB) per
epoch that way (issue 45). This layout keeps X sparse and its product scatter-free:

- X's rows as degree-bucketed padded lists (:func:`jaxgcn.core.gather.csr_lists`): each slot holds a
  feature id and ``1 +`` its entry's position in ``data`` (0 for padding), so per-run dropped values
  [nnz, R] are gathered beside the weights' rows: ``out[i, r] = sum_k v[pos_ik, r] * W_r[col_ik]``;
- the gradient of W is the same gather-sum over X's transposed lists (feature j's nodes), of the
  output's gradient rows: ``dW_r[j] = sum_k v[pos_jk, r] * g_r[node_jk]``.

``data`` is stored in the row-major order of the BCOO and CSR layouts, so dropout draws the same
masks for all three (:func:`jaxgcn.core.models._drop_input`): a run on these lists equals that run on
BCOO features up to float rounding.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from jaxgcn.core.gather import CHUNK_ELEMENTS, NeighbourLists, csr_lists, forward


class FeatureLists(NamedTuple):
    """Sparse [n, F] input features as padded row lists and their transpose's (a pytree of arrays).

    Attributes:
        data: [nnz] float32 stored values, row-major (as BCOO and CSR store them).
        rows: X's rows as :class:`~jaxgcn.core.gather.NeighbourLists` (cols: feature ids; weights:
            int32 ``1 +`` the entry's position in ``data``, 0 for a padding slot).
        columns: the transpose's lists (F rows; cols: node ids), the same positions.
    """

    data: Any
    rows: NeighbourLists
    columns: NeighbourLists

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.rows.order.shape[0]), int(self.columns.order.shape[0]))

    @property
    def nse(self) -> int:
        """Stored entries (what dropout draws a mask for)."""
        return int(self.data.shape[0])

    @property
    def slots(self) -> int:
        """Padded slots of both directions (each holds a column and a position)."""
        return self.rows.slots + self.columns.slots


def sorted_csr(matrix: Any, dtype: Any = None) -> sp.csr_matrix:
    """A SciPy sparse [n, F] matrix as the canonical CSR both sparse feature layouts store (this module's
    lists, :func:`jaxgcn.core.layers.sparse_features`' BCOO): duplicates summed, columns sorted within each
    row; ``dtype``: its values' type (None: the matrix's own). The matrix given is left as it was.

    >>> given = sp.csr_matrix(([4.0, 1.0, 2.0], [2, 0, 2], [0, 3]), shape=(1, 3))
    >>> m = sorted_csr(given)
    >>> m.indices.tolist(), m.data.tolist(), given.indices.tolist()
    ([0, 2], [1.0, 6.0], [2, 0, 2])
    """
    csr = sp.csr_matrix(matrix, dtype=dtype)
    if not csr.has_canonical_format:  # summed and sorted in a copy: csr may share the caller's arrays
        csr = csr.copy()
        csr.sum_duplicates()  # sorts each row's columns first
    return csr


def from_scipy(matrix: Any, dtype: Any = np.float32) -> FeatureLists:
    """The :class:`FeatureLists` of a SciPy sparse [n, F] matrix (host arrays; duplicates summed,
    columns sorted within each row, as :func:`jaxgcn.core.layers.sparse_features` stores them).

    >>> x = from_scipy(sp.csr_matrix(np.array([[0, 2.0, 3.0], [0, 0, 0], [4.0, 0, 0]])))
    >>> x.shape, x.nse, [c.tolist() for c in x.rows.cols], [p.tolist() for p in x.rows.weights]
    ((3, 3), 3, [[[0]], [[1, 2]]], [[[3]], [[1, 2]]])
    """
    csr = sorted_csr(matrix, dtype)
    n, f = csr.shape
    pos = np.arange(1, csr.nnz + 1, dtype=np.int32)
    indptr = np.asarray(csr.indptr, np.int64)
    rows = csr_lists(indptr, np.asarray(csr.indices, np.int64), pos, f)
    csc = sp.csr_matrix((pos, csr.indices, csr.indptr), shape=(n, f)).tocsc()
    columns = csr_lists(np.asarray(csc.indptr, np.int64), np.asarray(csc.indices, np.int64),
                     np.asarray(csc.data, np.int32), n)
    return FeatureLists(np.asarray(csr.data, dtype), rows, columns)


RunsSum = Callable[[jax.Array, jax.Array, jax.Array, jax.Array], jax.Array]


def _runs_sum(values: jax.Array, table: jax.Array, cols: jax.Array, pos: jax.Array) -> jax.Array:
    """``sum_k values[pos[:, k], r] * table[cols[:, k], r-th block]`` -> [m, W] for ``table`` [T, W]
    whose W = R x out columns hold R runs' blocks, ``values`` [nnz + 1, R or 1] (row 0: padding's 0)."""
    taken = jnp.take(table, cols, axis=0, mode="clip")  # [m, K, R * out]: one gather of wide rows
    v = jnp.take(values, pos, axis=0, mode="clip")  # [m, K, R]
    m, k, width = taken.shape
    r = v.shape[-1]
    out = jnp.sum(taken.reshape(m, k, r, width // r) * v[..., None], axis=1)
    return out.reshape(m, width)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _product(sums: RunsSum, budget: int, x: FeatureLists, values: jax.Array, w: jax.Array) -> jax.Array:
    return forward(x.rows, w, functools.partial(sums, values), budget)


def _product_fwd(sums: RunsSum, budget: int, x: FeatureLists, values: jax.Array,
                 w: jax.Array) -> tuple[jax.Array, Any]:
    return forward(x.rows, w, functools.partial(sums, values), budget), (x, values)


def _product_bwd(sums: RunsSum, budget: int, saved: Any, g: jax.Array) -> tuple[None, None, jax.Array]:
    # dW = X_r^T g_r: the same gather-sum over X's transposed lists; the features and their dropped
    # values get no gradient (the first layer's input is data)
    x, values = saved
    return None, None, forward(x.columns, g, functools.partial(sums, values), budget)


_product.defvjp(_product_fwd, _product_bwd)


def matmul_runs(x: FeatureLists, values: jax.Array | None, w: jax.Array, *,
                budget: int = CHUNK_ELEMENTS, sums: RunsSum | None = None) -> jax.Array:
    """Per-run ``x_r @ w_r`` -> [n, R, out] (:attr:`jaxgcn.core.ops.Ops.matmul_runs`) for ``w`` [F, R, out]:
    ``values`` [nnz, R] are each run's dropped values, None: ``x.data`` shared by every run. ``sums``: one
    bucket's sum (``(values, table, cols, pos) -> [m, width]``), XLA's gather-sum when None (in row chunks
    of at most ``budget`` elements); a TPU's is the Pallas kernel (:func:`jaxgcn.core.pallas_gather.runs_sum`).

    >>> x = from_scipy(sp.csr_matrix(np.array([[1.0, 2.0], [0.0, 3.0]])))
    >>> w = jnp.arange(4.0).reshape(2, 1, 2)
    >>> matmul_runs(x, None, w)[:, 0].tolist()
    [[4.0, 7.0], [6.0, 9.0]]
    """
    d_in, r, d_out = w.shape
    shared = x.data[:, None] if values is None else values
    padded = jnp.concatenate([jnp.zeros((1, shared.shape[1]), w.dtype), shared.astype(w.dtype)])
    out = _product(sums or _runs_sum, int(budget), x, padded, w.reshape(d_in, r * d_out))
    return out.reshape(-1, r, d_out)
