"""The training loop's last layer at the focus nodes only (jaxgcn.graph.focus_rows, jaxgcn.csr.spmm_rows)
against the square product over every row, and training with it against training without it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import jaxgcn.csr as csr_mod
import jaxgcn.data as data_mod
from jaxgcn import datasets
from jaxgcn.batched import entries_for, fit_runs
from jaxgcn.csr import spmm, spmm_rows
from jaxgcn.data import with_focus
from jaxgcn.graph import focus_rows, from_edges, gcn_norm, with_csr
from jaxgcn.models import Execution, GCNConfig
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


def test_focus_rows_need_the_csr_and_rows_need_their_transposed_pattern():
    g = graph("sym")
    with pytest.raises(ValueError, match="focus_rows needs the graph's CSR: attach it with with_csr"):
        focus_rows(g._replace(csr=None), np.array([1]))
    with pytest.raises(ValueError, match="spmm_rows: the rows need their transposed pattern"):
        spmm_rows(g.csr, jnp.ones((60, 2)))


def test_the_focus_rows_are_built_for_a_small_focus_only():
    p = datasets.prepare(datasets.synthetic(300, n_classes=3, n_features=8, seed=0))
    small = with_focus(p.data)
    assert small.focus.shape == (small.focus_rows.shape[0],) and small.focus_rows.shape == (small.focus.shape[0], 300)
    everyone = jnp.ones_like(p.data.train_mask)
    assert with_focus(p.data._replace(train_mask=everyone)).focus_rows is None  # every node: no copy


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
        cut = with_focus(data, hops).x_reached
        x = data.x
        assert np.array_equal(cut.indptr, x.indptr) and np.array_equal(cut.cols, x.cols)
        t_rows, t_perm, t_indptr = (np.asarray(v) for v in (x.t_rows, x.t_perm, x.t_indptr))
        keep = reached[t_rows]  # the transposed entries of reached rows, in their order
        assert keep.sum() < x.nse
        assert np.array_equal(np.asarray(cut.t_rows), t_rows[keep])
        assert np.array_equal(np.asarray(cut.t_perm), t_perm[keep])
        per_column = np.add.reduceat(np.append(keep, False).astype(int), t_indptr[:-1]) * (np.diff(t_indptr) > 0)
        assert np.array_equal(np.diff(np.asarray(cut.t_indptr)), per_column)
    assert with_focus(data).x_reached is None  # no hops given: no cut


@pytest.mark.parametrize(("layers", "runs", "hidden"), [(2, 1, 32), (2, 3, 16), (3, 3, 16)])
def test_training_on_the_focus_rows_equals_training_on_every_row(prepared, layers, runs, hidden, monkeypatch):
    """The loop's logits at the focus nodes only, and the first layer's gradient over the reached
    rows only, give the same runs, bit for bit, as the logits of every node followed by the focus
    gather and the gradient over every row (each one built or not). One run 32 wide: its first
    layer's gradient takes the transposed pattern (16 wide and less, the scatter of g's rows)."""
    config = TrainConfig(epochs=60, lr=0.1, early_stopping=Kipf(5))
    model = GCNConfig(hidden=hidden, layers=layers)
    assert with_focus(prepared.data, layers).x_reached is not None
    calls = []
    real = csr_mod.spmm_rows
    monkeypatch.setattr("jaxgcn.models.spmm_rows", lambda *a: calls.append(1) or real(*a))

    def train():
        if runs == 1:
            res = fit(prepared.data, prepared.n_classes, model_config=model, config=config, execution=EXEC,
                      key=jax.random.key(3), log=None)
            return res.history, res.params
        res = fit_runs(prepared.data, prepared.n_classes, entries_for([3, 1, 2], model_config=model, config=config),
                       execution=EXEC)
        return res.history, res.params

    both = train()
    assert calls  # traced: the last layer took the focus rows
    monkeypatch.setattr(data_mod, "_reached_features", lambda *a: None)  # every row's gradient
    every_reached = train()
    monkeypatch.setattr(data_mod, "focus_rows", lambda *a: None)  # and every row's logits, then the gather
    calls.clear()
    neither = train()
    assert not calls
    for (history, params) in (every_reached, neither):
        assert history.keys() == both[0].keys()
        for name in history:
            assert np.asarray(history[name]).tobytes() == np.asarray(both[0][name]).tobytes(), name
        for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(both[1])):
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_the_cut_features_refuse_a_second_order_gradient(prepared):
    # the cut transposed pattern is exact for a gradient zero off the reached rows; differentiating
    # that product again would need the rows it dropped
    cut = with_focus(prepared.data, 2).x_reached
    vals, w = jnp.ones((cut.nse, 2)), jnp.ones((cut.shape[1], 32))

    def loss(w):
        return jnp.sum(spmm(cut, w, vals) ** 2)

    assert np.all(np.isfinite(np.asarray(jax.grad(loss)(w))))
    with pytest.raises(NotImplementedError, match="cut to some rows has no second-order gradient"):
        jax.grad(lambda w: jnp.sum(jax.grad(loss)(w) ** 2))(w)
