"""The training loop's last layer at the focus nodes only (jaxgcn.core.graph.focus_rows, jaxgcn.native.csr.spmm_rows)
against the square product over every row, and training with it against training without it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import jaxgcn.native.csr as csr_mod
import jaxgcn.core.native_ops as native_mod
from jaxgcn import datasets, plan
from jaxgcn.batched import entries_for, fit_runs
from jaxgcn.native.csr import spmm, spmm_rows
from jaxgcn.core.data import with_focus
from jaxgcn.core.graph import focus_rows, from_edges, gcn_norm, with_csr
from jaxgcn.core.models import Execution, GCNConfig, _drop_hidden, make_run_inputs
from jaxgcn.core.native_ops import prepare, row_plan
from jaxgcn.train import TrainConfig, fit
from jaxgcn.training.config import Kipf

EXEC = Execution(backend="csr")


def graph(norm):
    """A random graph of 60 nodes with isolated nodes (their self-loop alone), normalized by ``norm``:
    ``sym`` leaves Â symmetric (no transposed copy), ``row`` does not."""
    rng = np.random.default_rng(0)
    senders, receivers = rng.integers(0, 50, 240), rng.integers(0, 50, 240)  # nodes 50-59 isolated
    g = with_csr(gcn_norm(from_edges(senders, receivers, n_nodes=60)[0], norm))
    assert g.csr.symmetric == (norm == "sym")
    return g


@pytest.mark.parametrize("width", [7, 112], ids=["one-run", "16-runs"])
@pytest.mark.parametrize("norm", ["sym", "row"])
def test_the_focus_rows_are_the_square_products_rows_bit_for_bit(norm, width):
    # the product and its gradient: each row sums its entries in the square product's order, the
    # self-loop last; the one-run gradient of the square product is the scatter of g's live rows
    g = graph(norm)
    rows = np.array([0, 3, 4, 17, 31, 49, 52, 59])
    sub = jax.tree.map(jnp.asarray, focus_rows(g, rows))
    assert sub.shape == (rows.size, 60)
    rng = np.random.default_rng(width)
    b = jnp.asarray(rng.standard_normal((60, width)), jnp.float32)
    diag = jnp.asarray(g.self_weights)

    def square(b):
        return spmm(g.csr, b, diag=diag)[rows]

    def part(b):
        return spmm_rows(sub, b)

    assert np.asarray(part(b)).tobytes() == np.asarray(square(b)).tobytes()
    dense = np.zeros((60, 60))
    np.add.at(dense, (np.repeat(np.arange(60), np.diff(g.csr.indptr)), g.csr.cols), g.csr.data)
    dense += np.diag(g.self_weights)
    np.testing.assert_allclose(np.asarray(part(b)), (dense @ np.asarray(b, np.float64))[rows], rtol=1e-5,
                               atol=1e-6)
    ct = rng.standard_normal((rows.size, width)).astype(np.float32)
    ct[[1, 5]] = 0.0
    ct[2] = -0.0  # a masked loss's zero rows, -0.0 among them
    ct = jnp.asarray(ct)
    want = jax.vjp(square, b)[1](ct)[0]
    got = jax.vjp(part, b)[1](ct)[0]
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
    np.testing.assert_allclose(np.asarray(got), dense[rows].T @ np.asarray(ct, np.float64), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("width", [7, 112], ids=["one-run", "16-runs"])
@pytest.mark.parametrize("norm", ["sym", "row"])
def test_rows_over_some_columns_are_the_square_products_rows_bit_for_bit(norm, width):
    # a layer above the first: its input holds the rows of `cols` only (every column of `rows`
    # among them), its gradient lands on those rows; both as the square product's, bit for bit
    g = graph(norm)
    rows = np.array([0, 3, 4, 17, 52, 59])
    pattern = dense_matrix(g) != 0
    cols = np.flatnonzero(pattern[rows].any(axis=0) | (np.arange(60) == 9))  # and a column no row reads
    sub = jax.tree.map(jnp.asarray, focus_rows(g, rows, cols))
    assert sub.shape == (rows.size, cols.size) and cols.size < 60
    rng = np.random.default_rng(width)
    b = jnp.asarray(rng.standard_normal((60, width)), jnp.float32)
    diag = jnp.asarray(g.self_weights)
    square = spmm(g.csr, b, diag=diag)[rows]
    assert np.asarray(spmm_rows(sub, b[cols])).tobytes() == np.asarray(square).tobytes()
    ct = rng.standard_normal((rows.size, width)).astype(np.float32)
    ct[1] = -0.0
    want = jax.vjp(lambda b: spmm(g.csr, b, diag=diag)[rows], b)[1](jnp.asarray(ct))[0]
    got = jax.vjp(lambda c: spmm_rows(sub, c), b[cols])[1](jnp.asarray(ct))[0]
    assert np.asarray(got).tobytes() == np.asarray(want)[cols].tobytes()
    assert not np.asarray(want)[np.setdiff1d(np.arange(60), cols)].any()  # nothing lands off cols
    with pytest.raises(ValueError, match=r"focus_rows: node \d+, a column of the rows, is not among cols"):
        focus_rows(g, rows, cols[1:])


def dense_matrix(g):
    """Â of ``g`` as a dense float64 array (its CSR plus the self-loops)."""
    dense = np.zeros((g.n_nodes, g.n_nodes))
    np.add.at(dense, (np.repeat(np.arange(g.n_nodes), np.diff(g.csr.indptr)), g.csr.cols), g.csr.data)
    return dense + np.diag(g.self_weights)


def test_the_row_plan_holds_the_rows_each_layer_needs():
    rng = np.random.default_rng(1)
    g = with_csr(gcn_norm(from_edges(rng.integers(0, 60, 50), rng.integers(0, 60, 50), n_nodes=60)[0], "row"))
    pattern = dense_matrix(g) != 0
    nodes = np.array([2, 11, 30, 55])
    plan = row_plan(g, nodes, 3)
    needed = [nodes]  # the output rows of the last layer, then of each layer below it
    for _ in range(2):
        needed.append(np.flatnonzero(pattern[needed[-1]].any(axis=0)))
    outs = needed[::-1]
    assert outs[0].size <= 45 and np.array_equal(plan.nodes, nodes) and plan.ids[0] is None
    for layer in range(3):
        ins = None if layer == 0 else outs[layer - 1]
        assert plan.mats[layer].shape == (outs[layer].size, 60 if ins is None else ins.size)
        if layer:
            assert np.array_equal(plan.ids[layer], ins)
            assert np.array_equal(ins[plan.pos[layer]], outs[layer])
        want = dense_matrix(g)[outs[layer]][:, ins] if ins is not None else dense_matrix(g)[outs[layer]]
        got = sp.csr_matrix((plan.mats[layer].data, plan.mats[layer].cols, plan.mats[layer].indptr),
                            shape=want.shape).toarray()
        np.testing.assert_array_equal(got, want.astype(np.float32))
    # past `most` of the nodes, a layer computes every row, and so do the layers below it
    cut = row_plan(g, nodes, 3, most=outs[0].size / 60 - 1e-9)
    assert cut.mats[0] is None and cut.ids[1] is None and cut.mats[1].shape == (outs[1].size, 60)
    assert np.array_equal(cut.pos[1], outs[1]) and cut.pos[0] is None
    assert row_plan(g, np.arange(31), 2) is None and row_plan(g, nodes, 1) is None


@pytest.mark.parametrize("kernels", [True, False], ids=["kernel", "xla"])
def test_hidden_dropout_of_some_rows_draws_each_nodes_own_mask(kernels):
    # a layer holding some nodes' rows drops each row with that node's mask: the full pass's rows
    if kernels and not csr_mod.kernel_status()[0]:
        pytest.skip("the kernel does not build here")
    rng = np.random.default_rng(4)
    h = jnp.asarray(rng.uniform(0.5, 1.5, (50, 3, 19)), jnp.float32)
    runs = make_run_inputs(dropout=[0.5, 0.2, 0.7], hidden=[19, 11, 19])
    keys = jax.random.split(jax.random.key(6), 3)
    ids = np.array([1, 7, 8, 20, 49])
    ex = plan.concrete(Execution(backend="csr", kernels=kernels))  # the plan decides the ops
    full = np.asarray(_drop_hidden(ex, h, keys, runs, relu=True))
    some = np.asarray(_drop_hidden(ex, h[ids], keys, runs, relu=True, ids=jnp.asarray(ids, jnp.int32)))
    assert some.tobytes() == full[ids].tobytes()
    assert 0.2 < float(np.mean(some == 0)) < 0.8


def test_focus_rows_need_the_csr_and_rows_need_their_transposed_pattern():
    g = graph("sym")
    with pytest.raises(ValueError, match="focus_rows needs the graph's CSR: attach it with with_csr"):
        focus_rows(g._replace(csr=None), np.array([1]))
    with pytest.raises(ValueError, match="spmm_rows: the rows need their transposed pattern"):
        spmm_rows(g.csr, jnp.ones((60, 2)))


def test_the_row_plans_are_built_for_a_small_focus_only():
    # the kernel's row plans read its CSR (a CPU's; an accelerator's plan refuses csr: reported skipped)
    p = datasets.prepare(datasets.synthetic(300, n_classes=3, n_features=8, seed=0), backend="csr")
    small = with_focus(p.data, 2, prepare)
    plan = small.aux.eval_rows
    assert np.array_equal(plan.nodes, small.focus) and plan.mats[1].shape[0] == small.focus.shape[0]
    assert with_focus(p.data, prepare=prepare).aux.eval_rows is None  # no layers given: no plan
    everyone = jnp.ones_like(p.data.train_mask)
    assert with_focus(p.data._replace(train_mask=everyone), 2, prepare).aux.eval_rows is None  # every node: no copy


def test_the_row_plans_serve_the_kernels_hash_dropout_only():
    # jax.random draws a layer's masks by row, not node id: some rows would get other masks
    from jaxgcn.training.config import TrainConfig as Config
    from jaxgcn.training.step import LOCAL, Step

    data = with_focus(datasets.prepare(datasets.synthetic(300, n_classes=3, n_features=8, seed=0)).data, 2, prepare)
    step = Step(GCNConfig(), Config(), Execution(backend="csr", kernels=True), None, LOCAL)
    assert step.rows(data, train=True) is data.aux.train_rows and step.rows(data, train=False) is data.aux.eval_rows
    for execution in (Execution(backend="csr", kernels=True, dropout_rng="jax"), Execution(backend="csr"),
                      Execution(backend="segment", kernels=True)):
        assert step._replace(execution=execution).rows(data, train=True) is None, execution
    assert step._replace(model_config=GCNConfig(layers=1)).rows(data, train=True) is None


@pytest.fixture(scope="module")
def prepared():
    """A sparse graph (average degree 2, 5 training nodes per class) with CSR features: a training
    loss's gradient reaches well under 3/4 of the nodes within 3 propagations."""
    raw = datasets.synthetic(600, n_classes=4, n_features=16, avg_degree=2.0, homophily=0.6, signal=0.4,
                             train_per_class=5, seed=1)
    dense = np.asarray(raw.features)
    raw = raw._replace(features=sp.csr_matrix(np.where(np.abs(dense) > 0.8, dense, 0.0).astype(np.float32)))
    return datasets.prepare(raw, backend="csr")


def test_the_reached_features_cut_only_rows_the_gradient_never_reaches(prepared):
    data = prepared.data
    g = data.graph.csr
    pattern = sp.csr_matrix((np.ones(g.cols.shape[0]), np.asarray(g.cols), np.asarray(g.indptr)), shape=(600, 600))
    for hops in (1, 2, 3):
        reached = np.asarray(data.train_mask) != 0
        for _ in range(hops):  # Â's pattern transposed, its self-loops included
            reached = reached | (pattern.T @ reached.astype(float) > 0)
        cut = with_focus(data, hops, prepare).aux.x_reached
        x = data.x
        assert np.array_equal(cut.indptr, x.indptr) and np.array_equal(cut.cols, x.cols)
        t_rows, t_perm, t_indptr = (np.asarray(v) for v in (x.t_rows, x.t_perm, x.t_indptr))
        keep = reached[t_rows]  # the transposed entries of reached rows, in their order
        assert keep.sum() < x.nse
        assert np.array_equal(np.asarray(cut.t_rows), t_rows[keep])
        assert np.array_equal(np.asarray(cut.t_perm), t_perm[keep])
        per_column = np.add.reduceat(np.append(keep, False).astype(int), t_indptr[:-1]) * (np.diff(t_indptr) > 0)
        assert np.array_equal(np.diff(np.asarray(cut.t_indptr)), per_column)
    assert with_focus(data, prepare=prepare).aux.x_reached is None  # no hops given: no cut


@pytest.mark.parametrize(("layers", "runs", "hidden", "variant"),
                         [(2, 1, 32, ""), (2, 3, 16, ""), (3, 3, 16, "residual"), (2, 3, 16, "layer-norm"),
                          (2, 1, 16, "aggregate-first")])
def test_training_on_the_focus_rows_equals_training_on_every_row(prepared, layers, runs, hidden, variant,
                                                                 monkeypatch):
    """Each layer at the rows the logits read need only (jaxgcn.core.native_ops.row_plan: the training
    nodes' in a training step, the focus nodes' in an evaluation), and the first layer's gradient
    over the reached rows only, give the same runs, bit for bit, as every layer at every row
    followed by the focus gather and the gradient over every row (each one built or not). One run
    32 wide: its first layer's gradient takes the transposed pattern (16 wide and less, the
    scatter of g's rows). ``residual`` takes the rows of a layer's input it adds; ``aggregate-first``
    (dense features) the rows of the input aggregated ahead. ``layer-norm`` (and residual): XLA
    blocks the norm's row sums by the rows' count, so the runs agree to float rounding only.

    Several runs agree to float rounding only as well: their step sums [rows, R, width] arrays in
    XLA's CPU runtime, whose order follows the CPU it runs on (its vector width) and the rows'
    count. On AVX-512 CPUs they came out bit for bit; on AVX2-only CPUs (a Zen 3 EPYC, and a
    13-core AVX2 host with the kernel built portable and XLA's code limited to SSE4.2, so the
    order is the runtime's, not the kernel's or the generated code's) 18 of 180 (run, epoch)
    losses differed by one ulp (at most 2.4e-7) from the first epoch on. One run's products are
    the kernel's, whose sums go in row order on every ISA, and one run is bit for bit on both
    CPUs: asserted so."""
    config = TrainConfig(epochs=60, lr=0.1, early_stopping=Kipf(5))
    model = GCNConfig(hidden=hidden, layers=layers, residual=variant in ("residual", "layer-norm"),
                      layer_norm=variant == "layer-norm")
    data, execution = prepared.data, EXEC
    if variant == "aggregate-first":
        x = data.x
        dense = sp.csr_matrix((np.asarray(x.data), np.asarray(x.cols), np.asarray(x.indptr)), shape=x.shape).toarray()
        data, execution = data._replace(x=jnp.asarray(dense)), Execution(backend="csr", aggregate_first=True)
    else:
        assert with_focus(data, layers, prepare).aux.x_reached is not None
    focused = with_focus(data, layers, prepare)
    aux = focused.aux
    assert all(m is not None for m in aux.train_rows.mats) and aux.train_rows.nodes.size < focused.focus.size
    # every layer's product into its rows (an aggregated first layer's: of its input; an evaluation's: once)
    products = sum(m is not None for p in (aux.train_rows, aux.eval_rows) for m in p.mats)
    calls = []
    real = csr_mod.spmm_rows
    monkeypatch.setattr("jaxgcn.core.models.spmm_rows", lambda *a: calls.append(1) or real(*a))

    def train():
        if runs == 1:
            res = fit(data, prepared.n_classes, model_config=model, config=config, execution=execution,
                      key=jax.random.key(3), log=None)
            return res.history, res.params
        res = fit_runs(data, prepared.n_classes, entries_for([3, 1, 2], model_config=model, config=config),
                       execution=execution)
        return res.history, res.params

    both = train()
    assert len(calls) >= products  # traced: the layers of a step and of an evaluation took their rows
    monkeypatch.setattr(native_mod, "_reached_features", lambda *a: None)  # every row's gradient
    every_reached = train()
    monkeypatch.setattr(native_mod, "row_plan", lambda *a: None)  # and every row's logits, then the gather
    calls.clear()
    neither = train()
    assert not calls
    for (history, params) in (every_reached, neither):
        assert history.keys() == both[0].keys()
        if variant == "layer-norm" or runs > 1:  # the order of the row sums differs (see above)
            for name in history:
                np.testing.assert_allclose(history[name], both[0][name], rtol=1e-5, atol=1e-6, err_msg=name)
            for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(both[1])):
                np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
            continue
        for name in history:
            assert np.asarray(history[name]).tobytes() == np.asarray(both[0][name]).tobytes(), name
        for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(both[1])):
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_the_cut_features_refuse_a_second_order_gradient(prepared):
    # the cut transposed pattern is exact for a gradient zero off the reached rows; differentiating
    # that product again would need the rows it dropped
    cut = with_focus(prepared.data, 2, prepare).aux.x_reached
    vals, w = jnp.ones((cut.nse, 2)), jnp.ones((cut.shape[1], 32))

    def loss(w):
        return jnp.sum(spmm(cut, w, vals) ** 2)

    assert np.all(np.isfinite(np.asarray(jax.grad(loss)(w))))
    with pytest.raises(NotImplementedError, match="cut to some rows has no second-order gradient"):
        jax.grad(lambda w: jnp.sum(jax.grad(loss)(w) ** 2))(w)
