"""THE L2 term, per run, and the single-run faces of the multi-class loss and accuracy (the task's
loss and metrics: :mod:`jaxgcn.core.tasks`)."""

from __future__ import annotations


import jax
import jax.numpy as jnp

from jaxgcn.core.layers import Params
from jaxgcn.core.layers import insert_axes
from jaxgcn.core.tasks import masked_sums  # THE cross-entropy, the multi-class task's (re-exported)


def masked_cross_entropy(logits: jax.Array, labels: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy over the nodes where ``mask`` is 1.

    Args:
        logits: [n_nodes, n_classes]. labels: [n_nodes] int (-1 allowed outside the mask).
        mask: [n_nodes] 0/1 float.

    >>> float(masked_cross_entropy(jnp.zeros((2, 4)), jnp.array([0, 3]), jnp.array([1.0, 0.0])))
    1.386294...
    """
    nll, _, count = masked_sums(logits[:, None], labels, mask[None])
    return nll[0] / jnp.maximum(count[0], 1.0)


def masked_accuracy(logits: jax.Array, labels: jax.Array, mask: jax.Array) -> jax.Array:
    """Fraction of masked nodes whose arg-max logit is the label ([n, c], [n], [n] -> scalar).

    >>> float(masked_accuracy(jnp.eye(3), jnp.array([0, 2, 2]), jnp.ones(3)))
    0.666666...
    """
    _, hits, count = masked_sums(logits[:, None], labels, mask[None])
    return hits[0] / jnp.maximum(count[0], 1.0)


def l2_covers(layer: str, key: str, scope: str) -> bool:
    """Whether the L2 term (and ``adamw``'s decay) covers ``params[layer][key]``: the weight matrices
    (``w``, ``w_res``) of the first layer (``scope="first"``, the paper's) or of every layer
    (``"all"``); never biases or norms. The one statement of the rule."""
    return key in ("w", "w_res") and (scope == "all" or layer == "layer_0")


def l2_penalty(params: Params, scope: str = "first") -> jax.Array:
    """``sum(w**2) / 2`` over the weights :func:`l2_covers` names: the engine's per-run L2 of a
    batch of one run (one definition for every kind of run)."""
    return per_run_l2(jax.tree.map(jnp.expand_dims, params, insert_axes(params)), scope)[0]


def per_run_l2(params: Params, scope: str) -> jax.Array:
    """``sum(w**2) / 2`` per run ([R]) over the weights :func:`l2_covers` names (stacked params)."""
    terms = [_sum_of_squares(layer[k]) for name, layer in params.items() for k in ("w", "w_res")
             if k in layer and l2_covers(name, k, scope)]
    return 0.5 * sum(terms[1:], terms[0])


def _sum_of_squares(w: jax.Array) -> jax.Array:
    """Per run, the sum of squares of ``w``: [in, R, out] -> [R].

    A ones-vector product over ``in``: XLA's CPU reduction of ``[in, R, out]`` over axes 0 and 2
    ran as a tree of partial reductions, 3x slower on Cora's first layer (benchmarks/profile_epoch.py).
    """
    d_in, r, d_out = w.shape
    per_column = jnp.matmul(jnp.ones((1, d_in), w.dtype), jnp.square(w).reshape(d_in, r * d_out),
                            precision=jax.lax.Precision.HIGHEST)
    return jnp.sum(per_column.reshape(r, d_out), axis=1)
