"""The C++ kernel's side of the ops seam (:class:`jaxgcn.core.ops.Ops`, ``native``): the first layer's
sparse product and pair, the per-run dense products, the fused hash dropout and Adam pass, row
plans (:func:`row_plan`) and the other host-side precomputations of a run's data (:func:`prepare`),
and the sharded path's CSR product, all from :mod:`jaxgcn.native.csr` and :mod:`jaxgcn.native.fused`. The execution
plan gives a run these ops where the backend is ``csr`` and the kernel can run here (:func:`jaxgcn.plan.ops_for`,
which asks the one availability oracle, :func:`jaxgcn.native.csr.kernel_status`).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse as jsparse

from jaxgcn.native.csr import CSR, row_pointers, spmm, spmm_given, spmm_pair
from jaxgcn.native.fused import hash_dropout, run_matmul
from jaxgcn.core.graph import Graph, focus_rows
from jaxgcn.core.feature_lists import FeatureLists


def matmul_runs(x: Any, values: jax.Array | None, w: jax.Array, *, xla: Callable[..., jax.Array]) -> jax.Array:
    """Per-run ``x_r @ w_r`` (:attr:`jaxgcn.core.ops.Ops.matmul_runs`) on the kernel where it serves: a
    CSR input (R matrices with one pattern, no [nnz, R*out] buffer) and per-run hidden activations
    [n, R, in]; else ``xla``'s (a BCOO or dense [n, in] input)."""
    d_in, r, d_out = w.shape
    if isinstance(x, CSR):
        return spmm(x, w.reshape(d_in, r * d_out), values).reshape(x.shape[0], r, d_out)
    if isinstance(x, (jsparse.BCOO, FeatureLists)) or x.ndim == 2:
        return xla(x, values, w)
    # one run too: the kernel reads each array once in its own layout, and its weight gradient sums
    # the live rows in order: the same sums over some rows only (row_plan) as over
    # every row, bit for bit, where XLA's dot blocks them anew
    return run_matmul(x, w)


def pair(x: Any) -> Callable[..., tuple[jax.Array, jax.Array]] | None:
    """The first layer's training/evaluation pair in one pass (:func:`jaxgcn.native.csr.spmm_pair`), for CSR
    features."""
    return spmm_pair if isinstance(x, CSR) else None


def csr_product(a: CSR, b: jax.Array) -> jax.Array:
    """``a @ b`` with the fused kernel (a sharded run's row block: :func:`jaxgcn.distributed.propagate_block`)."""
    return spmm(a, b.astype(jnp.float32)).astype(b.dtype)


def fields(execution: Any) -> dict[str, Any]:
    """The kernel's :class:`jaxgcn.core.ops.Ops` fields for a planned ``execution``: the hidden dropout
    fused and row plans taken where the masks are the counter hash's (row plans: backend ``csr``),
    and the data's precomputations (:func:`prepare`; its row plans only where the step takes them)."""
    hashed = execution.dropout_rng == "hash"
    kernel = dict(pair=pair, given=spmm_given, drop_hidden=hash_dropout if hashed else None,
                  fused_adam=True, row_plans=execution.backend == "csr" and hashed, csr_product=csr_product)
    # the host-side precomputations (prepare): row plans only where a step takes them
    return dict(kernel, prepare=functools.partial(prepare, rows=kernel["row_plans"]))


class RowPlan(NamedTuple):
    """Which rows each layer of a forward pass computes, when only the logits of some nodes are
    read (:func:`row_plan`): a pytree of host or device arrays.

    Attributes:
        nodes: [K] sorted node ids whose logits the pass returns (the last layer's rows).
        mats: per layer ``l``, the rows of ``Â`` its propagation computes (:func:`focus_rows`, columns
            cut to the rows layer ``l`` holds), or None: every row (the square product).
        ids: per layer ``l``, the node ids of the rows its input holds (sorted), or None: every node.
            Dropout draws its masks by node id, so a row's mask is the one the full pass draws.
        pos: per layer ``l``, the places of its output rows among its input rows, or None (the same
            rows): a residual connection or an input aggregated ahead (``aggregate_first``) takes them.
    """

    nodes: Any
    mats: tuple
    ids: tuple
    pos: tuple


def row_plan(graph: Graph, nodes: Any, layers: int, *, most: float = 0.75) -> RowPlan | None:
    """The rows each of ``layers`` layers needs for the logits of ``nodes`` (sorted, distinct): the
    last layer computes ``nodes``' rows, each layer below the rows within one more propagation,
    while those are at most ``most`` of the nodes (then every row, down to the first layer).
    None where ``nodes`` themselves are over half the nodes (little to save) or ``layers`` < 2.

    >>> from jaxgcn.core.graph import from_edges, gcn_norm, with_csr
    >>> g = with_csr(gcn_norm(from_edges([0, 1, 2], [1, 2, 3])[0]))   # a path 0-1-2-3
    >>> plan = row_plan(g, np.array([0]), 2)
    >>> plan.ids[1].tolist(), plan.mats[1].shape, plan.mats[0].shape, plan.pos[1].tolist()
    ([0, 1], (1, 2), (2, 4), [0])
    """
    nodes = np.asarray(nodes, np.int64)
    n = graph.n_nodes
    if layers < 2 or graph.csr is None or 2 * nodes.size > n:
        return None
    indptr, cols = np.asarray(graph.csr.indptr), np.asarray(graph.csr.cols)
    sets = [nodes]  # sets[k]: the rows of layer (layers - 1 - k)'s output
    while len(sets) < layers:
        reached = np.zeros(n, bool)
        reached[sets[-1]] = True
        reached[cols[np.repeat(reached, np.diff(indptr))]] = True
        if reached.sum() > most * n:
            break
        sets.append(np.flatnonzero(reached))
    outs = sets[::-1]  # outs[j]: layer (layers - len(sets) + j)'s output rows
    first = layers - len(outs)  # the layers below compute every row
    mats, ids, pos = [None] * layers, [None] * layers, [None] * layers
    for layer in range(first, layers):
        out_rows = outs[layer - first]
        in_rows = outs[layer - first - 1] if layer > first else None
        mats[layer] = focus_rows(graph, out_rows, in_rows)
        ids[layer] = None if in_rows is None else in_rows.astype(np.int32)
        pos[layer] = (out_rows if in_rows is None else np.searchsorted(in_rows, out_rows)).astype(np.int32)
    return RowPlan(nodes.astype(np.int32), tuple(mats), tuple(ids), tuple(pos))


class NativePrepared(NamedTuple):
    """The kernel's host-side precomputations of a run's data (:func:`prepare`), which a training
    step reads from :attr:`jaxgcn.core.data.TrainData.aux` (a pytree; each field None where it does not apply).

    Attributes:
        eval_rows: the rows each layer of the loop's evaluation computes for the logits at the data's
            ``focus`` (:func:`row_plan`), where the graph has its CSR, the model 2 or more layers and
            ``focus`` is at most half the nodes (None otherwise: every layer computes every row).
        train_rows: the same for a training step's logits, at the nodes of a training mask (of any
            split) only.
        x_reached: the CSR features with their transposed pattern cut to the nodes a training
            loss's gradient reaches, from which the training step's first layer takes its weights'
            gradient; None: ``x``'s own pattern.
    """

    eval_rows: RowPlan | None
    train_rows: RowPlan | None
    x_reached: Any


def prepare(data: Any, hops: int, *, rows: bool = True) -> NativePrepared | None:
    """The kernel's precomputations (:class:`NativePrepared`) of ``data``, a
    :class:`~jaxgcn.core.data.TrainData` with its ``focus`` (:func:`jaxgcn.core.data.with_focus`, which calls
    this as the ops' ``prepare`` with ``hops``, the model's layers), on the host, once; None where
    the masks are not concrete (no focus). ``rows=False``: no row plans (the ops take none).

    A training loss reads the logits of training nodes, whose gradient reaches the first layer's
    product ``X·W`` only within ``hops`` propagations of them (Cora's public split: 1,664 of 2,708
    nodes). The rest of its rows are exactly zero, so ``Xᵀ·g`` over the entries of the reached
    rows alone is the same sum, without testing each entry's row (``x_reached``). A graph with its
    CSR also gets which rows each of the ``hops`` layers computes for the logits a training step
    or an evaluation reads (a 2-layer model on Cora's public split trains its hidden layer at the
    644 rows around the 140 training nodes).
    """
    if data.focus is None:
        return None
    train = np.asarray(data.train_mask)
    trained = train != 0 if train.ndim == 1 else (train != 0).any(axis=0)
    plans = [None, None]
    if rows and getattr(data.graph, "csr", None) is not None:
        # each layer at the rows the logits read need: Cora's public split, the last layer 640 of
        # 2,708 rows (evaluation) or 140 (training), the first 1,756 or 644 (benchmarks/profile_epoch.py)
        plans = [row_plan(data.graph, nodes, hops) for nodes in (np.asarray(data.focus), np.flatnonzero(trained))]
        plans = [None if p is None else jax.tree.map(jnp.asarray, p) for p in plans]
    return NativePrepared(plans[0], plans[1], _reached_features(data, trained, hops))


def _reached_features(data: Any, trained: np.ndarray, hops: int) -> Any:
    """``data.x`` with its transposed pattern cut to the rows within ``hops`` propagations of the
    ``trained`` nodes (:func:`prepare`), or None where that cuts little or does not apply."""
    x, a = data.x, getattr(data.graph, "csr", None)
    if hops < 1 or a is None or not isinstance(x, CSR) or x.t_indptr is None:
        return None
    reached = trained.copy()
    indptr, cols = np.asarray(a.indptr), np.asarray(a.cols)
    for _ in range(hops):  # a gradient row g[i] reaches the columns of row i of Â (and i, its self-loop)
        reached[cols[np.repeat(reached, np.diff(indptr))]] = True
    if 4 * reached.sum() > 3 * reached.size:  # little to cut: not worth the pattern's copy
        return None
    t_indptr, t_rows, t_perm = (np.asarray(v) for v in (x.t_indptr, x.t_rows, x.t_perm))
    keep = reached[t_rows]
    columns = np.repeat(np.arange(t_indptr.size - 1), np.diff(t_indptr))  # of each transposed entry
    cut_indptr = row_pointers(np.bincount(columns[keep], minlength=t_indptr.size - 1))
    return x._replace(t_indptr=jnp.asarray(cut_indptr.astype(np.int32)), t_rows=jnp.asarray(t_rows[keep]),
                      t_perm=jnp.asarray(t_perm[keep]))
