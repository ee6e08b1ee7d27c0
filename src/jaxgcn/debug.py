"""Checked execution of one training step (``jaxgcn train --debug``).

The compiled training loop runs without runtime checks (its history marks epochs not yet run with
NaN, so ``jax_debug_nans`` cannot watch it). :func:`check_first_step` runs one step outside it, with
``jax_debug_nans`` on and under checkify's index, NaN and division checks, so an out-of-range index
or the first op that makes a NaN is named before the loop starts.
"""

from __future__ import annotations

from typing import Any

import jax
from jax.experimental import checkify

from jaxgcn.core.models import Execution, GCNConfig, gcn, precision_scope
from jaxgcn.core.data import TrainData
from jaxgcn.training.config import TrainConfig
from jaxgcn.training.losses import l2_penalty, masked_cross_entropy


class CheckFailed(ValueError):
    """The checked step made a NaN or failed an index/division check."""


def check_first_step(data: TrainData, n_classes: int, model_config: GCNConfig, config: TrainConfig,
                     execution: Execution = Execution()) -> None:
    """Run one training step (forward, loss, gradients) and an evaluation forward under checks.

    Args:
        data: the training data (features [n_nodes, n_features]).
        n_classes: the model's output width.
        model_config: the architecture to check.
        config: the training settings (the L2 term of the loss).
        execution: backend, dropout stream and first-layer order to check.

    Raises:
        CheckFailed: naming the first NaN-producing op or the failed check.
    """
    model = gcn(model_config, execution)
    params = model.init(jax.random.key(0), int(data.x.shape[1]), n_classes)

    def step(p: Any, data: TrainData) -> Any:  # data as an argument: closed-over arrays would be constant-folded
        def loss(q: Any) -> Any:
            logits = model.apply(q, data.graph, data.x, key=jax.random.key(1), train=True)
            return masked_cross_entropy(logits, data.labels, data.train_mask) + \
                config.coupled_l2 * l2_penalty(q, config.l2)
        value, grads = jax.value_and_grad(loss)(p)
        return value, grads, model.apply(p, data.graph, data.x)

    checked = checkify.checkify(step, errors=checkify.index_checks | checkify.nan_checks | checkify.div_checks)
    with jax.debug_nans(True), precision_scope(execution):  # the run's own precision
        try:
            err, _ = jax.jit(checked)(params, data)
        except FloatingPointError as exc:
            raise CheckFailed(f"the first training step made a NaN: {str(exc).splitlines()[0]}") from None
    message = err.get()
    if message is not None:
        raise CheckFailed(f"the first training step failed a check: {message.splitlines()[0]}")
