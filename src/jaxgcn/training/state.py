"""A run's state (:class:`RunState`, the carry of the compiled loop and what checkpoints hold), its
one initializer, the early-stopping rule and the per-epoch record, and the run axis of each of its leaves."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from jaxgcn.core.layers import Params, insert_axes, run_axes, unstacked_shapes
from jaxgcn.core.results import Evaluation  # noqa: F401 - where it always was
from jaxgcn.training.config import DIVERGED, FINISHED, Kipf, Patience, RUNNING, STOPPED_EARLY, TrainConfig
from jaxgcn.training.optim import optimizer_factory


class RunState(NamedTuple):
    """The carry of one training run (a pytree). History arrays are [epochs]."""

    params: Params
    opt_state: Any
    key: jax.Array
    epoch: jax.Array
    reason: jax.Array
    val_window: jax.Array
    best_params: Params
    best_val_acc: jax.Array
    best_val_loss: jax.Array
    best_epoch: jax.Array
    history: dict[str, jax.Array]


class BatchState(NamedTuple):
    """The carry of a batch of runs: a :class:`RunState` whose leaves have a run axis (each run's
    optimizer state included) and the shared epoch counter."""

    runs: RunState
    step: jax.Array


def run_keys(seed: Any) -> tuple[jax.Array, jax.Array]:
    """THE seed-to-key rule of every run (one run, a batch, the graph sharded): a run of seed ``s``
    (an int, or a key already made of it) initializes its params from the first half of
    ``split(key(s))`` and draws its dropout masks from the second. A batch equals its single runs
    because the three places that turn a seed into keys (:func:`jaxgcn.training.runs.init_params`,
    the batch's and the single run's initial state) all call this one."""
    key = seed if _is_key(seed) else jax.random.key(seed)
    init_key, run_key = jax.random.split(key)
    return init_key, run_key


def _is_key(value: Any) -> bool:
    """A typed PRNG key, or a raw ``uint32[2]`` one (``jax.random.PRNGKey``), rather than a seed."""
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return False
    return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key) or (dtype == jnp.uint32 and jnp.ndim(value) == 1)


def init_run_state(config: TrainConfig, params: Params, key: jax.Array, lr: Any, weight_decay: Any) -> RunState:
    """THE initial :class:`RunState` of one run (no run axis): its params, its optimizer's state with
    its learning rate and weight decay, its key, empty early-stopping records and a NaN history. A
    batch vmaps it over its runs (:func:`make_batch_runner`); a single run calls it
    (``make_batch_runner(..., one=...)``)."""
    nan = jnp.full((config.epochs,), jnp.nan, jnp.float32)
    return RunState(
        params=params, opt_state=optimizer_factory(config)(lr, weight_decay).init(params), key=key,
        epoch=jnp.int32(0), reason=jnp.int32(RUNNING), val_window=jnp.zeros((config.kipf_window,), jnp.float32),
        best_params=params, best_val_acc=jnp.float32(-1.0), best_val_loss=jnp.float32(jnp.inf),
        best_epoch=jnp.int32(0), history={k: nan for k in ("loss", "train_acc", "val_loss", "val_acc")},
    )


def should_stop_early(config: TrainConfig, epoch: jax.Array, kipf_loss: jax.Array, val_window: jax.Array,
                      best_epoch: jax.Array) -> jax.Array:
    """THE early-stopping rule, after 0-based ``epoch`` (pure; per run under vmap).

    :class:`Kipf` (Kipf's reference code): stop once ``epoch > window`` and this epoch's validation
    loss, with its L2 term as the reference computes it (``kipf_loss``), exceeds the mean of the
    previous ``window`` epochs' (``val_window``). :class:`Patience`: stop ``patience`` epochs after
    the best validation accuracy (``best_epoch``, 1-based, this epoch included). ``None``: never.

    >>> cfg = TrainConfig(early_stopping=Kipf(window=2))
    >>> bool(should_stop_early(cfg, jnp.int32(3), jnp.float32(1.0), jnp.array([0.5, 0.7]), jnp.int32(3)))
    True
    """
    rule = config.early_stopping
    if isinstance(rule, Kipf):
        return (epoch > rule.window) & (kipf_loss > jnp.mean(val_window))
    if isinstance(rule, Patience):
        return (epoch + 1 - best_epoch) >= rule.patience
    return jnp.bool_(False)


def record_epoch(state: RunState, config: TrainConfig, keep_best: bool, params: Params, opt_state: Any,
             key: jax.Array, loss: jax.Array, train_acc: jax.Array, val_loss: jax.Array,
             val_acc: jax.Array, kipf_loss: jax.Array) -> RunState:
    """Record one epoch and apply the early-stopping rule (pure; works batched under vmap)."""
    e = state.epoch
    history = {name: state.history[name].at[e].set(value) for name, value in
               (("loss", loss), ("train_acc", train_acc), ("val_loss", val_loss), ("val_acc", val_acc))}
    val_window = jnp.roll(state.val_window, -1).at[-1].set(kipf_loss)
    better = (val_acc > state.best_val_acc) | ((val_acc == state.best_val_acc) & (val_loss < state.best_val_loss))
    best_params = jax.tree.map(lambda new, old: jnp.where(better, new, old), params, state.best_params) \
        if keep_best else state.best_params
    best_epoch = jnp.where(better, e + 1, state.best_epoch)
    stop = should_stop_early(config, e, kipf_loss, state.val_window, best_epoch)
    reason = jnp.where(~jnp.isfinite(loss), DIVERGED,
                       jnp.where(stop, STOPPED_EARLY, jnp.where(e + 1 >= config.epochs, FINISHED, RUNNING)))
    return RunState(
        params=params, opt_state=opt_state, key=key, epoch=e + 1, reason=reason.astype(jnp.int32),
        val_window=val_window, best_params=best_params,
        best_val_acc=jnp.where(better, val_acc, state.best_val_acc),
        best_val_loss=jnp.where(better, val_loss, state.best_val_loss), best_epoch=best_epoch,
        history=history,
    )


def optimizer_axes(config: TrainConfig, one: Params) -> Any:
    """Run axis of every leaf of the stacked per-run optimizer states, from one run's params (or
    their shapes): the params' own for the subtrees shaped like the params (Adam's moments,
    momentum traces), 0 for the rest (step counts, the injected learning rate and weight decay)."""
    axes = insert_axes(one)
    shape = jax.eval_shape(lambda p: optimizer_factory(config)(0.0, 0.0).init(p), one)
    like_params = jax.tree.structure(one)

    def is_params(node: Any) -> bool:
        return jax.tree.structure(node) == like_params
    return jax.tree.map(lambda node: axes if is_params(node) else 0, shape, is_leaf=is_params)


def axes_of_state(params_axes: Any, opt_axes: Any) -> RunState:
    """Run axis of every leaf of a batched :class:`RunState` (the params' own, else 0)."""
    zero = 0
    return RunState(params=params_axes, opt_state=opt_axes, key=zero, epoch=zero, reason=zero, val_window=zero,
                    best_params=params_axes, best_val_acc=zero, best_val_loss=zero, best_epoch=zero,
                    history={k: zero for k in ("loss", "train_acc", "val_loss", "val_acc")})


def state_axes(config: TrainConfig, params: Params) -> RunState:
    """Run axis of every leaf of a batched :class:`RunState` whose params are ``params`` (stacked)."""
    return axes_of_state(run_axes(params), optimizer_axes(config, unstacked_shapes(params)))


class RunsView(NamedTuple):
    """How a step reaches the runs of its state: stacked on a run axis (a batch: ``vmap`` the
    per-run parts), or ONE run's own unbatched state (a single run: call them directly, and give
    the forward pass its params with a run axis of 1; both are free reshapes, while a vmap of one
    still turns indexed updates into scatters: measured +0.9 ms per Cora epoch)."""

    stack: Callable[[Params], Params]  # params as the forward pass takes them ([in, R, out] / [R, d])
    each: Callable[..., Callable[..., Any]]  # (fn, in_axes, out_axes) -> fn over every run
    value: Callable[[jax.Array], jax.Array]  # a [R] per-run value as the state holds it


def runs_of(state: RunState) -> RunsView:
    if state.reason.ndim == 0:  # one run, no run axis
        return RunsView(stack=lambda params: jax.tree.map(jnp.expand_dims, params, insert_axes(params)),
                     each=lambda fn, in_axes, out_axes: fn, value=lambda v: v[0])
    return RunsView(stack=lambda params: params,
                 each=lambda fn, in_axes, out_axes: jax.vmap(fn, in_axes=in_axes, out_axes=out_axes),
                 value=lambda v: v)
