"""The graph side of sharding: a normalized graph cut into P contiguous row blocks (one
:class:`GraphBlock` per device, in the ``all_gather`` or ``halo`` layout), how well a numbering
suits P blocks (:func:`partition_stats`), and the block exchange injected as the model's
propagation (:func:`propagate_block`)."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from jaxgcn.native.csr import CSR, csr_from_scipy, csr_matmul
from jaxgcn.core import gather
from jaxgcn.core.gather import NeighbourLists
from jaxgcn.core.graph import Graph

AXIS = "nodes"  # the mesh axis the row blocks are sharded over (runtime and sharded share it)
EXCHANGES = ("all_gather", "halo")


class GraphBlock(NamedTuple):
    """One device's rows of the adjacency (inside ``shard_map``; stacked [P, ...] outside).

    Attributes:
        adj: :class:`~jaxgcn.native.csr.CSR` of shape [L, P * L] (``all_gather``: columns are global ids)
            or [L, L + P * H] (``halo``: own rows, then H received rows per device).
        self_weights: [L] diagonal of the local rows.
        send: ``halo`` only: [P, H] int32, ``send[p]`` = the local rows device p needs from this one
            (padded with row 0, which no column reads); None for ``all_gather``.
        lists: ``adj`` as :class:`~jaxgcn.core.gather.NeighbourLists` with its transpose's (an
            accelerator's plan: :func:`partition` with ``lists``; ``adj`` is then None), or None.
        send_lists: ``halo`` with ``lists``: the [P * H, L] selection ``x[send]`` as neighbour lists (its
            gradient a gather too, where ``x[send]``'s is a scatter into the rows), or None.
    """

    adj: CSR | None
    self_weights: Any
    send: Any = None
    lists: Any = None
    send_lists: Any = None

    @property
    def n_nodes(self) -> int:
        return int(self.self_weights.shape[-1])


def _pad(a: np.ndarray, size: int, value: int) -> np.ndarray:
    return np.concatenate([a, np.full(size - a.size, value, a.dtype)])


def stack_csr(blocks: list[CSR], n_cols: int) -> CSR:
    """Stack same-shape host CSR blocks [L, n_cols] along a new leading axis, padding each to the
    largest entry count with zero-valued entries in its last row and last column."""
    n_rows = blocks[0].shape[0]
    nnz = max(1, max(b.nse for b in blocks))
    fields: dict[str, list[np.ndarray]] = {k: [] for k in CSR._fields}
    for b in blocks:
        extra = nnz - b.nse
        indptr = np.asarray(b.indptr).copy()
        indptr[-1] += extra  # the padding entries belong to the last row
        t_indptr = np.asarray(b.t_indptr).copy()
        t_indptr[-1] += extra  # ... and to the last column
        fields["indptr"].append(indptr)
        fields["cols"].append(_pad(np.asarray(b.cols), nnz, n_cols - 1))
        fields["data"].append(_pad(np.asarray(b.data), nnz, 0))
        fields["t_indptr"].append(t_indptr)
        fields["t_rows"].append(_pad(np.asarray(b.t_rows), nnz, n_rows - 1))
        fields["t_perm"].append(np.concatenate([np.asarray(b.t_perm), np.arange(b.nse, nnz, dtype=np.int32)]))
    return CSR(**{k: np.stack(v) for k, v in fields.items()})


def _padded_bucket(bucket: tuple[np.ndarray, np.ndarray] | None, rows: int, width: int) -> list[np.ndarray]:
    """One block's bucket of ``width`` (cols, weights; None: the block has none) padded to ``rows`` rows
    that read column 0 with weight 0."""
    cols, weights = bucket if bucket is not None else (np.zeros((0, width), np.int32), np.zeros((0, width), np.float32))
    extra = rows - cols.shape[0]
    return [np.concatenate([a, np.zeros((extra, width), a.dtype)]) for a in (cols, weights)]


def stack_lists(lists: list[NeighbourLists]) -> NeighbourLists:
    """Stack the neighbour lists of same-shape blocks [P, ...] (and their transposes'): every block gets
    the union of the widths, each bucket padded to the most rows a block has in it (padding rows read
    column 0 with weight 0, and no row's ``order`` points at them)."""
    widths = sorted({c.shape[1] for one in lists for c in one.cols})
    rows = [max(c.shape[0] for one in lists for c in one.cols if c.shape[1] == k) for k in widths]
    starts = dict(zip(widths, np.cumsum([0, *rows])))
    cols, weights, orders = [], [], []
    for one in lists:
        own = {c.shape[1]: (c, w) for c, w in zip(one.cols, one.weights)}
        padded = [_padded_bucket(own.get(k), m, k) for k, m in zip(widths, rows)]
        cols.append([c for c, _ in padded])
        weights.append([w for _, w in padded])
        # an old row's place in the padded concatenation; the old zero row (past them all) -> the new one
        place = np.concatenate([np.arange(starts[c.shape[1]], starts[c.shape[1]] + c.shape[0]) for c in one.cols]
                               + [np.array([sum(rows)])])
        orders.append(place[one.order].astype(np.int32))
    transpose = None if lists[0].transpose is None else stack_lists([one.transpose for one in lists])
    return NeighbourLists(tuple(np.stack(b) for b in zip(*cols)), tuple(np.stack(b) for b in zip(*weights)),
                          np.stack(orders), transpose)


def _adjacency(graph: Graph, n_pad: int) -> sp.csr_matrix:
    """The normalized adjacency without self-loops, as a host SciPy CSR padded to n_pad nodes."""
    n = graph.n_nodes
    if graph.csr is not None:
        c = graph.csr
        indptr = np.concatenate([np.asarray(c.indptr, np.int64), np.full(n_pad - n, np.asarray(c.indptr)[-1])])
        return sp.csr_matrix((np.asarray(c.data), np.asarray(c.cols), indptr), shape=(n_pad, n_pad))
    return sp.csr_matrix((np.asarray(graph.weights), (np.asarray(graph.receivers), np.asarray(graph.senders))),
                         shape=(n_pad, n_pad))


def _halo(rows: sp.csr_matrix, part: int, n_parts: int, local: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Column ids of one block after the halo remap (with H unknown yet: position within the
    source device's set), and, per source device q, the sorted local rows of q this block reads."""
    cols = rows.indices.astype(np.int64)
    owner = cols // local
    remote = owner != part
    needed = np.unique(cols[remote])
    starts = np.searchsorted(needed // local, np.arange(n_parts + 1))
    per_source = [needed[starts[q]:starts[q + 1]] - q * local for q in range(n_parts)]
    position = np.searchsorted(needed, cols[remote]) - starts[owner[remote]]
    return position, per_source


def partition(graph: Graph, n_parts: int, *, exchange: str = "all_gather",
              lists: bool = False) -> tuple[GraphBlock, int]:
    """Split a normalized host graph into ``n_parts`` row blocks, stacked along a leading axis.
    ``lists``: each block as neighbour lists (:func:`stack_lists`, for an accelerator: gathers, no
    scatter) in place of its CSR.

    Returns the stacked :class:`GraphBlock` and the padded node count ``P * L``.
    """
    if exchange not in EXCHANGES:
        raise ValueError(f"exchange={exchange!r} must be one of {EXCHANGES}")
    if n_parts < 1:
        raise ValueError(f"n_parts={n_parts} must be >= 1")
    n = graph.n_nodes
    local = -(-n // n_parts)
    n_pad = local * n_parts
    adj = _adjacency(graph, n_pad)
    row_blocks = [adj[p * local:(p + 1) * local] for p in range(n_parts)]
    self_w = _pad(np.asarray(graph.self_weights, np.float32), n_pad, 0).reshape(n_parts, local)
    mats, n_cols, send = (row_blocks, n_pad, None) if exchange == "all_gather" else _halo_blocks(row_blocks, local)
    if not lists:
        return GraphBlock(stack_csr([csr_from_scipy(b) for b in mats], n_cols), self_w, send), n_pad
    made = stack_lists([gather.sub_lists(b.indptr, b.indices, b.data, n_cols) for b in mats])
    return GraphBlock(None, self_w, send, made, None if send is None else _send_lists(send, local)), n_pad


def _send_lists(send: np.ndarray, local: int) -> NeighbourLists:
    """Each device's rows to send (``send`` [P, P, H]) as the lists of a [P * H, L] selection matrix
    (row r reads local row ``send[q].ravel()[r]`` with weight 1), stacked."""
    n_slots = send[0].size
    ones, indptr = np.ones(n_slots, np.float32), np.arange(n_slots + 1)
    return stack_lists([gather.sub_lists(indptr, rows.ravel(), ones, local) for rows in send])


def _halo_blocks(row_blocks: list[sp.csr_matrix], local: int) -> tuple[list[sp.csr_matrix], int, np.ndarray]:
    """The ``halo`` layout of the row blocks: each block's columns remapped to its own rows, then H
    received rows per device; the column count L + P * H; and ``send`` [P, P, H] (``send[q, p]``: the
    rows q sends p)."""
    n_parts = len(row_blocks)
    halos = [_halo(b, p, n_parts, local) for p, b in enumerate(row_blocks)]
    width = max(1, max(len(s) for _, per_source in halos for s in per_source))  # H
    n_cols = local + n_parts * width
    mats, send = [], np.zeros((n_parts, n_parts, width), np.int32)
    for p, (b, (position, per_source)) in enumerate(zip(row_blocks, halos)):
        cols = b.indices.astype(np.int64)
        owner = cols // local
        remote = owner != p
        new_cols = cols - p * local
        new_cols[remote] = local + owner[remote] * width + position
        mats.append(sp.csr_matrix((b.data, new_cols, b.indptr), shape=(local, n_cols)))
        for q, rows in enumerate(per_source):
            send[q, p, :rows.size] = rows
    return mats, n_cols, send


def partition_stats(graph: Graph, n_parts: int) -> dict[str, Any]:
    """How well the node numbering suits ``n_parts`` row blocks: the fraction of edges crossing a
    border, and the rows each device holds for a propagation under each exchange (``halo_rows`` =
    L + P * H, ``all_gather_rows`` = P * L).

    >>> from jaxgcn.core.graph import from_edges, gcn_norm
    >>> g = gcn_norm(from_edges(np.arange(7), np.arange(1, 8))[0])  # a path 0-1-...-7
    >>> s = partition_stats(g, 2)
    >>> s["cut_fraction"], s["halo_width"], s["halo_rows"], s["all_gather_rows"]
    (0.1428..., 1, 6, 8)
    """
    n = graph.n_nodes
    local = -(-n // n_parts)
    adj = _adjacency(graph, local * n_parts)
    rows = np.repeat(np.arange(adj.shape[0]), np.diff(adj.indptr))
    cut = float(np.mean(rows // local != adj.indices // local)) if adj.nnz else 0.0
    width = 1
    for p in range(n_parts):
        _, per_source = _halo(adj[p * local:(p + 1) * local], p, n_parts, local)
        width = max(width, max(len(s) for s in per_source))
    return {"parts": n_parts, "rows_per_device": local, "cut_fraction": cut, "halo_width": width,
            "halo_rows": local + n_parts * width, "all_gather_rows": local * n_parts}


def propagate_block(block: GraphBlock, x: jax.Array, *, product: Callable[[CSR, jax.Array], jax.Array] = csr_matmul,
                    lists_product: Callable[[Any, jax.Array], jax.Array] = gather.rows_product) -> jax.Array:
    """``Â · x`` for this device's rows (inside ``shard_map``): exchange the source rows, aggregate
    them with ``product`` (the plan's :attr:`jaxgcn.core.ops.Ops.csr_product`), or, for a block made
    as neighbour lists, ``lists_product`` (:attr:`jaxgcn.core.ops.Ops.block_lists`:
    :func:`jaxgcn.distributed.sharded.block_propagation`)."""
    if block.send is None:
        sources = jax.lax.all_gather(x, AXIS, tiled=True)  # [P * L, width]
    else:
        mine = x[block.send] if block.send_lists is None else \
            lists_product(block.send_lists, x).reshape(*block.send.shape, x.shape[-1])
        received = jax.lax.all_to_all(mine, AXIS, 0, 0)  # [P, H, width]: [q] came from device q
        sources = jnp.concatenate([x, received.reshape(-1, x.shape[-1])])
    if block.lists is not None:  # an accelerator's blocks: gathers forward and backward, no scatter
        aggregated = lists_product(block.lists, sources)
    else:  # the fused kernel on the CPU
        aggregated = product(block.adj, sources)
    return block.self_weights[:, None].astype(x.dtype) * x + aggregated


def shard_nodes(x: Any, n_pad: int, n_parts: int) -> Any:
    """Pad a per-node host array to ``n_pad`` rows and stack it as [P, L, ...]; a host CSR becomes
    stacked CSR row blocks."""
    if isinstance(x, CSR):
        m = sp.csr_matrix((np.asarray(x.data), np.asarray(x.cols), np.asarray(x.indptr)), shape=x.shape)
        m = sp.vstack([m, sp.csr_matrix((n_pad - m.shape[0], m.shape[1]), dtype=m.dtype)], format="csr")
        local = n_pad // n_parts
        return stack_csr([csr_from_scipy(m[p * local:(p + 1) * local]) for p in range(n_parts)], m.shape[1])
    x = np.asarray(x)
    padded = np.concatenate([x, np.zeros((n_pad - x.shape[0], *x.shape[1:]), x.dtype)])
    return padded.reshape(n_parts, n_pad // n_parts, *x.shape[1:])
