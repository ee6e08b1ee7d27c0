"""The training loop's last layer at the focus nodes only (jaxgcn.graph.focus_rows, jaxgcn.csr.spmm_rows)
against the square product over every row, and training with it against training without it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

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
    return datasets.prepare(datasets.synthetic(400, n_classes=4, n_features=16, homophily=0.5, signal=0.3, seed=1))


@pytest.mark.parametrize("runs", [1, 3])
def test_training_on_the_focus_rows_equals_training_on_every_row(prepared, runs, monkeypatch):
    """The loop's logits at the focus nodes only give the same runs, bit for bit, as the logits of
    every node followed by the focus gather (the rows built or not)."""
    config = TrainConfig(epochs=60, lr=0.1, early_stopping=Kipf(5))
    model = GCNConfig(hidden=16)
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

    history, params = train()
    assert calls  # traced: the last layer took the focus rows
    monkeypatch.setattr(data_mod, "focus_rows", lambda *a: None)  # not built: every row, then the gather
    calls.clear()
    every_history, every_params = train()
    assert not calls
    assert history.keys() == every_history.keys()
    for name in history:
        assert np.asarray(history[name]).tobytes() == np.asarray(every_history[name]).tobytes(), name
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(every_params)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
