"""Layers as pairs of pure functions ``init(key, in_dim, out_dim) -> params`` / ``apply(params, ...)``.

Node features may be a dense ``jax.Array``, a sparse ``jax.experimental.sparse.BCOO`` matrix with
row-sorted indices, or a :class:`jaxgcn.native.csr.CSR` matrix for the fused kernel (see
:func:`sparse_features`); :func:`dropout` and :func:`matmul` accept all three, so sparse inputs are
never densified. Both sparse layouts store the non-zeros in the same row-major order, so dropout
draws the same mask for either.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse as jsparse

from jaxgcn.native.csr import CSR, csr_from_scipy, csr_matmul
from jaxgcn.core import feature_lists
from jaxgcn.core.feature_lists import FeatureLists, sorted_csr
from jaxgcn.core.graph import Graph
from jaxgcn.core.hyper import keep_threshold  # host-side, declared with the per-run inputs it makes
from jaxgcn.core.propagate import propagate
from jaxgcn.core.validate import check_sparse

Params = dict[str, Any]
Features = jax.Array | jsparse.BCOO | CSR | FeatureLists


def is_sparse(x: Any) -> bool:
    """True for the sparse feature layouts (BCOO, CSR or an accelerator's :class:`FeatureLists`)."""
    return isinstance(x, (jsparse.BCOO, CSR, FeatureLists))


def sparse_features(matrix: Any, dtype: Any = jnp.float32, *, layout: str = "bcoo") -> jsparse.BCOO | CSR:
    """Turn a SciPy sparse [n_nodes, n_features] matrix into a row-sorted BCOO (``layout="bcoo"``)
    or a :class:`~jaxgcn.native.csr.CSR` with its transposed pattern (``layout="csr"``) on the device.

    >>> import scipy.sparse as sp
    >>> sparse_features(sp.eye(3, format="csr")).nse, sparse_features(sp.eye(3), layout="csr").shape
    (3, (3, 3))
    """
    if layout not in ("bcoo", "csr"):
        raise ValueError(f"layout={layout!r} must be 'bcoo' or 'csr'")
    check_sparse(matrix, "sparse_features")  # the gather and the kernel trust every index
    if layout == "csr":
        return jax.device_put(csr_from_scipy(matrix, np.dtype(dtype)))
    csr = sorted_csr(matrix)
    rows = np.repeat(np.arange(csr.shape[0], dtype=np.int32), np.diff(csr.indptr))
    idx = np.stack([rows, csr.indices.astype(np.int32)], axis=1)
    return jsparse.BCOO((jnp.asarray(csr.data, dtype), jnp.asarray(idx)), shape=csr.shape,
                        indices_sorted=True, unique_indices=True)


def _mix32(x: jax.Array) -> jax.Array:
    """A 32-bit integer hash with good avalanche (Wellons' "lowbias32")."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(0x846CA68B)
    return x ^ (x >> 16)


def hash_bits(counter: jax.Array, seeds: jax.Array) -> jax.Array:
    """32 random bits per counter value from two 32-bit seeds (``seeds[..., 0]``, ``seeds[..., 1]``,
    broadcast against ``counter``). The one formula behind every hash dropout mask, single-run and
    batched alike, so both draw the same masks."""
    return _mix32(_mix32(counter * jnp.uint32(0x9E3779B9) ^ seeds[..., 0]) + seeds[..., 1])


def keep_mask(key: jax.Array, shape: tuple[int, ...], rate: float, *, rng: str = "hash") -> jax.Array:
    """Boolean mask that is True with probability ``1 - rate``.

    ``rng="jax"`` draws it with ``jax.random.bernoulli``. ``rng="hash"`` (the default) draws two
    32-bit seeds from ``key`` with ``jax.random.bits`` and hashes the element counter with them:
    XLA's CPU random-bit generators cost ~13 ns per number (a Cora feature mask: ~1 ms, more than
    the rest of the training step), the hash ~1.5 ns. The hash is a counter-based generator of
    the kind GPU dropout kernels use; it is not cryptographic and needs not be for dropout.

    >>> m = keep_mask(jax.random.key(0), (100_000,), 0.3)
    >>> abs(float(m.mean()) - 0.7) < 0.01
    True
    """
    if rng == "jax":
        return jax.random.bernoulli(key, 1.0 - rate, shape)
    if rng != "hash":
        raise ValueError(f"rng={rng!r} must be 'hash' or 'jax'")
    seeds = jax.random.bits(key, (2,), jnp.uint32)
    counter = jax.lax.iota(jnp.uint32, int(np.prod(shape))).reshape(shape)
    bits = hash_bits(counter, seeds)
    threshold = keep_threshold(rate)
    return bits >= jnp.uint32(threshold)


def dropout(key: jax.Array | None, x: Features, rate: float, *, train: bool, rng: str = "hash") -> Features:
    """Inverted dropout: zero each entry with probability ``rate``, scale the rest by ``1/(1-rate)``.

    For a BCOO input only the stored non-zeros are dropped (Kipf's sparse dropout), which costs
    O(nnz) instead of O(n_nodes * n_features).

    Args:
        key: PRNG key; required when ``train`` and ``rate > 0``.
        x: [n, d] dense array or BCOO.
        rate: probability to DROP an entry, in [0, 1).
        train: apply dropout only when True.
        rng: ``"hash"`` or ``"jax"``, see :func:`keep_mask`.

    >>> y = dropout(jax.random.key(0), jnp.ones((2, 4)), 0.5, train=True)
    >>> sorted(set(y.ravel().tolist()))
    [0.0, 2.0]
    """
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"dropout rate {rate} must be in [0, 1): it is the probability to drop")
    if not train or rate == 0.0:
        return x
    if key is None:
        raise ValueError("dropout in training needs a PRNG key: pass key=jax.random.key(seed)")
    if is_sparse(x):
        keep = keep_mask(key, x.data.shape, rate, rng=rng)
        data = jnp.where(keep, x.data / (1.0 - rate), 0.0).astype(x.data.dtype)
        if isinstance(x, (CSR, FeatureLists)):
            return x._replace(data=data)
        return jsparse.BCOO((data, x.indices), shape=x.shape, indices_sorted=True, unique_indices=True)
    keep = keep_mask(key, x.shape, rate, rng=rng)
    return jnp.where(keep, x / (1.0 - rate), 0.0).astype(x.dtype)


def matmul(x: Features, w: jax.Array) -> jax.Array:
    """``x @ w`` for dense ``x``, row-sorted BCOO ``x`` or CSR ``x`` ([n, d] @ [d, k] -> [n, k]).

    The BCOO product is a gather of ``w``'s rows plus a sorted ``segment_sum``, which measured
    faster on CPU than BCOO's generic ``dot_general``; the CSR product is the fused kernel.
    """
    if isinstance(x, CSR):  # the fused kernel; XLA where it cannot run (sharded training on a GPU)
        return csr_matmul(x, w)
    if isinstance(x, FeatureLists):  # gathers only (an accelerator's layout)
        return feature_lists.matmul_runs(x, None, w[:, None, :])[:, 0]
    if isinstance(x, jsparse.BCOO):
        rows, cols = x.indices[:, 0], x.indices[:, 1]
        msgs = x.data[:, None].astype(w.dtype) * w[cols]  # ids were checked on the host
        return jax.ops.segment_sum(msgs, rows, num_segments=x.shape[0], indices_are_sorted=True)
    return x @ w


def glorot(key: jax.Array, in_dim: int, out_dim: int) -> jax.Array:
    """Glorot/Xavier uniform init, as in Kipf's reference: U(-r, r), r = sqrt(6 / (in + out))."""
    return jax.nn.initializers.glorot_uniform()(key, (in_dim, out_dim), jnp.float32)


def gcn_init(key: jax.Array, in_dim: int, out_dim: int, *, bias: bool = False) -> Params:
    """Params of one GCN layer: ``{"w": [in_dim, out_dim]}``, plus ``"b": [out_dim]`` with ``bias``
    (off by default, as in :class:`jaxgcn.core.models.GCNConfig` and Kipf's reference code)."""
    params = {"w": glorot(key, in_dim, out_dim)}
    if bias:
        params["b"] = jnp.zeros((out_dim,), jnp.float32)
    return params


def gcn_apply(
    params: Params,
    graph: Graph,
    x: Features,
    *,
    key: jax.Array | None = None,
    train: bool = False,
    dropout_rate: float = 0.0,
    backend: str = "auto",
    chunk_edges: int | None = None,
) -> jax.Array:
    """One graph convolution (Kipf & Welling 2017, arXiv:1609.02907, eq. 2), before activation.

    ``out = Â · (dropout(x) · W) + b`` with ``Â = D^-1/2 (A + I) D^-1/2`` already in ``graph``.
    The transform comes first so the propagation moves ``out_dim``-wide rows.

    Args:
        params: ``{"w": [in_dim, out_dim], "b"?: [out_dim]}``.
        graph: normalized graph with ``n_nodes`` nodes.
        x: [n_nodes, in_dim] dense or BCOO features.
        key: PRNG key for dropout (required when training with ``dropout_rate > 0``).
        train: training mode (dropout on).
        dropout_rate: probability to drop an input entry.
        backend: propagation backend (see :mod:`jaxgcn.core.propagate`); ``"auto"`` (the default, what
            the model uses): the layout the graph was prepared for, so a graph of
            :func:`jaxgcn.datasets.prepare` with its defaults works as it is.
        chunk_edges: edge block of the ``segment`` backend (see :func:`~jaxgcn.core.propagate.propagate`).

    Returns:
        [n_nodes, out_dim] pre-activation outputs.
    """
    h = matmul(dropout(key, x, dropout_rate, train=train), params["w"])
    h = propagate(graph, h, backend=backend, chunk_edges=chunk_edges)
    return h + params["b"][None, :] if "b" in params else h


def layer_norm(params: Params, x: jax.Array, eps: float = 1e-5) -> jax.Array:
    """Layer normalization over the feature axis: [n, d] -> [n, d], with ``scale``/``bias`` [d]."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * params["scale"][None, :] + params["bias"][None, :]


# ----------------------------------------------------------------------------- the run axis
# Where a batch of runs stacks each leaf of its params (weights [in, R, out], biases and norms
# [R, d]; :func:`jaxgcn.core.models.apply_runs` reads them so), and the tree operations on it that the
# model, the training engine and the results share.

def run_axis(leaf: jax.Array) -> int:
    """The run axis of a stacked params leaf: 1 for weights [in, R, out], 0 for biases and norms [R, d]."""
    return 1 if leaf.ndim == 3 else 0


def run_axes(tree: Any) -> Any:
    return jax.tree.map(run_axis, tree)


def insert_axes(one: Params) -> Any:
    """Where the run axis goes in each leaf of one run's params (weights: 1, biases and norms: 0)."""
    return jax.tree.map(lambda leaf: 1 if leaf.ndim == 2 else 0, one)


def select_running(running: jax.Array, new: Any, old: Any, axes: Any) -> Any:
    """Per run: ``new`` where ``running`` else ``old``; each leaf's run axis given by ``axes``."""
    def pick(a: jax.Array, b: jax.Array, axis: int) -> jax.Array:
        shape = [1] * a.ndim
        shape[axis] = running.shape[0]
        return jnp.where(running.reshape(shape), a, b)
    return jax.tree.map(pick, new, old, axes)


def unstacked_shapes(params: Params) -> Any:
    """The shapes of one run's params, from stacked params."""
    return jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape[:run_axis(leaf)] + leaf.shape[run_axis(leaf) + 1:],
                                                          leaf.dtype), params)
