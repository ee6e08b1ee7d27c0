"""THE optimizer factory every kind of run gets its optimizer from (Adam, AdamW, SGD, momentum;
clipping; per-run injected learning rate and weight decay)."""

from __future__ import annotations

from typing import Any, Callable

import jax
import optax

from jaxgcn.native.fused import ADAM_B1, ADAM_B2, ADAM_EPS, FusedStep, adam_step
from jaxgcn.core.layers import Params
from jaxgcn.training.config import TrainConfig
from jaxgcn.training.losses import l2_covers


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
    the ops offer it (``kernels``: :attr:`jaxgcn.core.ops.Ops.fused_adam`) and no clipping comes first."""
    return bool(kernels) and config.optimizer in ("adam", "adamw") and not config.clip_norm


def fused_adam(config: TrainConfig, params: Params, grads: Params, old_state: Any, new_state: Any,
               running: jax.Array) -> FusedStep:
    """One Adam (or AdamW, ``config.optimizer``) step in one kernel pass per params leaf
    (:func:`jaxgcn.native.fused.adam_step`), the L2 term over the weights ``config.l2`` covers."""
    return adam_step(params, grads, old_state, new_state, running, _decay_mask(params, config.l2), config.optimizer)
