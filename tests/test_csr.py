"""The fused CSR kernel (jaxgcn.csr) against SciPy and the dense formula."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax.test_util import check_grads

import jaxgcn.csr as csr_mod
from jaxgcn.csr import csr_from_scipy, kernel_status, spmm
from jaxgcn.layers import dropout, matmul, sparse_features


def random_matrix(n, m, density, seed):
    a = sp.random(n, m, density=density, random_state=seed, format="csr", dtype=np.float64)
    a = sp.csr_matrix(a.toarray() * (np.random.default_rng(seed).random((n, 1)) > 0.2))  # empty rows
    return a


def test_kernel_builds_here():
    ok, reason = kernel_status()
    assert ok, reason


@pytest.mark.parametrize(("n", "m", "width"), [(7, 5, 3), (3000, 2000, 64)], ids=["tiny", "threaded"])
def test_spmm_equals_scipy(n, m, width):
    a = random_matrix(n, m, 0.01 if n > 100 else 0.4, 0)
    b = np.random.default_rng(1).standard_normal((m, width)).astype(np.float32)
    out = spmm(csr_from_scipy(a), jnp.asarray(b))
    np.testing.assert_allclose(np.asarray(out), a @ b.astype(np.float64), rtol=1e-5, atol=1e-5)
    jitted = jax.jit(spmm)(jax.device_put(csr_from_scipy(a)), jnp.asarray(b))
    np.testing.assert_array_equal(np.asarray(jitted), np.asarray(out))


@pytest.mark.parametrize("n", [9, 2500], ids=["tiny", "threaded"])
def test_per_run_values_equal_separate_products(n):
    a = random_matrix(n, 300, 0.05, 2)
    runs, h = 4, 8
    rng = np.random.default_rng(3)
    vals = (rng.standard_normal((a.nnz, runs)) * (rng.random((a.nnz, runs)) > 0.5)).astype(np.float32)
    b = rng.standard_normal((300, runs * h)).astype(np.float32)
    out = np.asarray(spmm(csr_from_scipy(a), jnp.asarray(b), jnp.asarray(vals)))
    for r in range(runs):
        a_r = sp.csr_matrix((vals[:, r].astype(np.float64), a.indices, a.indptr), shape=a.shape)
        np.testing.assert_allclose(out[:, r * h:(r + 1) * h], a_r @ b[:, r * h:(r + 1) * h], rtol=1e-5, atol=1e-5)


def test_gradients_equal_the_dense_formula():
    a = random_matrix(30, 20, 0.2, 4)
    rows = np.repeat(np.arange(30), np.diff(a.indptr))
    rng = np.random.default_rng(5)
    vals = jnp.asarray(rng.standard_normal((a.nnz, 2)).astype(np.float32))
    b = jnp.asarray(rng.standard_normal((20, 6)).astype(np.float32))
    m = csr_from_scipy(a)

    def dense(b, vals):
        blocks = [jnp.zeros((30, 20)).at[rows, a.indices].add(vals[:, r]) @ b[:, 3 * r:3 * r + 3] for r in range(2)]
        return jnp.sum(jnp.tanh(jnp.concatenate(blocks, axis=1)) ** 2)

    def fused(b, vals):
        return jnp.sum(jnp.tanh(spmm(m, b, vals)) ** 2)

    for got, want in zip(jax.grad(fused, (0, 1))(b, vals), jax.grad(dense, (0, 1))(b, vals)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("symmetric", [True, False])
def test_gradients_match_finite_differences(symmetric):
    a = random_matrix(12, 12, 0.3, 6)
    a = a + a.T if symmetric else a
    m = csr_from_scipy(a, check_symmetric=True)
    assert m.symmetric == symmetric
    b = jnp.asarray(np.random.default_rng(7).standard_normal((12, 3)).astype(np.float32)) / 4
    check_grads(lambda b: jnp.sum(jnp.tanh(spmm(m, b)) ** 2), (b,), order=2, modes=("rev",),
                atol=1e-2, rtol=1e-2, eps=1e-2)


def test_csr_features_match_bcoo_in_dropout_and_matmul():
    x = random_matrix(50, 30, 0.2, 8).astype(np.float32)
    as_bcoo, as_csr = sparse_features(x), sparse_features(x, layout="csr")
    w = jnp.asarray(np.random.default_rng(9).standard_normal((30, 4)).astype(np.float32))
    key = jax.random.key(0)
    d_bcoo, d_csr = dropout(key, as_bcoo, 0.5, train=True), dropout(key, as_csr, 0.5, train=True)
    np.testing.assert_array_equal(np.asarray(d_bcoo.data), np.asarray(d_csr.data))
    np.testing.assert_allclose(np.asarray(matmul(d_csr, w)), np.asarray(matmul(d_bcoo, w)), rtol=1e-5, atol=1e-6)


def test_width_must_be_a_multiple_of_the_value_columns():
    m = csr_from_scipy(sp.eye(3, format="csr"))
    with pytest.raises(ValueError, match=r"b has shape \(3, 5\); its width must be a multiple of the 2 value columns"):
        spmm(m, jnp.ones((3, 5)), jnp.ones((3, 2)))


def test_int32_overflow_is_refused():
    big = sp.csr_matrix((2**31, 2), dtype=np.float32)
    with pytest.raises(ValueError, match=r"overflows int32 indices"):
        csr_from_scipy(big)


def test_unavailable_kernel_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("JAXGCN_NO_KERNELS", "1")
    monkeypatch.setattr(csr_mod, "_load", lambda: (False, "disabled by JAXGCN_NO_KERNELS"))
    assert not csr_mod.kernel_possible()
    with pytest.raises(ValueError, match=r"^backend='csr' needs the fused CPU kernel, which is unavailable: "
                                         r"disabled by JAXGCN_NO_KERNELS; use backend='segment'"):
        spmm(csr_from_scipy(sp.eye(2, format="csr")), jnp.ones((2, 1)))


def test_build_failure_names_the_command(monkeypatch, tmp_path):
    monkeypatch.setenv("JAXGCN_CACHE_DIR", str(tmp_path))
    with pytest.raises(RuntimeError, match=r"compiling spmm.cc failed: /bin/false"):
        csr_mod._build("/bin/false")
    assert not list((tmp_path / "kernels").glob("*.so"))  # nothing half-written left behind


def test_gradient_skips_zero_rows_of_the_cotangent_exactly():
    # A loss masked to a few rows gives a cotangent with all-zero rows, which the kernel skips.
    a = random_matrix(400, 400, 0.02, 10)
    a = a + a.T
    m = csr_from_scipy(a, check_symmetric=True)
    rows = np.zeros((400, 1), np.float32)
    rows[::37] = 1.0
    b = jnp.asarray(np.random.default_rng(11).standard_normal((400, 5)).astype(np.float32))
    got = jax.grad(lambda b: jnp.sum(rows * jnp.sin(spmm(m, b))))(b)
    dense = jnp.asarray(a.toarray().astype(np.float32))
    want = jax.grad(lambda b: jnp.sum(rows * jnp.sin(dense @ b)))(b)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)
    assert np.count_nonzero(np.abs(np.asarray(got)).sum(axis=1)) < 400  # rows no train node reaches stay 0


def test_xla_product_equals_the_kernel_with_gradients(monkeypatch):
    # spmm_xla is what sharded training uses where the kernel cannot run (GPU/TPU)
    from jaxgcn.csr import csr_matmul, spmm_xla

    rng = np.random.default_rng(3)
    a = csr_from_scipy(sp.random(60, 45, density=0.1, random_state=3, format="csr"))
    b = jnp.asarray(rng.standard_normal((45, 7)), jnp.float32)
    g = jnp.asarray(rng.standard_normal((60, 7)), jnp.float32)
    np.testing.assert_allclose(spmm_xla(a, b), spmm(a, b), atol=1e-5)
    fused = jax.grad(lambda v: jnp.sum(spmm(a, v) * g))(b)
    xla = jax.grad(lambda v: jnp.sum(spmm_xla(a, v) * g))(b)
    np.testing.assert_allclose(xla, fused, atol=1e-5)
    check_grads(lambda v: spmm_xla(a, v), (b,), order=1, modes=("rev",), atol=1e-2, rtol=1e-2)
    expected = spmm(a, b)
    monkeypatch.setattr(csr_mod, "kernel_status", lambda: (False, "no kernel here"))
    np.testing.assert_allclose(csr_matmul(a, b), expected, atol=1e-5)  # falls back to XLA


# --- every regime of the kernel, against SciPy (issue 12) --------------------------------------------
# The kernel switches on row prefetching when b exceeds 256 KiB (kTileBytes) and cuts the rows into
# chunks on the thread pool when (nnz + rows) * width >= 2**18; the gradient passes skip flags. Each
# regime is checked with one value column (V = 1) and with R per-run value columns (V = R), against
# SciPy and against R separate V = 1 calls.

PREFETCH_BYTES, CHUNK_COST = 256 * 1024, 1 << 18


def _kernel(a, vals, b, skip=False):
    """The raw kernel call (``skip``: flag the all-zero rows of b and do not read them)."""
    csr_mod.require_kernel()
    return np.asarray(csr_mod._call(jnp.asarray(a.indptr, jnp.int32), jnp.asarray(a.indices, jnp.int32),
                                    jnp.asarray(vals, jnp.float32), jnp.asarray(b, jnp.float32), skip))


def check_kernel_case(n, m, density, runs, h, skip_frac, seed):
    """V = R and V = 1 products equal SciPy, with a share of b's rows all zero (-0.0 among them)
    that the skipping pass flags and leaves unread."""
    rng = np.random.default_rng(seed)
    a = sp.random(n, m, density=density, random_state=seed, format="csr", dtype=np.float64)
    a.sort_indices()
    width = runs * h
    b = rng.standard_normal((m, width)).astype(np.float32)
    skip = skip_frac > 0
    if skip:
        zero = rng.random(m) < skip_frac
        b[zero] = 0.0
        b[zero & (rng.random(m) < 0.5), 0] = -0.0
    b_read = b
    vals = (rng.standard_normal((a.nnz, runs)) * (rng.random((a.nnz, runs)) > 0.5)).astype(np.float32)
    out = _kernel(a, vals, b, skip)
    assert out.shape == (n, width) and np.all(np.isfinite(out))
    separate = []
    for r in range(runs):
        a_r = sp.csr_matrix((vals[:, r].astype(np.float64), a.indices, a.indptr), shape=a.shape)
        cols = slice(r * h, (r + 1) * h)
        np.testing.assert_allclose(out[:, cols], a_r @ b_read[:, cols].astype(np.float64), rtol=1e-4, atol=1e-4)
        separate.append(_kernel(a, vals[:, r:r + 1], np.ascontiguousarray(b[:, cols]), skip))
    # the same sums in the same order: bit for bit (a run that read run 0's values would differ)
    np.testing.assert_array_equal(out, np.concatenate(separate, axis=1))
    shared = _kernel(a, a.data[:, None].astype(np.float32), b, skip)  # V = 1 over the whole width
    np.testing.assert_allclose(shared, a @ b_read.astype(np.float64), rtol=1e-4, atol=1e-4)
    return {"prefetch": m * width * 4 > PREFETCH_BYTES, "chunks": (a.nnz + n) * width >= CHUNK_COST}


@pytest.mark.parametrize(("n", "m", "density", "runs", "h", "skip"), [
    (40, 30, 0.2, 3, 5, 0.0),            # one chunk, b in cache
    (40, 30, 0.2, 3, 5, 0.5),            # + skipped rows
    (3000, 2000, 0.01, 4, 16, 0.0),      # prefetch + several chunks, width a multiple of 16
    (3000, 2000, 0.01, 3, 13, 0.4),      # prefetch + chunks + skips, width not a multiple of 16
    (20000, 50, 0.05, 2, 7, 0.3),        # many rows, small b in cache, several chunks
    (300, 9000, 0.002, 5, 3, 0.0),       # prefetch, one chunk
], ids=["small", "small-skip", "prefetch-chunks", "prefetch-chunks-skip-odd", "chunks-only", "prefetch-only"])
def test_kernel_regimes_equal_scipy(n, m, density, runs, h, skip):
    regime = check_kernel_case(n, m, density, runs, h, skip, seed=n + m)
    expected = {"small": (False, False), "small-skip": (False, False)}
    if n == 3000:
        assert regime == {"prefetch": True, "chunks": True}
    elif n == 20000:
        assert regime == {"prefetch": False, "chunks": True}
    elif n == 300:
        assert regime == {"prefetch": True, "chunks": False}
    else:
        assert tuple(regime.values()) == expected["small"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 2500), m=st.integers(1, 2500), density=st.floats(0.0, 0.05), runs=st.integers(1, 5),
       h=st.integers(1, 40), skip=st.sampled_from([0.0, 0.3, 0.9]), seed=st.integers(0, 2**16))
def test_kernel_equals_scipy_over_random_shapes(n, m, density, runs, h, skip, seed):
    check_kernel_case(n, m, density, runs, h, skip, seed)


def test_kernel_entry_refuses_out_of_range_patterns():
    """A pattern that bypassed host validation gets an error from the kernel, not a wild read."""
    a = sp.csr_matrix(np.eye(4))
    bad = sp.csr_matrix((a.data, a.indices.copy(), a.indptr), shape=a.shape)
    bad.indices[2] = 1000
    with pytest.raises(Exception, match=r"jaxgcn_spmm: a column index or row pointer is out of range"):
        _kernel(bad, bad.data[:, None], np.ones((4, 2)))
    bad.indices[2] = -3
    with pytest.raises(Exception, match=r"out of range"):
        _kernel(bad, bad.data[:, None], np.ones((4, 2)))
    shuffled = sp.csr_matrix((a.data, a.indices, np.array([0, 2, 1, 3, 4])), shape=a.shape)
    with pytest.raises(Exception, match=r"out of range"):
        _kernel(shuffled, shuffled.data[:, None], np.ones((4, 2)))


def test_host_conversion_refuses_out_of_range_indices():
    bad = sp.csr_matrix((np.ones(2), np.array([0, 7]), np.array([0, 1, 2])), shape=(2, 3))
    with pytest.raises(ValueError, match=r"sparse matrix of shape \(2, 3\) is malformed: column index 7 is out "
                                         r"of range \[0, 3\)"):
        csr_from_scipy(bad)


# --- the per-run dense products (run_matmul): [n, R, H] x [H, R, C] --------------------------------

def _per_run_einsum(x, w):
    return jnp.einsum("nrh,hrc->nrc", x, w, precision="highest")


@pytest.mark.parametrize(("n", "runs", "h", "c"), [(37, 3, 5, 7), (2708, 8, 64, 7), (100, 2, 33, 20), (9, 1, 1, 1),
                                                   (1000, 4, 16, 16)],
                         ids=["odd", "cora-64", "two-chunks-of-classes", "one", "exact-lanes"])
def test_run_matmul_equals_the_dense_formula_with_gradients(n, runs, h, c):
    from jaxgcn.csr import run_matmul

    rng = np.random.default_rng(n + h)
    x = jnp.asarray(rng.standard_normal((n, runs, h)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((h, runs, c)), jnp.float32)
    g = jnp.asarray(rng.standard_normal((n, runs, c)), jnp.float32).at[::3].set(0.0)  # rows the kernel skips
    np.testing.assert_allclose(run_matmul(x, w), _per_run_einsum(x, w), rtol=1e-5, atol=1e-4)

    def loss(fn):
        return lambda x, w: jnp.sum(jnp.sin(fn(x, w)) * g)

    kernel = jax.jit(jax.grad(loss(run_matmul), (0, 1)))(x, w)
    for got, want in zip(kernel, jax.grad(loss(_per_run_einsum), (0, 1))(x, w)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)


def test_run_matmul_gradients_match_finite_differences_to_second_order():
    from jaxgcn.csr import run_matmul

    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.standard_normal((11, 3, 5)), jnp.float32) / 2
    w = jnp.asarray(rng.standard_normal((5, 3, 4)), jnp.float32) / 2
    check_grads(lambda x, w: jnp.sum(jnp.tanh(run_matmul(x, w)) ** 2), (x, w), order=2, modes=("rev",),
                atol=1e-2, rtol=1e-2, eps=1e-2)


def test_run_matmul_gradient_is_exactly_zero_where_the_cotangent_is():
    from jaxgcn.csr import run_matmul

    rng = np.random.default_rng(4)
    x = jnp.asarray(rng.standard_normal((50, 2, 16)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((16, 2, 7)), jnp.float32)
    keep = np.zeros((50, 1, 1), np.float32)
    keep[[3, 17, 40]] = 1.0
    dx, dw = jax.grad(lambda x, w: jnp.sum(keep * run_matmul(x, w) ** 2), (0, 1))(x, w)
    assert set(np.flatnonzero(np.abs(np.asarray(dx)).sum(axis=(1, 2)))) == {3, 17, 40}
    want = jax.grad(lambda w: jnp.sum(keep * _per_run_einsum(x, w) ** 2))(w)
    np.testing.assert_allclose(np.asarray(dw), np.asarray(want), rtol=1e-4, atol=1e-4)


def test_run_matmul_refuses_mismatched_weights():
    from jaxgcn.csr import run_matmul

    with pytest.raises(ValueError, match=r"w must be \[4, 2, out\]"):
        run_matmul(jnp.ones((3, 2, 4)), jnp.ones((4, 3, 5)))


def test_batched_model_without_the_kernel_equals_with_it(monkeypatch):
    # the hidden products fall back to XLA where the kernel cannot run: same numbers
    from jaxgcn import models

    rng = np.random.default_rng(6)
    h = jnp.asarray(rng.standard_normal((40, 3, 16)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((16, 3, 7)), jnp.float32)
    with_kernel = models._matmul_runs(h, None, w)
    monkeypatch.setattr(models, "kernel_status", lambda: (False, "no kernel here"))
    np.testing.assert_allclose(models._matmul_runs(h, None, w), with_kernel, rtol=1e-5, atol=1e-5)


# --- the diagonal (a graph's self-loops) inside the kernel ---------------------------------------

@pytest.mark.parametrize(("n", "width"), [(30, 7), (3000, 64), (200, 33)], ids=["narrow", "threaded", "odd"])
def test_diagonal_equals_scipy_with_gradients(n, width):
    rng = np.random.default_rng(n)
    a = random_matrix(n, n, 0.02, n)
    a = a + a.T
    d = rng.random(n).astype(np.float32)
    m = csr_from_scipy(a, check_symmetric=True)
    b = jnp.asarray(rng.standard_normal((n, width)), jnp.float32)
    full = (a + sp.diags(d.astype(np.float64))).toarray()
    np.testing.assert_allclose(spmm(m, b, diag=jnp.asarray(d)), full @ np.asarray(b, np.float64), rtol=1e-4, atol=1e-4)
    rows = (rng.random((n, 1)) < 0.1).astype(np.float32)  # a masked loss: the gradient skips zero rows
    got_b, got_d = jax.grad(lambda b, d: jnp.sum(rows * jnp.sin(spmm(m, b, diag=d))), (0, 1))(b, jnp.asarray(d))
    dense = jnp.asarray(a.toarray(), jnp.float32)
    want = jax.grad(lambda b, d: jnp.sum(rows * jnp.sin(dense @ b + d[:, None] * b)), (0, 1))
    want_b, want_d = want(b, jnp.asarray(d))
    np.testing.assert_allclose(np.asarray(got_b), np.asarray(want_b), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(got_d), np.asarray(want_d), rtol=1e-4, atol=1e-4)


def test_diagonal_needs_a_square_matrix():
    m = csr_from_scipy(sp.random(5, 4, density=0.5, random_state=0, format="csr"))
    with pytest.raises(ValueError, match=r"diag has shape \(5,\); it needs a square matrix \(here \(5, 4\)\)"):
        spmm(m, jnp.ones((4, 2)), diag=jnp.ones(5))
