"""Layers (matmul, dropout, the GCN layer) and the GCN model against NumPy formulas."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

from jaxgcn.core.graph import gcn_norm, to_dense, with_dense
from jaxgcn.core.layers import dropout, gcn_apply, gcn_init, keep_mask, matmul, sparse_features
from jaxgcn.core.models import Execution, GCNConfig, gcn

RNGS = ("hash", "jax")


def random_params(params, seed=0):
    """Replace every leaf with random values, so zero-initialized biases/norms are exercised too."""
    leaves, treedef = jax.tree.flatten(params)
    rng = np.random.default_rng(seed)
    return jax.tree.unflatten(treedef, [jnp.asarray(rng.standard_normal(leaf.shape), jnp.float32)
                                        for leaf in leaves])


def relu(v):
    return np.maximum(v, 0.0)


def numpy_gcn(params, adj, x, config: GCNConfig):
    """The model written out with NumPy (float64): see the formula in models.gcn's docstring."""
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
    h = np.asarray(x, np.float64)
    for i in range(config.layers):
        layer = p[f"layer_{i}"]
        out = adj @ (h @ layer["w"]) + layer.get("b", 0.0)
        if i == config.layers - 1:
            return out
        if "ln" in layer:
            mean = out.mean(axis=1, keepdims=True)
            var = ((out - mean) ** 2).mean(axis=1, keepdims=True)
            out = (out - mean) / np.sqrt(var + 1e-5) * layer["ln"]["scale"] + layer["ln"]["bias"]
        out = relu(out)
        if config.residual:
            out = out + (h @ layer["w_res"] if "w_res" in layer else h)
        h = out
    raise AssertionError


@pytest.fixture
def norm_graph(graph):
    return gcn_norm(graph, "sym")


@pytest.fixture
def adj(norm_graph):
    return to_dense(norm_graph).astype(np.float64)


def sparse_input(seed=0):
    """[6, 5] sparse features with an empty row (node 2) and a duplicate entry."""
    rng = np.random.default_rng(seed)
    rows = np.array([0, 0, 1, 3, 3, 4, 5, 5, 0])
    cols = np.array([1, 4, 0, 2, 3, 4, 0, 1, 1])  # (0, 1) listed twice: summed
    vals = rng.uniform(0.5, 2.0, rows.size)
    return sp.coo_matrix((vals, (rows, cols)), shape=(6, 5))


# --- matmul / sparse features -------------------------------------------------------------------


def test_sparse_features_sums_duplicates_and_sorts():
    coo = sparse_input()
    x = sparse_features(coo)
    assert x.nse == 8  # 9 entries, one duplicate pair
    idx = np.asarray(x.indices)
    assert np.all(np.diff(idx[:, 0] * 5 + idx[:, 1]) > 0)
    np.testing.assert_allclose(np.asarray(x.todense()), coo.toarray(), rtol=1e-6)


def test_matmul_bcoo_equals_dense_product():
    coo = sparse_input()
    w = jnp.asarray(np.random.default_rng(1).standard_normal((5, 4)), jnp.float32)
    expected = coo.toarray() @ np.asarray(w, np.float64)
    out = matmul(sparse_features(coo), w)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(out)[2], np.zeros(4))  # the empty row
    np.testing.assert_allclose(np.asarray(matmul(jnp.asarray(coo.toarray(), jnp.float32), w)), expected,
                               rtol=1e-5, atol=1e-6)
    jitted = jax.jit(matmul)(sparse_features(coo), w)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(out), rtol=1e-6)


# --- dropout ------------------------------------------------------------------------------------


def test_dropout_identity_when_off():
    x = jnp.asarray(np.arange(1, 13, dtype=np.float32).reshape(3, 4))
    np.testing.assert_array_equal(dropout(jax.random.key(0), x, 0.0, train=True), x)
    np.testing.assert_array_equal(dropout(jax.random.key(0), x, 0.5, train=False), x)
    np.testing.assert_array_equal(dropout(None, x, 0.5, train=False), x)  # no key needed in eval
    np.testing.assert_array_equal(dropout(None, x, 0.0, train=True), x)


def test_dropout_without_key_raises():
    with pytest.raises(ValueError, match=r"needs a PRNG key.*key=jax\.random\.key"):
        dropout(None, jnp.ones((2, 2)), 0.5, train=True)


@pytest.mark.parametrize("rate", [1.0, 1.5, -0.1])
def test_dropout_rate_outside_unit_interval_raises(rate):
    with pytest.raises(ValueError, match=rf"dropout rate {rate} must be in \[0, 1\)"):
        dropout(jax.random.key(0), jnp.ones((2, 2)), rate, train=True)


@pytest.mark.parametrize("rng", RNGS)
@pytest.mark.parametrize("rate", [0.25, 0.5, 0.8])
def test_dropout_scales_kept_entries_and_zeroes_the_rest(rng, rate):
    x = jnp.asarray(np.arange(1, 401, dtype=np.float32).reshape(20, 20))
    key = jax.random.key(3)
    y = np.asarray(dropout(key, x, rate, train=True, rng=rng))
    keep = np.asarray(keep_mask(key, x.shape, rate, rng=rng))
    np.testing.assert_allclose(y[keep], np.asarray(x)[keep] / (1.0 - rate), rtol=1e-6)
    np.testing.assert_array_equal(y[~keep], 0.0)
    assert 0 < keep.sum() < keep.size
    assert y.dtype == np.float32


@pytest.mark.parametrize("rng", RNGS)
@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5, 0.9])
def test_keep_fraction_is_one_minus_rate(rng, rate):
    mask = np.asarray(keep_mask(jax.random.key(7), (400, 500), rate, rng=rng))
    assert mask.dtype == np.bool_
    # 200k Bernoulli draws: the standard error is <= 0.0012, so 0.01 is > 8 sigma.
    assert abs(mask.mean() - (1.0 - rate)) < 0.01
    # No structure along either axis: every row block and column block keeps about as often.
    assert np.all(np.abs(mask.reshape(8, 50, 500).mean(axis=(1, 2)) - (1.0 - rate)) < 0.03)
    assert np.all(np.abs(mask.reshape(400, 10, 50).mean(axis=(0, 2)) - (1.0 - rate)) < 0.03)


@pytest.mark.parametrize("rng", RNGS)
def test_masks_depend_on_the_key_only(rng):
    shape, rate = (300, 300), 0.3
    a = np.asarray(keep_mask(jax.random.key(1), shape, rate, rng=rng))
    a_again = np.asarray(keep_mask(jax.random.key(1), shape, rate, rng=rng))
    b = np.asarray(keep_mask(jax.random.key(2), shape, rate, rng=rng))
    np.testing.assert_array_equal(a, a_again)
    # Independent masks disagree with probability 2 * 0.7 * 0.3 = 0.42.
    assert abs(np.mean(a != b) - 0.42) < 0.02
    # Neighbouring columns of one mask are independent too (no counter correlation).
    assert abs(np.mean(a[:, :-1] != a[:, 1:]) - 0.42) < 0.02


def test_keep_mask_rejects_unknown_rng():
    with pytest.raises(ValueError, match=r"rng='philox' must be 'hash' or 'jax'"):
        keep_mask(jax.random.key(0), (4,), 0.5, rng="philox")


@pytest.mark.parametrize("rng", RNGS)
def test_dropout_jit_equals_eager(rng):
    x = jnp.asarray(np.random.default_rng(0).standard_normal((50, 8)), jnp.float32)
    key = jax.random.key(11)
    eager = dropout(key, x, 0.4, train=True, rng=rng)
    jitted = jax.jit(lambda k, v: dropout(k, v, 0.4, train=True, rng=rng))(key, x)
    np.testing.assert_array_equal(np.asarray(jitted), np.asarray(eager))


@pytest.mark.parametrize("rng", RNGS)
def test_sparse_dropout_touches_only_stored_values(rng):
    x = sparse_features(sparse_input())
    key, rate = jax.random.key(5), 0.5
    y = dropout(key, x, rate, train=True, rng=rng)
    np.testing.assert_array_equal(np.asarray(y.indices), np.asarray(x.indices))
    assert y.shape == x.shape and y.nse == x.nse
    keep = np.asarray(keep_mask(key, x.data.shape, rate, rng=rng))
    expected = np.where(keep, np.asarray(x.data) / (1 - rate), 0.0)
    np.testing.assert_allclose(np.asarray(y.data), expected, rtol=1e-6)
    assert 0 < keep.sum() < keep.size


# --- GCN layer ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bias", [True, False])
def test_gcn_init_params(bias):
    params = gcn_init(jax.random.key(0), 7, 3, bias=bias)
    assert set(params) == ({"w", "b"} if bias else {"w"})
    w = np.asarray(params["w"])
    limit = np.sqrt(6.0 / (7 + 3))  # Glorot uniform
    assert np.all(np.abs(w) <= limit) and np.abs(w).max() > 0.5 * limit
    if bias:
        np.testing.assert_array_equal(params["b"], np.zeros(3))


@pytest.mark.parametrize("backend", ["dense", "segment", "bcoo"])
def test_gcn_apply_equals_formula(norm_graph, adj, node_features, backend):
    params = random_params(gcn_init(jax.random.key(0), 3, 2, bias=True))
    g = with_dense(norm_graph) if backend == "dense" else norm_graph
    out = gcn_apply(params, g, jnp.asarray(node_features), backend=backend)
    expected = adj @ (node_features @ np.asarray(params["w"], np.float64)) + np.asarray(params["b"])
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-5)


# --- GCN model ------------------------------------------------------------------------------------


def param_names(params):
    return {layer: sorted(k for k in p) for layer, p in params.items()}


def test_gcn_param_names_default():
    params = gcn(GCNConfig(hidden=4)).init(jax.random.key(0), 3, 2)
    assert param_names(params) == {"layer_0": ["w"], "layer_1": ["w"]}
    assert params["layer_0"]["w"].shape == (3, 4) and params["layer_1"]["w"].shape == (4, 2)


def test_gcn_param_names_with_bias_residual_layer_norm():
    config = GCNConfig(hidden=4, layers=3, bias=True, residual=True, layer_norm=True)
    params = gcn(config).init(jax.random.key(0), 3, 2)
    assert param_names(params) == {
        "layer_0": ["b", "ln", "w", "w_res"],  # the first layer always projects its input
        "layer_1": ["b", "ln", "w"],  # 4 -> 4: identity skip, no projection
        "layer_2": ["b", "w"],  # the output layer has neither
    }
    assert set(params["layer_0"]["ln"]) == {"scale", "bias"}
    assert params["layer_0"]["w_res"].shape == (3, 4)


def test_gcn_init_depends_on_key():
    model = gcn(GCNConfig(hidden=4))
    a, b = model.init(jax.random.key(0), 3, 2), model.init(jax.random.key(1), 3, 2)
    a2 = model.init(jax.random.key(0), 3, 2)
    np.testing.assert_array_equal(a["layer_0"]["w"], a2["layer_0"]["w"])
    assert not np.allclose(a["layer_0"]["w"], b["layer_0"]["w"])
    assert not np.allclose(a["layer_0"]["w"][:2, :2], a["layer_1"]["w"][:2, :2])  # layers use different keys


@pytest.mark.parametrize("backend", ["dense", "segment", "bcoo"])
def test_two_layer_gcn_equals_kipf_formula(norm_graph, adj, node_features, backend):
    model = gcn(GCNConfig(hidden=4), Execution(backend=backend))
    params = model.init(jax.random.key(0), 3, 2)
    g = with_dense(norm_graph) if backend == "dense" else norm_graph
    logits = model.apply(params, g, jnp.asarray(node_features))
    w0, w1 = (np.asarray(params[f"layer_{i}"]["w"], np.float64) for i in range(2))
    expected = adj @ relu(adj @ node_features @ w0) @ w1  # Kipf & Welling, eq. 9
    assert np.abs(expected).max() > 0.1
    np.testing.assert_allclose(np.asarray(logits), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("config", [
    GCNConfig(hidden=4, bias=True),
    GCNConfig(hidden=4, layers=1),
    GCNConfig(hidden=4, layers=3, residual=True),
    GCNConfig(hidden=5, layers=3, bias=True, residual=True, layer_norm=True),
    GCNConfig(hidden=5, layers=3, residual=True, layer_norm=True),
], ids=["bias", "one-layer", "residual", "bias-residual-layer-norm", "residual-layer-norm"])
def test_gcn_variants_equal_numpy_reference(norm_graph, adj, node_features, config):
    model = gcn(config)
    params = random_params(model.init(jax.random.key(0), 3, 2), seed=1)
    logits = model.apply(params, norm_graph, jnp.asarray(node_features))
    np.testing.assert_allclose(np.asarray(logits), numpy_gcn(params, adj, node_features, config),
                               rtol=1e-4, atol=1e-4)


def test_gcn_train_mode_drops_each_layer_input_with_its_own_key(norm_graph, adj, node_features):
    config = GCNConfig(hidden=8, dropout=0.5)
    model = gcn(config)
    params = model.init(jax.random.key(0), 3, 2)
    key = jax.random.key(42)
    logits = model.apply(params, norm_graph, jnp.asarray(node_features), key=key, train=True)
    k0, k1 = jax.random.split(key, 2)
    w0, w1 = (np.asarray(params[f"layer_{i}"]["w"], np.float64) for i in range(2))
    x0 = np.asarray(dropout(k0, jnp.asarray(node_features), 0.5, train=True), np.float64)
    h = relu(adj @ x0 @ w0)
    h1 = np.asarray(dropout(k1, jnp.asarray(h, jnp.float32), 0.5, train=True), np.float64)
    np.testing.assert_allclose(np.asarray(logits), adj @ h1 @ w1, rtol=1e-4, atol=1e-5)
    eval_logits = model.apply(params, norm_graph, jnp.asarray(node_features))
    assert not np.allclose(np.asarray(logits), np.asarray(eval_logits))


def test_gcn_train_mode_without_key_raises(norm_graph, node_features):
    model = gcn(GCNConfig(hidden=4))
    params = model.init(jax.random.key(0), 3, 2)
    with pytest.raises(ValueError, match="PRNG key"):
        model.apply(params, norm_graph, jnp.asarray(node_features), train=True)
    # Without dropout no key is needed, and training mode equals evaluation mode.
    model0 = gcn(GCNConfig(hidden=4, dropout=0.0))
    np.testing.assert_array_equal(
        np.asarray(model0.apply(params, norm_graph, jnp.asarray(node_features), train=True)),
        np.asarray(model0.apply(params, norm_graph, jnp.asarray(node_features))))


@pytest.mark.parametrize("train", [False, True])
def test_gcn_jit_equals_eager(norm_graph, node_features, train):
    model = gcn(GCNConfig(hidden=4, layers=3, residual=True))
    params = random_params(model.init(jax.random.key(0), 3, 2))
    g, x, key = jax.device_put(norm_graph), jnp.asarray(node_features), jax.random.key(9)
    eager = model.apply(params, g, x, key=key, train=train)
    jitted = jax.jit(model.apply, static_argnames="train")(params, g, x, key=key, train=train)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(eager), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("config", [GCNConfig(hidden=4, bias=True), GCNConfig(hidden=4, layers=3, layer_norm=True)],
                         ids=["bias", "layer-norm"])
def test_bias_and_layer_norm_run_under_rank_promotion_raise(norm_graph, adj, node_features, config):
    model = gcn(config)
    params = random_params(model.init(jax.random.key(0), 3, 2))
    logits = model.apply(params, norm_graph, jnp.asarray(node_features))
    np.testing.assert_allclose(np.asarray(logits), numpy_gcn(params, adj, node_features, config),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("config", [GCNConfig(hidden=4), GCNConfig(hidden=4, layers=3, residual=True)],
                         ids=["plain", "residual"])
def test_dense_and_sparse_features_give_same_logits(norm_graph, config):
    coo = sparse_input()
    model = gcn(config)
    params = random_params(model.init(jax.random.key(0), 5, 3))
    dense = model.apply(params, norm_graph, jnp.asarray(coo.toarray(), jnp.float32))
    sparse = model.apply(params, norm_graph, sparse_features(coo))
    np.testing.assert_allclose(np.asarray(sparse), np.asarray(dense), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(layers=0), r"layers=0: a GCN needs at least 1 layer"),
    (dict(hidden=0), r"hidden=0: the hidden width must be >= 1"),
    (dict(dropout=1.0), r"dropout=1\.0: the drop probability must be in \[0, 1\)"),
    (dict(dropout=-0.1), r"dropout=-0\.1: the drop probability"),
])
def test_gcn_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GCNConfig(**kwargs)


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(backend="sparse"),
     r"backend='sparse' must be one of \('auto', 'dense', 'segment', 'bcoo', 'csr', 'gather'\)"),
    (dict(dropout_rng="philox"), r"dropout_rng='philox' must be 'hash' or 'jax'"),
    (dict(chunk_edges=0), r"chunk_edges=0 needs the segment backend and a value >= 1"),
])
def test_execution_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Execution(**kwargs)


def test_execution_defaults():
    e = Execution()
    assert (e.backend, e.dropout_rng, e.chunk_edges, e.aggregate_first) == ("auto", "hash", None, False)
    assert Execution(backend="segment", chunk_edges=10).chunk_edges == 10


def test_gcn_config_holds_the_architecture_only():
    """How a model runs lives in Execution: none of its fields may creep back into GCNConfig (a
    checkpoint rebuilds the model from GCNConfig alone)."""
    arch = {f.name for f in dataclasses.fields(GCNConfig)}
    assert arch == {"hidden", "layers", "dropout", "bias", "residual", "layer_norm"}
    assert not arch & {f.name for f in dataclasses.fields(Execution)}
    with pytest.raises(TypeError):
        GCNConfig(backend="csr")


def test_gcn_config_defaults_are_the_papers():
    c = GCNConfig()
    assert (c.hidden, c.layers, c.dropout, c.bias) == (16, 2, 0.5, False)
