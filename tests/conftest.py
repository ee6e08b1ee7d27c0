"""Shared test setup: strict JAX promotion rules and a tiny hand-built graph.

Strict dtype promotion and ``rank_promotion="raise"`` make any silent float32/float64 mix or
implicit broadcast an error (CONVENTIONS.md, item 15); pyproject.toml turns warnings into errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np
import pytest

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


class EdgeList(NamedTuple):
    """A raw edge list as a user would pass it to ``from_edges`` (``senders[k] -> receivers[k]``)."""

    senders: np.ndarray
    receivers: np.ndarray
    weights: np.ndarray
    n_nodes: int


@pytest.fixture
def raw_edges() -> EdgeList:
    """Six nodes, deliberately dirty input.

    - 0 <-> 1: an undirected pair, both directions listed.
    - 1 <-> 2: both directions listed, and 1 -> 2 listed TWICE (weights 1 and 2): a duplicate.
    - 2 -> 3: listed one way only (weight 0.5): a directed edge that symmetrization must mirror.
    - 3 <-> 4: an undirected pair.
    - 3 -> 3: an explicit self-loop of weight 3 (must keep weight 3, not get another + 1).
    - node 5: isolated (no edge at all).
    """
    senders = np.array([0, 1, 1, 2, 1, 2, 3, 4, 3])
    receivers = np.array([1, 0, 2, 1, 2, 3, 4, 3, 3])
    weights = np.array([1.0, 1.0, 1.0, 1.0, 2.0, 0.5, 1.0, 1.0, 3.0])
    return EdgeList(senders, receivers, weights, 6)


# The cleaned adjacency of ``raw_edges`` (duplicates="max", symmetrized, missing self-loops added),
# worked out by hand: entry [i, j] is the weight of edge j -> i.
#   [1, 2] and [2, 1]: duplicates 1 -> 2 (1, 2) merge to max 2; 2 -> 1 (1) mirrors to max(1, 2) = 2.
#   [2, 3] = [3, 2] = 0.5: the one-way edge, mirrored.  [3, 3] = 3: the explicit self-loop.
EXPECTED_ADJ_MAX = np.array([
    [1.0, 1.0, 0.0, 0.0, 0.0, 0.0],
    [1.0, 1.0, 2.0, 0.0, 0.0, 0.0],
    [0.0, 2.0, 1.0, 0.5, 0.0, 0.0],
    [0.0, 0.0, 0.5, 3.0, 1.0, 0.0],
    [0.0, 0.0, 0.0, 1.0, 1.0, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.0, 1.0],
], dtype=np.float32)


@pytest.fixture
def expected_adj() -> np.ndarray:
    return EXPECTED_ADJ_MAX.copy()


@pytest.fixture
def graph(raw_edges: EdgeList):
    """The fixture graph cleaned with the defaults (not normalized)."""
    from jaxgcn.graph import from_edges

    g, _ = from_edges(raw_edges.senders, raw_edges.receivers, raw_edges.weights, n_nodes=raw_edges.n_nodes)
    return g


@pytest.fixture
def node_features() -> np.ndarray:
    """[6, 3] float32 features with distinct, non-zero entries."""
    return (np.arange(18, dtype=np.float32).reshape(6, 3) - 7.5) / 4.0


@pytest.fixture(scope="session")
def planetoid_dir() -> Path:
    """The raw Planetoid files (``ind.<name>.*``) kept next to the repository; skip when absent."""
    candidates = [
        Path(__file__).resolve().parents[2] / "shared" / "datasets" / "planetoid",
    ]
    for path in candidates:
        if (path / "ind.cora.graph").is_file():
            return path
    pytest.skip("raw Planetoid files not found (expected ../shared/datasets/planetoid)")
