"""A stochastic block model whose features carry a class signal (for tests, demos and scale runs)."""

from __future__ import annotations

import numpy as np

from jaxgcn.datasets.base import RawGraph
from jaxgcn.datasets.splits import planetoid_split
from jaxgcn.core.validate import check_allocation


def synthetic(
    n_nodes: int = 1000,
    n_classes: int = 4,
    n_features: int = 32,
    avg_degree: float = 8.0,
    homophily: float = 0.8,
    signal: float = 0.5,
    train_per_class: int = 20,
    seed: int = 0,
    n_val: int = 500,
    n_test: int = 1000,
) -> RawGraph:
    """Generate a homophilous SBM graph, vectorized (millions of edges in seconds).

    Each node gets a uniform random class. ``n_nodes * avg_degree / 2`` edges are drawn: a uniform
    source, and a target from the source's class with probability ``homophily`` (else uniform).
    Features are ``signal * mean[class] + N(0, 1)`` with a random unit-variance mean per class.
    The split is Planetoid-style: ``train_per_class`` train nodes per class, then up to ``n_val``
    val and ``n_test`` test nodes (:func:`~jaxgcn.datasets.splits.planetoid_split`).

    >>> g = synthetic(200, n_classes=3, n_features=8, seed=1)
    >>> g.features.shape, int(g.labels.max())
    ((200, 8), 2)
    """
    args = {"n_nodes": n_nodes, "n_classes": n_classes, "n_features": n_features}
    for name, value in args.items():
        if value < 1:
            raise ValueError(f"synthetic: {name}={value} must be >= 1")
    if n_nodes < 2 * n_classes:
        raise ValueError(f"synthetic: n_nodes={n_nodes} is too small for {n_classes} classes")
    if not 0.0 <= homophily <= 1.0 or not 0 <= avg_degree < np.inf:
        raise ValueError(f"synthetic: homophily={homophily} must be in [0, 1] and avg_degree >= 0 (finite), "
                         f"got {avg_degree}")
    n_edges = int(round(n_nodes * avg_degree / 2))
    # dense float32 features (drawn, scaled, summed), 6 int64/float64 arrays per edge, per-node arrays
    check_allocation(12 * n_nodes * n_features + 48 * n_edges + 64 * n_nodes, "synthetic",
                     f"{n_nodes:,} nodes x {n_features:,} features with {n_edges:,} edges",
                     "lower n_nodes, n_features or avg_degree")
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, n_classes, n_nodes).astype(np.int32)
    order = np.argsort(labels, kind="stable")
    starts = np.searchsorted(labels[order], np.arange(n_classes))
    sizes = np.bincount(labels, minlength=n_classes)

    src = rng.integers(0, n_nodes, n_edges)
    cls = labels[src]
    same = order[starts[cls] + (rng.random(n_edges) * sizes[cls]).astype(np.int64)]
    dst = np.where(rng.random(n_edges) < homophily, same, rng.integers(0, n_nodes, n_edges))

    means = rng.standard_normal((n_classes, n_features)).astype(np.float32)
    features = signal * means[labels] + rng.standard_normal((n_nodes, n_features), dtype=np.float32)
    splits = planetoid_split(labels, per_class=train_per_class, n_val=n_val, n_test=n_test, seed=seed)
    return RawGraph("synthetic", src, dst, features, labels, splits)
