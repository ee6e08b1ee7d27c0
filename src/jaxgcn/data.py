"""What a training run reads: the prepared graph, features, labels and split masks (a pytree)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxgcn.csr import CSR, row_pointers
from jaxgcn.graph import Graph, row_plan
from jaxgcn.layers import Features

# Per-node split codes, as checkpoints store a split (split-<n>.npy) and split files are written.
SPLIT_CODES = {"train": 1, "val": 2, "test": 3}  # 0 = in no split


class TrainData(NamedTuple):
    """Everything a run reads, on the device.

    Attributes:
        graph: normalized graph with n_nodes nodes.
        x: [n_nodes, n_features] dense array or row-sorted BCOO.
        labels: [n_nodes] int32 (-1 = unlabelled; must be outside every mask).
        train_mask, val_mask, test_mask: [n_nodes] float32 0/1 masks.
        focus: [K] int32, sorted: every node in a training or validation mask (of any split), the
            only rows of the logits the training loop's loss and metrics read; None = every node.
            Set by :func:`with_focus`, which the training entry points call.
        focus_pos: [n_nodes] int32: each node's place in ``focus``, -1 for a node not in it (the
            focus gather's gradient reads it); set with ``focus``.
        eval_rows: the rows each layer of the loop's evaluation computes for the logits at ``focus``
            (:func:`jaxgcn.graph.row_plan`); set by :func:`with_focus` with ``hops`` (the model's
            layers, 2 or more) where the graph has its CSR and ``focus`` is at most half the nodes
            (None otherwise: every layer computes every row).
        train_rows: the same for a training step's logits, at the nodes of a training mask (of any
            split) only.
        x_reached: the CSR features with their transposed pattern cut to the nodes a training
            loss's gradient reaches (:func:`with_focus` with ``hops``), from which the training
            step's first layer takes its weights' gradient; None: ``x``'s own pattern.
    """

    graph: Graph
    x: Features
    labels: jax.Array
    train_mask: jax.Array
    val_mask: jax.Array
    test_mask: jax.Array
    focus: jax.Array | None = None
    focus_pos: jax.Array | None = None
    eval_rows: Any = None
    train_rows: Any = None
    x_reached: Any = None


def with_focus(data: TrainData, hops: int = 0) -> TrainData:
    """``data`` with :attr:`TrainData.focus` computed from its masks (on the host, once).

    The training loop then computes the log-softmax, cross-entropy and accuracies of the nodes in a
    training or validation mask only: on Cora's public split 640 of 2,708 nodes, where the loss
    and metrics over every node were 11-13% of a batched epoch (benchmarks/profile_epoch.py).
    Masks that are not concrete arrays (traced, or blocks of a sharded graph) keep ``focus`` None.

    With ``hops`` (the model's layers), CSR features also get :attr:`TrainData.x_reached`: a
    training loss reads the logits of training nodes, whose gradient reaches the first layer's
    product ``X·W`` only within ``hops`` propagations of them (Cora's public split: 1,664 of 2,708
    nodes). The rest of its rows are exactly zero, so ``Xᵀ·g`` over the entries of the reached
    rows alone is the same sum, without testing each entry's row. A graph with its CSR also gets
    :attr:`TrainData.train_rows` and :attr:`TrainData.eval_rows`: which rows each of the ``hops``
    layers computes for the logits a training step or an evaluation reads (a 2-layer model on
    Cora's public split trains its hidden layer at the 644 rows around the 140 training nodes).

    >>> import numpy as np
    >>> m = np.array([1.0, 0, 0, 0]), np.array([0, 0, 1.0, 0]), np.array([0, 1.0, 0, 1.0])
    >>> focused = with_focus(TrainData(None, None, None, *m))
    >>> focused.focus.tolist(), focused.focus_pos.tolist()
    ([0, 2], [0, -1, 1, -1])
    """
    try:
        train, val = np.asarray(data.train_mask), np.asarray(data.val_mask)
    except (TypeError, jax.errors.TracerArrayConversionError):
        return data._replace(focus=None, focus_pos=None, eval_rows=None, train_rows=None, x_reached=None)
    used = (train != 0) | (val != 0)
    if used.ndim == 2:  # stacked splits [n_splits, n]
        used = used.any(axis=0)
    pos = np.where(used, np.cumsum(used) - 1, -1)  # each node's place in focus (sorted)
    focus = np.flatnonzero(used).astype(np.int32)
    trained = train != 0 if train.ndim == 1 else (train != 0).any(axis=0)
    plans = [None, None]
    if getattr(data.graph, "csr", None) is not None:
        # each layer at the rows the logits read need: Cora's public split, the last layer 640 of
        # 2,708 rows (evaluation) or 140 (training), the first 1,756 or 644 (benchmarks/profile_epoch.py)
        plans = [row_plan(data.graph, np.flatnonzero(nodes), hops) for nodes in (used, trained)]
        plans = [None if p is None else jax.tree.map(jnp.asarray, p) for p in plans]
    return data._replace(focus=jnp.asarray(focus), focus_pos=jnp.asarray(pos.astype(np.int32)), eval_rows=plans[0],
                         train_rows=plans[1], x_reached=_reached_features(data, trained, hops))


def _reached_features(data: TrainData, trained: np.ndarray, hops: int) -> Any:
    """``data.x`` with its transposed pattern cut to the rows within ``hops`` propagations of the
    ``trained`` nodes (:func:`with_focus`), or None where that cuts little or does not apply."""
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
