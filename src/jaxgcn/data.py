"""What a training run reads: the prepared graph, features, labels and split masks (a pytree)."""

from __future__ import annotations

from typing import NamedTuple

import jax

from jaxgcn.graph import Graph
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
    """

    graph: Graph
    x: Features
    labels: jax.Array
    train_mask: jax.Array
    val_mask: jax.Array
    test_mask: jax.Array
