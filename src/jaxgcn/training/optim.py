"""THE optimizer factory every kind of run gets its optimizer from (Adam, AdamW, SGD, momentum;
clipping; per-run injected learning rate and weight decay)."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxgcn.fused import adam_leaf
from jaxgcn.layers import Params
from jaxgcn.training.config import TrainConfig
from jaxgcn.training.losses import l2_covers


# Adam's moment decays and epsilon (optax.scale_by_adam's defaults): the factory's and the fused step's
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.999, 1e-8


def standard_promotion(opt: optax.GradientTransformation) -> optax.GradientTransformation:
    """``opt`` with its ``init``/``update`` traced under standard dtype promotion.

    optax 0.2.8's Adam computes its bias correction as ``1 - decay**count`` (a Python float to the
    power of an int32 array), which ``jax_numpy_dtype_promotion="strict"`` rejects. The rest of the
    engine is strict-clean, so only the optimizer's own arithmetic gets the standard rules.
    """
    def init(params: Params) -> Any:
        with jax.numpy_dtype_promotion("standard"):
            return opt.init(params)

    def update(updates: Params, state: Any, params: Params | None = None) -> tuple[Params, Any]:
        with jax.numpy_dtype_promotion("standard"):
            return opt.update(updates, state, params)
    return optax.GradientTransformation(init, update)


def _decay_mask(params: Params, scope: str) -> Params:
    """True on the weights :func:`l2_covers` names, False on the rest: what ``adamw`` decays."""
    return {name: {k: l2_covers(name, k, scope) if not isinstance(v, dict)
                   else jax.tree.map(lambda _: False, v) for k, v in layer.items()}
            for name, layer in params.items()}


def optimizer_factory(config: TrainConfig) -> Callable[[Any, Any], optax.GradientTransformation]:
    """THE optimizer factory: ``(learning_rate, weight_decay) -> GradientTransformation`` for
    ``config.optimizer``, after optional global-norm clipping.

    Both hyperparameters are injected into the optimizer state (``optax.inject_hyperparams``), so a
    batch of runs initializes one state per run with its own values and runs this same update
    code for all of them (:mod:`jaxgcn.batched` vmaps it over the run axis).

    >>> import jax.numpy as jnp
    >>> opt = optimizer_factory(TrainConfig(optimizer="sgd"))(0.5, 0.0)
    >>> p = {"layer_0": {"w": jnp.ones((1, 2))}}
    >>> updates, _ = opt.update({"layer_0": {"w": jnp.full((1, 2), 2.0)}}, opt.init(p), p)
    >>> optax.apply_updates(p, updates)["layer_0"]["w"].tolist()  # p - lr * g
    [[0.0, 0.0]]
    """
    def build(learning_rate: Any, weight_decay: Any) -> optax.GradientTransformation:
        steps = [optax.clip_by_global_norm(config.clip_norm)] if config.clip_norm else []
        if config.optimizer in ("adam", "adamw"):
            steps.append(optax.scale_by_adam(b1=ADAM_B1, b2=ADAM_B2, eps=ADAM_EPS))
        elif config.optimizer == "momentum":
            steps.append(optax.trace(decay=config.momentum))
        if config.optimizer == "adamw":  # decoupled: added to the update, not to the loss
            steps.append(optax.add_decayed_weights(weight_decay, lambda p: _decay_mask(p, config.l2)))
        steps.append(optax.scale_by_learning_rate(learning_rate))
        return optax.chain(*steps)

    injected = optax.inject_hyperparams(build)
    return lambda learning_rate, weight_decay: standard_promotion(
        injected(learning_rate=learning_rate, weight_decay=weight_decay))


def make_optimizer(config: TrainConfig) -> optax.GradientTransformation:
    """The optimizer of one run: :func:`optimizer_factory` with the config's lr and weight decay."""
    return optimizer_factory(config)(config.lr, config.weight_decay)


def fused_adam_applies(config: TrainConfig, kernels: bool | None) -> bool:
    """Whether the step's Adam/AdamW runs as one kernel pass per params leaf (:func:`fused_adam`):
    the ops offer it (``kernels``: :attr:`jaxgcn.ops.Ops.fused_adam`) and no clipping comes first."""
    return bool(kernels) and config.optimizer in ("adam", "adamw") and not config.clip_norm


class FusedStep(NamedTuple):
    """What :func:`fused_adam` returns: the params and optimizer state after the step, and each
    run's L2 term (``sum(w**2) / 2`` over the weights :func:`l2_covers` names, [R], or [1] for one
    run) of the params before and after it."""

    params: Params
    opt_state: Any
    l2_before: jax.Array
    l2_after: jax.Array


def fused_adam(config: TrainConfig, params: Params, grads: Params, old_state: Any, new_state: Any,
               running: jax.Array) -> FusedStep:
    """One Adam (or AdamW) step from ``params`` and ``old_state``, each leaf in one kernel pass
    (:func:`jaxgcn.fused.adam_leaf`: optax's operations as XLA fuses them).

    ``grads`` are the loss's without the coupled L2 term: for ``adam`` the kernel adds its gradient
    (``weight_decay * w`` on the weights :func:`l2_covers` names) itself, and returns the L2 terms
    the step's losses need (:class:`FusedStep`), so the weights are read once. ``new_state`` is the
    state optax's own update gave (:func:`optimizer_factory`): its step counts and injected
    hyperparameters are kept, its moments replaced, so XLA drops optax's per-element passes as
    unused. Leaves are stacked (a weight [in, R, out], a bias [R, d]; ``running`` [R]) or one
    run's (``running`` a scalar); a run where ``running`` is False keeps its params and moments as
    they were.
    """
    def adam(state: Any) -> optax.ScaleByAdamState:
        return next(s for s in state.inner_state if isinstance(s, optax.ScaleByAdamState))
    batched, hp = running.ndim == 1, new_state.hyperparams
    with jax.numpy_dtype_promotion("standard"):  # as optax computes them (tree_bias_correction), inverted
        corrections = [1 / (1 - b ** adam(new_state).count).astype(jnp.float32) for b in (ADAM_B1, ADAM_B2)]
    covered = _decay_mask(params, config.l2)  # the L2 term's weights: decayed by adamw, coupled for adam
    n_runs = running.shape[0] if batched else 1
    hyper = jnp.stack([jnp.broadcast_to(jnp.asarray(v, jnp.float32), (n_runs,)) for v in (
        hp["learning_rate"], *corrections, hp["weight_decay"], running.astype(jnp.float32))])
    stepped, sums = {}, []

    def step(path: Any, p: jax.Array, mu: jax.Array, nu: jax.Array, g: jax.Array, l2: bool) -> jax.Array:
        # as [O, R, I]: a stacked weight is; a stacked bias [R, d], one run's weight [in, out] or bias [d]
        shape = p.shape if p.ndim == 3 else (1, *p.shape) if batched else \
            (p.shape[0], 1, p.shape[1]) if p.ndim == 2 else (1, 1, *p.shape)
        *outs, ss = adam_leaf(*(a.astype(jnp.float32).reshape(shape) for a in (p, mu, nu, g)), hyper,
                              b1=ADAM_B1, b2=ADAM_B2, eps=ADAM_EPS, decay=l2 and config.optimizer == "adamw",
                              couple=l2 and config.optimizer == "adam")
        stepped[path] = [o.reshape(p.shape) for o in outs]
        if l2:
            sums.append(ss)
        return stepped[path][0]

    new_params = jax.tree_util.tree_map_with_path(step, params, adam(old_state).mu, adam(old_state).nu, grads, covered)
    mu, nu = ({path: o[k] for path, o in stepped.items()} for k in (1, 2))
    total = 0.5 * sum(sums[1:], sums[0])  # as losses.per_run_l2 adds them: [2, R]
    state = optax.tree_utils.tree_set(new_state, mu=jax.tree_util.tree_map_with_path(lambda path, _: mu[path], params),
                                      nu=jax.tree_util.tree_map_with_path(lambda path, _: nu[path], params))
    return FusedStep(new_params, state, total[0], total[1])
