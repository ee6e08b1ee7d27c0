"""Batched runs (jaxgcn.batched) against the single-run reference (jaxgcn.train.fit / models.gcn).

Every batched run must reproduce, to float rounding, the single run with the same seed, split and
hyperparameters: same init, same dropout masks, same early-stopping decisions. Each distinct
(config, data shape, run count) compiles once per process (~5 s), so the tests share a few
module-scoped datasets and configurations; single runs go through a memoizing ``single`` fixture.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

from jaxgcn import datasets, plan
from jaxgcn.batched import Entry, entries_for, fit_runs, init_params, program_of, run_inputs, unstack_params
from jaxgcn.datasets.splits import planetoid_split
from jaxgcn.core.feature_lists import from_scipy
from jaxgcn.core.models import Execution, GCNConfig, apply_runs, gcn
from jaxgcn.train import Kipf, Patience, TrainConfig, fit

# On the weakly homophilous graph below, lr 0.1 makes Kipf's rule stop every seed well before 60
# epochs, each at its own epoch (measured: seed 1 at 33, seed 2 at 34, seed 0 at 35), so stopped
# runs sit frozen while others train. The earliest is run 0: a batch whose runs stopped when run 0
# stopped would end them all at 33.
SEEDS = [1, 0, 2]
MODEL = GCNConfig()  # hidden 16, dropout 0.5, no bias: the paper's
ON_CPU = jax.default_backend() == "cpu"
EXEC = Execution(backend="csr" if ON_CPU else "dense")  # what auto picks here (an accelerator: Â on its MXU)
KIPF = TrainConfig(epochs=60, lr=0.1, early_stopping=Kipf(5))
PATIENCE = TrainConfig(epochs=60, lr=0.05, early_stopping=Patience(5))
NONE = TrainConfig(epochs=40, early_stopping=None)  # run on the sparse-feature copy of the graph
HISTORY = ("loss", "train_acc", "val_loss", "val_acc")
# Trained params agree to ~1e-6 here (measured max 3e-6). Should one weight ever differ by ~1e-4:
# Adam divides by sqrt(second moment), so a weight whose gradient is almost zero amplifies float
# rounding (seen once, up to 2e-4, with another init); check the loss histories before suspecting.
PARAM_TOL = dict(rtol=1e-5, atol=1e-5)



@pytest.fixture(scope="module")
def raw_hard():
    """A weakly homophilous 4-class SBM (400 nodes, dense features): validation plateaus early."""
    return datasets.synthetic(400, n_classes=4, n_features=16, homophily=0.5, signal=0.3, seed=1)


@pytest.fixture(scope="module")
def hard(raw_hard):
    prepared = datasets.prepare(raw_hard)
    assert prepared.backend == EXEC.backend and isinstance(prepared.data.x, jax.Array)
    return prepared


def sparse_version(raw_hard, backend):
    """``hard`` with sparse features (entries below 1 in magnitude dropped, ~30% stored): CSR
    features for the csr backend, BCOO for the others (feature lists on an accelerator)."""
    dense = np.asarray(raw_hard.features)
    features = sp.csr_matrix(np.where(np.abs(dense) > 1.0, dense, 0.0).astype(np.float32))
    prepared = datasets.prepare(raw_hard._replace(features=features), backend=backend)
    assert prepared.backend == backend
    if not ON_CPU:  # an accelerator lays these out dense; its scatter-free sparse layout is the lists
        x = jax.device_put(from_scipy(sp.csr_matrix(np.asarray(prepared.data.x))))
        prepared = prepared._replace(data=prepared.data._replace(x=x))
    assert not isinstance(prepared.data.x, jax.Array) and 0 < prepared.data.x.nse < 0.5 * dense.size
    return prepared


@pytest.fixture(scope="module")
def sparse_hard(raw_hard):
    return sparse_version(raw_hard, EXEC.backend)


@pytest.fixture(scope="module")
def single():
    """``single(prepared, model_config, config, seed, data=None, tag="", execution=EXEC)`` -> memoized
    ``fit`` result (``data`` replaces ``prepared.data``; ``tag`` names it in the memo key)."""
    cache = {}

    def run(prepared, model_config, config, seed, data=None, tag="", execution=EXEC):
        key = (id(prepared), model_config, config, seed, tag, execution)
        if key not in cache:
            cache[key] = fit(prepared.data if data is None else data, prepared.n_classes,
                             model_config=model_config, execution=execution, config=config,
                             key=jax.random.key(seed), log=None)
        return cache[key]
    return run


def batch(prepared, entries, data=None, execution=EXEC, **kwargs):
    return fit_runs(prepared.data if data is None else data, prepared.n_classes, entries, execution=execution,
                    **kwargs)


def hyper(seed, lr, weight_decay, dropout, config=KIPF, model=MODEL, split=0):
    """One entry with its own learning rate, weight decay and dropout."""
    return Entry(dataclasses.replace(model, dropout=dropout),
                 dataclasses.replace(config, lr=lr, weight_decay=weight_decay), seed, split)


@pytest.fixture(scope="module")
def kipf_batch(hard):
    return batch(hard, entries_for(SEEDS, config=KIPF))


def assert_run_equals_fit(result, r, one, *, param_tol=PARAM_TOL):
    """Run ``r`` of a batch equals the single run ``one``: metrics, epochs, histories, params."""
    e = one.epochs_run
    assert int(result.epochs_run[r]) == e
    assert bool(result.stopped_early[r]) == one.stopped_early
    for split in ("train", "val", "test"):
        assert float(result.metrics[f"{split}_acc"][r]) == pytest.approx(one.metrics[f"{split}_acc"], abs=1e-6)
        assert float(result.metrics[f"{split}_loss"][r]) == pytest.approx(one.metrics[f"{split}_loss"],
                                                                          rel=1e-5, abs=1e-6)
    for name in HISTORY:
        np.testing.assert_allclose(result.history[name][r, :e], one.history[name], rtol=1e-5, atol=1e-5,
                                   err_msg=name)
        assert np.all(np.isnan(result.history[name][r, e:])), f"{name} recorded after the run stopped"
    mine = unstack_params(result.params, r)
    assert jax.tree.structure(mine) == jax.tree.structure(one.params)
    for got, want in zip(jax.tree.leaves(mine), jax.tree.leaves(one.params)):
        assert got.shape == want.shape
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), **param_tol)


# --- 1. seeds in one batch equal single runs ---------------------------------------------------------


def test_kipf_batch_equals_single_runs_and_some_stop_early(hard, kipf_batch, single):
    res = kipf_batch
    assert [e.seed for e in res.entries] == SEEDS and res.epochs_run.shape == (3,)
    assert res.history["loss"].shape == (3, KIPF.epochs)
    assert np.all(res.epochs_run < KIPF.epochs) and np.all(res.stopped_early)
    assert len(set(res.epochs_run.tolist())) > 1  # stopped at different epochs of the same program
    assert res.epochs_run[0] < res.epochs_run[1:].min()  # run 0 first; the others trained on
    for r, seed in enumerate(SEEDS):
        assert_run_equals_fit(res, r, single(hard, MODEL, KIPF, seed))
    # The seeds are really different runs.
    assert len({round(float(v), 6) for v in res.history["loss"][:, 0]}) == 3
    assert res.metrics["test_acc"].min() > 0.5  # 4 classes: chance is 0.25


def test_patience_batch_returns_each_runs_best_params(hard, single):
    res = batch(hard, entries_for(SEEDS, config=PATIENCE))
    assert np.any(res.stopped_early)
    np.testing.assert_array_equal(res.stopped_early, res.epochs_run < PATIENCE.epochs)
    for r, seed in enumerate(SEEDS):
        one = single(hard, MODEL, PATIENCE, seed)
        assert_run_equals_fit(res, r, one)
        e = int(res.epochs_run[r])
        val_acc, val_loss = res.history["val_acc"][r, :e], res.history["val_loss"][r, :e]
        best = int(np.argmax(val_acc))  # first epoch with the highest accuracy (ties: lower loss wins)
        ties = np.flatnonzero(val_acc == val_acc[best])
        best = int(ties[np.argmin(val_loss[ties])])
        assert float(res.metrics["val_acc"][r]) == pytest.approx(val_acc[best], abs=1e-6)
        assert float(res.metrics["val_loss"][r]) == pytest.approx(val_loss[best], rel=1e-5)
        if res.stopped_early[r]:
            assert e - (best + 1) == PATIENCE.early_stopping.patience  # stopped `patience` epochs after the best one
            assert float(res.metrics["val_loss"][r]) != pytest.approx(val_loss[-1], rel=1e-5)  # not the last


@pytest.mark.parametrize("backend", ["csr", "segment", "bcoo"])
def test_sparse_features_no_early_stopping_batch_equals_single_runs(raw_hard, sparse_hard, single, backend):
    # csr: CSR features and the fused kernel with per-run values; segment: BCOO, gather + segment_sum;
    # bcoo: BCOO features and adjacency through XLA's sparse dot (at scale: tests/test_equivalence.py
    # runs csr and segment, whose regimes it is built for).
    prepared = sparse_hard if backend == "csr" else sparse_version(raw_hard, backend)
    execution = EXEC if backend == "csr" else Execution(backend=backend)  # an accelerator's: dense Â, feature lists
    res = batch(prepared, entries_for(SEEDS, config=NONE), execution=execution)
    assert res.epochs_run.tolist() == [NONE.epochs] * 3 and not np.any(res.stopped_early)
    assert np.all(np.isfinite(res.history["loss"]))
    for r, seed in enumerate(SEEDS):
        assert_run_equals_fit(res, r, single(prepared, MODEL, NONE, seed, execution=execution))
    assert len({round(float(v), 6) for v in res.history["loss"][:, 0]}) == 3
    assert res.metrics["test_acc"].min() > 0.4  # 4 classes: chance is 0.25


def test_progress_lines_report_runs_still_training(hard, kipf_batch):
    lines = []
    res = batch(hard, entries_for(SEEDS, config=KIPF), log_every=20, log=lines.append)
    assert res.compile_seconds == 0.0  # the kipf_batch program was reused
    np.testing.assert_array_equal(res.epochs_run, kipf_batch.epochs_run)
    pattern = re.compile(r"^Epoch +(\d+) \| runs training (\d+)/3 \| val mean (\d\.\d{4})$")
    epochs = []
    for line in lines:
        m = pattern.match(line)
        assert m, line
        epoch = int(m.group(1))
        epochs.append(epoch)
        assert int(m.group(2)) == int(np.sum(res.epochs_run > epoch))
        assert m.group(3) == f"{np.nanmean(res.history['val_acc'][:, epoch - 1]):.4f}"
    # One line per 20-epoch chunk, and a last one when every run has stopped.
    last = int(res.epochs_run.max())
    assert epochs == [e for e in (20, 40, 60) if e < last] + [last]


# --- 2. per-run hyperparameters ----------------------------------------------------------------------

# (seed, lr, weight_decay, dropout) of three runs sharing one program.
HYPER = [(0, 0.1, 5e-4, 0.5), (1, 0.02, 0.0, 0.2), (2, 0.05, 2e-3, 0.0)]


def test_per_run_hyperparameters_equal_single_runs(hard, kipf_batch, single):
    res = batch(hard, [hyper(*h) for h in HYPER])
    assert res.compile_seconds == 0.0  # hyperparameters are inputs, not part of the program
    for r, (seed, lr, wd, d) in enumerate(HYPER):
        one = single(hard, dataclasses.replace(MODEL, dropout=d),
                     dataclasses.replace(KIPF, lr=lr, weight_decay=wd), seed)
        assert_run_equals_fit(res, r, one)
    # Runs 1 and 2 differ from the same seeds with the shared defaults: the per-run values were used.
    for r in (1, 2):
        same_seed = SEEDS.index(HYPER[r][0])
        assert not np.allclose(res.history["loss"][r, :5], kipf_batch.history["loss"][same_seed, :5])


def test_each_run_keeps_its_own_l2_factor_when_the_batch_config_has_none(hard, single):
    # regression: the step once dropped the L2 term of every run when the program's own
    # TrainConfig.weight_decay was 0 (a sweep whose --weight-decay list began with 0)
    # (the first entry's own weight decay is 0 here: the program's configs are the first entry's)
    runs = [(s, lr, 0.0 if r == 0 else wd, d) for r, (s, lr, wd, d) in enumerate(HYPER)]
    res = batch(hard, [hyper(*h) for h in runs])
    for r, (seed, lr, wd, d) in enumerate(runs):
        one = single(hard, dataclasses.replace(MODEL, dropout=d),
                     dataclasses.replace(KIPF, lr=lr, weight_decay=wd), seed)
        assert_run_equals_fit(res, r, one)


# --- 3. what one program shares -------------------------------------------------------------------------


def test_entries_that_cannot_share_one_program_are_refused_by_name(hard):
    # hidden width, epochs, layers: the program's shapes and loop; lr, weight decay, dropout: inputs
    assert program_of([hyper(*h) for h in HYPER]) == program_of(entries_for([0], config=KIPF))
    for j, changed, field in ((1, dict(model=dataclasses.replace(MODEL, hidden=8)), "model.hidden (16 vs 8)"),
                              (2, dict(train=dataclasses.replace(KIPF, epochs=61)), "train.epochs (60 vs 61)")):
        entries = entries_for(SEEDS, config=KIPF)
        entries[j] = entries[j]._replace(**changed)
        with pytest.raises(ValueError, match=rf"entries\[0\] and entries\[{j}\] differ in {re.escape(field)}: one "
                                             "program shares everything but lr, weight_decay, dropout"):
            batch(hard, entries)
    with pytest.raises(ValueError, match="entries: give at least one run"):
        batch(hard, [])


# --- 4. init_params / apply_runs against the single model --------------------------------------------

# (architecture, features): bias, residual projections and layer
# norm, over dense and sparse inputs. Each case compiles 4 small programs, so 3 cases, not 6.
ARCHS = {
    "paper-dense": (GCNConfig(hidden=16), "dense"),
    "bias_residual_3_layers-sparse": (GCNConfig(hidden=12, layers=3, bias=True, residual=True), "sparse"),
    "layer_norm_3_layers-dense": (GCNConfig(hidden=16, layers=3, layer_norm=True, bias=True), "dense"),
}


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_init_and_apply_runs_equal_the_single_model_per_run(arch, hard, sparse_hard):
    config, features = ARCHS[arch]
    data = (hard if features == "dense" else sparse_hard).data
    seeds, dropouts = [3, 4, 5], [0.5, 0.3, 0.0]
    entries = [Entry(dataclasses.replace(config, dropout=d), TrainConfig(), s) for s, d in zip(seeds, dropouts)]
    n_features, n_classes = data.x.shape[1], hard.n_classes
    stacked = init_params(config, entries, n_features, n_classes)
    assert stacked["layer_0"]["w"].shape == (n_features, 3, config.hidden)

    keys = jnp.stack([jax.random.key_data(jax.random.key(100 + r)) for r in range(3)])

    @jax.jit  # one compile for both modes: cheaper than dispatching every op eagerly
    def batched_apply(params, runs, keys):
        # Training mode: run r's layer keys are split from its key as the single model splits them.
        layer_keys = jax.vmap(lambda k: jax.random.split(jax.random.wrap_key_data(k), config.layers))(keys)
        return (apply_runs(config, params, data.graph, data.x, runs, execution=EXEC),
                apply_runs(config, params, data.graph, data.x, runs, execution=EXEC,
                           keys=jnp.swapaxes(layer_keys, 0, 1), train=True))

    logits, train_logits = batched_apply(stacked, run_inputs(entries), keys)
    assert logits.shape == train_logits.shape == (data.x.shape[0], 3, n_classes)
    for r, (seed, d) in enumerate(zip(seeds, dropouts)):
        model = gcn(dataclasses.replace(config, dropout=d), EXEC)

        @jax.jit
        def single_run(seed, key):  # the single run's init (its key's first half), eval and train logits
            params = model.init(jax.random.split(jax.random.key(seed))[0], n_features, n_classes)
            return (params, model.apply(params, data.graph, data.x),
                    model.apply(params, data.graph, data.x, key=jax.random.wrap_key_data(key), train=True))

        params, want, want_train = single_run(seed, keys[r])
        # init_params: run r is the single run's init.
        mine = unstack_params(stacked, r)
        assert jax.tree.structure(mine) == jax.tree.structure(params)
        jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), mine, params)
        np.testing.assert_allclose(np.asarray(logits[:, r]), np.asarray(want), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(train_logits[:, r]), np.asarray(want_train), rtol=1e-5, atol=1e-6)
    # Dropout did something for the runs that drop (and nothing for the rate-0 run).
    assert not np.allclose(np.asarray(train_logits[:, 0]), np.asarray(logits[:, 0]), atol=1e-3)
    np.testing.assert_allclose(np.asarray(train_logits[:, 2]), np.asarray(logits[:, 2]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_the_fused_relu_and_dropout_train_as_xla_computes_them(arch, hard, sparse_hard):
    """Where the kernel runs, a hidden layer's relu and dropout are one kernel pass
    (``fused.hash_dropout``, the relu deferred into it; not with residual connections, which read
    the activation after relu). A training forward and its gradient equal XLA's relu and dropout
    (the execution without kernels) for each architecture: the same masks, float rounding apart."""
    config, features = ARCHS[arch]
    ok, why = plan.kernel_available()
    if not ok:
        pytest.skip(f"the C++ kernel cannot run here: {why}")
    # the kernel's ops and XLA's, as the plan decides them (a bare request handed to apply_runs runs XLA's)
    kernels, xla = (plan.concrete(Execution(backend="csr", kernels=k)) for k in (True, False))
    assert (kernels.ops.name, xla.ops.name) == ("native", "xla")  # the two paths, not one twice
    data = (hard if features == "dense" else sparse_hard).data
    entries = [Entry(dataclasses.replace(config, dropout=d), TrainConfig(), s) for s, d in ((3, 0.5), (4, 0.3))]
    stacked = init_params(config, entries, data.x.shape[1], hard.n_classes)
    layer_keys = jnp.swapaxes(jax.vmap(lambda s: jax.random.split(jax.random.key(s), config.layers))(
        jnp.array([7, 8])), 0, 1)

    def loss(params, execution):
        logits = apply_runs(config, params, data.graph, data.x, run_inputs(entries), execution=execution,
                            keys=layer_keys, train=True)
        return jnp.sum(jnp.sin(logits)), logits

    (_, fused), g_fused = jax.jit(jax.value_and_grad(lambda p: loss(p, kernels), has_aux=True))(stacked)
    (_, plain), g_plain = jax.jit(jax.value_and_grad(lambda p: loss(p, xla), has_aux=True))(stacked)
    np.testing.assert_allclose(np.asarray(fused), np.asarray(plain), rtol=1e-4, atol=1e-5)
    for a, b in zip(jax.tree.leaves(g_fused), jax.tree.leaves(g_plain), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


# --- 5. random splits -----------------------------------------------------------------------------------

SPLIT_ARGS = dict(per_class=10, n_val=100, n_test=150, seed=5)


@pytest.fixture(scope="module")
def three_splits(hard, raw_hard):
    return datasets.with_random_splits(hard, raw_hard.labels, 3, **SPLIT_ARGS)


def test_random_splits_masks(three_splits, raw_hard, hard):
    d = three_splits.data
    labels = raw_hard.labels
    masks = {name: np.asarray(getattr(d, f"{name}_mask")) for name in ("train", "val", "test")}
    for m in masks.values():
        assert m.shape == (3, 400) and m.dtype == np.float32 and set(np.unique(m)) <= {0.0, 1.0}
    for k in range(3):
        for c in range(4):
            assert masks["train"][k][labels == c].sum() == 10
        assert masks["val"][k].sum() == 100 and masks["test"][k].sum() == 150
        assert np.max(masks["train"][k] + masks["val"][k] + masks["test"][k]) == 1.0  # disjoint
        want = planetoid_split(labels, per_class=10, n_val=100, n_test=150, seed=5 + k)
        for name, idx in want.items():
            np.testing.assert_array_equal(np.flatnonzero(masks[name][k]), idx)
    for a, b in ((0, 1), (0, 2), (1, 2)):
        assert not np.array_equal(masks["train"][a], masks["train"][b])
        assert not np.array_equal(masks["test"][a], masks["test"][b])
    assert three_splits.info["split_sizes"] == {"train": 40, "val": 100, "test": 150}
    assert three_splits.info["split"] == "3 random (seed 5..7)"
    assert hard.data.train_mask.shape == (400,)  # the input was not modified
    with pytest.raises(ValueError, match="at least one split"):
        datasets.with_random_splits(hard, labels, 0)


def test_run_split_selects_its_masks(three_splits, hard, single):
    res = batch(three_splits, entries_for([7], config=KIPF, splits=3))
    d = three_splits.data
    for k in range(3):
        data_k = hard.data._replace(train_mask=d.train_mask[k], val_mask=d.val_mask[k], test_mask=d.test_mask[k])
        assert_run_equals_fit(res, k, single(hard, MODEL, KIPF, 7, data=data_k, tag=f"split{k}"))
    assert len({round(float(v), 6) for v in res.history["loss"][:, 0]}) == 3  # same seed, other splits


# --- 6. the run axis sharded over several devices --------------------------------------------------

SHARDED_SCRIPT = """
import json, sys
import jax
import numpy as np
from jaxgcn import datasets, plan
from jaxgcn.batched import entries_for, fit_runs
from jaxgcn.core.models import Execution
from jaxgcn.train import COMPILED
from jaxgcn.train import Kipf, TrainConfig

assert len(jax.devices()) == 4, jax.devices()
prepared = datasets.prepare(datasets.synthetic(400, n_classes=4, n_features=16, homophily=0.5, signal=0.3, seed=1),
                            backend="segment")  # csr batches stay on one device: the kernel uses every core
config = TrainConfig(epochs={epochs}, lr={lr}, early_stopping=Kipf({window}))
res = fit_runs(prepared.data, prepared.n_classes, entries_for({seeds}, config=config),
               execution=Execution(backend="segment"), n_devices=4)
meshes = [key[-1] for key in COMPILED if key[0] == "runs"]
print(json.dumps({{
    "mesh_sizes": [None if m is None else int(m.size) for m in meshes],
    "test_acc": res.metrics["test_acc"].tolist(), "val_acc": res.metrics["val_acc"].tolist(),
    "epochs_run": res.epochs_run.tolist(),
    "loss": np.nan_to_num(res.history["loss"], nan=-1.0).tolist(),
    "params_runs": [int(leaf.shape[1 if leaf.ndim == 3 else 0]) for leaf in jax.tree.leaves(res.params)],
}}))
"""


def test_run_axis_sharded_over_four_devices_gives_the_same_runs(tmp_path, kipf_batch):
    script = tmp_path / "sharded.py"
    script.write_text(SHARDED_SCRIPT.format(seeds=SEEDS, lr=KIPF.lr, epochs=KIPF.epochs,
                                            window=KIPF.early_stopping.window))
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["mesh_sizes"] == [4]  # 3 runs padded to 4, one per device
    assert out["params_runs"] == [3, 3]  # the padding run was dropped
    assert out["epochs_run"] == kipf_batch.epochs_run.tolist()
    np.testing.assert_allclose(out["test_acc"], kipf_batch.metrics["test_acc"], atol=1e-6)
    np.testing.assert_allclose(out["val_acc"], kipf_batch.metrics["val_acc"], atol=1e-6)
    np.testing.assert_allclose(out["loss"], np.nan_to_num(kipf_batch.history["loss"], nan=-1.0), atol=1e-5)


def test_large_batches_run_in_slices_of_one_program(hard, kipf_batch):
    """More runs than runs_per_device x devices: repeated executions of one compiled program (the
    last slice padded) give exactly the runs of a single execution."""
    sliced = batch(hard, entries_for(SEEDS, config=KIPF), runs_per_device=2)
    assert len(sliced.entries) == 3 and sliced.compile_seconds >= 0
    np.testing.assert_array_equal(sliced.epochs_run, kipf_batch.epochs_run)
    for name in ("train_acc", "val_acc", "test_acc"):
        np.testing.assert_allclose(sliced.metrics[name], kipf_batch.metrics[name], atol=1e-6)
    np.testing.assert_allclose(sliced.history["loss"], kipf_batch.history["loss"], rtol=1e-5, atol=1e-6)
    for leaf_a, leaf_b in zip(jax.tree.leaves(sliced.params), jax.tree.leaves(kipf_batch.params)):
        assert leaf_a.shape == leaf_b.shape
        np.testing.assert_allclose(np.asarray(leaf_a), np.asarray(leaf_b), **PARAM_TOL)


# --- 5. training options through the whole batched loop, against single runs (issue 12) ------------

# Each option the batched step re-implements on the run axis: per-run gradient clipping, L2 on every
# layer, layer norm, residual projections, 3 layers, bias, and the aggregate-first first layer. Two
# configurations train every one of them with Kipf stopping; each run must equal its single run in
# epochs, accuracies, histories and params.
OPTIONS = {
    "clip_l2all_layernorm_residual_bias_3layers": (
        GCNConfig(layers=3, layer_norm=True, residual=True, bias=True), EXEC,
        TrainConfig(epochs=40, lr=0.05, early_stopping=Kipf(5), clip_norm=0.5, l2="all")),
    "aggregate_first": (MODEL, dataclasses.replace(EXEC, aggregate_first=True), KIPF),
    # one step for every path: jax.random dropout masks, drawn per run, equal a single run's too
    "jax_dropout_rng": (MODEL, dataclasses.replace(EXEC, dropout_rng="jax"), KIPF),
}


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_training_options_batched_equal_single_runs(option, hard, single):
    model_config, execution, config = OPTIONS[option]
    seeds = [0, 1]
    res = batch(hard, entries_for(seeds, model_config=model_config, config=config), execution=execution)
    for r, seed in enumerate(seeds):
        assert_run_equals_fit(res, r, single(hard, model_config, config, seed, execution=execution))


def test_a_diverging_run_is_named_like_the_single_run_reports_it(hard):
    from jaxgcn.train import TrainingDiverged

    # the first Adam step puts weights near 1e20, whose squares overflow float32 in the L2 term
    config = TrainConfig(epochs=10, lr=1e20, early_stopping=None)
    with pytest.raises(TrainingDiverged) as single_err:
        fit(hard.data, hard.n_classes, model_config=MODEL, execution=EXEC, config=config, key=jax.random.key(1),
            log=None)
    entries = [Entry(MODEL, dataclasses.replace(config, lr=0.01), 0), Entry(MODEL, config, 1)]
    with pytest.raises(TrainingDiverged, match=r"run\(s\) \[1\] \(seed 1, lr 1e\+20\)") as batch_err:
        batch(hard, entries)
    # the same epoch and causes as the single run's message
    assert str(single_err.value) in str(batch_err.value)
