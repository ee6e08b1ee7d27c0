"""The optimizer choice (TrainConfig.optimizer): one optax factory behind every path (issue 13).

A single run, a batch of runs, a sweep and a sharded run all get their optimizer from
``train.optimizer_factory``; the batch vmaps the single run's update over the run axis. These tests
pin the factory to the textbook updates and show each path runs the chosen optimizer.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxgcn import datasets
from jaxgcn.batched import entries_for, fit_runs, unstack_params
from jaxgcn.models import Execution, GCNConfig, gcn
from jaxgcn.sweep import Grid, run_grid
from jaxgcn.train import OPTIMIZERS, Kipf, TrainConfig, fit, l2_penalty, masked_cross_entropy, optimizer_factory

MODEL = GCNConfig()
EXEC = Execution(backend="csr")  # what auto picks here


@pytest.fixture(scope="module")
def prepared():
    return datasets.prepare(datasets.synthetic(400, n_classes=4, n_features=16, homophily=0.5, signal=0.3, seed=1))


def test_one_sgd_step_is_the_hand_written_update(prepared):
    """``--optimizer sgd``: the engine's first step is ``p - lr * g`` over the params pytree, with g
    the gradient of the training loss (cross-entropy + L2 on the first layer) at the initial params."""
    d, lr, wd = prepared.data, 0.1, 5e-4
    model_config = GCNConfig(dropout=0.0)  # no dropout: the step is deterministic
    config = TrainConfig(optimizer="sgd", lr=lr, weight_decay=wd, epochs=1, early_stopping=None)
    key = jax.random.key(7)
    res = fit(d, prepared.n_classes, model_config=model_config, execution=EXEC, config=config, key=key, log=None)
    model = gcn(model_config, EXEC)
    params = model.init(jax.random.split(key)[0], d.x.shape[1], prepared.n_classes)

    def loss(p):
        return masked_cross_entropy(model.apply(p, d.graph, d.x), d.labels, d.train_mask) + wd * l2_penalty(p)
    by_hand = jax.tree.map(lambda p, g: p - lr * g, params, jax.jit(jax.grad(loss))(params))
    for got, want in zip(jax.tree.leaves(res.params), jax.tree.leaves(by_hand)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-7)
    assert not np.allclose(np.asarray(res.params["layer_0"]["w"]), np.asarray(params["layer_0"]["w"]))


@pytest.mark.parametrize("name, textbook", [
    ("adam", lambda lr, wd: optax.adam(lr)),
    ("sgd", lambda lr, wd: optax.sgd(lr)),
    ("momentum", lambda lr, wd: optax.sgd(lr, momentum=0.9)),
    # decoupled decay on the first layer's weights only (the L2 scope), not on biases
    ("adamw", lambda lr, wd: optax.adamw(lr, weight_decay=wd, mask=lambda p: {
        k: {n: k == "layer_0" and n == "w" for n in v} for k, v in p.items()})),
])
def test_the_factory_builds_the_textbook_optimizers(name, textbook):
    rng = np.random.default_rng(0)
    params = {"layer_0": {"w": jnp.asarray(rng.standard_normal((3, 4)), jnp.float32),
                          "b": jnp.asarray(rng.standard_normal(4), jnp.float32)},
              "layer_1": {"w": jnp.asarray(rng.standard_normal((4, 2)), jnp.float32)}}
    ours, ref = optimizer_factory(TrainConfig(optimizer=name))(0.05, 0.1), textbook(0.05, 0.1)
    with jax.numpy_dtype_promotion("standard"):  # plain optax needs it (see train.standard_promotion)
        s_ref = ref.init(params)
    s_ours, p_ours, p_ref = ours.init(params), params, params
    for step in range(3):
        grads = jax.tree.map(lambda p: jnp.sin(p * (step + 1)), p_ours)
        u_ours, s_ours = ours.update(grads, s_ours, p_ours)
        with jax.numpy_dtype_promotion("standard"):
            u_ref, s_ref = ref.update(grads, s_ref, p_ref)
        p_ours, p_ref = optax.apply_updates(p_ours, u_ours), optax.apply_updates(p_ref, u_ref)
    for a, b in zip(jax.tree.leaves(p_ours), jax.tree.leaves(p_ref)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def test_adamw_decays_in_the_optimizer_not_in_the_loss(prepared):
    """With ``adamw`` the recorded loss has no L2 term (the decay is decoupled)."""
    d = prepared.data
    model_config = GCNConfig(dropout=0.0)
    losses = {}
    for name in ("adam", "adamw"):
        config = TrainConfig(optimizer=name, weight_decay=0.5, epochs=1, early_stopping=None)
        losses[name] = fit(d, prepared.n_classes, model_config=model_config, execution=EXEC, config=config,
                           key=jax.random.key(0), log=None).history["loss"][0]
    params = gcn(model_config, EXEC).init(jax.random.split(jax.random.key(0))[0], d.x.shape[1], prepared.n_classes)
    ce = float(masked_cross_entropy(gcn(model_config, EXEC).apply(params, d.graph, d.x), d.labels, d.train_mask))
    assert losses["adamw"] == pytest.approx(ce, rel=1e-5)
    assert losses["adam"] == pytest.approx(ce + 0.5 * float(l2_penalty(params)), rel=1e-5)


@pytest.mark.parametrize("name", [o for o in OPTIMIZERS if o != "adam"])  # adam: test_batched.py
def test_batched_runs_equal_single_runs_for_each_optimizer(prepared, name):
    config = TrainConfig(optimizer=name, epochs=40, lr=0.05, early_stopping=Kipf(5), clip_norm=1.0)
    res = fit_runs(prepared.data, prepared.n_classes, entries_for([0, 1], model_config=MODEL, config=config),
                   execution=EXEC)
    for r, seed in enumerate([0, 1]):
        one = fit(prepared.data, prepared.n_classes, model_config=MODEL, execution=EXEC, config=config,
                  key=jax.random.key(seed), log=None)
        assert int(res.epochs_run[r]) == one.epochs_run
        np.testing.assert_allclose(res.history["val_loss"][r, :one.epochs_run], one.history["val_loss"],
                                   rtol=1e-5, atol=1e-6)
        for got, want in zip(jax.tree.leaves(unstack_params(res.params, r)), jax.tree.leaves(one.params)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_a_sweep_over_optimizers_runs_each_as_its_single_runs(prepared):
    config = TrainConfig(epochs=30, early_stopping=None)
    rows = run_grid(prepared.data, prepared.n_classes, Grid(lr=(0.05,), optimizer=("adam", "sgd")), [0],
                    model_config=MODEL, execution=EXEC, config=config, log=None)
    assert sorted(r.config["optimizer"] for r in rows) == ["adam", "sgd"]
    for row in rows:
        one = fit(prepared.data, prepared.n_classes, model_config=MODEL, execution=EXEC, log=None,
                  key=jax.random.key(0),
                  config=TrainConfig(epochs=30, early_stopping=None, lr=0.05, optimizer=row.config["optimizer"]))
        assert row.runs[0]["val_acc"] == pytest.approx(one.metrics["val_acc"], abs=1e-6)
        assert row.runs[0]["test_acc"] == pytest.approx(one.metrics["test_acc"], abs=1e-6)
    adam, sgd = sorted(rows, key=lambda r: r.config["optimizer"])
    assert adam.runs[0]["val_acc"] != sgd.runs[0]["val_acc"]  # two optimizers, two trajectories


def test_unknown_optimizer_is_refused():
    with pytest.raises(ValueError, match=r"optimizer='rmsprop' must be one of \('adam', 'adamw', 'sgd', 'momentum'\)"):
        TrainConfig(optimizer="rmsprop")
