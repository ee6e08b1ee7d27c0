"""The scatter-free ``gather`` backend (jaxgcn.core.gather, issue 45): degree-bucketed neighbour lists.

Forward and gradient against the dense formula on graphs that reach each part of the layout (a
hub among degree-1 rows, empty rows, a directed row-normalized graph whose gradient needs the
transpose's lists), the row chunks against the unchunked product, no scatter in the lowered
programs, and a batch of runs against single runs.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxgcn import datasets, plan
from jaxgcn.batched import entries_for, fit_runs, unstack_params
from jaxgcn.core import gather
from jaxgcn.core.graph import from_edges, gcn_norm, to_dense, with_lists
from jaxgcn.core.models import Execution, GCNConfig
from jaxgcn.core.propagate import propagate
from jaxgcn.host.memory import GATHER_CHUNK_ELEMENTS, estimate
from jaxgcn.train import TrainConfig, fit
from jaxgcn.training.step import make_batch_runner


def _random(n=40, m=90, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, m), rng.integers(0, n, m)


def graph_of(kind: str):
    """A normalized host graph with its lists: ``random`` (symmetric), ``skewed`` (a hub of degree 60
    among degree-1 leaves, and rows of degree 2 and 3), ``isolated`` (10 of 40 nodes have no
    edge), ``directed`` (row-normalized, not symmetrized: the transpose differs; node 0 has no
    in-edge, so an empty row of A that is a full column)."""
    if kind == "random":
        g, _ = from_edges(*_random(), n_nodes=40)
    elif kind == "skewed":
        hub = np.zeros(60, np.int64)
        extra = np.array([[61, 62], [61, 63], [62, 63], [63, 64], [64, 65], [61, 65]])
        g, _ = from_edges(np.r_[hub, extra[:, 0]], np.r_[np.arange(1, 61), extra[:, 1]], n_nodes=66)
    elif kind == "isolated":
        s, r = _random(n=30, m=60, seed=1)
        g, _ = from_edges(s, r, n_nodes=40)
    else:
        s, r = _random(seed=2)
        keep = r != 0
        g, _ = from_edges(s[keep], r[keep], np.linspace(0.5, 2.0, int(keep.sum())), n_nodes=40, symmetrize=False)
        return with_lists(gcn_norm(g, "row"))
    return with_lists(gcn_norm(g, "sym"))


def features(n, width=3, seed=0):
    return jnp.asarray(np.random.default_rng(seed).normal(size=(n, width)).astype(np.float32))


def loss_of(g, backend, **kwargs):
    c = features(g.n_nodes, seed=9)

    def loss(x):
        y = propagate(g, x, backend=backend) if not kwargs else g.self_weights[:, None] * x + gather.propagate(
            g.lists, x, **kwargs)
        return jnp.sum(jnp.sin(y) * c)
    return loss


@pytest.mark.parametrize("kind", ["random", "skewed", "isolated", "directed"])
def test_forward_and_gradient_equal_the_dense_formula(kind):
    g = graph_of(kind)
    x, adj = features(g.n_nodes), jnp.asarray(to_dense(g))
    assert (g.lists.transpose is None) == (kind != "directed")  # only the directed graph keeps two
    want = adj @ x
    np.testing.assert_allclose(propagate(g, x, backend="gather"), want, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(jax.jit(lambda x: propagate(g, x, backend="gather"))(x), want, atol=1e-5, rtol=1e-5)
    c = features(g.n_nodes, seed=9)
    dense_grad = jax.grad(lambda x: jnp.sum(jnp.sin(adj @ x) * c))(x)
    np.testing.assert_allclose(jax.grad(loss_of(g, "gather"))(x), dense_grad, atol=1e-5, rtol=1e-5)
    if kind == "isolated":  # the empty rows' outputs are their self-loop terms only
        np.testing.assert_allclose(want[30:], x[30:], atol=1e-6)
        assert int(np.sum(np.asarray(g.lists.order) == sum(c.shape[0] for c in g.lists.cols))) == 10


def test_the_directed_gradient_differs_from_the_forward_lists():
    # the transpose's lists are really needed: A^T g differs from A g on this graph
    g = graph_of("directed")
    adj = to_dense(g)
    assert not np.allclose(adj, adj.T)
    x = features(g.n_nodes)
    assert not np.allclose(adj @ np.asarray(x), adj.T @ np.asarray(x), atol=1e-3)


def test_bucket_widths_are_the_powers_of_two_at_or_above_the_degree():
    np.testing.assert_array_equal(gather.bucket_width(np.array([0, 1, 2, 3, 4, 5, 8, 9, 20_000])),
                                  [0, 1, 2, 4, 4, 8, 8, 16, 32_768])
    g = graph_of("skewed")
    degree = np.bincount(np.asarray(g.receivers), minlength=g.n_nodes)
    assert [c.shape for c in g.lists.cols] == [(60, 1), (3, 2), (2, 4), (1, 64)]
    order = np.asarray(g.lists.order)
    starts = np.cumsum([0] + [c.shape[0] for c in g.lists.cols])
    for b, w in enumerate(g.lists.weights):  # each bucket holds its rows' entries, then zero-weight padding
        rows = np.flatnonzero((order >= starts[b]) & (order < starts[b + 1]))
        np.testing.assert_array_equal(np.count_nonzero(np.asarray(w), axis=1), degree[rows[np.argsort(order[rows])]])


def test_one_bucket_of_a_given_width_holds_every_row_both_ways():
    # width=K: the [n, K] lists a kernel takes whole (pallas_gather.propagate_symmetric); the transpose too
    g = graph_of("directed")
    lists = gather.build(g.senders, g.receivers, g.weights, g.n_nodes, width=16)
    for own in (lists, lists.transpose):
        assert [c.shape for c in own.cols] == [(40, 16)] and own.order.tolist() == list(range(40))
    assert not lists.weights[0][0].any()  # node 0 has no in-edge: a row of padding only, weight 0
    x, adj = features(g.n_nodes), jnp.asarray(to_dense(g))
    c = features(g.n_nodes, seed=9)
    prop = jax.tree.map(jnp.asarray, lists)
    grad = jax.grad(lambda x: jnp.sum(jnp.sin(g.self_weights[:, None] * x + gather.propagate(prop, x)) * c))(x)
    np.testing.assert_allclose(grad, jax.grad(lambda x: jnp.sum(jnp.sin(adj @ x) * c))(x), atol=1e-5, rtol=1e-5)


def test_int32_weights_keep_their_dtype_and_place_each_entry():
    # entry positions (1-based here: padding holds 0) as the weights: each lands beside its own column
    g = graph_of("skewed")
    send, recv = np.asarray(g.senders), np.asarray(g.receivers)
    indptr = np.r_[0, np.cumsum(np.bincount(recv, minlength=g.n_nodes))]
    lists = gather.csr_lists(indptr, send, np.arange(1, send.size + 1, dtype=np.int32), g.n_nodes)
    assert {w.dtype for w in lists.weights} == {np.dtype(np.int32)}
    pos = np.concatenate([w.ravel() for w in lists.weights])
    cols = np.concatenate([c.ravel() for c in lists.cols])
    np.testing.assert_array_equal(np.sort(pos[pos > 0]), np.arange(1, send.size + 1))
    np.testing.assert_array_equal(cols[pos > 0], send[pos[pos > 0] - 1])


def test_a_star_of_twenty_thousand_leaves():
    # skewed degrees as in ogbn-products: one row of 20,000 entries is one bucket of width 32,768
    n = 20_001
    lists = gather.build(np.r_[np.arange(1, n), np.zeros(n - 1, np.int64)], np.r_[np.zeros(n - 1, np.int64),
                         np.arange(1, n)], np.ones(2 * (n - 1), np.float32), n)
    assert [c.shape for c in lists.cols] == [(n - 1, 1), (1, 32_768)] and lists.transpose is None
    x = jnp.arange(n, dtype=jnp.float32)[:, None]
    out = gather.propagate(lists, x)
    assert float(out[0, 0]) == float(np.sum(np.arange(1, n, dtype=np.float64)))
    np.testing.assert_array_equal(out[1:, 0], np.zeros(n - 1))


def test_row_chunks_equal_the_unchunked_product():
    # budget 21 at width 3: the 60-row bucket goes in 7-row chunks (8 full and one of 4), the hub's
    # 64-wide bucket one row at a time
    g = graph_of("skewed")
    x = features(g.n_nodes)
    whole = jax.jit(lambda x: gather.propagate(g.lists, x))
    chunked = jax.jit(lambda x: gather.propagate(g.lists, x, budget=21))
    assert "while" in chunked.lower(x).as_text() and "while" not in whole.lower(x).as_text()
    # The same sums of the same products, to the last bit or one: XLA fuses the surrounding
    # programs differently (a multiply-add fused or not), measured here up to 1.6e-7 relative on 2
    # of 198 gradient entries (on a TPU v5e, 1.1e-6 on 1 of 198); a misplaced chunk row would differ
    # by whole entries.
    np.testing.assert_allclose(chunked(x), whole(x), rtol=2e-6, atol=0)
    grads = [jax.jit(jax.grad(loss_of(g, None, budget=b)))(x) for b in (21, 10**9)]
    np.testing.assert_allclose(*grads, rtol=2e-6, atol=0)
    with pytest.raises(ValueError, match=r"budget=0 must be >= 1"):
        gather.propagate(g.lists, x, budget=0)


def test_another_row_sum_is_used_forward_and_backward():
    g = graph_of("directed")
    calls = []

    def counted(x, cols, weights):
        calls.append(cols.shape)
        return gather.row_sum(x, cols, weights)

    jax.grad(loss_of(g, None, rows_sum=counted))(features(g.n_nodes))
    n_buckets = len(g.lists.cols) + len(g.lists.transpose.cols)
    assert len(calls) == n_buckets


def scatters(text: str) -> list[str]:
    """The lines of an HLO or StableHLO program that name a scatter, its source locations left out (the
    test's own name holds the word)."""
    text = re.sub(r"\nFileNames\n.*?\n(?=%|ENTRY)", "\n", text, flags=re.S)
    text = re.sub(r"(, )?metadata=\{[^}]*\}|loc\([^\n]*\)|#loc[^\n]*", "", text)
    return re.findall(r"[^\n]*scatter[^\n]*", text)


def test_no_scatter_in_the_lowered_forward_and_backward():
    g = graph_of("directed")
    x = features(g.n_nodes)
    for backend in ("gather", "segment"):
        text = jax.jit(jax.value_and_grad(loss_of(g, backend))).lower(x).as_text()
        assert bool(scatters(text)) == (backend == "segment"), backend  # the check can see one


@pytest.fixture(scope="module")
def small():
    """A 120-node SBM with dense features, laid out for ``gather``."""
    prepared = datasets.prepare(datasets.synthetic(120, n_classes=3, n_features=8, seed=2), backend="gather")
    assert prepared.backend == "gather" and prepared.data.graph.lists is not None
    return prepared


def lowered_step(prepared, backend: str, hops: int = 1) -> dict[str, str]:
    """The StableHLO text of one run's training loop and evaluation, lowered as the engine lowers them
    (jaxgcn.training.loop.compile), before XLA's CPU passes (which expand a scatter into a loop)."""
    data = prepared.data
    execution = plan.concrete(Execution(backend=backend), data.graph)
    runner = make_batch_runner(GCNConfig(), TrainConfig(epochs=3), execution, one=(data.x.shape[1], prepared.n_classes))
    runs = jax.tree.map(np.asarray, runner.inputs())
    state = jax.eval_shape(runner.init, jax.random.key(0), data, runs)
    return {"run_until": jax.jit(runner.run_until).lower(state, data, runs, jnp.int32(0)).as_text(),
            "evaluate": jax.jit(runner.evaluate).lower(runner.final_params(state), data, runs).as_text()}


# The scatters a training step holds outside the propagation (issue 45 leaves them to the engine's
# owners): each one writes one element, not a row of nodes. By their operand types (one run, so
# [R, 2R] = [1, 2]; 3 epochs; Kipf's window of 10):
OUTSIDE = {
    # jaxgcn/training/losses.py masked_sums: sums[runs, runs], the diagonal of [R, 2R]; its gradient
    "tensor<1x2xf32>, tensor<1x2xi32>, tensor<1xf32>": 1,
    # jaxgcn/training/state.py record_epoch: history[name].at[e].set(value), four histories of [epochs]
    "tensor<3xf32>, tensor<1xi32>, tensor<f32>": 4,
    # jaxgcn/training/state.py record_epoch: jnp.roll(val_window, -1).at[-1].set(kipf_loss)
    "tensor<10xf32>, tensor<1xi32>, tensor<f32>": 1,
}


def scatter_operands(text: str) -> dict[str, int]:
    """How many scatters of each operand type (the types after a StableHLO scatter's region)."""
    found = re.findall(r'"stablehlo\.scatter"\(.*?\}\) : \(([^)]*)\)', text, flags=re.S)
    return {t: found.count(t) for t in set(found)}


def test_a_gcn_training_step_has_no_scatter_of_node_rows(small):
    steps = lowered_step(small, "gather")
    assert "while" in steps["run_until"] and "dot_general" in steps["run_until"]  # the loop and the layers are there
    assert scatters(steps["evaluate"]) == []
    assert scatter_operands(steps["run_until"]) == OUTSIDE
    segment = datasets.prepare(datasets.synthetic(120, n_classes=3, n_features=8, seed=2), backend="segment")
    extra = set(scatter_operands(lowered_step(segment, "segment")["run_until"])) - set(OUTSIDE)
    assert extra and all(t.startswith("tensor<120x") for t in extra)  # where the propagation scatters, it shows


def test_a_batch_equals_single_runs_and_the_segment_backend(small):
    config = TrainConfig(epochs=30, early_stopping=None)
    execution = Execution(backend="gather")
    seeds = [1, 0, 2]
    res = fit_runs(small.data, small.n_classes, entries_for(seeds, config=config), execution=execution)
    segment = datasets.prepare(datasets.synthetic(120, n_classes=3, n_features=8, seed=2), backend="segment")
    for r, seed in enumerate(seeds):
        one = fit(small.data, small.n_classes, config=config, execution=execution, key=jax.random.key(seed), log=None)
        ref = fit(segment.data, segment.n_classes, config=config, execution=Execution(backend="segment"),
                  key=jax.random.key(seed), log=None)
        for name in ("loss", "val_loss", "val_acc"):
            np.testing.assert_allclose(res.history[name][r], one.history[name], rtol=1e-5, atol=1e-5, err_msg=name)
            np.testing.assert_allclose(one.history[name], ref.history[name], rtol=1e-5, atol=1e-5, err_msg=name)
        for got, want in zip(jax.tree.leaves(unstack_params(res.params, r)), jax.tree.leaves(one.params)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    assert len({round(float(v), 6) for v in res.history["loss"][:, 0]}) == 3  # three different runs


def test_the_layout_is_required_and_reattached():
    g = graph_of("random")
    x = features(g.n_nodes)
    with pytest.raises(ValueError, match=r"backend 'gather' needs the neighbour lists: attach them with .*with_lists"):
        propagate(g._replace(lists=None), x, backend="gather")
    renormed = gcn_norm(g, "row")  # gcn_norm rebuilds the lists of what it normalized: now not symmetric
    assert renormed.lists.transpose is not None
    np.testing.assert_allclose(propagate(renormed, x, backend="gather"), to_dense(renormed) @ np.asarray(x), atol=1e-5)


def test_the_memory_estimate_counts_the_lists_and_the_chunk_buffer():
    assert GATHER_CHUNK_ELEMENTS == gather.CHUNK_ELEMENTS
    g = graph_of("directed")
    slots = g.lists.slots
    assert slots == sum(c.size for c in g.lists.cols) + sum(c.size for c in g.lists.transpose.cols)
    one = estimate(40, g.n_edges, 8, 3, backend="gather", symmetric=False, list_slots=slots)
    base = estimate(40, g.n_edges, 8, 3, backend="segment")
    assert one.parts["adjacency"] - base.parts["adjacency"] == slots * 8 + 2 * 40 * 4
    assert one.parts["messages"] == 2 * (slots // 2) * 16 * 4 + 41 * 16 * 4
    big = estimate(2_400_000, 124_000_000, 100, 47, hidden=16, backend="gather")
    assert big.parts["messages"] == 2 * GATHER_CHUNK_ELEMENTS * 4 + (2_400_000 + 1) * 47 * 4  # the chunks bound it


def test_sub_lists_of_a_rectangular_matrix_read_only_columns_that_exist():
    """The lists of some rows of Â (a [K, m] matrix, m the input rows a layer holds) and of its
    transpose: a padding slot reads a column inside the matrix (the Pallas row sum loads VMEM at that
    index; XLA's gather would clip it silently), and the products equal the dense ones, both ways."""
    import scipy.sparse as sp

    from jaxgcn.core.gather import rows_product, sub_lists

    rng = np.random.default_rng(4)
    for k, m in ((9, 4), (4, 9)):
        dense = (rng.random((k, m)) < 0.5) * rng.random((k, m)).astype(np.float32)
        dense[0] = 0.0  # an empty row
        row, col = min(k, m) + 1, m - 1  # a row past the 4 columns of a [9, 4] matrix; its transpose's
        dense[row % k, :] = 0.0
        dense[row % k, :3] = 1.0  # 3 entries: padded to a width of 4 by a slot that reads the row's own id
        dense[:, col] = 0.0
        dense[:3, col] = 2.0  # a column of 3 entries: the transpose's row (id m - 1 >= k for [4, 9]) padded too
        a = sp.csr_matrix(dense.astype(np.float32))
        lists = sub_lists(a.indptr, a.indices, a.data, m)
        for own, n_cols in ((lists, m), (lists.transpose, k)):
            assert all(int(np.max(c)) < n_cols for c in own.cols), (k, m)
        x = jnp.asarray(rng.standard_normal((m, 3)).astype(np.float32))
        np.testing.assert_allclose(rows_product(lists, x), dense @ np.asarray(x), rtol=1e-5, atol=1e-6)
        g = jnp.asarray(rng.standard_normal((k, 3)).astype(np.float32))
        grad = jax.grad(lambda x: jnp.sum(rows_product(lists, x) * g))(x)
        np.testing.assert_allclose(grad, dense.T @ np.asarray(g), rtol=1e-5, atol=1e-6)
