"""The ``lists`` layout of sparse input features (:mod:`jaxgcn.core.feature_lists`): the first layer's
per-run product and its weight gradient as gathers over X's padded rows and columns, equal to the dense
formula, with the same dropout masks as the BCOO layout (so a run on it equals that run on BCOO)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

from jaxgcn.core import feature_lists
from jaxgcn.core.feature_lists import FeatureLists, from_scipy, matmul_runs
from jaxgcn.core.layers import dropout, is_sparse, matmul, sparse_features


def features(n: int, f: int, density: float, seed: int) -> sp.csr_matrix:
    """A random sparse [n, f] matrix with an empty row and an unused column (padding both ways)."""
    rng = np.random.default_rng(seed)
    dense = np.where(rng.random((n, f)) < density, rng.normal(size=(n, f)), 0.0).astype(np.float32)
    dense[n // 2] = 0.0  # a node without features: reads the zero row
    dense[:, f // 3] = 0.0  # a feature no node has: its weight gradient is 0
    return sp.csr_matrix(dense)


def per_run_dense(x: sp.csr_matrix, values: np.ndarray) -> np.ndarray:
    """[R, n, f]: X with run r's values in place of its stored ones."""
    out = np.zeros((values.shape[1], *x.shape), np.float32)
    rows = np.repeat(np.arange(x.shape[0]), np.diff(x.indptr))
    out[:, rows, x.indices] = values.T
    return out


@pytest.mark.parametrize("n, f", [(40, 13), (9, 30)])  # fewer features than nodes, and more
@pytest.mark.parametrize("budget", [feature_lists.CHUNK_ELEMENTS, 37])  # whole buckets, and row chunks
def test_per_run_products_and_weight_gradients_equal_the_dense_formula(n, f, budget):
    x = features(n, f, 0.3, seed=n)
    lists = from_scipy(x)
    assert is_sparse(lists) and lists.shape == (n, f) and lists.nse == x.nnz
    values = np.random.default_rng(1).normal(size=(x.nnz, 3)).astype(np.float32)
    w = jax.random.normal(jax.random.key(0), (f, 3, 4))
    dense = per_run_dense(x, values)
    want = np.einsum("rnf,fro->nro", dense, np.asarray(w))
    c = jax.random.normal(jax.random.key(1), (n, 3, 4))

    @jax.jit  # the product, its weight gradient and the shared values' product: one compile, not one per op
    def products(lists, values, w):
        grad = jax.grad(lambda w: jnp.sum(c * matmul_runs(lists, values, w, budget=budget)))(w)
        return matmul_runs(lists, values, w, budget=budget), grad, matmul_runs(lists, None, w, budget=budget)

    got, grad, shared = products(lists, jnp.asarray(values), w)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    want_grad = np.einsum("rnf,nro->fro", dense, np.asarray(c))
    np.testing.assert_allclose(np.asarray(grad), want_grad, rtol=1e-5, atol=1e-5)
    assert not np.asarray(grad)[f // 3].any()  # the unused feature
    # evaluation: the stored values shared by every run
    np.testing.assert_allclose(np.asarray(shared), np.einsum("nf,fro->nro", x.toarray(), np.asarray(w)),
                               rtol=1e-5, atol=1e-5)


def test_the_product_and_its_gradient_have_no_scatter():
    from test_accelerator_plan import _scatters

    lists = from_scipy(features(30, 12, 0.3, seed=2))
    values = jnp.ones((lists.nse, 2), jnp.float32)
    loss = lambda w: jnp.sum(matmul_runs(lists, values, w) ** 2)  # noqa: E731
    jaxpr = jax.make_jaxpr(jax.grad(loss))(jnp.ones((12, 2, 3), jnp.float32)).jaxpr
    assert _scatters(jaxpr) == []
    bcoo = sparse_features(features(30, 12, 0.3, seed=2))
    from jaxgcn.core.ops import xla_matmul_runs

    bcoo_jaxpr = jax.make_jaxpr(jax.grad(lambda w: jnp.sum(xla_matmul_runs(bcoo, values, w) ** 2)))(
        jnp.ones((12, 2, 3), jnp.float32)).jaxpr
    assert _scatters(bcoo_jaxpr), "BCOO's product scatters: if not, the walk finds nothing"


def test_one_run_layer_functions_take_the_lists_and_drop_the_stored_values_as_bcoo_does():
    x = features(25, 10, 0.4, seed=3)
    lists, bcoo = from_scipy(x), sparse_features(x)
    key = jax.random.key(4)
    dropped = dropout(key, lists, 0.5, train=True)
    assert isinstance(dropped, FeatureLists)
    np.testing.assert_array_equal(np.asarray(dropped.data), np.asarray(dropout(key, bcoo, 0.5, train=True).data))
    w = jax.random.normal(key, (10, 6))
    want = np.asarray(matmul(dropout(key, bcoo, 0.5, train=True), w))
    np.testing.assert_allclose(np.asarray(matmul(dropped, w)), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(matmul(lists, w)), x.toarray() @ np.asarray(w), rtol=1e-5, atol=1e-5)


def test_a_batch_on_feature_lists_equals_it_on_bcoo():
    """The same masks (drawn over the stored entries in one order) and the same sums up to rounding:
    three seeds trained on the lists give the BCOO runs' epochs, accuracies and weights."""
    from jaxgcn import datasets
    from jaxgcn.batched import entries_for, fit_runs
    from jaxgcn.core.models import Execution
    from jaxgcn.train import Kipf, TrainConfig

    raw = datasets.synthetic(300, n_classes=4, n_features=24, homophily=0.5, signal=0.3, seed=1)
    dense = np.asarray(raw.features)
    raw = raw._replace(features=sp.csr_matrix(np.where(np.abs(dense) > 1.0, dense, 0.0).astype(np.float32)))
    prepared = datasets.prepare(raw, backend="segment")  # the CPU's BCOO features (an accelerator's: dense)
    host = sp.csr_matrix(np.asarray(prepared.data.x.todense() if is_sparse(prepared.data.x) else prepared.data.x))
    config = TrainConfig(epochs=40, lr=0.05, early_stopping=Kipf(5))
    entries, execution = entries_for([0, 1, 2], config=config), Execution(backend="segment")
    on_bcoo = fit_runs(prepared.data._replace(x=sparse_features(host)), prepared.n_classes, entries,
                       execution=execution)
    on_lists = fit_runs(prepared.data._replace(x=jax.device_put(from_scipy(host))), prepared.n_classes, entries,
                        execution=execution)
    np.testing.assert_array_equal(on_lists.epochs_run, on_bcoo.epochs_run)
    np.testing.assert_allclose(on_lists.metrics["test_acc"], on_bcoo.metrics["test_acc"], atol=1e-6)
    for got, want in zip(jax.tree.leaves(on_lists.params), jax.tree.leaves(on_bcoo.params)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)


def test_both_layouts_store_the_canonical_csr_of_a_matrix_with_duplicates_and_unsorted_rows():
    """A CSR given with row 0's columns unsorted and column 2 listed twice: the lists and the BCOO each
    hold its entries once, summed and row-sorted (feature_lists.sorted_csr), and the same values."""
    given = sp.csr_matrix((np.array([4.0, 1.0, 2.0, 3.0]), np.array([2, 0, 2, 1]), np.array([0, 3, 4])), shape=(2, 3))
    lists, bcoo = from_scipy(given), sparse_features(given)
    assert lists.nse == bcoo.nse == 3
    assert np.asarray(bcoo.indices).tolist() == [[0, 0], [0, 2], [1, 1]]
    assert np.asarray(lists.data).tolist() == np.asarray(bcoo.data).tolist() == [1.0, 6.0, 3.0]
    assert [c.tolist() for c in lists.rows.cols] == [[[1]], [[0, 2]]]  # row 1: one entry; row 0: two
    assert given.indptr.tolist() == [0, 3, 4] and given.indices.tolist() == [2, 0, 2, 1]  # the caller's, as given


@pytest.mark.parametrize("runs, out", [(3, 4), (130, 2)])  # runs across one lane tile, and across two
def test_the_pallas_runs_kernel_equals_the_xla_sums(runs, out):
    """The TPU's bucket sum (:func:`jaxgcn.core.pallas_gather.runs_sum`, interpreted here) against XLA's
    gather-sum: per-run values (the runs across the lanes) and shared ones (rows folded into 128 lanes),
    with padding slots (position 0) and rows of the last, padded block."""
    from jaxgcn.core import pallas_gather

    rng = np.random.default_rng(runs)
    table = jnp.asarray(rng.normal(size=(23, runs * out)), jnp.float32)
    cols, pos = rng.integers(0, 23, (37, 5)), rng.integers(1, 20, (37, 5))
    pos[::4, 3:] = 0  # padding slots: the values' zero row
    cols, pos = jnp.asarray(cols, jnp.int32), jnp.asarray(pos, jnp.int32)
    for r in (runs, 1):
        values = jnp.asarray(rng.normal(size=(20, r)), jnp.float32).at[0].set(0.0)
        want = feature_lists._runs_sum(values, table, cols, pos)
        got = pallas_gather.runs_sum(values, table, cols, pos, interpret=True)
        assert got.shape == want.shape == (37, runs * out)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_a_tpu_takes_the_kernel_for_the_lists_where_its_tables_fit_vmem(monkeypatch):
    """``tpu_matmul_runs`` (a TPU's ``matmul_runs``): the kernel's product and weight gradient equal the
    dense formula; where the tables would not fit VMEM, XLA's gathers (the same numbers)."""
    from jaxgcn.core import ops, pallas_gather

    x = features(40, 13, 0.3, seed=4)
    lists = from_scipy(x)
    values = np.random.default_rng(2).normal(size=(x.nnz, 3)).astype(np.float32)
    w, c = jax.random.normal(jax.random.key(0), (13, 3, 4)), jax.random.normal(jax.random.key(1), (40, 3, 4))
    dense = per_run_dense(x, values)
    calls = []
    kernel = pallas_gather.runs_sum
    monkeypatch.setattr(pallas_gather, "runs_sum", lambda *a: calls.append(a[1].shape) or kernel(*a))
    for fits in (True, False):
        monkeypatch.setattr(pallas_gather, "runs_kernel_fits", lambda *a, fits=fits: fits)
        calls.clear()
        # the product and its gradient in one program (traced once: the calls are recorded at tracing)
        got, grad = jax.jit(lambda w: (ops.tpu_matmul_runs(lists, jnp.asarray(values), w),
                                       jax.grad(lambda w: jnp.sum(c * ops.tpu_matmul_runs(lists, jnp.asarray(values),
                                                                                          w)))(w)))(w)
        np.testing.assert_allclose(np.asarray(got), np.einsum("rnf,fro->nro", dense, np.asarray(w)),
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(grad), np.einsum("rnf,nro->fro", dense, np.asarray(c)),
                                   rtol=1e-5, atol=1e-5)
        # forward over X's rows (the table: W, F rows), gradient over its columns (the table: c, n rows)
        assert ({13, 40} <= {shape[0] for shape in calls}) if fits else calls == []
    assert not pallas_gather.runs_kernel_fits(2_449_029, 1600, 100, 10**6)
