"""THE training step, on a run axis.

One epoch of one or many runs is written once (:func:`make_batch_runner`): a batch of R runs keeps
a RunState whose leaves carry a run axis (weights [in, R, out], biases and norms [R, d], everything
else [R, ...]). A single run is a batch of one, its own state without a run axis behind the batch's
view (``make_batch_runner(..., one=...)``), and sharded training is the
same step inside ``shard_map`` with its block propagation and a ``psum`` collective.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxgcn.core import hyper
from jaxgcn.core.data import TrainData
from jaxgcn.core.layers import Params, insert_axes, run_axes, select_running, unstacked_shapes
from jaxgcn.core.models import (Decided, Execution, FirstLayer, GCNConfig, Ops, Propagate, RunInputs, aggregate_input,
                           apply_runs, first_layer_pair, gcn, make_run_inputs, ops_of)
from jaxgcn.core.propagate import take_rows
from jaxgcn.core.results import Evaluation
from jaxgcn.core.tasks import Task, task_of
from jaxgcn.training.config import Patience, RUNNING, TrainConfig
from jaxgcn.training.losses import per_run_l2
from jaxgcn.training.optim import fused_adam, fused_adam_applies, optimizer_factory
from jaxgcn.training.state import (BatchState, RunState, axes_of_state, init_run_state, optimizer_axes,
                                   record_epoch, run_keys, runs_of, state_axes)


class Collective(NamedTuple):
    """What a step does across devices when each holds a block of the graph's rows (sharded
    training, inside ``shard_map``); nothing on one device (:data:`LOCAL`).

    Attributes:
        total: sums a pytree over the devices (``psum``): the loss, metric sums and gradients.
        device_key: this device's dropout key from the run's (``fold_in`` of the device index).
        gather: ``(array, axis)``: every device's block of ``array`` along its node axis ``axis``,
            in device order (``all_gather``): what a metric that is no sum over nodes (ROC-AUC) reads.
    """

    total: Callable[[Any], Any]
    device_key: Callable[[jax.Array], jax.Array]
    gather: Callable[[jax.Array, int], jax.Array] = lambda x, axis: x


LOCAL = Collective(total=lambda tree: tree, device_key=lambda key: key)


class Runner(NamedTuple):
    """THE runner type: the pure functions of a batch of runs or of one run (both built by
    :func:`make_batch_runner`), called alike: ``init(..., runs)`` (a batch's stacked params and
    seeds, one run's key and data), ``run_until(state, data, runs, stop)``, ``evaluate(params,
    data, runs)``, ``final_params(state)``. Each takes the runs' :class:`jaxgcn.core.models.RunInputs`:
    passed so, the learning rate, weight decay and dropout rate are inputs of the compiled program,
    not constants in it, so runs that differ only in them share one program (and its
    persistent-cache entry). One run's also gives them (``inputs()``); a batch's come from its entries."""

    init: Callable[..., Any]
    run_until: Callable[..., Any]
    evaluate: Callable[..., Any]
    final_params: Callable[[Any], Params]
    inputs: Callable[[], RunInputs] | None = None


BatchRunner = Runner  # the name a batch's runner always had


class Step(NamedTuple):
    """The settings of THE training step (:func:`make_batch_runner`) and its parts, each a pure
    function of its arguments (compiled with ``jax.jit`` by the callers). ``ops`` compute the
    products (:class:`jaxgcn.core.ops.Ops`, chosen by the plan; None: those the plan decides for ``execution``):
    the step reads its kernel-only shortcuts (row plans, the fused Adam pass, the first layer's
    pair) from them (:attr:`products`)."""

    model_config: GCNConfig
    config: TrainConfig
    execution: Execution | Decided
    propagate: Propagate | None
    collective: Collective
    ops: Ops | None = None
    one: tuple[int, int] | None = None  # (n_features, n_classes) of ONE run, whose state has no run axis

    @property
    def products(self) -> Ops:
        """The ops that compute the products: those given, else the decided execution's own
        (:func:`jaxgcn.core.models.ops_of`, the model's own rule)."""
        return ops_of(self.execution, self.ops)

    @property
    def keep_best(self) -> bool:
        return isinstance(self.config.early_stopping, Patience)

    def masks(self, data: TrainData, runs: RunInputs) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Each run's train, validation and test masks [R, n] (the split its inputs name)."""
        def per_run(m: jax.Array) -> jax.Array:  # [n] or [n_splits, n] -> [R, n]
            return m[runs.split] if m.ndim == 2 else jnp.broadcast_to(m[None, :], (runs.split.shape[0], m.shape[0]))
        return per_run(data.train_mask), per_run(data.val_mask), per_run(data.test_mask)

    def rows(self, data: TrainData, *, train: bool) -> Any:
        """The rows each layer computes (:func:`jaxgcn.core.native_ops.row_plan`, in ``data.aux``) for the
        logits a training step's loss (``train``) or the loop's evaluation reads, where the forward
        pass is the ops' default propagation with 2 or more layers and the ops take row plans (the
        csr kernel's, with the hash's dropout masks, drawn by node id; ``jax.random`` draws a
        layer's masks by row); else None (every row)."""
        usable = self.propagate is None and self.model_config.layers > 1 and self.products.row_plans
        aux = data.aux if usable else None
        return None if aux is None else aux.train_rows if train else aux.eval_rows

    def focused(self, data: TrainData, logits: jax.Array, *ms: jax.Array, rows: Any = None) -> tuple[jax.Array, ...]:
        """The logits, labels and masks of the nodes the loop's loss and metrics read: ``rows.nodes``,
        whose logits ``logits`` are (:meth:`rows`), or else ``data.focus``, gathered from every node's."""
        if rows is not None:
            nodes = rows.nodes
        elif data.focus is None:
            return (logits, data.labels, *ms)
        else:
            nodes = data.focus
            logits = take_rows(logits, nodes, data.focus_pos)
        take = functools.partial(jnp.take, indices=nodes, unique_indices=True, indices_are_sorted=True)
        return (logits, take(data.labels, axis=0), *(take(m, axis=1) for m in ms))

    def l2_factor(self, runs: RunInputs) -> Any:
        """Each run's factor of the L2 term in its loss: its weight decay (adamw: 0, it decays in the optimizer)."""
        return 0.0 if self.config.optimizer == "adamw" else runs.weight_decay

    def penalty(self, params: Params, runs: RunInputs) -> jax.Array:
        """Each run's coupled L2 term [R] (adamw decays in the optimizer instead)."""
        return self.l2_factor(runs) * per_run_l2(params, self.config.l2)

    def task(self, labels: jax.Array) -> Task:
        """What the runs learn: the config's task, or the one the labels' shape names (:func:`task_of`)."""
        return task_of(self.config.task, labels)

    def metrics(self, logits: jax.Array, labels: jax.Array, m: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Each run's mean loss and the task's metric (accuracy, ROC-AUC, ...) over the masked nodes,
        summed over devices first; a metric that is no sum over nodes (ROC-AUC ranks every node of the
        split) reads every device's rows, gathered onto each, and is then computed as on one device."""
        task = self.task(labels)
        if not task.additive and self.collective is not LOCAL:
            gather = self.collective.gather
            return task.metrics(gather(logits, 0), gather(labels, 0), gather(m, 1), LOCAL.total)
        return task.metrics(logits, labels, m, self.collective.total)

    def forward(self, params: Params, data: TrainData, runs: RunInputs, **kwargs: Any) -> jax.Array:
        return apply_runs(self.model_config, params, data.graph, data.x, runs, execution=self.execution,
                          propagate=self.propagate, ops=self.products, **kwargs)

    def init(self, params: Params, seeds: jax.Array, runs_in: RunInputs) -> BatchState:
        config = self.config
        keys = jax.vmap(lambda s: run_keys(s)[1])(seeds)  # THE seed-to-key rule
        runs = jax.vmap(functools.partial(init_run_state, config), in_axes=(run_axes(params), 0, 0, 0),
                        out_axes=state_axes(config, params))(params, keys, runs_in.lr, runs_in.weight_decay)
        return BatchState(runs, jnp.int32(0))

    def inputs(self) -> RunInputs:
        """ONE run's settings, as a batch of one (the host values of its program's run inputs)."""
        return make_run_inputs(**{k: [v] for k, v in hyper.values_of(self.model_config, self.config).items()})

    def init_one(self, key: jax.Array, data: TrainData, runs: RunInputs) -> RunState:
        """ONE run's own :class:`RunState` (no run axis: what its checkpoints hold), from ``key``."""
        k_init, k_run = run_keys(key)  # THE seed-to-key rule
        params = gcn(self.model_config).init(k_init, *self.one)
        return init_run_state(self.config, params, k_run, runs.lr[0], runs.weight_decay[0])

    def step_keys(self, st: RunState) -> tuple[jax.Array, jax.Array]:
        """The key after this step [R] and each layer's dropout keys of this step [L, R]."""
        def keys(key: jax.Array) -> tuple[jax.Array, jax.Array]:
            key, k_drop = jax.random.split(key)
            return key, jax.random.split(self.collective.device_key(k_drop), self.model_config.layers)
        key, layer_keys = runs_of(st).each(keys, (0,), (0, 1))(st.key)  # one run: [], [L]
        return key, layer_keys if layer_keys.ndim == 2 else layer_keys[:, None]

    def ahead(self, st: RunState, data: TrainData, runs: RunInputs) -> tuple[FirstLayer, FirstLayer] | None:
        """The first layer of the next training step of ``st`` and of an evaluation of its params,
        in one kernel pass (:func:`jaxgcn.core.models.first_layer_pair`; None where it does not apply)."""
        return first_layer_pair(runs_of(st).stack(st.params), data.x, runs, execution=self.execution,
                                keys=self.step_keys(st)[1], ops=self.products)

    def gradients(self, st: RunState, data: TrainData, runs: RunInputs, n_train: jax.Array, layer_keys: jax.Array,
                  first: FirstLayer | None, l2: bool = True) -> tuple[jax.Array, Params]:
        """Each run's training loss [R] (cross-entropy + L2, the cross-entropy summed over devices)
        and its gradients, dropout on; without ``l2``, of the cross-entropy alone (the fused Adam
        step adds the L2 term's gradient and computes its value)."""
        the = runs_of(st)
        train_m = self.masks(data, runs)[0]
        reached = getattr(data.aux, "x_reached", None)  # the kernel's (jaxgcn.core.native_ops.prepare)
        if first is not None and reached is not None and self.propagate is None:
            # the first layer's weight gradient over the rows the loss reaches
            data = data._replace(x=reached)

        rows = self.rows(data, train=True)

        def cross_entropy(params: Params) -> tuple[jax.Array, jax.Array]:
            logits = self.forward(the.stack(params), data, runs, keys=layer_keys, train=True, first=first, rows=rows)
            logits, labels, m = self.focused(data, logits, train_m, rows=rows)
            per_run = self.task(labels).loss_sums(logits, labels, m) / n_train  # this device's share
            return jnp.sum(per_run), per_run

        def regularizer(params: Params) -> tuple[jax.Array, jax.Array]:
            per_run = self.penalty(the.stack(params), runs)
            return jnp.sum(per_run), per_run

        (_, ce), grads = jax.value_and_grad(cross_entropy, has_aux=True)(st.params)
        ce, grads = self.collective.total((ce, grads))
        if not l2:
            return ce, grads
        (_, reg), reg_grads = jax.value_and_grad(regularizer, has_aux=True)(st.params)
        return ce + reg, jax.tree.map(jnp.add, grads, reg_grads)

    def epoch_step(self, state: BatchState, data: TrainData, runs: RunInputs, aggregated: jax.Array | None,
                   n_train: jax.Array, first: FirstLayer | None) -> tuple[BatchState, FirstLayer | None]:
        """One epoch of every running run: gradients, the optimizer, an evaluation, the record."""
        config, keep_best = self.config, self.keep_best
        st = state.runs
        the = runs_of(st)
        axes = run_axes(the.stack(st.params))
        opt_axes = optimizer_axes(config, unstacked_shapes(the.stack(st.params)))
        state_ax = axes_of_state(axes, opt_axes)
        train_m, val_m, _ = self.masks(data, runs)
        key, layer_keys = self.step_keys(st)
        fused = fused_adam_applies(config, self.products.fused_adam)
        loss, grads = self.gradients(st, data, runs, n_train, layer_keys, first, l2=not fused)
        # The one optimizer, per run (vmapped over a batch): each run's clipping, moments and
        # injected learning rate / weight decay, exactly as it would compute them alone.
        opt = optimizer_factory(config)(config.lr, config.weight_decay)  # its update reads each run's values
        updates, opt_state = the.each(opt.update, (axes, opt_axes, axes), (axes, opt_axes))(
            grads, st.opt_state, st.params)
        params = optax.apply_updates(st.params, updates)
        running = st.reason == RUNNING
        if fused:  # optax's numbers, each leaf in one kernel pass (optax's passes then go unused)
            step = fused_adam(config, st.params, grads, st.opt_state, opt_state, running)
            params, opt_state = step.params, step.opt_state
            loss = loss + self.l2_factor(runs) * step.l2_before
        # the evaluation's first layer and the next step's, from one pass (when first is in use)
        pair = None if first is None else self.ahead(st._replace(params=params, key=key), data, runs)
        rows = self.rows(data, train=False)
        logits = self.forward(the.stack(params), data, runs, aggregated=aggregated,
                              first=None if pair is None else pair[1], rows=rows)
        logits, labels, train_f, val_f = self.focused(data, logits, train_m, val_m, rows=rows)
        _, train_acc = self.metrics(logits, labels, train_f)
        val_loss, val_acc = self.metrics(logits, labels, val_f)
        l2_after = self.l2_factor(runs) * step.l2_after if fused else self.penalty(the.stack(params), runs)
        kipf_loss = val_loss + l2_after
        per_run = [the.value(v) for v in (loss, train_acc, val_loss, val_acc, kipf_loss)]
        advanced = the.each(
            lambda s, p, o, k, *m: record_epoch(s, config, keep_best, p, o, k, *m[:4], kipf_loss=m[4]),
            (state_ax, axes, opt_axes, 0, 0, 0, 0, 0, 0), state_ax,
        )(st, params, opt_state, key, *per_run)
        if st.reason.ndim == 1:  # a batch: runs that have stopped stay as they were (their next
            # first-layer product is of params they do not keep, and is never used)
            kept = st if not fused else st._replace(  # the kernel kept them: select(c, a, a) is a
                params=params, opt_state=optax.tree_utils.tree_set(  # for XLA, no pass
                    st.opt_state, mu=optax.tree_utils.tree_get(opt_state, "mu"),
                    nu=optax.tree_utils.tree_get(opt_state, "nu")))
            advanced = select_running(running, advanced, kept, state_ax)
        return BatchState(advanced, state.step + 1), None if pair is None else pair[0]

    def run_until(self, state: BatchState | RunState, data: TrainData, runs: RunInputs,
                  stop_epoch: jax.Array) -> BatchState | RunState:
        """Epochs until no run is running or the shared epoch reaches ``stop_epoch`` (one ``while_loop``).
        ONE run's own :class:`RunState` runs as a batch whose runs it is (:func:`runs_of`'s view)."""
        if isinstance(state, RunState):
            return self.run_until(BatchState(state, state.epoch), data, runs, stop_epoch).runs
        def cond(carry: tuple[BatchState, Any]) -> jax.Array:
            s = carry[0]
            return jnp.any(s.runs.reason == RUNNING) & (s.step < stop_epoch)

        total = self.collective.total
        n_train = jnp.maximum(total(self.task(data.labels).loss_count(data.labels, self.masks(data, runs)[0])),
                              1.0)  # [R], every device's targets
        aggregated = aggregate_input(self.execution, data.graph, data.x, propagate=self.propagate,  # once per call,
                                     ops=self.products, rows=self.rows(data, train=False))  # at the evaluation's rows
        # The first step's first-layer product; each step then computes the next one together with
        # its evaluation. Rebuilt from the state at every call, so a resumed run computes the same.
        pair = self.ahead(state.runs, data, runs)
        return jax.lax.while_loop(cond, lambda c: self.epoch_step(*c[:1], data, runs, aggregated, n_train, c[1]),
                                  (state, None if pair is None else pair[0]))[0]

    def final_params(self, state: BatchState | RunState) -> Params:
        runs = state if isinstance(state, RunState) else state.runs
        return runs.best_params if self.keep_best else runs.params

    def evaluate(self, params: Params, data: TrainData, runs: RunInputs) -> dict[str, jax.Array] | Evaluation:
        """Each run's loss and accuracy per split, dropout off; ONE run's (:attr:`one`) as a batch of one."""
        if self.one is not None:
            stacked = jax.tree.map(jnp.expand_dims, params, insert_axes(params))
            return Evaluation(**{k: v[0] for k, v in self._replace(one=None).evaluate(stacked, data, runs).items()})
        logits = self.forward(params, data, runs)
        out = {}
        for name, m in zip(("train", "val", "test"), self.masks(data, runs)):
            out[f"{name}_loss"], out[f"{name}_acc"] = self.metrics(logits, data.labels, m)
        return out


def make_batch_runner(model_config: GCNConfig, config: TrainConfig, execution: Execution = Execution(), *,
                      propagate: Propagate | None = None, collective: Collective = LOCAL,
                      ops: Ops | None = None, one: tuple[int, int] | None = None) -> Runner:
    """THE runner builder: the training step for R runs at once (compile the functions with
    ``jax.jit``); every path (one run, many runs, sharded) runs these functions (:class:`Step`).

    One epoch, per run: dropout forward, masked cross-entropy (+ the coupled L2 term), gradient,
    :func:`optimizer_factory`'s update (vmapped over the run axis, with each run's injected learning
    rate and weight decay), an evaluation forward, then :func:`record_epoch` (history, best params,
    :func:`should_stop_early`). A run that has stopped is frozen by a per-run mask.

    ``propagate`` replaces the aggregation (sharded training passes its block exchange) and
    ``collective`` sums the loss, metrics and gradients over devices (:class:`Collective`). Split
    masks may be stacked ``[n_splits, n_nodes]``; each run reads the split its
    :class:`jaxgcn.core.models.RunInputs` names. The first layer of a step and of its evaluation come
    from one kernel pass wherever the kernel runs (:func:`jaxgcn.core.models.first_layer_pair`; on a
    sharded run, over the device's block of rows: the first layer is row-local). ``ops``: what
    computes the products (default: those of the planned ``execution``, :func:`jaxgcn.plan.ops_for`).

    ``one=(n_features, n_classes)``: ONE run, its own :class:`RunState` without a run axis behind the
    batch's view (what its checkpoints hold; a vmap of one would cost scatters,
    :class:`~jaxgcn.training.state.RunsView`): ``init(key, data, runs)``, ``evaluate`` of its params
    to an :class:`Evaluation`, and ``inputs()``.
    """
    step = Step(model_config, config, execution, propagate, collective, ops, one)
    if one is None:
        return Runner(step.init, step.run_until, step.evaluate, step.final_params)
    return Runner(step.init_one, step.run_until, step.evaluate, step.final_params, step.inputs)


def make_runner(model_config: GCNConfig, config: TrainConfig, n_features: int, n_classes: int,
                execution: Execution = Execution(), **options: Any) -> Runner:
    """ONE run's runner, as it was always called: :func:`make_batch_runner` with ``one=(n_features, n_classes)``."""
    return make_batch_runner(model_config, config, execution, one=(n_features, n_classes), **options)
