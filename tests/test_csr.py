"""The fused CSR kernel (jaxgcn.native.csr) against SciPy and the dense formula."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from conftest import KERNEL_ONLY
from jax.test_util import check_grads

import jaxgcn.native.csr as csr_mod
import jaxgcn.native.fused as fused_mod
from jaxgcn.native import kernel_build
from jaxgcn.native.csr import csr_from_scipy, kernel_status, spmm
from jaxgcn.core.layers import dropout, matmul, sparse_features


def sparse_random(n, m, density, seed):
    """SciPy's ``sp.random`` [n, m] CSR (distinct positions, uniform values). Given an int seed,
    sp.random draws with a RandomState, which permutes all n * m positions to pick the non-zeros
    (3.7 s for 3000 x 12000, and tests/test_kernel_build.py runs these tests twice more): past a
    million positions a NumPy Generator of its own stream (not the tests' ``default_rng(seed)``)
    draws them instead (0.01 s). Smaller matrices keep the RandomState draws, the values that the
    finite-difference tolerances below were set against."""
    draws = seed if n * m <= 10**6 else np.random.default_rng([seed, 1])
    return sp.random(n, m, density=density, random_state=draws, format="csr", dtype=np.float64)


def random_matrix(n, m, density, seed):
    keep = np.random.default_rng(seed).random(n) > 0.2  # the other rows are emptied
    a = sp.csr_matrix(sp.diags(keep.astype(np.float64)) @ sparse_random(n, m, density, seed))
    a.eliminate_zeros()  # without an [n, m] dense copy (144 MB for 3000 x 6000)
    a.sort_indices()
    return a


# on an accelerator the kernel is refused by name (native.csr.kernel_status) and its FFI targets are CPU-only
CPU_KERNEL = pytest.mark.skipif(jax.default_backend() != "cpu", reason="the fused CSR kernel runs on the CPU only")


@CPU_KERNEL
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

    for got, want in zip(jax.jit(jax.grad(fused, (0, 1)))(b, vals), jax.jit(jax.grad(dense, (0, 1)))(b, vals)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("width", [3, 20], ids=["scatter", "gather"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_gradients_match_finite_differences(symmetric, width):
    # width 3: one run's gradient scatters (jaxgcn_spmm_t); 20: the gather over the transposed
    # pattern, whose own gradient goes back through the inverse permutation
    a = random_matrix(12, 12, 0.3, 6)
    a = a + a.T if symmetric else a
    m = csr_from_scipy(a, check_symmetric=True)
    assert m.symmetric == symmetric
    b = jnp.asarray(np.random.default_rng(7).standard_normal((12, width)).astype(np.float32)) / 4
    check_grads(lambda b: jnp.sum(jnp.tanh(spmm(m, b)) ** 2), (b,), order=2, modes=("rev",),
                atol=1e-2, rtol=1e-2, eps=1e-2)
    if not symmetric:  # and in the values with b, mixed second order included (the values of the
        # gradient's transposed product, read through its permutation, get theirs scattered back)
        vals = jnp.asarray(m.data, jnp.float32)[:, None]
        check_grads(lambda b, v: jnp.sum(jnp.tanh(spmm(m, b, v)) ** 2), (b, vals), order=2, modes=("rev",),
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
        kernel_build._build("/bin/false")
    assert not list((tmp_path / "kernels").glob("*.so"))  # nothing half-written left behind


@pytest.mark.parametrize("symmetric", [True, False])
def test_gradient_skips_zero_rows_of_the_cotangent_exactly(symmetric):
    # A loss masked to a few rows gives a cotangent with all-zero rows, which the kernel skips.
    a = random_matrix(400, 400, 0.02, 10)
    a = a + a.T if symmetric else a
    m = csr_from_scipy(a, check_symmetric=True)
    assert m.symmetric == symmetric
    rows = np.zeros((400, 1), np.float32)
    rows[::37] = 1.0
    b = jnp.asarray(np.random.default_rng(11).standard_normal((400, 5)).astype(np.float32))
    csr_mod.reset_kernel_counters()
    grad = jax.jit(jax.grad(lambda b: jnp.sum(rows * jnp.sin(spmm(m, b)))))  # one compile per width
    got = grad(b).block_until_ready()  # run (jit's dispatch is asynchronous) before the counters are read
    counters = csr_mod.kernel_counters()
    dense = jnp.asarray(a.toarray().astype(np.float32))
    want = jax.jit(jax.grad(lambda b: jnp.sum(rows * jnp.sin(dense @ b))))(b)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)
    assert np.count_nonzero(np.abs(np.asarray(got)).sum(axis=1)) < 400  # rows no train node reaches stay 0
    # the forward product reads every row; the gradient (one run: a scatter of g's live rows) never
    # reads the 389 zero rows of the cotangent
    assert (counters["calls"], counters["scatter_calls"], counters["skipped_rows"]) == (1, 1, 400 - 11)
    # with 16 runs sharing the values, the gather over the (transposed) pattern skips them
    csr_mod.reset_kernel_counters()
    wide = jnp.tile(b, (1, 4))
    got = grad(wide).block_until_ready()
    np.testing.assert_allclose(np.asarray(got), np.tile(np.asarray(want), (1, 4)), rtol=1e-5, atol=1e-6)
    counters = csr_mod.kernel_counters()
    assert (counters["calls"], counters["skip_calls"], counters["skipped_rows"]) == (2, 1, 400 - 11)


@pytest.mark.parametrize(("width", "with_diag", "symmetric"), [(7, False, False), (16, True, False),
                                                             (1, True, False), (16, True, True), (5, False, True)])
def test_one_run_gradient_scatter_equals_the_transposed_gather_bit_for_bit(width, with_diag, symmetric):
    # one value column, width <= 16: the gradient A^T g scatters g's live rows (jaxgcn_spmm_t)
    # instead of the gather over the transposed pattern (A's own when it is symmetric); every output
    # row sums the same terms in the same order from +0, so the bits agree, the zero rows of g
    # (-0.0 among them) included
    rng = np.random.default_rng(width)
    a = random_matrix(300, 300 if with_diag or symmetric else 200, 0.03, width)
    if symmetric:  # mirrored values 2e-14 apart, as a normalization may leave them, on either side of
        # a float32 rounding boundary (1 + 2^-24): cast alone they would differ by one float32 step
        a = sp.lil_matrix(a + a.T)
        i, j = next((i, j) for i, j in zip(*a.nonzero()) if i < j)
        a[i, j], a[j, i] = (1 + 2.0**-24) * (1 + 1e-14), (1 + 2.0**-24) * (1 - 1e-14)
        a = sp.csr_matrix(a)
        assert np.float32(a[i, j]) != np.float32(a[j, i])
    m = csr_from_scipy(a, check_symmetric=True)
    assert m.symmetric == symmetric
    if symmetric:
        a = sp.csr_matrix((m.data.astype(np.float64), m.cols, m.indptr), shape=a.shape)
        assert abs(a - a.T).max() == 0  # made exactly symmetric
    vals = jnp.asarray(m.data, jnp.float32)[:, None]
    g = rng.standard_normal((300, width)).astype(np.float32)
    g[rng.random(300) < 0.6] = -0.0
    g[rng.random(300) < 0.2] = 0.0
    g = jnp.asarray(g)
    diag = jnp.asarray(rng.standard_normal(300), jnp.float32) if with_diag else None
    operands = [None if v is None else jnp.asarray(v) for v in (m.indptr, m.cols, m.t_indptr, m.t_rows, m.t_perm)]
    csr_mod.reset_kernel_counters()
    got = csr_mod._spmm_t(*operands, vals, g, diag)
    assert csr_mod.kernel_counters()["scatter_calls"] == 1
    indptr, cols, t_indptr, t_rows, t_perm = operands
    if symmetric:
        want = csr_mod._spmm(indptr, cols, None, None, None, vals, g, diag, True)
    else:
        want = csr_mod._spmm(t_indptr, t_rows, indptr, cols, t_perm, vals[t_perm], g, diag, True)
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
    dense = a.toarray().T + (np.diag(np.asarray(diag)) if with_diag else 0)
    np.testing.assert_allclose(np.asarray(got), dense @ np.asarray(g, np.float64), rtol=1e-5, atol=1e-5)
    # its own gradients (second order of a product), against finite differences
    check_grads(jax.jit(lambda v, g: jnp.sum(jnp.tanh(csr_mod._spmm_t(*operands, v, g, diag)) ** 2)), (vals, g / 4),
                order=1, modes=("rev",), atol=1e-2, rtol=1e-2, eps=1e-2)


@CPU_KERNEL
def test_one_run_gradient_scatter_refuses_out_of_range_patterns():
    a = sp.csr_matrix(np.eye(4))
    bad = sp.csr_matrix((a.data, a.indices.copy(), a.indptr), shape=a.shape)
    bad.indices[2] = 4  # the first row past the output's last
    m = csr_from_scipy(sp.csr_matrix(np.eye(4)))._replace(cols=bad.indices.astype(np.int32))
    operands = [jnp.asarray(v) for v in (m.indptr, m.cols, m.t_indptr, m.t_rows, m.t_perm)]
    with pytest.raises(Exception, match=r"jaxgcn_spmm_t: a column index or row pointer is out of range"):
        np.asarray(csr_mod._spmm_t(*operands, jnp.ones((4, 1)), jnp.ones((4, 3)), None))


def test_xla_product_equals_the_kernel_with_gradients(monkeypatch):
    # spmm_xla is what sharded training uses where the kernel cannot run (GPU/TPU)
    from jaxgcn.native.csr import csr_matmul, spmm_xla

    rng = np.random.default_rng(3)
    a = csr_from_scipy(sp.random(60, 45, density=0.1, random_state=3, format="csr"))
    b = jnp.asarray(rng.standard_normal((45, 7)), jnp.float32)
    g = jnp.asarray(rng.standard_normal((60, 7)), jnp.float32)
    np.testing.assert_allclose(spmm_xla(a, b), spmm(a, b), atol=1e-5)
    fused = jax.grad(lambda v: jnp.sum(spmm(a, v) * g))(b)
    xla = jax.grad(lambda v: jnp.sum(spmm_xla(a, v) * g))(b)
    np.testing.assert_allclose(xla, fused, atol=1e-5)
    check_grads(jax.jit(lambda v: spmm_xla(a, v)), (b,), order=1, modes=("rev",), atol=1e-2, rtol=1e-2)
    expected = spmm(a, b)
    monkeypatch.setattr(csr_mod, "_status", lambda: (False, "no kernel here"))
    monkeypatch.setattr(csr_mod, "spmm", None)  # the fallback never reaches the kernel
    np.testing.assert_allclose(csr_matmul(a, b), expected, atol=1e-5)  # falls back to XLA


# --- every regime of the kernel, against SciPy (issue 12) --------------------------------------------
# The kernel switches on row prefetching when b exceeds the tile and cuts the rows into chunks on the
# thread pool when (nnz + rows) * width reaches the product cut-off; it sums a row in vector registers
# when V = 1 or W / V is a multiple of 16, else in a loop; the gradient passes skip flags. Each case
# names the regime it must reach and the kernel's own counters (csr.kernel_counters) say which it
# did, so a changed threshold fails here instead of silently testing another regime. The machine
# chooses the tile and cut-offs (jaxgcn.host.machine); these tests pin the settings the cases were sized
# for (256 KiB, 2**18, 2**17), so that they test the same regimes on every CPU.

pytestmark = pytest.mark.usefixtures("regime_tuning")  # tests/conftest.py

def _kernel_run(a, vals, b, skip=False, skip_mask=None):
    """One raw kernel call and the kernel's counters for it.

    Args:
        a: [n, m] SciPy CSR pattern (its indices sorted).
        vals: [nnz, V] values.
        b: [m, W] dense operand.
        skip: flag the all-zero rows of b and do not read them.
        skip_mask: optional [m] bool, rows of b not to read (in place of those flags).

    Returns:
        ([n, W] float32 output, the counters of this call).
    """
    csr_mod.require_kernel()
    csr_mod.reset_kernel_counters()
    out = csr_mod._call(jnp.asarray(a.indptr, jnp.int32), jnp.asarray(a.indices, jnp.int32),
                        jnp.asarray(vals, jnp.float32), jnp.asarray(b, jnp.float32), skip,
                        skip_mask=None if skip_mask is None else jnp.asarray(skip_mask))
    return np.asarray(out), csr_mod.kernel_counters()


def _kernel(a, vals, b, skip=False):
    """The raw kernel's [n, W] output (``_kernel_run`` without the counters)."""
    return _kernel_run(a, vals, b, skip)[0]


def _regime(counters, n):
    """The regime of one kernel call over n output rows, as the kernel counted it."""
    assert counters["calls"] == 1, counters
    paths = {(n, 0, 0): "narrow", (0, n, 0): "blocked", (0, 0, n): "scalar"}
    rows = (counters["narrow_rows"], counters["blocked_rows"], counters["scalar_rows"])
    assert rows in paths, counters  # every row once, one path
    return {"prefetch": counters["prefetch_calls"] == 1, "chunks": counters["chunked_calls"] == 1,
            "path": paths[rows]}


def _plant_zero_rows(b, frac, rng):
    """Zero a share ``frac`` of the rows of b [m, W] in place (+0.0 and -0.0 mixed), half of them
    all zero and half zero but in one lane that a check of only some lanes would miss: one of the
    first 16, the last, or one of each later vector of 16 in turn.

    Returns:
        [m] bool: the rows that are now all zero (the ones the kernel may skip).
    """
    m, width = b.shape
    kind = rng.choice(3, size=m, p=[1 - frac, frac / 2, frac / 2])  # 0: as is, 1: zero, 2: zero but one lane
    signed_zeros = np.where(rng.random(b.shape) < 0.5, -0.0, 0.0).astype(np.float32)
    b[kind > 0] = signed_zeros[kind > 0]
    lanes = [int(rng.integers(0, min(16, width))), width - 1]
    lanes += [int(rng.integers(start, min(start + 16, width))) for start in range(16, width, 16)]
    partly = np.flatnonzero(kind == 2)
    b[partly, np.array(lanes)[np.arange(partly.size) % len(lanes)]] = (
        rng.choice([-1.0, 1.0], partly.size) * (1.0 + rng.random(partly.size)))
    return kind == 1


def check_kernel_case(n, m, density, runs, h, skip_frac, seed):
    """V = R and V = 1 products equal SciPy, with a share of b's rows zero (-0.0 among them, and
    rows zero but in one lane) that the skipping pass must flag exactly.

    Returns:
        The regime of the V = R call (``_regime``).
    """
    rng = np.random.default_rng(seed)
    a = sparse_random(n, m, density, seed)
    a.sort_indices()
    width = runs * h
    b = rng.standard_normal((m, width)).astype(np.float32)
    skip = skip_frac > 0
    zero = _plant_zero_rows(b, skip_frac, rng) if skip else np.zeros(m, bool)
    vals = (rng.standard_normal((a.nnz, runs)) * (rng.random((a.nnz, runs)) > 0.5)).astype(np.float32)
    out, counters = _kernel_run(a, vals, b, skip)
    assert out.shape == (n, width) and np.all(np.isfinite(out))
    # the kernel flagged exactly the all-zero rows: a -0.0 row is zero, a row non-zero in one lane is not
    assert (counters["skip_calls"], counters["skipped_rows"]) == (int(skip), int(zero.sum()))
    separate = []
    for r in range(runs):
        a_r = sp.csr_matrix((vals[:, r].astype(np.float64), a.indices, a.indptr), shape=a.shape)
        cols = slice(r * h, (r + 1) * h)
        np.testing.assert_allclose(out[:, cols], a_r @ b[:, cols].astype(np.float64), rtol=1e-4, atol=1e-4)
        separate.append(_kernel(a, vals[:, r:r + 1], np.ascontiguousarray(b[:, cols]), skip))
    # the same sums in the same order: bit for bit (a run that read run 0's values would differ)
    np.testing.assert_array_equal(out, np.concatenate(separate, axis=1))
    shared = _kernel(a, a.data[:, None].astype(np.float32), b, skip)  # V = 1 over the whole width
    np.testing.assert_allclose(shared, a @ b.astype(np.float64), rtol=1e-4, atol=1e-4)
    return _regime(counters, n)


@pytest.mark.parametrize(("n", "m", "density", "runs", "h", "skip", "prefetch", "chunks", "path"), [
    (40, 30, 0.2, 3, 5, 0.0, False, False, "scalar"),
    (40, 30, 0.2, 3, 5, 0.5, False, False, "scalar"),          # + skipped rows
    (40, 30, 0.2, 2, 24, 0.5, False, False, "scalar"),         # rows zero but past lane 16, in the loop
    (40, 30, 0.2, 3, 16, 0.5, False, False, "blocked"),        # ... and in registers
    (3000, 2000, 0.01, 4, 16, 0.0, True, True, "blocked"),     # width a multiple of 16
    (3000, 2000, 0.01, 3, 13, 0.4, True, True, "scalar"),      # + skips, width not a multiple of 16
    (3000, 3000, 0.005, 3, 16, 0.4, True, True, "blocked"),    # b over 2**17 values: flagged in chunks too
    (20000, 50, 0.05, 2, 7, 0.3, False, True, "scalar"),       # many rows, small b in cache
    (300, 9000, 0.002, 5, 3, 0.0, True, False, "scalar"),
    (40, 30, 0.2, 1, 7, 0.5, False, False, "narrow"),          # one run, width <= 16: one register a row
    (3000, 12000, 0.003, 1, 16, 0.4, True, True, "narrow"),    # ... b over the tile, in chunks, skips
    (20000, 50, 0.05, 1, 7, 0.3, False, True, "narrow"),       # ... many rows, small b in cache
], ids=["small", "small-skip", "small-skip-wide", "small-skip-blocked", "prefetch-chunks", "prefetch-chunks-skip-odd",
        "prefetch-chunks-skip-blocked", "chunks-only", "prefetch-only", "narrow-skip", "narrow-prefetch-chunks-skip",
        "narrow-chunks"])
def test_kernel_regimes_equal_scipy(n, m, density, runs, h, skip, prefetch, chunks, path):
    regime = check_kernel_case(n, m, density, runs, h, skip, seed=n + m)
    assert regime == {"prefetch": prefetch, "chunks": chunks, "path": path}


# On an accelerator the kernel's tests fail with KERNEL_ONLY and are reported skipped (conftest); this one
# would first have Hypothesis shrink the failure, a compile on the chip per example (minutes): it skips ahead.
@pytest.mark.skipif(jax.default_backend() != "cpu", reason=f"{KERNEL_ONLY}, which runs on the CPU only")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 2500), m=st.integers(1, 2500), density=st.floats(0.0, 0.05), runs=st.integers(1, 5),
       h=st.integers(1, 40), skip=st.sampled_from([0.0, 0.3, 0.9]), seed=st.integers(0, 2**16))
def test_kernel_equals_scipy_over_random_shapes(n, m, density, runs, h, skip, seed):
    check_kernel_case(n, m, density, runs, h, skip, seed)


# Rows of b a test marks as skipped hold NaN: an output that read one is NaN. The kernel computes
# its own flags from all-zero rows (where skipping and reading give the same numbers), so only an
# explicit mask shows that the flags are obeyed. Each regime, with one value column, R of them in
# registers (W / R = 16) and R of them in the loop (W / R = 20).
MASK_SHAPES = {  # (n, m, density), (prefetch, chunks) at 32 to 40 columns
    "one-chunk": ((40, 30, 0.2), (False, False)),
    "prefetch": ((200, 3000, 0.002), (True, False)),
    "chunks": ((8000, 500, 0.01), (False, True)),
    "prefetch-chunks": ((3000, 3000, 0.003), (True, True)),
}
MASK_LAYOUTS = {"v1": (1, 40, "blocked"), "vr-blocked": (2, 16, "blocked"), "vr-loop": (2, 20, "scalar")}
NARROW_MASK_SHAPES = {  # the same regimes at 7 columns, one value column (the narrow rows): b must be larger
    "one-chunk": ((40, 30, 0.2), (False, False)),
    "prefetch": ((200, 12000, 0.002), (True, False)),
    "chunks": ((8000, 500, 0.01), (False, True)),
    "prefetch-chunks": ((3000, 12000, 0.003), (True, True)),
}
MASK_CASES = {**{f"{shape}-{layout}": (*MASK_SHAPES[shape], MASK_LAYOUTS[layout])
                 for layout in MASK_LAYOUTS for shape in MASK_SHAPES},
              **{f"{shape}-narrow": (*NARROW_MASK_SHAPES[shape], (1, 7, "narrow")) for shape in NARROW_MASK_SHAPES}}


@pytest.mark.parametrize("case", MASK_CASES)
def test_masked_rows_of_b_are_never_read(case):
    (n, m, density), (prefetch, chunks), (runs, h, path) = MASK_CASES[case]
    rng = np.random.default_rng(n + h)
    a = sparse_random(n, m, density, n)
    a.sort_indices()
    b = rng.standard_normal((m, runs * h)).astype(np.float32)
    mask = rng.random(m) < 0.4
    b[~mask & (rng.random(m) < 0.2)] = 0.0  # unmasked zero rows: read, since the mask replaces the flags
    vals = (rng.standard_normal((a.nnz, runs)) * (rng.random((a.nnz, runs)) > 0.5)).astype(np.float32)
    out, counters = _kernel_run(a, vals, np.where(mask[:, None], np.nan, b), skip=True, skip_mask=mask)
    assert np.all(np.isfinite(out)), f"{np.count_nonzero(~np.isfinite(out).all(axis=1))} rows read a masked row"
    unmasked = np.where(mask[:, None], 0.0, b.astype(np.float64))
    for r in range(runs):
        a_r = sp.csr_matrix((vals[:, r].astype(np.float64), a.indices, a.indptr), shape=a.shape)
        cols = slice(r * h, (r + 1) * h)
        np.testing.assert_allclose(out[:, cols], a_r @ unmasked[:, cols], rtol=1e-4, atol=1e-4)
    assert _regime(counters, n) == {"prefetch": prefetch, "chunks": chunks, "path": path}
    assert (counters["skip_calls"], counters["mask_calls"], counters["skipped_rows"]) == (1, 1, mask.sum())


def test_kernel_reports_its_isa():
    # JAXGCN_KERNEL_ISA=portable keeps to the portable branch, avx2 to the AVX2 one where the CPU has
    # AVX2; native takes the widest the CPU has
    want = os.environ.get("JAXGCN_KERNEL_ISA") or "native"
    flags = kernel_build._cpu_id().split()
    if want == "native":
        want = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "portable"
    elif want == "avx2" and "avx2" not in flags:
        want = "portable"
    assert csr_mod.kernel_isa() == want


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
    bad.indices[2] = 4  # the first row past b's last: in the narrow and blocked register paths (V = 1, W = 2
    # and 40) and the loop path (V = 2, H = 3)
    for vals, b in ((bad.data[:, None], np.ones((4, 2))), (bad.data[:, None], np.ones((4, 40))),
                    (np.ones((4, 2)), np.ones((4, 6)))):
        with pytest.raises(Exception, match=r"out of range"):
            _kernel(bad, vals, b)
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
    from jaxgcn.native.fused import run_matmul

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
    from jaxgcn.native.fused import run_matmul

    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.standard_normal((11, 3, 5)), jnp.float32) / 2
    w = jnp.asarray(rng.standard_normal((5, 3, 4)), jnp.float32) / 2
    check_grads(jax.jit(lambda x, w: jnp.sum(jnp.tanh(run_matmul(x, w)) ** 2)), (x, w), order=2, modes=("rev",),
                atol=1e-2, rtol=1e-2, eps=1e-2)


def test_run_matmul_gradient_is_exactly_zero_where_the_cotangent_is():
    from jaxgcn.native.fused import run_matmul

    rng = np.random.default_rng(4)
    x = jnp.asarray(rng.standard_normal((50, 2, 16)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((16, 2, 7)), jnp.float32)
    keep = np.zeros((50, 1, 1), np.float32)
    keep[[3, 17, 40]] = 1.0
    dx, dw = jax.jit(jax.grad(lambda x, w: jnp.sum(keep * run_matmul(x, w) ** 2), (0, 1)))(x, w)
    assert set(np.flatnonzero(np.abs(np.asarray(dx)).sum(axis=(1, 2)))) == {3, 17, 40}
    want = jax.grad(lambda w: jnp.sum(keep * _per_run_einsum(x, w) ** 2))(w)
    np.testing.assert_allclose(np.asarray(dw), np.asarray(want), rtol=1e-4, atol=1e-4)


def test_run_matmul_gradients_read_rows_zero_only_in_their_first_lanes():
    # The gradient products skip the all-zero rows of the cotangent, 39 = 3 runs x 13 classes wide
    # here: rows zero but in one lane (of the second vector of 16, the tail, or the last run) must
    # be read, and all-zero rows (-0.0 too) skipped, in both directions (mode 1: dx, mode 2: dw).
    n, runs, h, c = 64, 3, 5, 13
    rng = np.random.default_rng(8)
    x = jnp.asarray(rng.standard_normal((n, runs * h)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((h, runs, c)), jnp.float32)
    g = rng.standard_normal((n, runs * c)).astype(np.float32)
    kind = np.arange(n) % 4  # 0: as is, 1: zero but one lane past 16, 2: all zero, 3: zero but the last lane
    g[kind > 0] = np.where(rng.random((n, runs * c)) < 0.5, -0.0, 0.0)[kind > 0]
    g[kind == 1, 16 + np.arange(n // 4) % (runs * c - 16)] = 1.0 + rng.random(n // 4)
    g[kind == 3, -1] = -1.0 - rng.random(n // 4)
    want_dx = jnp.einsum("nrc,hrc->nrh", g.reshape(n, runs, c), w, precision="highest")
    want_dw = jnp.einsum("nrh,nrc->hrc", x.reshape(n, runs, h), g.reshape(n, runs, c), precision="highest")
    for got, want in ((lambda: fused_mod._times_t(jnp.asarray(g), w), want_dx.reshape(n, runs * h)),
                      (lambda: fused_mod._outer(x, jnp.asarray(g), w.shape), want_dw)):
        csr_mod.reset_kernel_counters()
        np.testing.assert_allclose(np.asarray(got()), np.asarray(want), rtol=1e-5, atol=1e-5)
        counters = csr_mod.kernel_counters()
        assert (counters["dense_calls"], counters["dense_skipped_rows"]) == (1, n // 4)


def test_run_matmul_refuses_mismatched_weights():
    from jaxgcn.native.fused import run_matmul

    with pytest.raises(ValueError, match=r"w must be \[4, 2, out\]"):
        run_matmul(jnp.ones((3, 2, 4)), jnp.ones((4, 3, 5)))


def test_batched_model_without_the_kernel_equals_with_it(monkeypatch):
    # the hidden products fall back to XLA where the kernel cannot run (or another backend is named):
    # same numbers
    from jaxgcn.core import models

    rng = np.random.default_rng(6)
    h = jnp.asarray(rng.standard_normal((40, 3, 16)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((16, 3, 7)), jnp.float32)
    csr_mod.reset_kernel_counters()
    from jaxgcn import plan

    with_kernel = plan.ops_for(models.Execution(backend="csr")).matmul_runs(h, None, w)
    assert csr_mod.kernel_counters()["dense_calls"] == 1
    xla = plan.ops_for(models.Execution(backend="csr", kernels=False))  # the deprecated request: no kernel
    np.testing.assert_allclose(xla.matmul_runs(h, None, w), with_kernel, rtol=1e-5, atol=1e-5)
    assert csr_mod.kernel_counters()["dense_calls"] == 1
    # the plan decides once (jaxgcn.plan.planned); the forward pass only reads the decision

    assert plan.planned(models.Execution(backend="csr")).kernels and plan.planned(models.Execution()).kernels
    assert not any(plan.planned(models.Execution(backend=b)).kernels for b in ("segment", "bcoo", "dense"))
    assert models.ops_of(plan.planned(models.Execution(backend="csr"))).name == "native"
    assert models.ops_of(models.Execution(backend="csr")).name == "xla"  # not planned: no kernel
    monkeypatch.setattr(plan, "kernel_status", lambda: (False, "no kernel here"))
    assert plan.planned(models.Execution(backend="csr")).kernels is False


def test_a_batch_on_another_backend_never_calls_the_kernel():
    # --backend segment --seeds N: propagation, the sparse first layer and the per-run dense products
    # all in XLA (here with sparse features, dropout, a residual 3-layer model; bcoo and dense take
    # the same decision of the plan, tested above)
    from jaxgcn import datasets
    from jaxgcn.batched import entries_for, fit_runs
    from jaxgcn.core.models import Execution, GCNConfig
    from jaxgcn.train import TrainConfig

    raw = datasets.synthetic(120, n_classes=3, n_features=30, seed=2)
    raw = raw._replace(features=sp.csr_matrix(np.where(raw.features > 1.0, raw.features, 0)))
    p = datasets.prepare(raw, backend="segment")
    csr_mod.reset_kernel_counters()
    runs = entries_for([0, 1, 2], model_config=GCNConfig(layers=3, residual=True), config=TrainConfig(epochs=3))
    res = fit_runs(p.data, p.n_classes, runs, execution=Execution(backend="segment"))
    assert res.epochs_run.tolist() == [3, 3, 3]
    assert csr_mod.kernel_counters()["calls"] == csr_mod.kernel_counters()["dense_calls"] == 0
    fit_runs(p.data, p.n_classes, runs, execution=Execution())
    # "auto" is the backend the graph was prepared for (jaxgcn.plan): segment here, no kernel either
    assert csr_mod.kernel_counters()["calls"] == csr_mod.kernel_counters()["dense_calls"] == 0
    on_csr = datasets.prepare(raw)  # prepared for csr: the plan lets the kernel do the per-run products
    fit_runs(on_csr.data, on_csr.n_classes, runs, execution=Execution())
    assert csr_mod.kernel_counters()["dense_calls"] > 0


# --- the diagonal (a graph's self-loops) inside the kernel ---------------------------------------

@pytest.mark.parametrize(("n", "runs", "h"), [(30, 1, 7), (3000, 1, 64), (200, 1, 33), (60, 3, 5)],
                         ids=["narrow", "threaded", "odd", "per-run-loop"])
def test_diagonal_equals_scipy_with_gradients(n, runs, h):
    # runs > 1 with h % 16 != 0: per-run values, summed in the loop rather than in registers (and
    # no longer symmetric, so the gradient takes the transposed pattern)
    rng = np.random.default_rng(n)
    a = random_matrix(n, n, 0.02 if n > 100 else 0.1, n)
    m = csr_from_scipy(a + a.T, check_symmetric=runs == 1)
    assert m.symmetric == (runs == 1)
    d = rng.random(n).astype(np.float32)
    values = (m.data[:, None] * (rng.random((m.nse, runs)) < (0.7 if runs > 1 else 1.0))).astype(np.float32)
    b = jnp.asarray(rng.standard_normal((n, runs * h)), jnp.float32)
    dense = [sp.csr_matrix((values[:, r].astype(np.float64), m.cols, m.indptr), shape=(n, n)).toarray()
             for r in range(runs)]
    want_out = np.concatenate([(dense[r] + np.diag(d)) @ np.asarray(b[:, r * h:(r + 1) * h], np.float64)
                               for r in range(runs)], axis=1)
    vals = None if runs == 1 else jnp.asarray(values)  # one run: a's own (symmetric) values
    rows = (rng.random((n, 1)) < 0.1).astype(np.float32)  # a masked loss: the gradient skips zero rows

    @jax.jit  # the product and its gradients: one compile, not one per op
    def product_and_grads(b, d):
        grads = jax.grad(lambda b, d: jnp.sum(rows * jnp.sin(spmm(m, b, vals, diag=d))), (0, 1))(b, d)
        return spmm(m, b, vals, diag=d), grads

    got_out, (got_b, got_d) = product_and_grads(b, jnp.asarray(d))
    np.testing.assert_allclose(np.asarray(got_out), want_out, rtol=1e-4, atol=1e-4)

    def dense_product(b, d):
        return jnp.concatenate([jnp.asarray(dense[r], jnp.float32) @ b[:, r * h:(r + 1) * h] for r in range(runs)],
                               axis=1) + d[:, None] * b

    want_b, want_d = jax.jit(jax.grad(lambda b, d: jnp.sum(rows * jnp.sin(dense_product(b, d))), (0, 1)))(
        b, jnp.asarray(d))
    np.testing.assert_allclose(np.asarray(got_b), np.asarray(want_b), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(got_d), np.asarray(want_d), rtol=1e-4, atol=1e-4)


def test_diagonal_needs_a_square_matrix():
    m = csr_from_scipy(sp.random(5, 4, density=0.5, random_state=0, format="csr"))
    with pytest.raises(ValueError, match=r"diag has shape \(5,\); it needs a square matrix \(here \(5, 4\)\)"):
        spmm(m, jnp.ones((4, 2)), diag=jnp.ones(5))


# --- the pair product: training (per-run values) and evaluation (a's values) from one pass -------

@pytest.mark.parametrize(("n", "m", "runs", "h", "big"), [
    (60, 40, 3, 16, False), (60, 40, 3, 13, False), (3000, 2000, 2, 32, True), (3000, 2000, 4, 13, True),
    (60, 40, 1, 7, False), (3000, 6000, 1, 16, True)],
    ids=["blocked", "loop", "blocked-threaded", "loop-threaded", "narrow", "narrow-threaded"])
def test_spmm_pair_equals_scipy(n, m, runs, h, big):
    # big: b over 256 KiB (prefetched) and several row chunks; one run of width <= 16 in the narrow
    # rows, else blocked when h % 16 == 0, else the loop
    from jaxgcn.native.csr import spmm_pair

    a = csr_from_scipy(random_matrix(n, m, 0.2 if n < 100 else 0.01, n + h))
    rng = np.random.default_rng(h)
    values = a.data[:, None] * (rng.random((a.nse, runs)) < 0.5) / 0.5  # a dropout of a's values per run
    b = rng.standard_normal((m, runs * h)).astype(np.float32)
    csr_mod.reset_kernel_counters()
    train, evaluation = spmm_pair(a, jnp.asarray(b), jnp.asarray(values))
    counters = csr_mod.kernel_counters()
    for r in range(runs):
        a_r = sp.csr_matrix((values[:, r].astype(np.float64), a.cols, a.indptr), shape=a.shape)
        cols = slice(r * h, (r + 1) * h)
        np.testing.assert_allclose(np.asarray(train)[:, cols], a_r @ b[:, cols].astype(np.float64), rtol=1e-4,
                                   atol=1e-4)
    a_own = sp.csr_matrix((a.data.astype(np.float64), a.cols, a.indptr), shape=a.shape)
    np.testing.assert_allclose(np.asarray(evaluation), a_own @ b.astype(np.float64), rtol=1e-4, atol=1e-4)
    path = "narrow" if runs == 1 and h <= 16 else "scalar" if h % 16 else "blocked"
    assert _regime(counters, n) == {"prefetch": big, "chunks": big, "path": path}
    assert counters["pair_calls"] == 1


@pytest.mark.parametrize("symmetric", [False, True])
def test_spmm_given_has_the_gradients_of_spmm(symmetric):
    from jaxgcn.native.csr import spmm_given, spmm_pair

    a = random_matrix(40, 40, 0.15, 12)
    a = csr_from_scipy(a + a.T if symmetric else a, check_symmetric=True)
    assert a.symmetric == symmetric
    rng = np.random.default_rng(13)
    values = jnp.asarray(a.data[:, None] * (rng.random((a.nse, 3)) < 0.7) / 0.7, jnp.float32)
    b = jnp.asarray(rng.standard_normal((40, 15)), jnp.float32)
    g = jnp.asarray(rng.standard_normal((40, 15)) * (rng.random((40, 1)) < 0.3), jnp.float32)  # a masked loss

    def loss(out):
        return jnp.sum(jnp.sin(out) * g)

    if symmetric:  # a symmetric pattern takes a's own values only (per-entry ones are refused)
        product = spmm(a, b)
        given = jax.grad(lambda b: loss(spmm_given(a, b, None, product)))(b)
        np.testing.assert_allclose(np.asarray(given), np.asarray(jax.grad(lambda b: loss(spmm(a, b)))(b)),
                                   rtol=1e-5, atol=1e-5)
        return
    product = spmm_pair(a, b, values)[0]  # as the step before computes it
    np.testing.assert_allclose(np.asarray(product), np.asarray(spmm(a, b, values)), rtol=1e-6, atol=1e-6)
    given_grads = jax.jit(jax.grad(lambda b, v: loss(spmm_given(a, b, v, product)), (0, 1)))(b, values)
    spmm_grads = jax.jit(jax.grad(lambda b, v: loss(spmm(a, b, v)), (0, 1)))(b, values)
    for got, want in zip(given_grads, spmm_grads):
        assert got.shape == want.shape
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    assert float(jnp.abs(given_grads[1]).sum()) > 0  # the values' gradient is not trivially zero


def test_values_on_a_symmetric_pattern_are_refused():
    """A symmetric CSR keeps no transposed pattern: its gradient reuses the matrix, which is wrong for
    per-entry values that are not symmetric, so such values are refused instead of differentiated."""
    a = random_matrix(6, 6, 0.5, 1)
    m = csr_from_scipy(a + a.T, check_symmetric=True)
    assert m.symmetric
    with pytest.raises(ValueError, match=r"spmm: values replacing a's entries need a's transposed pattern .*"
                                         r"check_symmetric=False"):
        spmm(m, jnp.ones((6, 2)), jnp.ones((m.nse, 1)))
    plain = csr_from_scipy(a + a.T)  # the same matrix with its transpose: per-run values are fine
    np.testing.assert_allclose(spmm(plain, jnp.ones((6, 2)), jnp.ones((plain.nse, 2))), (a + a.T).astype(bool) @
                               np.ones((6, 2)), rtol=1e-6)


@pytest.mark.parametrize("runs", [1, 3])
def test_the_hidden_dropout_kernel_keeps_the_hashed_masks(runs):
    """``models._drop_hidden`` on the kernel (``fused.hash_dropout``) keeps exactly the elements the
    XLA hash keeps, each run with its own keys, rate and width (counter ``i * hidden_r + j``), and
    scales them alike; its gradient is the same dropout of the incoming gradient."""
    from jaxgcn.core.models import Execution, _drop_hidden, make_run_inputs
    from jaxgcn.plan import concrete

    rng = np.random.default_rng(2)
    n, width = 37, 19  # widths past one 16-lane vector; run 1 narrower than the padded width
    h = jnp.asarray(rng.uniform(0.5, 1.5, (n, runs, width)), jnp.float32)  # no zeros: a zero is a dropped element
    run_inputs = make_run_inputs(dropout=[0.5, 0.2, 0.7][:runs], hidden=[19, 11, 19][:runs])
    keys = jax.random.split(jax.random.key(5), runs)
    on, off = (concrete(Execution(backend="csr", kernels=k)) for k in (True, False))  # the plan decides
    csr_mod.reset_kernel_counters()
    got = np.asarray(jax.jit(lambda h: _drop_hidden(on, h, keys, run_inputs))(h))
    assert csr_mod.kernel_counters()["dropout_calls"] == 1
    want = np.asarray(jax.jit(lambda h: _drop_hidden(off, h, keys, run_inputs))(h))
    np.testing.assert_array_equal(got == 0, want == 0)  # the same masks
    assert 0.2 < float(np.mean(got == 0)) < 0.8
    np.testing.assert_allclose(got, want, rtol=1e-6)
    for r, rate in enumerate([0.5, 0.2, 0.7][:runs]):  # kept: h * (1 / (1 - rate)), in float32
        kept = got[:, r] != 0
        inverse = np.float32(1) / np.float32(1 - rate)
        np.testing.assert_array_equal(got[:, r][kept], np.asarray(h)[:, r][kept] * inverse)
    w = jnp.asarray(rng.standard_normal(h.shape), jnp.float32)
    grad = jax.jit(jax.grad(lambda h: jnp.sum(w * _drop_hidden(on, h, keys, run_inputs))))(h)
    dropped_w = jax.jit(lambda w: _drop_hidden(on, w, keys, run_inputs))(w)
    np.testing.assert_array_equal(np.asarray(grad), np.asarray(dropped_w))


def test_the_hidden_dropout_kernel_applies_relu_with_its_gradient():
    """With ``relu`` the kernel drops ``relu(h)``: the elements and gradients of relu then dropout
    computed by XLA, from one pass and its kept mask; a NaN stays NaN where kept (a diverging run
    must still be seen diverging)."""
    from jaxgcn.core.models import Execution, _drop_hidden, make_run_inputs
    from jaxgcn.plan import concrete

    rng = np.random.default_rng(3)
    h = jnp.asarray(rng.standard_normal((41, 2, 16)), jnp.float32).at[0, 0, :].set(jnp.nan)
    run_inputs = make_run_inputs(dropout=[0.5, 0.3], hidden=[16, 16])
    keys = jax.random.split(jax.random.key(8), 2)
    on, off = (concrete(Execution(backend="csr", kernels=k)) for k in (True, False))  # the plan decides
    got, want = (np.asarray(jax.jit(lambda h, e=e: _drop_hidden(e, h, keys, run_inputs, relu=True))(h))
                 for e in (on, off))
    np.testing.assert_allclose(got, want, rtol=1e-6)  # NaN where XLA has NaN
    assert np.isnan(got[0, 0]).any() and (got[1:] >= 0).all() and (got[1:] == 0).mean() > 0.6  # relu, then ~half
    w = jnp.asarray(rng.standard_normal(h.shape), jnp.float32)
    finite = jnp.nan_to_num(h, nan=1.0)
    grads = [np.asarray(jax.jit(jax.grad(lambda h, e=e: jnp.sum(w * _drop_hidden(e, h, keys, run_inputs, relu=True))))(
                 finite))
             for e in (on, off)]
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-6)
    assert (grads[0][np.asarray(finite) <= 0] == 0).all()
