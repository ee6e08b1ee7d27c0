"""The GCN model (Kipf & Welling 2017) as a pure ``(init, apply)`` pair built from a config."""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxgcn.graph import Graph
from jaxgcn.propagate import BACKENDS, propagate
from jaxgcn.layers import Features, Params, dropout, gcn_apply, is_sparse, layer_norm, matmul


@dataclasses.dataclass(frozen=True)
class GCNConfig:
    """Architecture of a GCN. Defaults are the paper's: 2 layers, 16 hidden units, dropout 0.5, and
    no bias (Kipf's reference code; measured here on Cora over 20 seeds: 81.7% without bias, 80.6%
    with it, because with a bias the early-stopping rule fires ~50 epochs sooner).

    Attributes:
        hidden: width of every hidden layer.
        layers: number of graph-convolution layers (>= 1).
        dropout: probability to DROP an input entry of each layer during training.
        bias: add a bias after each propagation (off by default, as in the reference code).
        residual: hidden layers add their input (through a linear projection when widths differ).
        layer_norm: layer normalization before each hidden activation (for deeper stacks).
        backend: propagation backend: ``dense``, ``segment``, ``bcoo``, ``csr``, or ``auto`` (the
            default): whatever layout the graph was prepared with (see :func:`jaxgcn.prepare`).
        dropout_rng: ``"hash"`` (fast counter-based masks) or ``"jax"`` (``jax.random.bernoulli``).
        chunk_edges: edge block of the ``segment`` backend (bounds its message buffer); None: all.
        aggregate_first: the first layer computes ``(Â · drop(X)) · W`` instead of ``Â · (drop(X) · W)``
            when its input is dense. Equal in exact arithmetic; cheaper when the input is narrower
            than the layer (the input needs no gradient, so the propagation runs forward only:
            ``--aggregate-first auto`` turns it on when 2 x features < 3 x hidden).
    """

    hidden: int = 16
    layers: int = 2
    dropout: float = 0.5
    bias: bool = False
    residual: bool = False
    layer_norm: bool = False
    backend: str = "auto"
    dropout_rng: str = "hash"
    chunk_edges: int | None = None
    aggregate_first: bool = False

    def __post_init__(self) -> None:
        if self.layers < 1:
            raise ValueError(f"layers={self.layers}: a GCN needs at least 1 layer")
        if self.hidden < 1:
            raise ValueError(f"hidden={self.hidden}: the hidden width must be >= 1")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout={self.dropout}: the drop probability must be in [0, 1)")
        if self.backend not in ("auto", *BACKENDS):
            raise ValueError(f"backend={self.backend!r} must be one of {('auto', *BACKENDS)}")
        if self.chunk_edges is not None and (self.chunk_edges < 1 or self.backend not in ("segment", "auto")):
            raise ValueError(f"chunk_edges={self.chunk_edges} needs the segment backend and a value >= 1 "
                             f"(backend is {self.backend!r}; csr has no message buffer to bound)")
        if self.dropout_rng not in ("hash", "jax"):
            raise ValueError(f"dropout_rng={self.dropout_rng!r} must be 'hash' or 'jax'")


class Model(NamedTuple):
    """``init(key, in_dim, n_classes) -> params``; ``apply(params, graph, x, *, key, train) -> logits``."""

    init: Callable[..., Params]
    apply: Callable[..., jax.Array]


def _widths(config: GCNConfig, in_dim: int, n_classes: int) -> list[int]:
    return [in_dim] + [config.hidden] * (config.layers - 1) + [n_classes]


def gcn(config: GCNConfig = GCNConfig()) -> Model:
    """Build the GCN's pure init/apply functions.

    Params are ``{"layer_0": {"w", "b", ["w_res"], ["ln"]}, ..., "layer_{L-1}": {"w", "b"}}``;
    ``w_res`` (residual projection) exists in the first layer, whose input may be sparse, and where
    widths differ.
    ``apply(..., embed=True)`` returns the input of the last layer (the last hidden representation,
    [n_nodes, hidden]) instead of the logits.

    ``apply(..., aggregated=A_x)`` takes ``Â · x`` precomputed (:func:`aggregate_input`) for the
    first layer of an ``aggregate_first`` model when dropout leaves ``x`` unchanged (evaluation).
    Hidden layer ``l`` computes ``relu(ln(Â · drop(h) · W + b)) [+ drop(h) · W_res or + h]``; the last
    layer returns logits ``Â · drop(h) · W + b``.

    >>> import numpy as np
    >>> from jaxgcn.graph import from_edges, gcn_norm
    >>> g = gcn_norm(from_edges([0, 1], [1, 2])[0])
    >>> model = gcn(GCNConfig(hidden=4))
    >>> params = model.init(jax.random.key(0), 5, 3)
    >>> model.apply(params, g, np.ones((3, 5), np.float32)).shape
    (3, 3)
    """

    def init(key: jax.Array, in_dim: int, n_classes: int) -> Params:
        # Every weight matrix is Glorot-uniform, U(-r, r) with r = sqrt(6 / (in + out)). They are cut
        # from ONE uniform draw: each distinct random shape costs ~0.5 s of XLA compile on CPU.
        widths = _widths(config, in_dim, n_classes)
        shapes = []
        for i, (d_in, d_out) in enumerate(zip(widths[:-1], widths[1:])):
            shapes.append((i, "w", d_in, d_out))
            if i < config.layers - 1 and config.residual and (d_in != d_out or i == 0):
                shapes.append((i, "w_res", d_in, d_out))
        total = sum(d_in * d_out for _, _, d_in, d_out in shapes)
        uniform = jax.random.uniform(key, (total,), jnp.float32, minval=-1.0, maxval=1.0)
        params: Params = {f"layer_{i}": {} for i in range(config.layers)}
        offset = 0
        for i, name, d_in, d_out in shapes:
            block = uniform[offset:offset + d_in * d_out].reshape(d_in, d_out)
            params[f"layer_{i}"][name] = block * jnp.float32(np.sqrt(6.0 / (d_in + d_out)))
            offset += d_in * d_out
        for i, d_out in enumerate(widths[1:]):
            layer = params[f"layer_{i}"]
            if config.bias:
                layer["b"] = jnp.zeros((d_out,), jnp.float32)
            if i < config.layers - 1 and config.layer_norm:
                layer["ln"] = {"scale": jnp.ones((d_out,), jnp.float32), "bias": jnp.zeros((d_out,), jnp.float32)}
        return params

    def apply(params: Params, graph: Graph, x: Features, *, key: jax.Array | None = None,
              train: bool = False, aggregated: jax.Array | None = None, embed: bool = False) -> jax.Array:
        keys = [None] * config.layers
        if train and config.dropout > 0.0:
            if key is None:
                raise ValueError("training with dropout needs a PRNG key: pass key=jax.random.key(seed)")
            keys = list(jax.random.split(key, config.layers))
        h = x
        for i in range(config.layers):
            if embed and i == config.layers - 1:
                return h  # the last hidden representation (the node embeddings a plot shows)
            layer = params[f"layer_{i}"]
            h_in = dropout(keys[i], h, config.dropout, train=train, rng=config.dropout_rng)
            if i == 0 and config.aggregate_first and not is_sparse(h_in):
                # Â·X is the same every epoch when dropout leaves X alone: take it precomputed if given
                agg = aggregated if aggregated is not None and h_in is x else propagate(
                    graph, h_in, backend=config.backend, chunk_edges=config.chunk_edges)
                out = matmul(agg, layer["w"])
                out = out + layer["b"][None, :] if "b" in layer else out
            else:
                out = gcn_apply({k: layer[k] for k in ("w", "b") if k in layer}, graph, h_in,
                                backend=config.backend, chunk_edges=config.chunk_edges)
            if i == config.layers - 1:
                return out
            if "ln" in layer:
                out = layer_norm(layer["ln"], out)
            out = jax.nn.relu(out)
            if config.residual:
                out = out + (matmul(h_in, layer["w_res"]) if "w_res" in layer else h_in)
            h = out
        raise AssertionError("unreachable")

    return Model(init, apply)


def aggregate_input(config: GCNConfig, graph: Graph, x: Features) -> jax.Array | None:
    """``Â · x`` for a model whose first layer aggregates first (dense ``x``), else None: computed
    once per training loop and reused by every evaluation forward, which then skips a propagation."""
    if not config.aggregate_first or is_sparse(x):
        return None
    return propagate(graph, x, backend=config.backend, chunk_edges=config.chunk_edges)
