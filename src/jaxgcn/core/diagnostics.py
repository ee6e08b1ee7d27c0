"""Why a run diverged, told from what the host can see: the learning rate, the scale of the
features and the spectral radius of the adjacency ``Â``.

These run on the host after a run has stopped (NumPy and SciPy, no compiled program): the training
loop only flags a NaN/inf loss, and :func:`divergence_message` explains it in the error that
:func:`jaxgcn.training.loop.fit` and :func:`jaxgcn.training.runs.fit_runs` raise; :func:`divergence_hint` names a
loss that blew up without one (the CLI prints it). ``config`` is any object with the run's ``lr``
(a :class:`jaxgcn.training.config.TrainConfig`).
"""

from __future__ import annotations

from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from jaxgcn.core.data import TrainData


class _Settings(Protocol):
    lr: float


def row_sums_of(graph: Any) -> np.ndarray:
    """Row sums of the adjacency ``Â`` (self-loops included), from the edge list or the CSR form."""
    if graph.has_edge_list:
        off = np.bincount(np.asarray(graph.receivers), np.asarray(graph.weights), graph.n_nodes)
    else:
        indptr = np.asarray(graph.csr.indptr)
        off = np.bincount(np.repeat(np.arange(graph.n_nodes), np.diff(indptr)), np.asarray(graph.csr.data),
                          graph.n_nodes)
    return off + np.asarray(graph.self_weights)


def adjacency_of(graph: Any) -> Any:
    """The adjacency ``Â`` (self-loops included) as a host SciPy CSR [n_nodes, n_nodes] matrix, from
    the edge list or the CSR form (``out = Â @ x``: row = receiver)."""
    import scipy.sparse as sp

    n = graph.n_nodes
    if graph.has_edge_list:
        off = sp.csr_matrix((np.asarray(graph.weights, np.float64),
                             (np.asarray(graph.receivers), np.asarray(graph.senders))), shape=(n, n))
    else:
        off = sp.csr_matrix((np.asarray(graph.csr.data, np.float64), np.asarray(graph.csr.cols),
                             np.asarray(graph.csr.indptr)), shape=(n, n))
    return (off + sp.diags(np.asarray(graph.self_weights, np.float64))).tocsr()


def adjacency_scale(graph: Any) -> float:
    """The spectral radius of ``Â``: how much one propagation can scale features up (1 for a sym- or
    row-normalized ``Â``, about the largest degree for a raw ``A + I``).

    Cheap where it can be: for a non-negative ``Â`` the radius is at most the largest row sum and
    the largest column sum, so a row-normalized graph needs no eigen solver; otherwise ARPACK
    (``eigsh`` when ``Â`` is symmetric) finds the largest eigenvalue.

    >>> from jaxgcn.core.graph import from_edges, gcn_norm
    >>> g, _ = from_edges([0, 0, 0], [1, 2, 3], add_self_loops=True)
    >>> round(adjacency_scale(g), 3), round(adjacency_scale(gcn_norm(g, "sym")), 3)
    (2.732, 1.0)
    """
    import scipy.sparse.linalg as spla

    adj = adjacency_of(graph)
    if adj.nnz == 0:
        return 0.0
    bound = float(min(abs(adj).sum(axis=1).max(), abs(adj).sum(axis=0).max()))
    if bound <= 1.0:
        return bound
    symmetric = abs(adj - adj.T).max() <= 1e-6 * abs(adj).max()
    if adj.shape[0] <= 256:
        dense = adj.toarray()
        values = np.linalg.eigvalsh(dense) if symmetric else np.linalg.eigvals(dense)
        return float(np.max(np.abs(values)))
    try:
        solve = spla.eigsh if symmetric else spla.eigs
        values = solve(adj, k=1, which="LM", return_eigenvectors=False, tol=1e-4, maxiter=2000)
        return float(np.max(np.abs(values)))
    except spla.ArpackNoConvergence:
        return bound  # an upper bound: may name the adjacency when it is not the cause, never the reverse


def divergence_message(data: TrainData | None, config: _Settings, epoch: int, *, norm: str | None = None) -> str:
    """Explain a NaN/inf loss from what the run can see: lr, feature scale, adjacency scale
    (``norm``: the normalization the graph was prepared with, when known; ``data`` None: a sharded
    run's, whose rows are spread over devices; see :func:`likely_causes`). THE wording of one run's
    divergence (:func:`jaxgcn.training.loop.fit`, :func:`jaxgcn.distributed.fit_sharded`; a batch names
    its runs before it)."""
    return (f"training diverged: the loss became NaN/inf at epoch {epoch}; likely cause: "
            + likely_causes(data, config, norm=norm))


def divergence_hint(losses: np.ndarray, data: TrainData, config: _Settings, factor: float = 10.0, *,
                    norm: str | None = None) -> str | None:
    """A hint when training blew up without a NaN (Adam's bounded steps usually prevent one): the
    training loss rose above ``factor`` times its first value. ``losses``: [epochs] or [runs, epochs].

    >>> divergence_hint(np.array([2.0, 1.5, 1.2]), None, None) is None
    True
    """
    losses = np.atleast_2d(np.asarray(losses, np.float64))
    first, worst = losses[:, 0], np.nanmax(np.where(np.isfinite(losses), losses, np.nan), axis=1)
    bad = np.flatnonzero(worst > factor * np.maximum(first, 1e-6))
    if bad.size == 0:
        return None
    r = int(bad[0])
    runs = f" (in {bad.size} of {losses.shape[0]} runs)" if losses.shape[0] > 1 else ""
    return (f"hint: the training loss rose from {first[r]:.3g} to {worst[r]:.3g}{runs}: training diverged; likely "
            "cause: " + likely_causes(data, config, norm=norm))


ADJACENCY_TOLERANCE = 1.01  # a normalized Â has spectral radius 1; float32 rounding stays far below this


def adjacency_cause(graph: Any, norm: str | None = None) -> str | None:
    """Why the adjacency may make a run diverge, or ``None``: a sym- or row-normalized ``Â`` has
    spectral radius 1, so only a larger one (:func:`adjacency_scale`) is named, with the
    normalization the graph was prepared with (``norm``: ``"sym"``, ``"row"``, ``"none"``, or
    ``None`` when unknown). Row sums above 1 are no sign: sym-normalized Cora has rows summing to 2."""
    scale = adjacency_scale(graph)
    if scale <= ADJACENCY_TOLERANCE:
        return None
    what = f"the largest eigenvalue of Â is {scale:.3g}, so each layer can scale features up by that much"
    if norm == "none":
        return f"the adjacency is unnormalized: you chose no normalization (norm='none') and {what}; use norm='sym'"
    if norm in ("sym", "row"):
        return (f"the adjacency is not normalized as norm={norm!r} implies ({what}, where a normalized Â "
                "has 1): check the edge weights")
    return f"the adjacency is unnormalized ({what}; a normalized Â has 1): use norm='sym' (jaxgcn.core.graph.gcn_norm)"


def likely_causes(data: TrainData | None, config: _Settings, *, norm: str | None = None) -> str:
    """The causes of a diverging run that its settings and data show: a large ``lr``, unnormalized
    features, an adjacency that scales features up (:func:`adjacency_cause`; ``norm``: the
    normalization the graph was prepared with, ``prepared.info["norm"]``, when known). ``data``
    None: the data is not on this host in one piece (a sharded run's row blocks); the settings speak.

    >>> from types import SimpleNamespace
    >>> likely_causes(None, SimpleNamespace(lr=5.0))
    'the learning rate 5 is large (try lr=0.01)'
    """
    causes = []
    if config.lr > 0.1:
        causes.append(f"the learning rate {config.lr:g} is large (try lr=0.01)")
    if data is not None:
        x = data.x.data if hasattr(data.x, "data") and not isinstance(data.x, jax.Array) else data.x
        feature_scale = float(jnp.max(jnp.abs(x))) if x.size else 0.0
        if feature_scale > 10:
            causes.append(f"features are unnormalized (largest |value| {feature_scale:.3g}; "
                          "use row normalization or feature_norm='standardize')")
        adjacency = adjacency_cause(data.graph, norm)
        if adjacency is not None:
            causes.append(adjacency)
    if not causes:
        causes.append(f"learning rate {config.lr:g} too large for this data, or extreme input values")
    return "; ".join(causes)


def runs_divergence_message(entries: list[Any], data: TrainData, bad: np.ndarray, epoch: int) -> str:
    """THE wording of a batch's divergence: the runs (``entries``, :class:`jaxgcn.training.runs.Entry`)
    whose loss became NaN/inf, indices ``bad``, named with the first one's seed and learning rate,
    then :func:`divergence_message` of its settings."""
    worst = entries[int(bad[0])]
    return f"run(s) {bad.tolist()} (seed {worst.seed}, lr {worst.train.lr:g}): " + divergence_message(
        data, worst.train, epoch)
