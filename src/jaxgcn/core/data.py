"""What a training run reads: the prepared graph, features, labels and split masks (a pytree)."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxgcn.core.graph import Graph
from jaxgcn.core.layers import Features

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
        aux: what the ops that train on it precompute of it on the host (their ``prepare``,
            :attr:`jaxgcn.core.ops.Ops.prepare`: the kernel's row plans and cut features,
            :class:`jaxgcn.core.native_ops.NativePrepared`), a pytree the training step reads; set by
            :func:`with_focus`. None: nothing (XLA's ops, or no ``prepare`` given).

    The masks are float32 because the compiled loop multiplies by them (``logits[mask]`` breaks
    jit); :meth:`mask` is the boolean view to select with, :attr:`edge_index` the cleaned graph's
    edges in PyG's layout:

    >>> d = TrainData(None, None, np.array([2, 0, 1]), *np.eye(3, dtype=np.float32))
    >>> d.labels[d.mask("test")].tolist(), d.mask("train").tolist()
    ([1], [True, False, False])
    """

    graph: Graph
    x: Features
    labels: jax.Array
    train_mask: jax.Array
    val_mask: jax.Array
    test_mask: jax.Array
    focus: jax.Array | None = None
    focus_pos: jax.Array | None = None
    aux: Any = None

    def mask(self, split: str) -> np.ndarray:
        """Host bool ``[n_nodes]`` (``[n_splits, n_nodes]`` for stacked splits): the nodes of ``split``
        ("train", "val" or "test"), so that ``data.labels[data.mask("test")]`` selects them."""
        if split not in SPLIT_CODES:
            raise ValueError(f"split={split!r}: choose one of {', '.join(map(repr, SPLIT_CODES))}")
        return np.asarray(getattr(self, f"{split}_mask")) != 0

    @property
    def edge_index(self) -> np.ndarray:
        """[2, n_edges] int32: the prepared graph's off-diagonal edges, row 0 the senders and row 1 the
        receivers (PyG's layout; self-loops live in ``graph.self_weights``)."""
        return np.stack([np.asarray(self.graph.senders), np.asarray(self.graph.receivers)])


def with_focus(data: TrainData, hops: int = 0, prepare: Callable[[TrainData, int], Any] | None = None) -> TrainData:
    """``data`` with :attr:`TrainData.focus` computed from its masks (on the host, once).

    The training loop then computes the log-softmax, cross-entropy and accuracies of the nodes in a
    training or validation mask only: on Cora's public split 640 of 2,708 nodes, where the loss
    and metrics over every node were 11-13% of a batched epoch (benchmarks/profile_epoch.py).
    Masks that are not concrete arrays (traced, or blocks of a sharded graph) keep ``focus`` None.

    ``prepare`` (the ops' :attr:`jaxgcn.core.ops.Ops.prepare`, which the training entry points pass)
    then precomputes what those ops read of the focused data for a model of ``hops`` layers
    (:attr:`TrainData.aux`): the C++ kernel's row plans and cut features
    (:func:`jaxgcn.core.native_ops.prepare`).

    >>> import numpy as np
    >>> m = np.array([1.0, 0, 0, 0]), np.array([0, 0, 1.0, 0]), np.array([0, 1.0, 0, 1.0])
    >>> focused = with_focus(TrainData(None, None, None, *m))
    >>> focused.focus.tolist(), focused.focus_pos.tolist()
    ([0, 2], [0, -1, 1, -1])
    """
    try:
        train, val = np.asarray(data.train_mask), np.asarray(data.val_mask)
    except (TypeError, jax.errors.TracerArrayConversionError):
        return data._replace(focus=None, focus_pos=None, aux=None)
    used = (train != 0) | (val != 0)
    if used.ndim == 2:  # stacked splits [n_splits, n]
        used = used.any(axis=0)
    pos = np.where(used, np.cumsum(used) - 1, -1)  # each node's place in focus (sorted)
    focus = np.flatnonzero(used).astype(np.int32)
    focused = data._replace(focus=jnp.asarray(focus), focus_pos=jnp.asarray(pos.astype(np.int32)), aux=None)
    return focused if prepare is None else focused._replace(aux=prepare(focused, hops))
