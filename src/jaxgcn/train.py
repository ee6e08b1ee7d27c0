"""Losses, metrics, the optimizer, and the compiled training run with early stopping.

One training run is a pure function of its inputs. The epochs run inside a ``lax.while_loop``
(compiled once, called in chunks so the host can print progress between chunks); each epoch is
one training step (dropout on) followed by one evaluation pass (dropout off) that feeds the
early-stopping rule. Early stopping is expressed with masks and a best-params carry, never a
Python ``break``, so the same code can later be ``vmap``-ed over runs.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxgcn.compiler import jit
from jaxgcn.data import TrainData, with_focus  # noqa: F401 - TrainData re-exported: jaxgcn.train.TrainData
from jaxgcn.diagnostics import (  # noqa: F401 - re-exported: jaxgcn.train.divergence_message, ...
    adjacency_cause, adjacency_of, adjacency_scale, divergence_hint, divergence_message, likely_causes, row_sums_of)
from jaxgcn.layers import Params
from jaxgcn.models import (
    Execution,
    FirstLayer,
    GCNConfig,
    Propagate,
    RunInputs,
    aggregate_input,
    apply_runs,
    first_layer_pair,
    gcn,
    make_run_inputs,
)
from jaxgcn.progress import epoch_line

L2_SCOPES = ("first", "all")
OPTIMIZERS = ("adam", "adamw", "sgd", "momentum")
# Why a run ended, as stored in RunState.reason.
RUNNING, FINISHED, STOPPED_EARLY, DIVERGED = 0, 1, 2, 3


@dataclasses.dataclass(frozen=True)
class Kipf:
    """Kipf's early stopping (the reference code's rule, the default): stop once the validation
    loss, with its L2 term, exceeds the mean of the previous ``window`` epochs' (paper: 10). The
    run keeps its last params."""

    window: int = 10
    kind: str = dataclasses.field(default="kipf", init=False)  # names the choice in saved configs

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"window={self.window} must be >= 1")


@dataclasses.dataclass(frozen=True)
class Patience:
    """Stop ``patience`` epochs after the best validation accuracy (ties: lower validation loss)
    and return that epoch's params (50 is common)."""

    patience: int = 50
    kind: str = dataclasses.field(default="patience", init=False)

    def __post_init__(self) -> None:
        if self.patience < 1:
            raise ValueError(f"patience={self.patience} must be >= 1")


def early_stopping_from(choice: str, *, window: int = 10, patience: int = 50) -> Kipf | Patience | None:
    """The typed early-stopping choice from its name (``"kipf"``, ``"patience"`` or ``"none"``).

    >>> early_stopping_from("patience", patience=20)
    Patience(patience=20, kind='patience')
    """
    choices = {"kipf": lambda: Kipf(window), "patience": lambda: Patience(patience), "none": lambda: None}
    if choice not in choices:
        raise ValueError(f"early_stopping={choice!r} must be one of {tuple(choices)}")
    return choices[choice]()


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimization settings. Defaults are Kipf & Welling's (arXiv:1609.02907, section 5.1).

    Attributes:
        lr: Adam learning rate (paper: 0.01).
        weight_decay: L2 factor; ``weight_decay * sum(w**2) / 2`` is ADDED to the loss (coupled, as
            in the paper; not optax.adamw's decoupled decay). Paper: 5e-4.
        l2: ``"first"`` (paper: first layer's weights only) or ``"all"`` (every weight matrix).
        epochs: maximum number of epochs (paper: 200).
        early_stopping: ONE typed choice: :class:`Kipf` (the default, window 10), :class:`Patience`,
            or ``None`` to run every epoch.
        clip_norm: optional global-norm gradient clipping threshold.
        optimizer: ``"adam"`` (the paper's), ``"adamw"`` (Adam with ``weight_decay`` applied
            DECOUPLED to the weights of the ``l2`` scope, instead of an L2 term in the loss),
            ``"sgd"`` (``p - lr * g``) or ``"momentum"`` (SGD with heavy-ball ``momentum``). Built by
            :func:`optimizer_factory`, the one place every path (single, batched, swept, sharded)
            gets its optimizer from.
        momentum: the momentum of ``"momentum"`` (0.9).
    """

    lr: float = 0.01
    weight_decay: float = 5e-4
    l2: str = "first"
    epochs: int = 200
    early_stopping: Kipf | Patience | None = Kipf()
    clip_norm: float | None = None
    optimizer: str = "adam"
    momentum: float = 0.9

    @property
    def kipf_window(self) -> int:
        """Length of the validation-loss window a run carries (1 when the rule is not Kipf's)."""
        return self.early_stopping.window if isinstance(self.early_stopping, Kipf) else 1

    @property
    def coupled_l2(self) -> float:
        """The factor of the L2 term added to the loss: ``weight_decay``, except for ``adamw``, whose
        optimizer applies the decay itself."""
        return 0.0 if self.optimizer == "adamw" else self.weight_decay

    def __post_init__(self) -> None:
        checks = [
            (self.lr > 0 and np.isfinite(self.lr), f"lr={self.lr} must be a positive number"),
            (self.weight_decay >= 0, f"weight_decay={self.weight_decay} must be >= 0"),
            (self.l2 in L2_SCOPES, f"l2={self.l2!r} must be one of {L2_SCOPES}"),
            (self.epochs >= 1, f"epochs={self.epochs} must be >= 1"),
            (self.early_stopping is None or isinstance(self.early_stopping, (Kipf, Patience)),
             f"early_stopping={self.early_stopping!r} must be Kipf(window), Patience(patience) or None"),
            (self.clip_norm is None or self.clip_norm > 0, f"clip_norm={self.clip_norm} must be > 0"),
            (self.optimizer in OPTIMIZERS, f"optimizer={self.optimizer!r} must be one of {OPTIMIZERS}"),
            (0.0 <= self.momentum < 1.0, f"momentum={self.momentum} must be in [0, 1)"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


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


class TrainingDiverged(ValueError):
    """The training loss became NaN or infinite."""


def masked_sums(logits: jax.Array, labels: jax.Array, masks: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """THE cross-entropy: per run, over the masked nodes, the summed softmax cross-entropy, the
    correct predictions and the node count (logits [n, R, C], labels [n], masks [R, n] -> three [R]).
    Sums, so that devices holding blocks of the nodes can add them up before dividing."""
    logp = jax.nn.log_softmax(logits)
    # a one-hot product, not take_along_axis: its gradient would be a scatter (slow on the CPU)
    nll = -jnp.sum(jax.nn.one_hot(labels, logits.shape[-1], dtype=logp.dtype)[:, None, :] * logp, axis=-1)  # [n, R]
    hit = (jnp.argmax(logits, axis=-1) == labels[:, None]).astype(masks.dtype)  # [n, R]
    # masks [R, n] @ [n, 2R], whose diagonals are the sums: a matrix product in both layouts as
    # they are (R^2 n multiply-adds, nothing at R <= 100), where "nll.T * masks" summed over
    # the nodes cost XLA two transposes and a tree of partial reductions per call
    r = nll.shape[1]
    sums = jnp.matmul(masks.astype(nll.dtype), jnp.concatenate([nll, hit.astype(nll.dtype)], axis=1),
                      precision=jax.lax.Precision.HIGHEST)
    runs = jnp.arange(r)
    return sums[runs, runs], sums[runs, r + runs], jnp.sum(masks, axis=1)


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
    return _per_run_l2(jax.tree.map(jnp.expand_dims, params, _insert_axes(params)), scope)[0]


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

    >>> opt = optimizer_factory(TrainConfig(optimizer="sgd"))(0.5, 0.0)
    >>> p = {"layer_0": {"w": jnp.ones((1, 2))}}
    >>> updates, _ = opt.update({"layer_0": {"w": jnp.full((1, 2), 2.0)}}, opt.init(p), p)
    >>> optax.apply_updates(p, updates)["layer_0"]["w"].tolist()  # p - lr * g
    [[0.0, 0.0]]
    """
    def build(learning_rate: Any, weight_decay: Any) -> optax.GradientTransformation:
        steps = [optax.clip_by_global_norm(config.clip_norm)] if config.clip_norm else []
        if config.optimizer in ("adam", "adamw"):
            steps.append(optax.scale_by_adam())
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


class Evaluation(NamedTuple):
    """Loss and accuracy on each split, computed with dropout off."""

    train_loss: jax.Array
    train_acc: jax.Array
    val_loss: jax.Array
    val_acc: jax.Array
    test_loss: jax.Array
    test_acc: jax.Array


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


# --- THE training step, on a run axis ----------------------------------------------------------------
#
# One epoch of one or many runs is written once (:func:`make_batch_runner`): a batch of R runs keeps
# a RunState whose leaves carry a run axis (weights [in, R, out], biases and norms [R, d], everything
# else [R, ...]). A single run is a batch of one (:func:`make_runner`), and sharded training is the
# same step inside ``shard_map`` with its block propagation and a ``psum`` collective.


def run_axis(leaf: jax.Array) -> int:
    """The run axis of a stacked params leaf: 1 for weights [in, R, out], 0 for biases and norms [R, d]."""
    return 1 if leaf.ndim == 3 else 0


def _run_axes(tree: Any) -> Any:
    return jax.tree.map(run_axis, tree)


def _insert_axes(one: Params) -> Any:
    """Where the run axis goes in each leaf of one run's params (weights: 1, biases and norms: 0)."""
    return jax.tree.map(lambda leaf: 1 if leaf.ndim == 2 else 0, one)


def _select(running: jax.Array, new: Any, old: Any, axes: Any) -> Any:
    """Per run: ``new`` where ``running`` else ``old``; each leaf's run axis given by ``axes``."""
    def pick(a: jax.Array, b: jax.Array, axis: int) -> jax.Array:
        shape = [1] * a.ndim
        shape[axis] = running.shape[0]
        return jnp.where(running.reshape(shape), a, b)
    return jax.tree.map(pick, new, old, axes)


class BatchState(NamedTuple):
    """The carry of a batch of runs: a :class:`RunState` whose leaves have a run axis (each run's
    optimizer state included) and the shared epoch counter."""

    runs: RunState
    step: jax.Array


def _opt_axes(config: TrainConfig, one: Params) -> Any:
    """Run axis of every leaf of the stacked per-run optimizer states, from one run's params (or
    their shapes): the params' own for the subtrees shaped like the params (Adam's moments,
    momentum traces), 0 for the rest (step counts, the injected learning rate and weight decay)."""
    axes = _insert_axes(one)
    shape = jax.eval_shape(lambda p: optimizer_factory(config)(0.0, 0.0).init(p), one)
    like_params = jax.tree.structure(one)

    def is_params(node: Any) -> bool:
        return jax.tree.structure(node) == like_params
    return jax.tree.map(lambda node: axes if is_params(node) else 0, shape, is_leaf=is_params)


def _unstacked(params: Params) -> Any:
    """The shapes of one run's params, from stacked params."""
    return jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape[:run_axis(leaf)] + leaf.shape[run_axis(leaf) + 1:],
                                                          leaf.dtype), params)


def _state_axes(params_axes: Any, opt_axes: Any) -> RunState:
    """Run axis of every leaf of a batched :class:`RunState` (the params' own, else 0)."""
    zero = 0
    return RunState(params=params_axes, opt_state=opt_axes, key=zero, epoch=zero, reason=zero, val_window=zero,
                    best_params=params_axes, best_val_acc=zero, best_val_loss=zero, best_epoch=zero,
                    history={k: zero for k in ("loss", "train_acc", "val_loss", "val_acc")})


def state_axes(config: TrainConfig, params: Params) -> RunState:
    """Run axis of every leaf of a batched :class:`RunState` whose params are ``params`` (stacked)."""
    return _state_axes(_run_axes(params), _opt_axes(config, _unstacked(params)))


def _per_run_l2(params: Params, scope: str) -> jax.Array:
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


class _Runs(NamedTuple):
    """How a step reaches the runs of its state: stacked on a run axis (a batch: ``vmap`` the
    per-run parts), or ONE run's own unbatched state (a single run: call them directly, and give
    the forward pass its params with a run axis of 1; both are free reshapes, while a vmap of one
    still turns indexed updates into scatters: measured +0.9 ms per Cora epoch)."""

    stack: Callable[[Params], Params]  # params as the forward pass takes them ([in, R, out] / [R, d])
    each: Callable[..., Callable[..., Any]]  # (fn, in_axes, out_axes) -> fn over every run
    value: Callable[[jax.Array], jax.Array]  # a [R] per-run value as the state holds it


def _runs_of(state: RunState) -> _Runs:
    if state.reason.ndim == 0:  # one run, no run axis
        return _Runs(stack=lambda params: jax.tree.map(jnp.expand_dims, params, _insert_axes(params)),
                     each=lambda fn, in_axes, out_axes: fn, value=lambda v: v[0])
    return _Runs(stack=lambda params: params,
                 each=lambda fn, in_axes, out_axes: jax.vmap(fn, in_axes=in_axes, out_axes=out_axes),
                 value=lambda v: v)


class Collective(NamedTuple):
    """What a step does across devices when each holds a block of the graph's rows (sharded
    training, inside ``shard_map``); nothing on one device (:data:`LOCAL`).

    Attributes:
        total: sums a pytree over the devices (``psum``): the loss, metric sums and gradients.
        device_key: this device's dropout key from the run's (``fold_in`` of the device index).
    """

    total: Callable[[Any], Any]
    device_key: Callable[[jax.Array], jax.Array]


LOCAL = Collective(total=lambda tree: tree, device_key=lambda key: key)


class BatchRunner(NamedTuple):
    """The pure functions of a batch of runs (see :func:`make_batch_runner`)."""

    init: Callable[[Params, jax.Array, RunInputs], BatchState]
    run_until: Callable[[BatchState, TrainData, RunInputs, jax.Array], BatchState]
    evaluate: Callable[[Params, TrainData, RunInputs], dict[str, jax.Array]]
    final_params: Callable[[BatchState], Params]


def init_run_state(config: TrainConfig, params: Params, key: jax.Array, lr: Any, weight_decay: Any) -> RunState:
    """THE initial :class:`RunState` of one run (no run axis): its params, its optimizer's state with
    its learning rate and weight decay, its key, empty early-stopping records and a NaN history. A
    batch vmaps it over its runs (:func:`make_batch_runner`); a single run calls it (:func:`make_runner`)."""
    nan = jnp.full((config.epochs,), jnp.nan, jnp.float32)
    return RunState(
        params=params, opt_state=optimizer_factory(config)(lr, weight_decay).init(params), key=key,
        epoch=jnp.int32(0), reason=jnp.int32(RUNNING), val_window=jnp.zeros((config.kipf_window,), jnp.float32),
        best_params=params, best_val_acc=jnp.float32(-1.0), best_val_loss=jnp.float32(jnp.inf),
        best_epoch=jnp.int32(0), history={k: nan for k in ("loss", "train_acc", "val_loss", "val_acc")},
    )


def make_batch_runner(model_config: GCNConfig, config: TrainConfig, execution: Execution = Execution(), *,
                      propagate: Propagate | None = None,
                      collective: Collective = LOCAL) -> BatchRunner:
    """THE training step, for R runs at once (compile the functions with ``jax.jit``): every path
    (one run, many runs, sharded) runs these functions.

    One epoch, per run: dropout forward, masked cross-entropy (+ the coupled L2 term), gradient,
    :func:`optimizer_factory`'s update (vmapped over the run axis, with each run's injected learning
    rate and weight decay), an evaluation forward, then :func:`record_epoch` (history, best params,
    :func:`should_stop_early`). A run that has stopped is frozen by a per-run mask.

    ``propagate`` replaces the aggregation (sharded training passes its block exchange) and
    ``collective`` sums the loss, metrics and gradients over devices (:class:`Collective`). Split
    masks may be stacked ``[n_splits, n_nodes]``; each run reads the split its
    :class:`jaxgcn.models.RunInputs` names.
    """
    factory = optimizer_factory(config)
    opt = factory(config.lr, config.weight_decay)  # its update reads each run's injected values
    keep_best = isinstance(config.early_stopping, Patience)

    def masks(data: TrainData, runs: RunInputs) -> tuple[jax.Array, jax.Array, jax.Array]:
        def per_run(m: jax.Array) -> jax.Array:  # [n] or [n_splits, n] -> [R, n]
            return m[runs.split] if m.ndim == 2 else jnp.broadcast_to(m[None, :], (runs.split.shape[0], m.shape[0]))
        return per_run(data.train_mask), per_run(data.val_mask), per_run(data.test_mask)

    def focused(data: TrainData, logits: jax.Array, *ms: jax.Array) -> tuple[jax.Array, ...]:
        """The logits, labels and masks of the nodes the loop's loss and metrics read (``data.focus``)."""
        rows = data.focus
        if rows is None:
            return (logits, data.labels, *ms)
        take = functools.partial(jnp.take, indices=rows, unique_indices=True, indices_are_sorted=True)
        return (take(logits, axis=0), take(data.labels, axis=0), *(take(m, axis=1) for m in ms))

    def penalty(params: Params, runs: RunInputs) -> jax.Array:  # [R]; adamw decays in the optimizer instead
        return (0.0 if config.optimizer == "adamw" else runs.weight_decay) * _per_run_l2(params, config.l2)

    def metrics(logits: jax.Array, labels: jax.Array, m: jax.Array) -> tuple[jax.Array, jax.Array]:
        nll, hits, count = collective.total(masked_sums(logits, labels, m))
        count = jnp.maximum(count, 1.0)
        return nll / count, hits / count

    def forward(params: Params, data: TrainData, runs: RunInputs, **kwargs: Any) -> jax.Array:
        return apply_runs(model_config, params, data.graph, data.x, runs, execution=execution, propagate=propagate,
                          **kwargs)

    def init(params: Params, seeds: jax.Array, runs_in: RunInputs) -> BatchState:
        keys = jax.vmap(lambda s: jax.random.split(jax.random.key(s))[1])(seeds)
        runs = jax.vmap(functools.partial(init_run_state, config), in_axes=(_run_axes(params), 0, 0, 0),
                        out_axes=state_axes(config, params))(params, keys, runs_in.lr, runs_in.weight_decay)
        return BatchState(runs, jnp.int32(0))

    def step_keys(st: RunState) -> tuple[jax.Array, jax.Array]:
        """The key after this step [R] and each layer's dropout keys of this step [L, R]."""
        def keys(key: jax.Array) -> tuple[jax.Array, jax.Array]:
            key, k_drop = jax.random.split(key)
            return key, jax.random.split(collective.device_key(k_drop), model_config.layers)
        key, layer_keys = _runs_of(st).each(keys, (0,), (0, 1))(st.key)  # one run: [], [L]
        return key, layer_keys if layer_keys.ndim == 2 else layer_keys[:, None]

    def ahead(st: RunState, data: TrainData, runs: RunInputs) -> tuple[FirstLayer, FirstLayer] | None:
        """The first layer of the next training step of ``st`` and of an evaluation of its params,
        in one kernel pass (:func:`jaxgcn.models.first_layer_pair`; None where it does not apply)."""
        if propagate is not None:  # sharded: the features are a block of rows, the plain path is kept
            return None
        return first_layer_pair(_runs_of(st).stack(st.params), data.x, runs, execution=execution,
                                keys=step_keys(st)[1])

    def epoch_step(state: BatchState, data: TrainData, runs: RunInputs, aggregated: jax.Array | None,
                   n_train: jax.Array, first: FirstLayer | None) -> tuple[BatchState, FirstLayer | None]:
        st = state.runs
        the = _runs_of(st)
        axes = _run_axes(the.stack(st.params))
        opt_axes = _opt_axes(config, _unstacked(the.stack(st.params)))
        state_ax = _state_axes(axes, opt_axes)
        train_m, val_m, _ = masks(data, runs)
        key, layer_keys = step_keys(st)

        def cross_entropy(params: Params) -> tuple[jax.Array, jax.Array]:
            logits = forward(the.stack(params), data, runs, keys=layer_keys, train=True, first=first)
            logits, labels, m = focused(data, logits, train_m)
            per_run = masked_sums(logits, labels, m)[0] / n_train  # this device's share
            return jnp.sum(per_run), per_run

        def regularizer(params: Params) -> tuple[jax.Array, jax.Array]:
            per_run = penalty(the.stack(params), runs)
            return jnp.sum(per_run), per_run

        (_, ce), grads = jax.value_and_grad(cross_entropy, has_aux=True)(st.params)
        (_, reg), reg_grads = jax.value_and_grad(regularizer, has_aux=True)(st.params)
        ce, grads = collective.total((ce, grads))
        grads = jax.tree.map(jnp.add, grads, reg_grads)
        # The one optimizer, per run (vmapped over a batch): each run's clipping, moments and
        # injected learning rate / weight decay, exactly as it would compute them alone.
        updates, opt_state = the.each(opt.update, (axes, opt_axes, axes), (axes, opt_axes))(
            grads, st.opt_state, st.params)
        params = optax.apply_updates(st.params, updates)
        # the evaluation's first layer and the next step's, from one pass (when first is in use)
        pair = None if first is None else ahead(st._replace(params=params, key=key), data, runs)
        logits = forward(the.stack(params), data, runs, aggregated=aggregated,
                         first=None if pair is None else pair[1])
        logits, labels, train_f, val_f = focused(data, logits, train_m, val_m)
        _, train_acc = metrics(logits, labels, train_f)
        val_loss, val_acc = metrics(logits, labels, val_f)
        kipf_loss = val_loss + penalty(the.stack(params), runs)
        per_run = [the.value(v) for v in (ce + reg, train_acc, val_loss, val_acc, kipf_loss)]
        advanced = the.each(
            lambda s, p, o, k, *m: record_epoch(s, config, keep_best, p, o, k, *m[:4], kipf_loss=m[4]),
            (state_ax, axes, opt_axes, 0, 0, 0, 0, 0, 0), state_ax,
        )(st, params, opt_state, key, *per_run)
        if st.reason.ndim == 1:  # a batch: runs that have stopped stay as they were (their next
            # first-layer product is of params they do not keep, and is never used)
            advanced = _select(st.reason == RUNNING, advanced, st, state_ax)
        return BatchState(advanced, state.step + 1), None if pair is None else pair[0]

    def run_until(state: BatchState, data: TrainData, runs: RunInputs, stop_epoch: jax.Array) -> BatchState:
        def cond(carry: tuple[BatchState, Any]) -> jax.Array:
            s = carry[0]
            return jnp.any(s.runs.reason == RUNNING) & (s.step < stop_epoch)

        n_train = jnp.maximum(collective.total(jnp.sum(masks(data, runs)[0], axis=1)), 1.0)  # [R], every device's
        aggregated = aggregate_input(execution, data.graph, data.x, propagate=propagate)  # once per call
        # The first step's first-layer product; each step then computes the next one together with
        # its evaluation. Rebuilt from the state at every call, so a resumed run computes the same.
        pair = ahead(state.runs, data, runs)
        return jax.lax.while_loop(cond, lambda c: epoch_step(*c[:1], data, runs, aggregated, n_train, c[1]),
                                  (state, None if pair is None else pair[0]))[0]

    def final_params(state: BatchState) -> Params:
        return state.runs.best_params if keep_best else state.runs.params

    def evaluate(params: Params, data: TrainData, runs: RunInputs) -> dict[str, jax.Array]:
        logits = forward(params, data, runs)
        out = {}
        for name, m in zip(("train", "val", "test"), masks(data, runs)):
            out[f"{name}_loss"], out[f"{name}_acc"] = metrics(logits, data.labels, m)
        return out

    return BatchRunner(init, run_until, evaluate, final_params)


class Runner(NamedTuple):
    """The pure functions of one training run (see :func:`make_runner`). Each also takes the run's
    :class:`jaxgcn.models.RunInputs` (``inputs()``) as its last argument: passed so, the run's
    learning rate, weight decay and dropout rate are inputs of the compiled program, not constants
    in it, so runs that differ only in them share one program (and its persistent-cache entry)."""

    init: Callable[..., RunState]
    run_until: Callable[..., RunState]
    evaluate: Callable[..., Evaluation]
    final_params: Callable[[RunState], Params]
    inputs: Callable[[], RunInputs]


def make_runner(model_config: GCNConfig, config: TrainConfig, n_features: int, n_classes: int,
                execution: Execution = Execution(), *,
                propagate: Propagate | None = None, collective: Collective = LOCAL) -> Runner:
    """The (uncompiled) functions of ONE training run: :func:`make_batch_runner`'s step, carrying one
    run's own :class:`RunState` (no run axis: what checkpoints hold; the step gives the forward
    pass its params with a run axis of 1). ``propagate`` and ``collective`` as in
    :func:`make_batch_runner` (sharded training)."""
    model = gcn(model_config)
    batch = make_batch_runner(model_config, config, execution, propagate=propagate, collective=collective)
    keep_best = isinstance(config.early_stopping, Patience)

    def one() -> RunInputs:  # this run's settings, as a batch of one
        return make_run_inputs(dropout=[model_config.dropout], hidden=[model_config.hidden], lr=[config.lr],
                               weight_decay=[config.weight_decay])

    def init(key: jax.Array, data: TrainData, runs: RunInputs) -> RunState:
        k_init, k_run = jax.random.split(key)
        return init_run_state(config, model.init(k_init, n_features, n_classes), k_run, runs.lr[0],
                              runs.weight_decay[0])

    def run_until(state: RunState, data: TrainData, stop_epoch: jax.Array, runs: RunInputs) -> RunState:
        return batch.run_until(BatchState(state, state.epoch), data, runs, stop_epoch).runs

    def evaluate(params: Params, data: TrainData, runs: RunInputs) -> Evaluation:
        stacked = jax.tree.map(jnp.expand_dims, params, _insert_axes(params))
        return Evaluation(**{k: v[0] for k, v in batch.evaluate(stacked, data, runs).items()})

    def final_params(state: RunState) -> Params:
        return state.best_params if keep_best else state.params

    return Runner(init, run_until, evaluate, final_params, one)


class WithRuns(NamedTuple):
    """A compiled :class:`Runner` function with its last argument, the run's settings, bound."""

    program: Any  # jax.stages.Compiled
    runs: RunInputs

    def __call__(self, *args: Any) -> Any:
        return self.program(*args, self.runs)

    def as_text(self) -> str:
        return self.program.as_text()


class Compiled(NamedTuple):
    """AOT-compiled :class:`Runner` functions for one configuration and one data signature."""

    init: Callable[..., RunState]
    run_until: Callable[..., RunState]
    evaluate: Callable[..., Evaluation]
    final_params: Callable[..., Params]
    compile_seconds: float


_COMPILED: dict[Any, Compiled] = {}


def signature(data: TrainData) -> Any:
    leaves, treedef = jax.tree.flatten(data)
    return treedef, tuple((leaf.shape, str(leaf.dtype)) for leaf in leaves)


def compile_programs(runner: Runner, key: jax.Array, init_data: Any, data: Any) -> Compiled:
    """AOT-compile a :class:`Runner`'s functions for ``data``, with the run's settings
    (``runner.inputs()``, host values, the same on every process) bound as their last argument:
    runs that differ only in lr, weight decay or dropout share one program. ``init_data`` is the
    second argument ``init`` is called with (a single run's data, a sharded run's ``None``; either
    ``init`` reads only the key); ``run_until`` and ``evaluate`` are lowered for the state's shapes and dtypes, with no
    placement: the state ``init`` returns is uncommitted, so a sharded run's programs replicate it
    over their mesh."""
    start = time.perf_counter()
    runs = jax.tree.map(np.asarray, runner.inputs())
    init = jit(runner.init).lower(key, init_data, runs).compile()
    state = jax.eval_shape(runner.init, key, init_data, runs)
    run_until = jit(runner.run_until, donate_argnums=0).lower(state, data, jnp.int32(0), runs).compile()
    evaluate = jit(runner.evaluate).lower(state.params, data, runs).compile()
    return Compiled(WithRuns(init, runs), WithRuns(run_until, runs), WithRuns(evaluate, runs), runner.final_params,
                    time.perf_counter() - start)


def compile_runner(model_config: GCNConfig, config: TrainConfig, data: TrainData, n_classes: int,
                   execution: Execution = Execution()) -> Compiled:
    """Compile (once per configuration and data shapes; cached) the functions of a training run."""
    cache_key = (model_config, config, execution, n_classes, signature(data))
    if cache_key in _COMPILED:
        return _COMPILED[cache_key]._replace(compile_seconds=0.0)
    runner = make_runner(model_config, config, data.x.shape[1], n_classes, execution)
    _COMPILED[cache_key] = compile_programs(runner, jax.random.key(0), data, data)
    return _COMPILED[cache_key]


class FitResult(NamedTuple):
    """Outcome of one training run (host values).

    Attributes:
        params: the final params (best params for ``patience`` early stopping).
        metrics: loss/accuracy per split of ``params`` (dropout off).
        epochs_run: epochs trained.
        stopped_early: whether the early-stopping rule ended the run.
        history: ``{"loss", "train_acc", "val_loss", "val_acc"}`` -> [epochs_run] NumPy arrays.
        compile_seconds: time spent compiling (0 when the program was cached).
        train_seconds: wall time of the epochs and the final evaluation.
        restored_epoch: with ``patience`` early stopping, the epoch (1-based) whose params
            ``params`` are (the best validation accuracy); ``None`` otherwise.
    """

    params: Params
    metrics: dict[str, float]
    epochs_run: int
    stopped_early: bool
    history: dict[str, np.ndarray]
    compile_seconds: float
    train_seconds: float
    restored_epoch: int | None = None


class Chunk(NamedTuple):
    """What the host sees after each compiled chunk of epochs (the hooks' argument).

    Attributes:
        epoch: epochs done (by the furthest run).
        history: ``{"loss", "train_acc", "val_loss", "val_acc"}`` -> [epochs] or [runs, epochs] (NaN
            where a run has not, or no longer, trained).
        reason: [runs] why each run ended (``RUNNING`` while it trains); [1] for a single run.
        seconds: wall time since the first chunk started.
    """

    epoch: int
    history: dict[str, np.ndarray]
    reason: np.ndarray
    seconds: float


Hook = Callable[[Any, Chunk], None]  # (the device state after the chunk, what it shows)


def drive(step: Callable[[Any, int], Any], state: Any, view: Callable[[Any], tuple[int, dict, np.ndarray]], *,
          epochs: int, chunk: int, hooks: list[Hook]) -> tuple[Any, Chunk]:
    """THE host loop of every path (single, batched, sharded): run the compiled loop in chunks of
    ``chunk`` epochs, ``step(state, stop_epoch) -> state``, until no run is running; after each
    chunk call every hook (log lines, progress bar, JSON lines, TensorBoard, checkpoints).
    ``view(state) -> (epoch, history, reason)`` reads the state back to the host."""
    start = time.perf_counter()
    while True:
        epoch = view(state)[0]
        state = step(state, min(epoch + max(chunk, 1), epochs))
        seen = Chunk(*view(state), time.perf_counter() - start)
        if seen.epoch <= epoch and np.any(seen.reason == RUNNING):
            # the compiled loop ended a chunk without an epoch while runs still train: looping on
            # would never end (a loop condition or a stop mask that misreads the runs' states)
            raise RuntimeError(f"training made no progress at epoch {epoch}: {int(np.sum(seen.reason == RUNNING))} "
                               "run(s) still running but the compiled loop advanced no epoch (a jaxgcn bug; "
                               "please report it)")
        for hook in hooks:
            hook(state, seen)
        if not np.any(seen.reason == RUNNING):
            return state, seen


def log_hook(log: Callable[[str], None], every: int) -> Hook:
    """A hook that logs :func:`jaxgcn.progress.epoch_line` for every ``every``-th epoch of one run."""
    shown = [0]

    def hook(_: Any, seen: Chunk) -> None:
        rows = seen.history
        for e in range(shown[0] + 1, seen.epoch + 1):
            if e % every == 0:
                log(epoch_line(e, *(float(rows[k][e - 1]) for k in ("loss", "train_acc", "val_acc"))))
        shown[0] = seen.epoch
    return hook


def progress_hook(progress: Any) -> Hook:
    """A hook that feeds a :class:`jaxgcn.progress.Progress` (bar or lines, ``--log``, TensorBoard)."""
    return lambda _, seen: progress.epochs(seen.epoch, seen.history, seen.seconds)


def single_view(state: RunState) -> tuple[int, dict[str, np.ndarray], np.ndarray]:
    """``view`` of :func:`drive` for one run's :class:`RunState`."""
    return int(state.epoch), {k: np.asarray(v) for k, v in state.history.items()}, np.asarray([int(state.reason)])


def fit(
    data: TrainData,
    n_classes: int,
    *,
    model_config: GCNConfig = GCNConfig(),
    execution: Execution = Execution(),
    config: TrainConfig = TrainConfig(),
    key: jax.Array | None = None,
    log_every: int = 20,
    log: Callable[[str], None] | None = print,
    checkpoint_every: int | None = None,
    on_checkpoint: Callable[[RunState], None] | None = None,
    resume: Callable[[RunState], RunState] | None = None,
    progress: Any = None,
) -> FitResult:
    """Train one GCN; print ``Epoch  20 | loss ... | train ... | val ...`` every ``log_every`` epochs.

    With ``checkpoint_every`` K, ``on_checkpoint(state)`` receives the whole run state (params,
    Adam moments, PRNG key, early-stopping window, history) every K epochs; ``resume(template)``
    returns a saved state to continue from instead of a fresh one. The epochs are the same
    compiled computation whatever the chunking, so a resumed run equals an uninterrupted one.

    ``progress`` (a :class:`jaxgcn.progress.Progress`) receives the compile phase and the history
    after every chunk of ``log_every`` epochs (bar, plain lines, ``--log`` JSON lines).

    Raises:
        TrainingDiverged: the loss became NaN/inf; the message names the likely causes.
    """
    key = jax.random.key(0) if key is None else key
    data = with_focus(data)
    if progress is not None:
        progress.compiling()
    compiled = compile_runner(model_config, config, data, n_classes, execution)
    if progress is not None:
        progress.compiled(compiled.compile_seconds)
    state = compiled.init(key, data)
    if resume is not None:
        state = resume(state)
    return run_one(compiled, data, state, config, compile_seconds=compiled.compile_seconds, log_every=log_every,
                   log=log, checkpoint_every=checkpoint_every, on_checkpoint=on_checkpoint, progress=progress,
                   diverged=lambda epoch: divergence_message(data, config, epoch))


def run_one(compiled: Compiled, data: Any, state: RunState, config: TrainConfig, *, compile_seconds: float,
            log_every: int, log: Callable[[str], None] | None, checkpoint_every: int | None,
            on_checkpoint: Callable[[RunState], None] | None, progress: Any,
            diverged: Callable[[int], str]) -> FitResult:
    """THE host side of one run, from its compiled programs and its (fresh or restored) state:
    hooks (log lines, progress, checkpoints every ``checkpoint_every`` epochs while it runs),
    :func:`drive`, the divergence check (``diverged(epoch)`` words it), the final evaluation and
    the :class:`FitResult` with host NumPy params. :func:`fit` and sharded training
    (:func:`jaxgcn.distributed.fit_sharded`) both end here."""
    start = time.perf_counter()
    hooks: list[Hook] = []
    if log is not None and log_every > 0:
        hooks.append(log_hook(log, log_every))
    if progress is not None:
        hooks.append(progress_hook(progress))
    if on_checkpoint is not None:
        hooks.append(lambda s, seen: on_checkpoint(s) if seen.reason[0] == RUNNING else None)
    state, seen = drive(lambda s, stop: compiled.run_until(s, data, jnp.int32(stop)), state, single_view,
                        epochs=config.epochs, chunk=checkpoint_every or log_every, hooks=hooks)
    epoch, reason = seen.epoch, int(seen.reason[0])
    if reason == DIVERGED:
        raise TrainingDiverged(diverged(epoch))
    params = compiled.final_params(state)
    metrics = {k: float(v) for k, v in compiled.evaluate(params, data)._asdict().items()}
    history = {k: np.asarray(v)[:epoch] for k, v in state.history.items()}
    restored = int(state.best_epoch) if isinstance(config.early_stopping, Patience) else None
    return FitResult(jax.tree.map(np.asarray, params), metrics, epoch, reason == STOPPED_EARLY, history,
                     compile_seconds, time.perf_counter() - start, restored)
