"""Losses, metrics, the optimizer, and the compiled training run with early stopping (jaxgcn.train).

Training runs are traced under standard dtype promotion (optax's Adam is not strict-promotion
clean; see conftest.py). Each distinct (config, data shape) costs one ~5 s compilation, so the
runs below share configurations where they can (fit caches compiled programs per process).
"""

from __future__ import annotations

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxgcn import datasets
from jaxgcn.core.graph import gcn_norm
from jaxgcn.core.models import Execution, GCNConfig, gcn
from jaxgcn.train import (
    Kipf,
    Patience,
    TrainConfig,
    TrainingDiverged,
    early_stopping_from,
    fit,
    l2_penalty,
    make_optimizer,
    masked_accuracy,
    masked_cross_entropy,
    should_stop_early,
)

GRAD_TOL = dict(atol=1e-2, rtol=1e-2, eps=1e-2)  # float32 finite differences


def np_log_softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


# --- losses and metrics ----------------------------------------------------------------------------


@pytest.fixture
def scores():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((12, 4)).astype(np.float32) * 3
    labels = rng.integers(0, 4, 12).astype(np.int32)
    labels[[2, 7]] = -1  # unlabelled nodes, outside the mask
    mask = np.zeros(12, np.float32)
    mask[[0, 1, 3, 4, 5, 9, 11]] = 1.0
    return logits, labels, mask


def test_masked_cross_entropy_matches_numpy(scores):
    logits, labels, mask = scores
    idx = np.flatnonzero(mask)
    expected = -np.mean(np_log_softmax(logits.astype(np.float64))[idx, labels[idx]])
    got = masked_cross_entropy(jnp.asarray(logits), jnp.asarray(labels), jnp.asarray(mask))
    assert float(got) == pytest.approx(expected, rel=1e-5)


def test_masked_accuracy_matches_numpy(scores):
    logits, labels, mask = scores
    idx = np.flatnonzero(mask)
    expected = np.mean(logits[idx].argmax(axis=1) == labels[idx])
    assert 0.0 < expected < 1.0
    got = masked_accuracy(jnp.asarray(logits), jnp.asarray(labels), jnp.asarray(mask))
    assert float(got) == pytest.approx(expected, abs=1e-6)


def test_empty_mask_gives_zero_not_nan(scores):
    logits, labels, _ = scores
    zero = jnp.zeros(12, jnp.float32)
    assert float(masked_cross_entropy(jnp.asarray(logits), jnp.asarray(labels), zero)) == 0.0
    assert float(masked_accuracy(jnp.asarray(logits), jnp.asarray(labels), zero)) == 0.0


def test_masked_losses_jit_equal_eager(scores):
    args = tuple(jnp.asarray(a) for a in scores)
    for fn in (masked_cross_entropy, masked_accuracy):
        assert float(jax.jit(fn)(*args)) == pytest.approx(float(fn(*args)), rel=1e-6)


@pytest.fixture
def rich_params():
    """Params with biases, a residual projection and layer norms, all random (non-zero)."""
    config = GCNConfig(hidden=5, layers=3, bias=True, residual=True, layer_norm=True)
    params = gcn(config).init(jax.random.key(0), 4, 3)
    rng = np.random.default_rng(1)
    return jax.tree.map(lambda a: jnp.asarray(rng.standard_normal(a.shape), jnp.float32), params)


def test_l2_penalty_first_and_all(rich_params):
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), rich_params)
    first = 0.5 * (np.sum(p["layer_0"]["w"] ** 2) + np.sum(p["layer_0"]["w_res"] ** 2))
    every = first + 0.5 * (np.sum(p["layer_1"]["w"] ** 2) + np.sum(p["layer_2"]["w"] ** 2))
    assert float(l2_penalty(rich_params, "first")) == pytest.approx(first, rel=1e-5)
    assert float(l2_penalty(rich_params, "all")) == pytest.approx(every, rel=1e-5)
    # Biases and layer-norm parameters are not decayed: changing them leaves the penalty alone.
    shifted = jax.tree.map(lambda a: a, rich_params)
    shifted["layer_0"]["b"] = shifted["layer_0"]["b"] + 100.0
    shifted["layer_1"]["ln"] = {"scale": jnp.full((5,), 50.0), "bias": jnp.full((5,), -50.0)}
    assert float(l2_penalty(shifted, "all")) == pytest.approx(every, rel=1e-5)


def test_l2_penalty_first_is_paper_default():
    assert TrainConfig().l2 == "first" and TrainConfig().weight_decay == 5e-4


def test_training_loss_gradients_match_finite_differences(graph, node_features):
    g = gcn_norm(graph)
    x = jnp.asarray(node_features)
    labels = jnp.asarray([0, 1, 2, 1, 0, 2], jnp.int32)
    mask = jnp.asarray([1, 1, 0, 1, 1, 0], jnp.float32)
    model = gcn(GCNConfig(hidden=4, layers=2, residual=True))  # eval mode: dropout off
    params = model.init(jax.random.key(3), 3, 3)

    def loss(params):
        logits = model.apply(params, g, x)
        return masked_cross_entropy(logits, labels, mask) + 0.1 * l2_penalty(params, "all")

    check_grads(jax.jit(loss), (params,), order=2, modes=("rev",), **GRAD_TOL)
    check_grads(jax.jit(loss), (params,), order=1, modes=("fwd",), **GRAD_TOL)
    grads = jax.grad(loss)(params)
    assert set(grads["layer_0"]) == {"w", "w_res"}
    assert float(jnp.abs(grads["layer_1"]["w"]).max()) > 1e-3


# --- configuration ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(lr=0.0), r"lr=0\.0 must be a positive number"),
    (dict(lr=-0.01), r"lr=-0\.01 must be a positive number"),
    (dict(lr=float("nan")), r"lr=nan must be a positive number"),
    (dict(lr=float("inf")), r"lr=inf must be a positive number"),
    (dict(weight_decay=-1e-4), r"weight_decay=-0\.0001 must be >= 0"),
    (dict(l2="last"), r"l2='last' must be one of \('first', 'all'\)"),
    (dict(epochs=0), r"epochs=0 must be >= 1"),
    (dict(early_stopping="kipf"), r"early_stopping='kipf' must be Kipf\(window\), Patience\(patience\) or None"),
    (dict(clip_norm=0.0), r"clip_norm=0\.0 must be > 0"),
])
def test_train_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**kwargs)


@pytest.mark.parametrize(("make", "match"), [
    (lambda: Kipf(window=0), r"window=0 must be >= 1"),
    (lambda: Patience(patience=0), r"patience=0 must be >= 1"),
    (lambda: early_stopping_from("loss"), r"early_stopping='loss' must be one of \('kipf', 'patience', 'none'\)"),
])
def test_early_stopping_choices_are_validated(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_train_config_defaults_are_the_papers():
    c = TrainConfig()
    assert (c.lr, c.weight_decay, c.l2, c.epochs, c.early_stopping) == (0.01, 5e-4, "first", 200, Kipf(window=10))


@pytest.mark.parametrize("clip_norm", [None, 1.0])
def test_make_optimizer_first_adam_step_is_lr_times_sign(clip_norm):
    # Adam's first update is -lr * g / (|g| + eps) = -lr * sign(g) for every entry, with or
    # without (scale-invariant) global-norm clipping in front.
    grads = {"w": jnp.asarray([[3.0, -0.5], [0.02, -40.0]], jnp.float32)}
    opt = make_optimizer(TrainConfig(lr=0.05, clip_norm=clip_norm))
    updates, _ = opt.update(grads, opt.init(grads), grads)
    np.testing.assert_allclose(np.asarray(updates["w"]), -0.05 * np.sign(np.asarray(grads["w"])), rtol=1e-3)


# --- training runs -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def easy():
    """A homophilous 4-class SBM (500 nodes) the GCN learns well; about 0.63 without its edges."""
    return datasets.prepare(datasets.synthetic(500, n_classes=4, n_features=16, homophily=0.7, signal=0.5, seed=0))


@pytest.fixture(scope="module")
def hard():
    """A weakly homophilous SBM (400 nodes) on which validation accuracy plateaus early."""
    return datasets.prepare(datasets.synthetic(400, n_classes=4, n_features=16, homophily=0.5, signal=0.3, seed=1))


FULL_RUN = TrainConfig(epochs=100, early_stopping=None)


@pytest.fixture(scope="module")
def full_run(easy):
    return fit(easy.data, easy.n_classes, config=FULL_RUN, key=jax.random.key(0), log=None)


def test_fit_learns_the_synthetic_graph(easy, full_run):
    # an accelerator's auto: dense Â on its MXU
    assert easy.backend == ("csr" if jax.default_backend() == "cpu" else "dense") and easy.n_classes == 4
    assert full_run.metrics["test_acc"] > 0.8  # chance is 0.25; features alone give ~0.63
    assert full_run.metrics["train_acc"] > 0.9
    loss = full_run.history["loss"]
    assert loss[-1] < 0.8 * loss[0]
    assert loss[0] == pytest.approx(np.log(4), abs=0.1)  # near-uniform predictions at the start


def test_early_stopping_none_runs_exactly_epochs(full_run):
    assert full_run.epochs_run == 100 and not full_run.stopped_early
    for name in ("loss", "train_acc", "val_loss", "val_acc"):
        assert full_run.history[name].shape == (100,)
        assert np.all(np.isfinite(full_run.history[name]))


def test_fit_metrics_equal_the_returned_params_evaluated_by_hand(easy, full_run):
    logits = gcn(GCNConfig(), Execution(backend=easy.backend)).apply(full_run.params, easy.data.graph, easy.data.x)
    d = easy.data
    for split, mask in (("train", d.train_mask), ("val", d.val_mask), ("test", d.test_mask)):
        acc = float(masked_accuracy(logits, d.labels, mask))
        assert full_run.metrics[f"{split}_acc"] == pytest.approx(acc, abs=1e-6)
        assert full_run.metrics[f"{split}_loss"] == pytest.approx(
            float(masked_cross_entropy(logits, d.labels, mask)), rel=1e-4)
    # The last recorded epoch is the state that was returned (no early stopping).
    assert full_run.history["val_acc"][-1] == pytest.approx(full_run.metrics["val_acc"], abs=1e-6)
    assert full_run.history["val_loss"][-1] == pytest.approx(full_run.metrics["val_loss"], rel=1e-4)


def test_same_key_gives_identical_run_and_other_key_differs(easy, full_run):
    again = fit(easy.data, easy.n_classes, config=FULL_RUN, key=jax.random.key(0), log=None)
    other = fit(easy.data, easy.n_classes, config=FULL_RUN, key=jax.random.key(1), log=None)
    assert again.compile_seconds == 0.0  # the compiled program was reused
    for name, values in full_run.history.items():
        np.testing.assert_array_equal(again.history[name], values)
    jax.tree.map(np.testing.assert_array_equal, again.params, full_run.params)
    assert not np.array_equal(other.history["loss"], full_run.history["loss"])


def test_runs_differing_only_in_lr_weight_decay_and_dropout_share_one_program(easy, full_run):
    """A run's learning rate, weight decay and dropout rate are arguments of its compiled program,
    not constants in it: another value compiles to the same program text (one persistent-cache
    entry: a second ``jaxgcn train --lr 0.05`` skips XLA), and the values still reach the run."""
    from jaxgcn.train import compile_runner

    other_config = dataclasses.replace(FULL_RUN, lr=0.05, weight_decay=1e-3)
    a = compile_runner(GCNConfig(), FULL_RUN, easy.data, easy.n_classes)
    b = compile_runner(GCNConfig(dropout=0.3), other_config, easy.data, easy.n_classes)
    def program(compiled) -> str:  # the instructions, without the source locations of their tracing
        text = re.sub(r"\nFileNames\n.*?\n(?=%|ENTRY)", "\n", compiled.as_text(), flags=re.S)
        return re.sub(r", metadata=\{[^}]*\}", "", text)

    for name in ("init", "run_until", "evaluate"):
        assert program(getattr(a, name)) == program(getattr(b, name)), name
    other = fit(easy.data, easy.n_classes, config=other_config, key=jax.random.key(0), log=None)
    assert other.history["loss"][0] != full_run.history["loss"][0]  # the weight decay's L2 term
    assert not np.allclose(other.history["loss"], full_run.history["loss"], rtol=1e-3)


def test_progress_log_lines(easy, full_run):
    lines = []
    res = fit(easy.data, easy.n_classes, config=FULL_RUN, key=jax.random.key(0), log=lines.append, log_every=40)
    assert len(lines) == 2  # epochs 40 and 80 of 100
    pattern = re.compile(r"^Epoch +(\d+) \| loss (\d\.\d{4}) \| train (\d\.\d{4}) \| val (\d\.\d{4})$")
    for line, epoch in zip(lines, (40, 80)):
        m = pattern.match(line)
        assert m, line
        assert int(m.group(1)) == epoch
        i = epoch - 1
        assert m.group(2) == f"{res.history['loss'][i]:.4f}"
        assert m.group(3) == f"{res.history['train_acc'][i]:.4f}"
        assert m.group(4) == f"{res.history['val_acc'][i]:.4f}"
    assert lines[0].startswith("Epoch  40 |")


def replay_patience(val_acc, val_loss, patience):
    """The 'patience' rule written out: (epoch it stops at, best epoch), both 1-based."""
    best_acc, best_loss, best_epoch = -1.0, np.inf, 0
    for e in range(len(val_acc)):
        if val_acc[e] > best_acc or (val_acc[e] == best_acc and val_loss[e] < best_loss):
            best_acc, best_loss, best_epoch = val_acc[e], val_loss[e], e + 1
        if e + 1 - best_epoch >= patience:
            return e + 1, best_epoch
    return None, best_epoch


def test_patience_stops_early_and_returns_the_best_params(hard):
    config = TrainConfig(epochs=200, early_stopping=Patience(10))
    res = fit(hard.data, hard.n_classes, config=config, key=jax.random.key(0), log=None)
    assert res.stopped_early and res.epochs_run < 200
    val_acc, val_loss = res.history["val_acc"], res.history["val_loss"]
    stop, best = replay_patience(val_acc, val_loss, patience=10)
    assert res.epochs_run == stop
    assert best <= res.epochs_run - 10
    # The returned params are the best epoch's, not the last epoch's.
    assert res.metrics["val_acc"] == pytest.approx(val_acc.max(), abs=1e-6)
    assert res.metrics["val_acc"] == pytest.approx(val_acc[best - 1], abs=1e-6)
    assert res.metrics["val_loss"] == pytest.approx(val_loss[best - 1], rel=1e-4)
    assert res.metrics["val_loss"] != pytest.approx(val_loss[-1], rel=1e-4)  # not the last epoch's


def test_kipf_rule_stops_when_val_loss_exceeds_the_window_mean(hard):
    # With weight_decay=0 the loss the rule watches equals the recorded validation loss, so the
    # rule can be replayed exactly: stop at the first epoch e (0-based) with e > window and
    # val_loss[e] > mean(val_loss[e - window : e]).
    window = 3
    config = TrainConfig(epochs=100, lr=0.05, weight_decay=0.0, early_stopping=Kipf(window))
    res = fit(hard.data, hard.n_classes, config=config, key=jax.random.key(0), log=None)
    assert res.stopped_early and res.epochs_run < 100
    vl = res.history["val_loss"].astype(np.float64)
    gaps = np.array([vl[e] - vl[e - window:e].mean() for e in range(window + 1, len(vl))])
    assert np.all(np.abs(gaps) > 1e-6)  # no near-tie that float rounding could flip
    fired = np.flatnonzero(gaps > 0)
    assert fired.tolist() == [len(gaps) - 1]  # it fires at the last epoch and at no earlier one


# The window [0.25, 0.5, 0.75] has the exact float32 mean 0.5.
@pytest.mark.parametrize(("epoch", "kipf_loss", "stops"), [
    (3, 1.0, False),  # epoch == window: the window is full, but the reference code waits for epoch > window
    (4, 1.0, True),
    (4, 0.5, False),  # equal to the mean is not above it
    (4, 0.5000001, True),
    (40, 0.25, False),
])
def test_kipf_rule_at_its_boundaries(epoch, kipf_loss, stops):
    config = TrainConfig(early_stopping=Kipf(window=3))
    window = jnp.asarray([0.25, 0.5, 0.75], jnp.float32)
    got = should_stop_early(config, jnp.int32(epoch), jnp.float32(kipf_loss), window, jnp.int32(1))
    assert bool(got) is stops


@pytest.mark.parametrize(("epoch", "best_epoch", "stops"), [
    (13, 5, False),  # the 14th epoch, 9 after the best (the 5th)
    (14, 5, True),  # 10 after it: patience 10 is used up
    (14, 15, False),  # this epoch is the best
    (3, 0, False),
])
def test_patience_rule_at_its_boundaries(epoch, best_epoch, stops):
    config = TrainConfig(early_stopping=Patience(10))
    got = should_stop_early(config, jnp.int32(epoch), jnp.float32(9.0), jnp.zeros(1, jnp.float32),
                            jnp.int32(best_epoch))
    assert bool(got) is stops
    never = TrainConfig(early_stopping=None)
    assert not bool(should_stop_early(never, jnp.int32(epoch), jnp.float32(9.0), jnp.zeros(1, jnp.float32),
                                      jnp.int32(best_epoch)))


def test_fit_runs_under_strict_dtype_promotion(hard):
    # A configuration used nowhere else, so no program compiled under standard promotion is reused.
    config = TrainConfig(epochs=3, lr=0.02, early_stopping=None)
    res = fit(hard.data, hard.n_classes, config=config, log=None)
    assert res.epochs_run == 3


@pytest.mark.parametrize("l2", ["first", "all"])
def test_weight_decay_is_added_to_the_loss(hard, l2):
    # Without dropout the first recorded loss is exactly CE(train) + wd * l2 of the initial params,
    # the L2 term over the first layer's weights (the paper's) or over every layer's.
    model_config, execution = GCNConfig(dropout=0.0), Execution(backend=hard.backend)
    config = TrainConfig(epochs=1, weight_decay=0.3, l2=l2, early_stopping=None)
    key = jax.random.key(4)
    res = fit(hard.data, hard.n_classes, model_config=model_config, execution=execution, config=config, key=key,
              log=None)
    k_init, _ = jax.random.split(key)
    model = gcn(model_config, execution)
    params = model.init(k_init, hard.data.x.shape[1], hard.n_classes)
    ce = float(masked_cross_entropy(model.apply(params, hard.data.graph, hard.data.x), hard.data.labels,
                                    hard.data.train_mask))
    scope, other = float(l2_penalty(params, l2)), float(l2_penalty(params, "all" if l2 == "first" else "first"))
    assert res.history["loss"][0] == pytest.approx(ce + 0.3 * scope, rel=1e-5)
    assert abs((ce + 0.3 * other) - res.history["loss"][0]) > 1e-3


DIVERGING = TrainConfig(lr=1e20, epochs=20, early_stopping=None)


@pytest.fixture(scope="module")
def raw_easy():
    return datasets.synthetic(500, n_classes=4, n_features=16, homophily=0.7, signal=0.5, seed=0)


def test_diverging_run_raises_with_causes(raw_easy):
    # An absurd learning rate on raw (x 1e4) features and an unnormalized adjacency: the first
    # Adam step puts weights near 1e20, whose squares overflow float32 in the loss (epoch 2).
    raw = raw_easy._replace(features=raw_easy.features * 1e4)
    prepared = datasets.prepare(raw, norm="none", feature_norm="none")
    with pytest.raises(TrainingDiverged, match="learning rate") as exc:
        fit(prepared.data, prepared.n_classes, config=DIVERGING, log=None)
    message = str(exc.value)
    assert isinstance(exc.value, ValueError)
    assert re.search(r"NaN/inf at epoch \d+", message)
    assert "learning rate 1e+20 is large (try lr=0.01)" in message
    assert "features are unnormalized" in message
    assert "adjacency is unnormalized" in message


def test_diverging_run_on_clean_data_blames_only_the_learning_rate(raw_easy):
    prepared = datasets.prepare(raw_easy)  # same shapes as above: the compiled program is reused
    with pytest.raises(TrainingDiverged, match="learning rate 1e\\+20 is large") as exc:
        fit(prepared.data, prepared.n_classes, config=DIVERGING, log=None)
    assert "features are unnormalized" not in str(exc.value)
    assert "adjacency is unnormalized" not in str(exc.value)



def test_the_host_loop_refuses_a_chunk_that_advances_no_epoch():
    """A compiled loop that returns with runs still running but no epoch done would make the host
    loop spin forever; it raises instead (a planted bug in the loop condition then fails fast)."""
    from jaxgcn import train

    def view(state):
        return state, {}, np.array([train.RUNNING, train.FINISHED])

    with pytest.raises(RuntimeError, match=r"no progress at epoch 3: 1 run\(s\) still running but the compiled "
                                           r"loop advanced no epoch"):
        train.drive(lambda state, stop: state, 3, view, epochs=10, chunk=2, hooks=[])
    seen = []
    state, last = train.drive(lambda state, stop: stop, 0, lambda s: (s, {}, np.array(
        [train.RUNNING if s < 10 else train.FINISHED])), epochs=10, chunk=4, hooks=[lambda s, c: seen.append(c.epoch)])
    assert state == 10 and seen == [4, 8, 10]


def test_take_rows_gradient_equals_the_scatter_add_bit_for_bit():
    # the training loop's gather of its focus nodes: the gradient is a gather (pos), not XLA's
    # scatter-add, with the same bits (a -0.0 gradient row comes back +0.0 either way)
    from jaxgcn.training.step import take_rows

    rng = np.random.default_rng(0)
    used = rng.random(50) < 0.3
    rows = jnp.asarray(np.flatnonzero(used), jnp.int32)
    pos = jnp.where(jnp.asarray(used), jnp.cumsum(jnp.asarray(used)) - 1, -1)
    x = jnp.asarray(rng.standard_normal((50, 3, 4)), jnp.float32)
    weights = np.asarray(rng.standard_normal((rows.shape[0], 3, 4)), np.float32)
    weights[1] = -0.0  # a row whose gradient is -0.0 (not row 0, which pos -1 would read if unmasked)

    def loss(take):
        return lambda x: jnp.sum(jnp.sin(take(x)) * weights)

    ours = jax.jit(jax.grad(loss(lambda x: take_rows(x, rows, pos))))(x)
    xlas = jax.jit(jax.grad(loss(lambda x: jnp.take(x, rows, axis=0))))(x)
    assert np.asarray(ours).tobytes() == np.asarray(xlas).tobytes()
    assert np.all(np.asarray(ours)[~used] == 0) and np.any(np.asarray(ours)[used] != 0)
    np.testing.assert_array_equal(take_rows(x, rows, pos), x[rows])
