"""The Pallas TPU row sum (jaxgcn.core.pallas_gather), run interpreted on the CPU, against the XLA
row sum and the dense formula ``to_dense(graph) @ x``, forward and gradient. Small graphs: the
interpreted kernel is slow."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxgcn.core import gather, pallas_gather as pg
from jaxgcn.core.graph import from_edges, gcn_norm, to_dense

ATOL = 1e-5


def skewed_graph(n: int = 40, seed: int = 0):
    """A hub joined to 20 nodes (degree 20: the K=32 bucket), a sparse random rest (many K=1 and
    K=2 rows) and isolated nodes (rows of padding only), symmetric, sym-normalized."""
    rng = np.random.default_rng(seed)
    hub = np.zeros(20, np.int64), np.arange(1, 21)
    extra = rng.integers(1, n - 6, 12), rng.integers(1, n - 6, 12)  # nodes n-6.. stay isolated
    senders = np.concatenate([hub[0], extra[0]])
    receivers = np.concatenate([hub[1], extra[1]])
    weights = rng.uniform(0.5, 2.0, senders.size)
    graph, _ = from_edges(senders, receivers, weights, n_nodes=n)
    return gcn_norm(graph)


def features(n: int, f: int, seed: int = 1) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).normal(size=(n, f)), jnp.float32)


def lists_of(graph, width=None):
    """The graph's neighbour lists as the ``gather`` backend builds them (:func:`jaxgcn.core.gather.build`)."""
    return gather.build(graph.senders, graph.receivers, graph.weights, graph.n_nodes, width=width)


def buckets(graph):
    """(cols, weights) of each degree bucket, as device arrays."""
    lists = lists_of(graph)
    return [(jnp.asarray(c), jnp.asarray(w)) for c, w in zip(lists.cols, lists.weights)]


def by_buckets(graph, x, row_sum):
    """``Â · x``: the degree buckets' row sums put in place by the backend's ``order``, plus the diagonal."""
    out = np.asarray(graph.self_weights)[:, None] * np.asarray(x)
    return out + np.asarray(gather.propagate(jax.tree.map(jnp.asarray, lists_of(graph)), x, rows_sum=row_sum))


def test_the_lists_are_bucketed_by_degree_with_padding_rows():
    graph = skewed_graph()
    lists = lists_of(graph)
    widths = [cols.shape[1] for cols in lists.cols]
    assert widths[0] == 1 and widths[-1] == 32 and widths == sorted(set(widths))
    rows, order = sum(c.shape[0] for c in lists.cols), np.asarray(lists.order)
    empty = np.bincount(np.asarray(graph.receivers), minlength=graph.n_nodes) == 0
    assert empty[34:].all()
    np.testing.assert_array_equal(order[empty], rows)  # rows without neighbours read the zero row
    np.testing.assert_array_equal(np.sort(order[~empty]), np.arange(rows))  # the others: one bucket row each
    one = lists_of(graph, width=32)  # one bucket of every row, as the symmetric kernel takes them
    assert [c.shape for c in one.cols] == [(40, 32)] and one.order.tolist() == list(range(40))
    assert not one.weights[0][empty].any()  # rows of padding only: weight 0


@pytest.mark.parametrize("f", [16, 5])
def test_forward_equals_the_xla_row_sum_and_the_dense_formula(f):
    graph = skewed_graph()
    x = features(graph.n_nodes, f)
    for cols, weights in buckets(graph):
        got = pg.row_sum(x, cols, weights, interpret=True)
        np.testing.assert_allclose(got, gather.row_sum(x, cols, weights), atol=ATOL)
    expected = to_dense(graph) @ np.asarray(x)
    np.testing.assert_allclose(by_buckets(graph, x, pg.row_sum), expected, atol=ATOL)
    assert np.abs(expected).max() > 0.5  # the sums are not trivially small


def test_rows_of_padding_only_sum_to_zero():
    x = features(24, 16) + 10.0  # padding slots point at rows whose values are far from zero
    cols = jnp.asarray([[3, 3, 3, 3], [0, 1, 2, 3], [7, 7, 7, 7]], jnp.int32)
    weights = jnp.asarray([[0.0] * 4, [1.0, -2.0, 0.5, 0.0], [0.0] * 4], jnp.float32)
    got = np.asarray(pg.row_sum(x, cols, weights))
    np.testing.assert_array_equal(got[[0, 2]], 0.0)
    np.testing.assert_allclose(got[1], x[0] - 2 * x[1] + 0.5 * x[2], atol=ATOL)


@pytest.mark.parametrize("m", [13, 8, 1])
def test_rows_past_the_last_full_block(m):
    x = features(30, 16)
    rng = np.random.default_rng(m)
    cols = jnp.asarray(rng.integers(0, 30, (m, 128)), jnp.int32)  # width 128: blocks of 8 rows
    weights = jnp.asarray(rng.uniform(-1, 1, (m, 128)), jnp.float32)
    got = pg.row_sum(x, cols, weights, block_rows=8)
    assert got.shape == (m, 16)
    np.testing.assert_allclose(got, gather.row_sum(x, cols, weights), atol=ATOL)


def test_bfloat16_storage_sums_the_rounded_rows_in_float32():
    graph = skewed_graph()
    x = features(graph.n_nodes, 16)
    rounded = x.astype(jnp.bfloat16).astype(jnp.float32)
    cols, weights = buckets(graph)[-1]
    got = pg.row_sum(x, cols, weights, dtype=jnp.bfloat16)
    np.testing.assert_allclose(got, gather.row_sum(rounded, cols, weights), atol=ATOL)
    assert np.abs(got - gather.row_sum(x, cols, weights)).max() > 1e-4  # it is bf16


def test_the_gradient_of_the_symmetric_product_equals_the_dense_formulas():
    graph = skewed_graph(n=24)
    one = lists_of(graph, width=32)
    ((cols,), (weights,)) = one.cols, one.weights
    np.testing.assert_array_equal(one.order, np.arange(24))
    dense = jnp.asarray(to_dense(graph))
    x, target = features(24, 4), features(24, 4, seed=2)

    def loss(propagate):
        return lambda x: jnp.sum(jnp.sin(propagate(x)) * target)

    def pallas(x):
        return pg.propagate_symmetric(x, jnp.asarray(cols), jnp.asarray(weights), jnp.asarray(graph.self_weights))

    np.testing.assert_allclose(pallas(x), dense @ x, atol=ATOL)
    np.testing.assert_allclose(jax.jit(jax.grad(loss(pallas)))(x), jax.grad(loss(lambda x: dense @ x))(x), atol=ATOL)


def test_interpreted_everywhere_but_on_the_tpu(monkeypatch):
    x = features(8, 16)
    got = pg.row_sum(x, jnp.zeros((8, 1), jnp.int32), jnp.ones((8, 1), jnp.float32))  # default: the CPU
    np.testing.assert_allclose(got, jnp.broadcast_to(x[0], (8, 16)), atol=ATOL)
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    assert pg.resolve_interpret(None) is False and pg.resolve_interpret(True) is True
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    assert pg.resolve_interpret(None) is True


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_the_kernel_lowers_for_the_tpu(monkeypatch, dtype):
    """Pallas's Mosaic lowering (not libtpu's compiler, which needs the chip) of the compiled kernel,
    exported for the TPU from this CPU: a kernel Pallas cannot lower for Mosaic fails here."""
    from jax import export
    from jax._src.pallas.mosaic import tpu_info  # private: the lowering asks the device for its tiling

    v5e = tpu_info.get_tpu_info_for_chip(tpu_info.ChipVersion.TPU_V5E, 1)
    monkeypatch.setattr(tpu_info, "get_tpu_info", lambda: v5e)
    for f, k in ((16, 4), (5, 17), (200, 1)):
        fn = jax.jit(lambda x, c, w: pg.row_sum(x, c, w, interpret=False, dtype=dtype))
        args = (jax.ShapeDtypeStruct((1000, f), jnp.float32), jax.ShapeDtypeStruct((300, k), jnp.int32),
                jax.ShapeDtypeStruct((300, k), jnp.float32))
        assert "tpu_custom_call" in export.export(fn, platforms=["tpu"])(*args).mlir_module()


def test_the_table_fits_by_its_padded_vmem_size():
    # 16 float32 columns: 8 rows share a 128-lane VMEM row; 1M rows take 64 MB
    assert pg.table_bytes(1_000_000, 16) == 125_000 * 128 * 4
    assert pg.table_bytes(1_000_000, 16, jnp.bfloat16) == 62_504 * 128 * 4  # 62,500 rows padded to 8 sublanes
    # 5 columns do not divide 128: one row per VMEM row, padded to 128 lanes; rows to 8 sublanes
    assert pg.table_bytes(1001, 5) == 1008 * 128 * 4
    assert pg.table_bytes(10, 200) == 16 * 256 * 4
    need = pg.table_bytes(1_000_000, 16) + pg.VMEM_RESERVE
    assert pg.fits(1_000_000, 16, vmem_bytes=need) and not pg.fits(1_000_000, 16, vmem_bytes=need - 1)
    assert pg.fits(200_000, 5) and not pg.fits(300_000, 5)  # 5 columns pay 128 lanes a row


def test_a_table_past_vmem_is_refused_before_anything_runs():
    x = jax.ShapeDtypeStruct((2_400_000, 16), jnp.float32)
    lists = jax.ShapeDtypeStruct((8, 2), jnp.int32), jax.ShapeDtypeStruct((8, 2), jnp.float32)
    with pytest.raises(ValueError, match=r"x of shape \(2400000, 16\) .* does not fit .* dtype=bfloat16"):
        jax.eval_shape(pg.row_sum, x, *lists)
    assert jax.eval_shape(lambda *a: pg.row_sum(*a, dtype=jnp.bfloat16), x, *lists).shape == (8, 16)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"block_rows": 12}, "block_rows=12 must be a multiple of 1024 for lists of width 1"),
    ({"block_rows": 0}, "block_rows=0 must be positive"),
    ({"dtype": jnp.float16}, "dtype=float16 is not a table storage type; use float32 or bfloat16"),
])
def test_bad_options_are_named(kwargs, match):
    x = features(8, 4)
    with pytest.raises(ValueError, match=match):
        pg.row_sum(x, jnp.zeros((8, 1), jnp.int32), jnp.ones((8, 1), jnp.float32), **kwargs)


def test_blocks_of_lists_meet_the_rank_1_smem_block_rule():
    # rows a multiple of 8 and rows * width a multiple of 1024; odd widths padded to stay small
    assert [pg.smem_step(k) for k in (1, 4, 128, 3)] == [1024, 256, 8, 1024]
    assert [pg.list_width(k) for k in (3, 16, 17, 136)] == [3, 16, 18, 144]
    for k in (1, 3, 5, 16, 17, 100, 136, 999):
        kp, block = pg.list_width(k), pg.block_rows_for(pg.list_width(k))
        assert block % 8 == 0 and block * kp % 1024 == 0 and block * kp <= pg.SMEM_BLOCK_MAX


def test_odd_widths_are_padded_with_zero_weight_slots():
    x = features(30, 16)
    rng = np.random.default_rng(5)
    cols = jnp.asarray(rng.integers(0, 30, (11, 17)), jnp.int32)
    weights = jnp.asarray(rng.uniform(-1, 1, (11, 17)), jnp.float32)
    np.testing.assert_allclose(pg.row_sum(x, cols, weights), gather.row_sum(x, cols, weights), atol=ATOL)


def test_a_width_below_the_largest_degree_is_refused():
    with pytest.raises(ValueError, match="width=8 is below the largest degree 20; pass width >= 20"):
        lists_of(skewed_graph(), width=8)
