"""Every propagation backend against the dense formula ``to_dense(graph) @ x`` (jaxgcn.core.propagate)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jaxgcn.native.csr import kernel_status
from jaxgcn.core.graph import from_edges, gcn_norm, to_dense, with_csr, with_dense, with_lists
from jaxgcn.plan import backend_for
from jaxgcn.core.propagate import BACKENDS, DENSE_MAX_NODES, graph_backend, propagate

NORMS = ("sym", "row", "none")
# (backend, what to attach first: "dense" with with_dense, "csr" with with_csr, "lists" with with_lists, None)
VARIANTS = [("dense", "dense"), ("dense", None), ("segment", None), ("bcoo", None), ("csr", "csr"),
            ("gather", "lists")]
VARIANT_IDS = ["dense-attached", "dense-on-the-fly", "segment", "bcoo", "csr", "gather"]
ATTACH = {"dense": with_dense, "csr": with_csr, "lists": with_lists, None: lambda x: x}
# Forward mode is not defined for the csr kernel and the gather lists (custom VJPs); training uses reverse mode.
MODES = {"csr": ("rev",), "gather": ("rev",)}

# float32 finite differences: eps 1e-2 and 1e-2 tolerances (x64 stays off, see conftest).
GRAD_TOL = dict(atol=1e-2, rtol=1e-2, eps=1e-2)


def prepared(graph, norm, attach):
    g = gcn_norm(graph, norm)
    return ATTACH[attach](g)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize(("backend", "attach"), VARIANTS, ids=VARIANT_IDS)
def test_backend_equals_dense_formula(graph, node_features, norm, backend, attach):
    g = prepared(graph, norm, attach)
    expected = to_dense(gcn_norm(graph, norm)).astype(np.float64) @ node_features.astype(np.float64)
    out = propagate(g, jnp.asarray(node_features), backend=backend)
    assert out.dtype == jnp.float32 and out.shape == (6, 3)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize(("backend", "attach"), VARIANTS, ids=VARIANT_IDS)
def test_jit_equals_eager(graph, node_features, norm, backend, attach):
    g = jax.device_put(prepared(graph, norm, attach))
    x = jnp.asarray(node_features)
    eager = propagate(g, x, backend=backend)
    jitted = jax.jit(propagate, static_argnames="backend")(g, x, backend=backend)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(eager), rtol=1e-6, atol=1e-6)


def test_backends_agree_on_a_random_directed_graph():
    rng = np.random.default_rng(0)
    senders, receivers = rng.integers(0, 40, 300), rng.integers(0, 40, 300)
    g, _ = from_edges(senders, receivers, rng.uniform(0.1, 2.0, 300), n_nodes=40, symmetrize=False)
    g = gcn_norm(g, "sym")
    x = rng.standard_normal((40, 5)).astype(np.float32)
    expected = to_dense(g).astype(np.float64) @ x.astype(np.float64)
    for backend, attach in VARIANTS:
        gb = ATTACH[attach](g)
        out = propagate(gb, jnp.asarray(x), backend=backend)
        np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-5, err_msg=backend)


@pytest.mark.parametrize(("backend", "attach"), VARIANTS, ids=VARIANT_IDS)
def test_gradients_match_finite_differences(graph, node_features, backend, attach):
    g = prepared(graph, "sym", attach)
    x = jnp.asarray(node_features) / 4.0

    def linear(x):
        return propagate(g, x, backend=backend)

    def nonlinear(x):
        return jnp.sum(jnp.tanh(propagate(g, x, backend=backend)) ** 2)

    modes = MODES.get(backend, ("rev", "fwd"))
    check_grads(linear, (x,), order=1, modes=modes, **GRAD_TOL)
    check_grads(nonlinear, (x,), order=2, modes=modes, **GRAD_TOL)


def test_gradient_is_transpose_of_adjacency(graph, node_features):
    # d/dx sum(c * (A x)) = A^T c: checks the backward pass of the segment gather/scatter exactly.
    g, _ = from_edges([0, 1, 2], [1, 2, 3], [1.0, 2.0, 3.0], symmetrize=False)
    c = jnp.asarray(np.arange(8, dtype=np.float32).reshape(4, 2))
    expected = to_dense(g).T @ np.asarray(c)
    g = with_lists(with_csr(g))  # directed: the csr backend and the gather lists need their transposes here
    assert not g.csr.symmetric and g.lists.transpose is not None
    for backend in BACKENDS:
        grad = jax.grad(lambda x: jnp.sum(c * propagate(g, x, backend=backend)))(jnp.zeros((4, 2), jnp.float32))
        np.testing.assert_allclose(np.asarray(grad), expected, rtol=1e-6, err_msg=backend)


def test_backend_for_by_size():
    # the CPU's rule, whatever device runs the tests (the accelerator's: tests/test_accelerator_plan.py)
    sparse = "csr" if kernel_status()[0] else "segment"
    assert backend_for("auto", 6, 8, "cpu") == "dense"  # 8 of 36 pairs
    assert backend_for("auto", 100, 1000, "cpu") == "dense"
    assert backend_for("auto", 100, 999, "cpu") == sparse
    assert backend_for("auto", DENSE_MAX_NODES, DENSE_MAX_NODES**2 // 5, "cpu") == "dense"
    assert backend_for("auto", DENSE_MAX_NODES + 1, DENSE_MAX_NODES**2 // 5, "cpu") == sparse
    assert backend_for("auto", 2708, 10556, "cpu") == sparse  # Cora
    assert backend_for("auto", 3327, 9104, "cpu") == sparse  # CiteSeer


def test_backend_for_falls_back_to_segment_without_the_kernel(monkeypatch):
    import jaxgcn.plan

    monkeypatch.setattr(jaxgcn.plan, "kernel_status", lambda: (False, "no C++ compiler found"))  # the oracle
    assert backend_for("auto", 2708, 10556, "cpu") == "segment"


@pytest.mark.parametrize("name", BACKENDS)
def test_backend_for_keeps_explicit_names(name):
    assert backend_for(name, 2708, 10556) == name
    assert backend_for(name, 6, 8) == name


def test_backend_for_rejects_unknown_name():
    with pytest.raises(ValueError,
                       match=r"backend 'sparse' is not one of \('auto', 'dense', 'segment', 'bcoo', 'csr', 'gather'\)"):
        backend_for("sparse", 10, 10)


def test_propagate_rejects_unknown_backend(graph, node_features):
    with pytest.raises(ValueError, match="backend 'sparse' is not one of"):
        propagate(gcn_norm(graph), jnp.asarray(node_features), backend="sparse")


@pytest.mark.parametrize("attach", ["dense", "csr", "lists", None])
def test_auto_uses_the_layout_the_graph_was_prepared_for(graph, node_features, attach):
    g = prepared(graph, "sym", attach)
    x = jnp.asarray(node_features)
    expected = {"dense": "dense", "csr": "csr", "lists": "gather", None: "segment"}[attach]
    assert graph_backend(g) == expected
    np.testing.assert_array_equal(np.asarray(propagate(g, x, backend="auto")),
                                  np.asarray(propagate(g, x, backend=expected)))


def test_graph_without_edge_list_serves_csr_only(graph, node_features):
    g = with_csr(gcn_norm(graph), keep_edges=False)
    assert not g.has_edge_list and g.n_edges == gcn_norm(graph).n_edges
    x = jnp.asarray(node_features)
    np.testing.assert_allclose(np.asarray(propagate(g, x, backend="csr")),
                               to_dense(gcn_norm(graph)) @ node_features, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"backend 'segment' needs the edge list, but this graph keeps only its CSR"):
        propagate(g, x, backend="segment")


@pytest.mark.parametrize("chunk", [1, 3, 7, 1000])
def test_chunked_segment_equals_unchunked(chunk):
    rng = np.random.default_rng(1)
    g, _ = from_edges(rng.integers(0, 30, 120), rng.integers(0, 30, 120), n_nodes=30)
    g = gcn_norm(g)
    x = jnp.asarray(rng.standard_normal((30, 4)).astype(np.float32))
    whole = propagate(g, x, backend="segment")
    np.testing.assert_allclose(np.asarray(propagate(g, x, backend="segment", chunk_edges=chunk)),
                               np.asarray(whole), rtol=1e-5, atol=1e-6)
    grad = jax.grad(lambda x, c: jnp.sum(jnp.sin(propagate(g, x, backend="segment", chunk_edges=c))), argnums=0)
    np.testing.assert_allclose(np.asarray(grad(x, chunk)), np.asarray(grad(x, None)), rtol=1e-5, atol=1e-6)


def test_sorted_and_unsorted_edge_input_give_the_same_propagation():
    # from_edges sorts receivers whatever the input order; the result is the same graph.
    rng = np.random.default_rng(2)
    s, r = rng.integers(0, 25, 80), rng.integers(0, 25, 80)
    order = np.lexsort((s, r))
    x = jnp.asarray(rng.standard_normal((25, 3)).astype(np.float32))
    outs = [propagate(gcn_norm(from_edges(s[o], r[o], n_nodes=25)[0]), x, backend="segment")
            for o in (order, rng.permutation(80))]
    np.testing.assert_array_equal(np.asarray(outs[0]), np.asarray(outs[1]))


@pytest.mark.parametrize("backend", ["csr", "bcoo", "dense"])
def test_chunk_edges_is_for_the_segment_backend(graph, node_features, backend):
    with pytest.raises(ValueError, match=f"chunk_edges=5 applies to the segment backend, not '{backend}'"):
        propagate(prepared(graph, "sym", "csr"), jnp.asarray(node_features), backend=backend, chunk_edges=5)


def test_csr_backend_needs_the_attached_csr(graph, node_features):
    with pytest.raises(ValueError, match=r"backend 'csr' needs the CSR adjacency: attach it with .*with_csr"):
        propagate(gcn_norm(graph), jnp.asarray(node_features), backend="csr")


@pytest.mark.parametrize(("backend", "attach"), VARIANTS, ids=VARIANT_IDS)
def test_output_dtype_follows_input_dtype(graph, node_features, backend, attach):
    g = prepared(graph, "sym", attach)
    x = jnp.asarray(node_features, jnp.bfloat16)
    out = propagate(g, x, backend=backend)
    assert out.dtype == jnp.bfloat16
    expected = to_dense(gcn_norm(graph)) @ np.asarray(x, np.float32)
    np.testing.assert_allclose(np.asarray(out, np.float32), expected, rtol=3e-2, atol=3e-2)
