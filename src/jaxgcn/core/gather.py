"""The ``gather`` propagation: ``Â · x`` as gathers over degree-bucketed neighbour lists, no scatter.

On an accelerator XLA's scatter (``segment_sum``, which the ``segment`` backend and the gradient of
any gather produce) runs about 20x slower than a gather: on one TPU v5e chip, 1M nodes / 25M
nonzeros / 16 columns, ``segment_sum`` took 3.1 s, a bare gather ``x[cols]`` 0.17 s and
degree-bucketed padded lists 0.31-0.41 s (issue 45). So the rows are grouped into buckets by
degree, each padded only to its own width (:func:`bucket_width`), and each bucket's output is a
gather of its neighbours' rows summed over the width (:func:`row_sum`). The bucket outputs are
concatenated in bucket order with one zero row, and ONE gather by ``order`` puts every node's row
in its place (a node without off-diagonal neighbours reads the zero row). The gradient is a
forward propagation with the transpose's lists (the same lists for a symmetric ``Â``), through a
custom VJP: nothing in forward or backward is a scatter.

The lists are built once on the host with NumPy (O(nnz), no loop over nodes).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

# The most elements of one [rows, K, width] gathered buffer: a bucket above it is processed in
# chunks of rows (64 MiB of float32), so memory stays bounded whatever the degrees.
CHUNK_ELEMENTS = 2**24

# (x [n, F], cols [m, K] int32, weights [m, K]) -> [m, F]: sum_k weights[:, k] * x[cols[:, k]].
RowSum = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]


class NeighbourLists(NamedTuple):
    """The off-diagonal adjacency as degree buckets of padded neighbour lists (a pytree of arrays).

    Attributes:
        cols: per bucket, [m_b, K_b] int32 neighbour (column) ids; a padding slot holds its row's id.
        weights: per bucket, [m_b, K_b] entry weights (float32 from :func:`build`); a padding slot holds 0.
        order: [n] int32, node i's row in the concatenated bucket outputs; nodes with no
            off-diagonal entry point at the zero row appended after them.
        transpose: the transpose's lists (for the gradient), or None when ``Â`` is symmetric.
    """

    cols: tuple[Any, ...]
    weights: tuple[Any, ...]
    order: Any
    transpose: Any = None

    @property
    def slots(self) -> int:
        """Padded slots of these lists and their transpose's (what they hold in memory)."""
        own = sum(int(np.prod(c.shape)) for c in self.cols)
        return own + (self.transpose.slots if self.transpose is not None else 0)


def bucket_width(degree: np.ndarray) -> np.ndarray:
    """The padded width of a row of ``degree`` off-diagonal entries: the power of two at or above it
    (so padding at most doubles a row, and skewed degrees up to 2**k make only k + 1 buckets); 0 for 0."""
    degree = np.asarray(degree, np.int64)
    return np.where(degree > 0, 1 << np.ceil(np.log2(np.maximum(degree, 1))).astype(np.int64), 0)


def csr_lists(indptr: np.ndarray, cols: np.ndarray, weights: np.ndarray, n_cols: int | None = None, *,
           width: int | None = None) -> NeighbourLists:
    """Bucketed lists of the CSR matrix (``indptr`` [n + 1], ``cols``/``weights`` [nnz]; ``n_cols`` columns,
    default n: a padding slot reads its row's id, or the last column where that is past them), vectorised.
    ``weights`` keep their dtype (int32 entry positions, say: a padding slot holds 0). ``width``: one bucket
    of that width holding every row, empty ones too (for a kernel given [n, K] lists); default by degree.

    >>> lists = csr_lists(np.array([0, 2, 2]), np.array([1, 0]), np.array([7, 8], np.int32))   # row 1 empty
    >>> lists.weights[0].tolist(), lists.weights[0].dtype, lists.order.tolist()
    ([[7, 8]], dtype('int32'), [0, 1])
    """
    n = indptr.size - 1
    degree = np.diff(indptr)
    if width is not None and width < degree.max(initial=0):
        raise ValueError(f"neighbour lists: width={width} is below the largest degree {degree.max()}; "
                         f"pass width >= {degree.max()}, or width=None for lists bucketed by degree")
    width = bucket_width(degree) if width is None else np.full(n, width, np.int64)
    widths = np.unique(width[width > 0])
    bucket = np.searchsorted(widths, width)  # a node's bucket (meaningless for empty rows)
    # nodes in (bucket, node id) order: each bucket's rows ascending, empty rows last
    ranked = np.argsort(np.where(width > 0, bucket, widths.size), kind="stable")
    sizes = np.bincount(bucket[width > 0], minlength=widths.size)
    row_start = np.r_[0, np.cumsum(sizes)]  # first row of each bucket in the concatenation
    order = np.empty(n, np.int64)
    order[ranked] = np.arange(n)
    order = np.where(width > 0, order, row_start[-1])  # empty rows: the zero row
    slot_start = np.r_[0, np.cumsum(sizes * widths)]  # first slot of each bucket in one flat array
    node_slot = slot_start[bucket] + (order - row_start[bucket]) * width  # first slot of each non-empty row
    # entry e of row i goes to node_slot[i] + (e - indptr[i]); no [nnz] row-id array (1 GB at 124M entries)
    slot = np.repeat(node_slot - indptr[:-1], degree) + np.arange(cols.size)
    flat_cols = np.repeat(ranked, width[ranked]).astype(np.int32)  # padding points at the row itself
    if n_cols is not None and n_cols < n:
        np.minimum(flat_cols, n_cols - 1, out=flat_cols)  # a rectangular matrix: a column that exists
    flat_w = np.zeros(slot_start[-1], weights.dtype)
    flat_cols[slot] = cols
    flat_w[slot] = weights
    split = [(slot_start[b], slot_start[b + 1], int(widths[b])) for b in range(widths.size)]
    return NeighbourLists(tuple(flat_cols[a:z].reshape(-1, k) for a, z, k in split),
                          tuple(flat_w[a:z].reshape(-1, k) for a, z, k in split), order.astype(np.int32))



def build(senders: Any, receivers: Any, weights: Any, n_nodes: int, *, symmetric: bool | None = None,
          width: int | None = None) -> NeighbourLists:
    """The :class:`NeighbourLists` of the off-diagonal adjacency ``out[r] += w * x[s]`` (host arrays).

    Args:
        senders, receivers: [nnz] node ids of each entry, ``receivers`` sorted (as
            :func:`jaxgcn.core.graph.from_edges` leaves them).
        weights: [nnz] entry weights.
        n_nodes: the node count.
        symmetric: whether the matrix equals its transpose, when the caller knows it (``None``:
            check); a non-symmetric one also gets its transpose's lists, for the gradient. The check
            compares entry orders, so it finds a symmetric matrix only with the senders sorted within
            each receiver (as from_edges leaves them); otherwise the (equal) transpose is built too.
        width: one bucket of this width holding every row (rows without entries as padding only, weight 0),
            for the Pallas kernel's [n, K] lists (:func:`jaxgcn.core.pallas_gather.propagate_symmetric`);
            ``None`` (the backend's): buckets by degree, and rows without entries read the zero row.

    >>> lists = build([1, 2, 3, 0, 0, 0], [0, 0, 0, 1, 2, 3], [1.0] * 6, 5)   # a star, node 4 alone
    >>> [c.tolist() for c in lists.cols], [w.tolist() for w in lists.weights][1], lists.order.tolist()
    ([[[0], [0], [0]], [[1, 2, 3, 0]]], [[1.0, 1.0, 1.0, 0.0]], [3, 0, 1, 2, 4])
    >>> t = build([1], [0], [1.0], 2).transpose   # A[0, 1] = 1: the transpose's row 1 reads node 0
    >>> lists.transpose is None, t.cols[0].tolist(), t.order.tolist()
    (True, [[0]], [1, 0])
    >>> one = build([1, 2, 3, 0, 0, 0], [0, 0, 0, 1, 2, 3], [1.0] * 6, 5, width=4)   # one bucket, every row
    >>> one.cols[0].shape, one.weights[0][4].tolist(), one.order.tolist()
    ((5, 4), [0.0, 0.0, 0.0, 0.0], [0, 1, 2, 3, 4])
    """
    recv, send = np.asarray(receivers, np.int64), np.asarray(senders, np.int64)
    w = np.asarray(weights, np.float32)
    if recv.size and np.any(recv[1:] < recv[:-1]):
        raise ValueError("neighbour lists: receivers must be sorted, as from_edges leaves them")
    indptr = np.r_[0, np.cumsum(np.bincount(recv, minlength=n_nodes))]
    lists = csr_lists(indptr, send, w, width=width)
    if symmetric:
        return lists
    # the transpose by SciPy's O(nnz) CSR -> CSC conversion (rows ascending within each column)
    csc = sp.csr_matrix((w, send, indptr), shape=(n_nodes, n_nodes)).tocsc()
    t_indptr, t_cols, t_w = np.asarray(csc.indptr, np.int64), np.asarray(csc.indices, np.int64), csc.data
    if symmetric is None and np.array_equal(t_indptr, indptr) and np.array_equal(t_cols, send) \
            and np.array_equal(t_w, w):
        return lists
    return lists._replace(transpose=csr_lists(t_indptr, t_cols, t_w, width=width))


def sub_lists(indptr: Any, cols: Any, weights: Any, n_cols: int) -> NeighbourLists:
    """The :class:`NeighbourLists` of a [K, ``n_cols``] CSR matrix (host arrays: some rows of ``Â``, their
    columns those of a layer's input rows, :func:`jaxgcn.core.graph.focus_rows`), with its transpose's
    lists for the gradient.

    >>> sub = sub_lists(np.array([0, 2]), np.array([0, 2]), np.array([1.0, 3.0], np.float32), 3)
    >>> [c.tolist() for c in sub.cols], sub.order.tolist(), sub.transpose.order.tolist()
    ([[[0, 2]]], [0], [0, 2, 1])
    """
    indptr, cols = np.asarray(indptr, np.int64), np.asarray(cols, np.int64)
    weights = np.asarray(weights, np.float32)
    csc = sp.csr_matrix((weights, cols, indptr), shape=(indptr.size - 1, n_cols)).tocsc()
    transpose = csr_lists(np.asarray(csc.indptr, np.int64), np.asarray(csc.indices, np.int64), csc.data,
                       indptr.size - 1)
    return csr_lists(indptr, cols, weights, n_cols)._replace(transpose=transpose)


def dense_rows(indptr: Any, cols: Any, weights: Any, n_cols: int) -> np.ndarray:
    """The [K, ``n_cols``] CSR rows of ``Â`` a row plan's layer computes (:func:`sub_lists`' arguments) as a
    dense float32 matrix: a ``dense`` plan's rows on an accelerator, whose product (:func:`dense_product`)
    and its gradient are matrix-unit dots over those rows only.

    >>> dense_rows(np.array([0, 2]), np.array([0, 2]), np.array([1.0, 3.0], np.float32), 3).tolist()
    [[1.0, 0.0, 3.0]]
    """
    indptr = np.asarray(indptr, np.int64)
    return sp.csr_matrix((np.asarray(weights, np.float32), np.asarray(cols, np.int64), indptr),
                         shape=(indptr.size - 1, n_cols)).toarray()


def dense_product(mat: jax.Array, x: jax.Array) -> jax.Array:
    """Some rows of ``Â · x`` ([K, W]) from :func:`dense_rows`' [K, m] matrix and the [m, W] rows a layer's
    input holds: one dot (at the run's matmul precision); its gradient ``matᵀ · g``, a dot too."""
    return jnp.dot(mat, x)


class RowsPrepared(NamedTuple):
    """The row plans of a run's data for the ``gather`` backend's ops (:func:`prepare`; the fields a
    training step reads of :attr:`jaxgcn.core.data.TrainData.aux`): each layer's rows as neighbour lists."""

    eval_rows: Any
    train_rows: Any


def prepare(data: Any, hops: int, *, layout: Callable[..., Any] | None = None) -> RowsPrepared | None:
    """Which rows each layer computes for the logits a training step (the training nodes) and an
    evaluation (the data's ``focus``) read (:func:`jaxgcn.core.native_ops.row_plan`, on the graph's CSR
    built here on the host from its edge list), each layer's rows of ``Â`` as ``layout`` makes them
    (:func:`sub_lists`' signature; None: :func:`sub_lists`, a ``gather`` plan's; a ``dense`` plan's:
    :func:`dense_rows`): a 2-layer model on a 1M-node graph with 100 training nodes trains its last
    layer at those 100 rows and its first at the ~2,600 around them, each product a gather and its
    gradient too; Cora's 140 training nodes, dense, a [644, 2708] and a [140, 644] product."""
    from jaxgcn.core.graph import with_csr
    from jaxgcn.core.native_ops import row_plan

    if data.focus is None or hops < 2:
        return None
    host = jax.tree.map(np.asarray, data.graph._replace(lists=None, dense=None))
    graph = with_csr(host, symmetric=data.graph.lists.transpose is None if data.graph.lists is not None else None)
    train = np.asarray(data.train_mask)
    trained = np.flatnonzero(train != 0 if train.ndim == 1 else (train != 0).any(axis=0))
    plans = [row_plan(graph, nodes, hops) for nodes in (np.asarray(data.focus), trained)]
    plans = [None if p is None else jax.tree.map(jnp.asarray, p._replace(mats=tuple(
        None if m is None else (layout or sub_lists)(m.indptr, m.cols, m.data, m.shape[1]) for m in p.mats)))
             for p in plans]
    return RowsPrepared(*plans)


def rows_product(lists: NeighbourLists, x: jax.Array, *, rows_sum: RowSum | None = None,
                 budget: int = CHUNK_ELEMENTS) -> jax.Array:
    """Some rows of ``Â · x`` ([K, W]) for ``x`` the [m, W] rows a layer's input holds: the product of
    :func:`sub_lists` (the self-loops are entries of it), its gradient a gather over the transpose's lists."""
    return _product(rows_sum or row_sum, int(budget), lists, x)


def row_sum(x: jax.Array, cols: jax.Array, weights: jax.Array) -> jax.Array:
    """``sum_k weights[:, k] * x[cols[:, k]]`` -> [m, F] for ``x`` [n, F], ``cols``/``weights`` [m, K]
    (XLA: one gather, accumulated in float32). A Pallas kernel of this signature may replace it."""
    taken = jnp.take(x, cols, axis=0, mode="clip").astype(jnp.float32)  # [m, K, F]; the ids are valid
    return jnp.sum(taken * weights.astype(jnp.float32)[:, :, None], axis=1).astype(x.dtype)


def _bucket(x: jax.Array, cols: jax.Array, weights: jax.Array, rows_sum: RowSum, budget: int) -> jax.Array:
    """One bucket's [m, F] output, in chunks of rows where [m, K, F] would exceed ``budget`` elements."""
    m, k = cols.shape
    chunk = max(1, budget // (k * x.shape[1]))
    if m <= chunk:
        return rows_sum(x, cols, weights)
    n_chunks = -(-m // chunk)
    pad = n_chunks * chunk - m  # padding rows: column 0, weight 0, cut off below
    cols = jnp.pad(cols, ((0, pad), (0, 0))).reshape(n_chunks, chunk, k)
    weights = jnp.pad(weights, ((0, pad), (0, 0))).reshape(n_chunks, chunk, k)
    out = jax.lax.map(lambda cw: rows_sum(x, *cw), (cols, weights))
    return out.reshape(n_chunks * chunk, x.shape[1])[:m]


def forward(lists: NeighbourLists, x: jax.Array, rows_sum: RowSum, budget: int) -> jax.Array:
    """The product of ``lists`` with ``x``, no gradient rule of its own: each bucket's ``rows_sum`` (in row
    chunks of at most ``budget`` elements), then one gather puts every row in its place (an empty row
    reads a zero row). :func:`propagate` and :mod:`jaxgcn.core.feature_lists` differentiate it."""
    outs = [_bucket(x, c, w, rows_sum, budget) for c, w in zip(lists.cols, lists.weights)]
    stacked = jnp.concatenate([*outs, jnp.zeros((1, x.shape[1]), x.dtype)])  # the zero row of empty rows
    return jnp.take(stacked, lists.order, axis=0, mode="clip")


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _product(rows_sum: RowSum, budget: int, lists: NeighbourLists, x: jax.Array) -> jax.Array:
    return forward(lists, x, rows_sum, budget)


def _product_fwd(rows_sum: RowSum, budget: int, lists: NeighbourLists, x: jax.Array) -> tuple[jax.Array, Any]:
    return forward(lists, x, rows_sum, budget), lists


def _product_bwd(rows_sum: RowSum, budget: int, lists: NeighbourLists, g: jax.Array) -> tuple[None, jax.Array]:
    # d(A x)/dx applied to g is A^T g: a forward pass over the transpose's lists; the graph gets no gradient
    t = lists.transpose if lists.transpose is not None else lists
    return None, forward(t, g, rows_sum, budget)


_product.defvjp(_product_fwd, _product_bwd)


def propagate(lists: NeighbourLists, x: jax.Array, *, rows_sum: RowSum = row_sum,
              budget: int = CHUNK_ELEMENTS) -> jax.Array:
    """The off-diagonal product ``A_off @ x`` -> [n, F] for ``x`` [n, F] (the self-loops are the
    caller's: :func:`jaxgcn.core.propagate.propagate`). ``rows_sum``: the gather-sum primitive
    (:func:`row_sum`'s signature); ``budget``: the most elements of one [rows, K, F] buffer.

    >>> lists = build([1, 0], [0, 1], [2.0, 3.0], 3)
    >>> propagate(lists, jnp.array([[1.0], [10.0], [100.0]])).ravel().tolist()
    [20.0, 3.0, 0.0]
    """
    if budget < 1:
        raise ValueError(f"budget={budget} must be >= 1 element")
    return _product(rows_sum, int(budget), lists, x)
