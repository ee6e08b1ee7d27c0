"""Propagation ``Â · x`` with interchangeable backends that share one signature and one result.

- ``dense``: ``Â`` as a dense matrix (attached with :func:`jaxgcn.core.graph.with_dense`, or built on
  the fly); O(n²) memory, for small graphs and as the reference formula.
- ``segment``: gather the sender rows, scale by the edge weights, ``jax.ops.segment_sum`` into the
  (sorted) receivers; O(edges · width) memory.
- ``bcoo``: ``jax.experimental.sparse.BCOO`` matrix product.
- ``csr``: the fused CSR kernel of :mod:`jaxgcn.native.csr` (CPU; no [edges, width] buffer), with the
  adjacency attached by :func:`jaxgcn.core.graph.with_csr`.
- ``gather``: scatter-free, for accelerators (:mod:`jaxgcn.core.gather`): gathers over degree-bucketed
  neighbour lists attached by :func:`jaxgcn.core.graph.with_lists`; its gradient is a gather too.
- ``auto``: the plan picks from the graph size (:func:`jaxgcn.plan.backend_for`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import sparse as jsparse

from jaxgcn.core.graph import Graph

BACKENDS = ("dense", "segment", "bcoo", "csr", "gather")

# Measured on a 2-core CPU (benchmarks/bench_propagate.py, forward + gradient): the dense product
# wins only on small graphs that are also dense (>= ~10% of all pairs are edges); on sparse graphs
# `segment` wins from 128 nodes on (1.6x at 128 nodes, 16x on Cora), and the fused `csr` kernel
# beats `segment` (Cora training 0.50 s per run against 0.96 s; 2.5x on 100k nodes).
DENSE_MAX_NODES = 1024
DENSE_MIN_DENSITY = 0.1


def graph_backend(graph: Graph) -> str:
    """The backend a prepared graph is laid out for: ``csr`` with an attached CSR form, ``gather`` with
    attached neighbour lists, ``dense`` with an attached dense matrix, else ``segment``. (A static
    choice: it reads which fields exist.)"""
    if graph.csr is not None:
        return "csr"
    if graph.lists is not None:
        return "gather"
    return "dense" if graph.dense is not None else "segment"


def _segment_chunked(graph: Graph, x: jax.Array, chunk: int) -> jax.Array:
    """The ``segment`` product over blocks of ``chunk`` edges, accumulated in a scan: the message
    buffer is [chunk, width] instead of [n_edges, width] (forward and backward)."""
    n, n_edges = x.shape[0], graph.senders.shape[0]
    n_blocks = max(1, -(-n_edges // chunk))
    pad = n_blocks * chunk - n_edges
    # Padding edges point at the last node with weight 0, so receivers stay sorted and add nothing.
    senders = jnp.pad(jnp.asarray(graph.senders), (0, pad)).reshape(n_blocks, chunk)
    receivers = jnp.pad(jnp.asarray(graph.receivers), (0, pad), constant_values=n - 1).reshape(n_blocks, chunk)
    weights = jnp.pad(jnp.asarray(graph.weights, x.dtype), (0, pad)).reshape(n_blocks, chunk)

    def block(acc: jax.Array, edges: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[jax.Array, None]:
        s, r, w = edges
        return acc.at[r].add(x[s] * w[:, None], indices_are_sorted=True), None

    out, _ = jax.lax.scan(block, jnp.zeros_like(x), (senders, receivers, weights))
    return out


def propagate(graph: Graph, x: jax.Array, *, backend: str = "segment", chunk_edges: int | None = None,
              rows_sum: Any = None) -> jax.Array:
    """Compute ``Â @ x`` for the graph's (normalized) adjacency ``Â``.

    Args:
        graph: a :class:`~jaxgcn.core.graph.Graph` with device or host arrays.
        x: [n_nodes, width] node features.
        backend: ``"dense"``, ``"segment"``, ``"bcoo"``, ``"csr"``, ``"gather"``, or ``"auto"``: the layout
            the graph was prepared for (:func:`graph_backend`).
        chunk_edges: with ``segment``, process the edges in blocks of this many (bounds the
            [n_edges, width] message buffer to [chunk_edges, width]); ``None``: all at once.
        rows_sum: with ``gather``, the neighbour lists' row sum (:func:`jaxgcn.core.gather.row_sum`'s
            signature); None: XLA's gather (a TPU's plan gives :func:`jaxgcn.core.pallas_gather.tpu_row_sum`).

    Returns:
        [n_nodes, width] aggregated features.

    >>> import numpy as np
    >>> from jaxgcn.core.graph import from_edges
    >>> g, _ = from_edges([0], [1])
    >>> propagate(g, np.array([[1.0], [2.0]], np.float32)).tolist()
    [[3.0], [3.0]]
    """
    if backend == "auto":
        backend = graph_backend(graph)
    n = x.shape[0]
    if backend != "csr" and not graph.has_edge_list:
        raise ValueError(f"backend {backend!r} needs the edge list, but this graph keeps only its CSR form "
                         "(prepared for backend 'csr'); prepare it with the backend you want")
    if chunk_edges is not None and backend != "segment":
        raise ValueError(f"chunk_edges={chunk_edges} applies to the segment backend, not {backend!r} "
                         "(csr has no message buffer to bound)")
    if backend == "csr":
        if graph.csr is None:
            raise ValueError("backend 'csr' needs the CSR adjacency: attach it with jaxgcn.core.graph.with_csr(graph)")
        from jaxgcn.native.csr import spmm

        # the self-loops inside the kernel: one pass over x and the output instead of two more
        return spmm(graph.csr, x.astype(jnp.float32), diag=jnp.asarray(graph.self_weights)).astype(x.dtype)
    loops = jnp.asarray(graph.self_weights, x.dtype)[:, None] * x
    if backend == "gather":
        if graph.lists is None:
            raise ValueError("backend 'gather' needs the neighbour lists: attach them with "
                             "jaxgcn.core.graph.with_lists(graph)")
        from jaxgcn.core import gather

        return loops + gather.propagate(graph.lists, x, rows_sum=rows_sum or gather.row_sum)
    if backend == "segment" and chunk_edges is not None:
        if chunk_edges < 1:
            raise ValueError(f"chunk_edges={chunk_edges} must be >= 1")
        return loops + _segment_chunked(graph, x, int(chunk_edges))
    if backend == "segment":
        msgs = x[graph.senders] * jnp.asarray(graph.weights)[:, None].astype(x.dtype)
        return loops + jax.ops.segment_sum(msgs, graph.receivers, num_segments=n, indices_are_sorted=True)
    if backend == "bcoo":
        idx = jnp.stack([jnp.asarray(graph.receivers), jnp.asarray(graph.senders)], axis=1)
        adj = jsparse.BCOO((jnp.asarray(graph.weights, x.dtype), idx), shape=(n, n),
                           indices_sorted=True, unique_indices=True)
        return loops + adj @ x
    if backend == "dense":
        if graph.dense is not None:
            return jnp.asarray(graph.dense, x.dtype) @ x
        adj = jnp.zeros((n, n), x.dtype).at[graph.receivers, graph.senders].add(jnp.asarray(graph.weights, x.dtype))
        return loops + adj @ x
    raise ValueError(f"backend {backend!r} is not one of {BACKENDS}")


@jax.custom_vjp
def take_rows(x: jax.Array, rows: jax.Array, pos: jax.Array) -> jax.Array:
    """``x[rows]`` for sorted, distinct ``rows``, where ``pos[i]`` is node i's place in ``rows``
    (-1 for a node not in it). The gradient is a gather, ``g[pos]`` where ``pos >= 0`` and 0
    elsewhere, instead of the scatter-add XLA transposes a gather into, which the CPU runs as a
    loop of one row per iteration (Cora's 640 focus nodes: 0.32 ms of a 16-run epoch,
    benchmarks/profile_epoch.py). The same numbers: each gradient row is ``0 + g[j]`` either way.

    >>> x = jnp.arange(4.0)[:, None]
    >>> rows, pos = jnp.array([1, 3]), jnp.array([-1, 0, -1, 1])
    >>> jax.grad(lambda x: jnp.sum(take_rows(x, rows, pos) * jnp.array([[2.0], [5.0]])))(x).ravel().tolist()
    [0.0, 2.0, 0.0, 5.0]
    """
    return jnp.take(x, rows, axis=0, unique_indices=True, indices_are_sorted=True)


def _take_rows_fwd(x: jax.Array, rows: jax.Array, pos: jax.Array) -> tuple[jax.Array, jax.Array]:
    return take_rows(x, rows, pos), pos


def _take_rows_bwd(pos: jax.Array, g: jax.Array) -> tuple[jax.Array, None, None]:
    taken = jnp.take(g, jnp.maximum(pos, 0), axis=0, mode="clip")
    there = (pos >= 0).reshape(pos.shape + (1,) * (g.ndim - 1))
    # a -0.0 gradient comes back +0.0, as 0 + g does (XLA folds a "+ 0.0", not this select)
    return jnp.where(there & (taken != 0), taken, 0.0), None, None


take_rows.defvjp(_take_rows_fwd, _take_rows_bwd)
