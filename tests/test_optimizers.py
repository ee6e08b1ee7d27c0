"""The optimizer choice (TrainConfig.optimizer): one optax factory behind every path (issue 13).

A single run, a batch of runs, a sweep and a sharded run all get their optimizer from
``train.optimizer_factory``; the batch vmaps the single run's update over the run axis. These tests
pin the factory to the textbook updates and show each path runs the chosen optimizer.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxgcn import datasets
from jaxgcn.batched import Entry, entries_for, fit_runs, unstack_params
from jaxgcn.native.csr import kernel_counters, reset_kernel_counters
from jaxgcn.native.fused import adam_leaf
from jaxgcn.core.models import Execution, GCNConfig, gcn
from jaxgcn.sweep import Grid, run_grid
from jaxgcn.train import OPTIMIZERS, Kipf, TrainConfig, fit, l2_penalty, masked_cross_entropy, optimizer_factory

MODEL = GCNConfig()
# what auto picks here (an accelerator: Â on its MXU)
EXEC = Execution(backend="csr" if jax.default_backend() == "cpu" else "dense")


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


@pytest.fixture
def optax_only(monkeypatch):
    """Within the test, ``optax_only()`` turns the fused Adam step off (optax's own update then makes
    the step) for the programs compiled after it; programs compiled meanwhile leave the cache with
    the test."""
    from jaxgcn.training import loop, step

    saved = dict(loop.COMPILED)
    yield lambda: (loop.COMPILED.clear(), monkeypatch.setattr(step, "fused_adam_applies", lambda *a: False))
    loop.COMPILED.clear()
    loop.COMPILED.update(saved)


@pytest.mark.parametrize("decay", [False, True])
def test_the_adam_kernel_computes_the_documented_step(decay):
    """``fused.adam_leaf`` against its formula (kernels/adam.h) in float64: optax's Adam as XLA fuses it
    (with the coupled L2 term's gradient) or AdamW, each run with its own hyperparameters, and each
    run's sums of squares; a stopped run's leaf comes back as it was, bit for bit."""
    rng = np.random.default_rng(4)
    shape = (5, 3, 19)  # [O, R, I]: I past one 16-lane vector
    p, mu, g = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    nu = np.abs(rng.standard_normal(shape)).astype(np.float32)
    lr, rc1, rc2, wd = (np.array(v, np.float32) for v in ([0.01, 0.2, 0.05], [10.0, 1.5, 2.0], [1000.0, 3.0, 7.0],
                                                          [0.5, 0.0, 0.1]))
    running = np.array([1.0, 1.0, 0.0], np.float32)
    hyper = np.stack([lr, rc1, rc2, wd, running])
    step = functools.partial(adam_leaf, b1=0.9, b2=0.999, eps=1e-8, decay=decay, couple=not decay)
    *got, sums = [np.asarray(a) for a in jax.jit(step)(*map(jnp.asarray, (p, mu, nu, g, hyper)))]
    f64 = np.float64
    per_run = [v[None, :, None].astype(f64) for v in (lr, rc1, rc2, wd)]
    if not decay:  # Adam: the coupled L2 term's gradient wd * p added to g first
        g = (per_run[3] * p + g).astype(np.float32)
    m = g.astype(f64) * f64(np.float32(0.1)) + (np.float32(0.9) * mu).astype(f64)
    v = (g * g).astype(f64) * f64(np.float32(1 - 0.999)) + (np.float32(0.999) * nu).astype(f64)
    m32, v32 = m.astype(np.float32), v.astype(np.float32)
    u = ((m32 * per_run[1].astype(np.float32)) / (np.sqrt(v32 * per_run[2].astype(np.float32)) + np.float32(1e-8)))
    if decay:
        u = (per_run[3] * p + u.astype(f64)).astype(np.float32)
    want = [(-per_run[0] * u.astype(f64) + p).astype(np.float32), m32, v32]
    for a, b, before in zip(got, want, (p, mu, nu)):
        np.testing.assert_array_max_ulp(a[:, :2], b[:, :2], maxulp=1)  # float64 then float32: one rounding more
        np.testing.assert_array_equal(a[:, 2], before[:, 2])  # the stopped run
    if not decay:  # the decay term is there only when asked for (run 0 has wd 0.5)
        assert not np.allclose(got[0][:, 0], (-per_run[0] * (u.astype(f64) + per_run[3] * p) + p)[:, 0])
    # each run's sums of squares before and after the step (a stopped run: the same twice)
    np.testing.assert_allclose(sums, [np.sum(p.astype(f64) ** 2, axis=(0, 2)),
                                      np.sum(got[0].astype(f64) ** 2, axis=(0, 2))], rtol=1e-6)


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_the_fused_adam_step_trains_as_optaxs_own(prepared, name, optax_only):
    """Where the kernel runs, Adam and AdamW step each params leaf in one pass
    (``training.optim.fused_adam``). Its runs stop at the epochs optax's own update gives and end
    with its params and histories to float rounding (XLA fuses optax's operations differently in
    each program, so the bits differ): for a batch whose runs have their own learning rates and
    weight decays and stop at different epochs (the kernel keeps a stopped run as it was), and for
    one run."""
    config = TrainConfig(optimizer=name, epochs=60, lr=0.05, weight_decay=5e-3, early_stopping=Kipf(3))
    entries = [Entry(MODEL, dataclasses.replace(config, lr=lr, weight_decay=wd), seed, 0)
               for seed, lr, wd in ((0, 0.05, 5e-3), (1, 0.3, 0.0), (2, 0.01, 5e-2))]
    one = dict(model_config=MODEL, execution=EXEC, config=config, key=jax.random.key(3), log=None)

    def both():
        return (fit_runs(prepared.data, prepared.n_classes, entries, execution=EXEC),
                fit(prepared.data, prepared.n_classes, **one))
    reset_kernel_counters()
    (batch, single) = both()
    assert kernel_counters()["adam_calls"] > 0
    assert len(set(batch.epochs_run.tolist())) > 1  # runs stopped at different epochs
    optax_only()
    reset_kernel_counters()
    (batch_ref, single_ref) = both()
    assert kernel_counters()["adam_calls"] == 0
    np.testing.assert_array_equal(batch.epochs_run, batch_ref.epochs_run)
    assert single.epochs_run == single_ref.epochs_run
    for got, want in ((single.params, single_ref.params), (single.history, single_ref.history),
                      (batch.params, batch_ref.params), (batch.history, batch_ref.history)):
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            # 60 epochs compound each step's rounding: measured up to 2.5e-5 relative on a weight
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
