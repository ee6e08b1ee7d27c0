"""The run axis: where a batch of runs stacks each leaf of its params (weights ``[in, R, out]``,
biases and norms ``[R, d]``), and the few tree operations every part of the engine shares."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxgcn.layers import Params


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
