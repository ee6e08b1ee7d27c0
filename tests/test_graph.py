"""Graph building, cleaning and normalization (jaxgcn.core.graph) against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from jaxgcn.core.graph import Graph, from_edges, from_scipy, gcn_norm, to_dense, with_dense
from jaxgcn.core.propagate import propagate


def build(raw_edges, **kwargs):
    return from_edges(raw_edges.senders, raw_edges.receivers, raw_edges.weights, n_nodes=raw_edges.n_nodes,
                      **kwargs)


# --- cleaning ---------------------------------------------------------------------------------


def test_from_edges_report_counts(raw_edges):
    _, report = build(raw_edges)
    assert report == {
        "input_edges": 9,
        "duplicates_merged": 1,  # 1 -> 2 listed twice
        "self_loops_found": 1,  # 3 -> 3
        "edges_symmetrized": 1,  # 2 -> 3 had no 3 -> 2
        "undirected_edges": 4,  # 0-1, 1-2, 2-3, 3-4
        "isolated_nodes": 1,  # node 5
    }


def test_from_edges_adjacency_matches_hand_cleaned_matrix(raw_edges, expected_adj):
    g, _ = build(raw_edges)
    np.testing.assert_array_equal(to_dense(g), expected_adj)
    assert g.n_nodes == 6
    assert g.n_edges == 8  # 4 undirected edges, each stored in both directions
    assert g.senders.dtype == np.int32 and g.receivers.dtype == np.int32
    assert g.weights.dtype == np.float32 and g.self_weights.dtype == np.float32
    assert g.dense is None


def test_from_edges_receivers_sorted_and_pairs_unique(raw_edges):
    g, _ = build(raw_edges)
    recv, send = np.asarray(g.receivers), np.asarray(g.senders)
    assert np.all(np.diff(recv) >= 0)
    pairs = recv.astype(np.int64) * 6 + send
    assert np.all(np.diff(pairs) > 0)  # sorted by (receiver, sender) and no repeats
    assert not np.any(recv == send)  # the diagonal lives in self_weights only


def test_only_missing_self_loops_are_added(raw_edges):
    g, _ = build(raw_edges)
    np.testing.assert_array_equal(g.self_weights, [1.0, 1.0, 1.0, 3.0, 1.0, 1.0])
    g_no, report = build(raw_edges, add_self_loops=False)
    np.testing.assert_array_equal(g_no.self_weights, [0.0, 0.0, 0.0, 3.0, 0.0, 0.0])
    assert report["self_loops_found"] == 1
    off_diag = to_dense(g) - np.diag(np.diag(to_dense(g)))
    np.testing.assert_array_equal(to_dense(g_no) - np.diag(np.diag(to_dense(g_no))), off_diag)


def test_duplicates_max_vs_sum(raw_edges, expected_adj):
    g_max, _ = build(raw_edges, duplicates="max")
    g_sum, report = build(raw_edges, duplicates="sum")
    adj_sum = expected_adj.copy()
    # 1 -> 2 twice (1 + 2 = 3); the reverse 2 -> 1 (weight 1) is mirrored to max(1, 3) = 3.
    adj_sum[2, 1] = adj_sum[1, 2] = 3.0
    np.testing.assert_array_equal(to_dense(g_max), expected_adj)
    np.testing.assert_array_equal(to_dense(g_sum), adj_sum)
    assert report["duplicates_merged"] == 1


def test_duplicate_self_loops_merge_with_the_rule():
    g_max, rep = from_edges([0, 0, 0], [0, 0, 1], [2.0, 5.0, 1.0], duplicates="max")
    g_sum, _ = from_edges([0, 0, 0], [0, 0, 1], [2.0, 5.0, 1.0], duplicates="sum")
    assert float(g_max.self_weights[0]) == 5.0
    assert float(g_sum.self_weights[0]) == 7.0
    assert rep["self_loops_found"] == 2 and rep["duplicates_merged"] == 1


def test_without_symmetrize_one_way_edges_stay_one_way(raw_edges, expected_adj):
    g, report = build(raw_edges, symmetrize=False)
    expected = expected_adj.copy()
    expected[2, 3] = 0.0  # 3 -> 2 was never listed
    expected[1, 2] = 1.0  # 2 -> 1 keeps its own weight (no max with 1 -> 2)
    np.testing.assert_array_equal(to_dense(g), expected)
    assert report["edges_symmetrized"] == 0
    assert report["undirected_edges"] == 7  # directed off-diagonal edges when not symmetrized


def test_n_nodes_defaults_to_max_id_plus_one():
    g, report = from_edges([0, 4], [1, 1])
    assert g.n_nodes == 5
    assert report["isolated_nodes"] == 2  # nodes 2 and 3
    np.testing.assert_array_equal(g.self_weights, np.ones(5, np.float32))


def test_integer_valued_float_ids_are_accepted(raw_edges, expected_adj):
    g, _ = from_edges(raw_edges.senders.astype(np.float64), raw_edges.receivers.astype(np.float32),
                      raw_edges.weights, n_nodes=6)
    np.testing.assert_array_equal(to_dense(g), expected_adj)


def test_from_scipy_reads_matrix_entry_ij_as_edge_j_to_i(raw_edges, expected_adj):
    # matrix[i, j] = weight of j -> i, exactly the layout of to_dense.
    coo = sp.coo_matrix((raw_edges.weights, (raw_edges.receivers, raw_edges.senders)), shape=(6, 6))
    g, report = from_scipy(coo)
    np.testing.assert_array_equal(to_dense(g), expected_adj)
    assert report["duplicates_merged"] == 1 and report["self_loops_found"] == 1
    # A directed one-entry matrix: entry [1, 0] is edge 0 -> 1.
    g1, _ = from_scipy(np.array([[0.0, 0.0], [4.0, 0.0]]), symmetrize=False, add_self_loops=False)
    assert g1.senders.tolist() == [0] and g1.receivers.tolist() == [1] and g1.weights.tolist() == [4.0]


def test_from_scipy_rejects_non_square():
    with pytest.raises(ValueError, match=r"square, got shape \(2, 3\)"):
        from_scipy(sp.coo_matrix(np.ones((2, 3))))


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(senders=[0, -1], receivers=[1, 2]), r"sender id -1 at position 1 is outside \[0, 6\)"),
        (dict(senders=[0, 1], receivers=[1, 6]), r"receiver id 6 at position 1 is outside \[0, 6\).*n_nodes > 6"),
        (dict(senders=[0, 1.5], receivers=[1, 2]), r"senders must hold integer node ids, found .*1\.5"),
        (dict(senders=[0, 1], receivers=[1, np.nan]), r"receivers must hold integer node ids, found .*nan"),
        (dict(senders=[0, 1], receivers=[1, 2], weights=[1.0, np.nan]), r"edge weight .*nan.* at position 1"),
        (dict(senders=[0, 1], receivers=[1, 2], weights=[np.inf, 1.0]), r"edge weight .*inf.* at position 0"),
        (dict(senders=[0, 1], receivers=[1, 2], weights=[1.0, -2.0]), r"edge weight .*-2\.0.* at position 1"),
        (dict(senders=[0, 1, 2], receivers=[1, 2]), r"3 senders but 2 receivers"),
        (dict(senders=[0, 1, 2], receivers=[1, 2, 3], weights=[1.0, 1.0]),
         r"weights has shape \(2,\) but there are 3 edges"),
        (dict(senders=[[0, 1, 2]], receivers=[[1, 2, 3]]), r"senders must be a 1-D array .*shape \(1, 3\)"),
        (dict(senders=[0, 1], receivers=[[1], [2]]), r"receivers must be a 1-D array .*shape \(2, 1\)"),
        (dict(senders=[0, 1], receivers=[1, 2], duplicates="mean"), r"duplicates='mean' is not one of"),
    ],
)
def test_from_edges_errors_name_the_offending_value(kwargs, match):
    kwargs.setdefault("n_nodes", 6)
    with pytest.raises(ValueError, match=match):
        from_edges(**kwargs)


def test_error_messages_name_the_source():
    with pytest.raises(ValueError, match=r"^edges\.csv: receiver id 9 "):
        from_edges([0], [9], n_nodes=3, source="edges.csv")


def test_empty_graph_without_n_nodes_raises():
    with pytest.raises(ValueError, match="no nodes"):
        from_edges([], [])


def test_empty_edge_list_with_n_nodes_gives_identity():
    g, report = from_edges(np.zeros(0, np.int64), np.zeros(0, np.int64), n_nodes=3)
    np.testing.assert_array_equal(to_dense(g), np.eye(3, dtype=np.float32))
    assert report["isolated_nodes"] == 3


# --- normalization ------------------------------------------------------------------------------


def sym_formula(adj: np.ndarray) -> np.ndarray:
    """D^-1/2 A D^-1/2 with D the row sums of A, 0 where D == 0 (float64 reference)."""
    deg = adj.astype(np.float64).sum(axis=1)
    inv = np.zeros_like(deg)
    inv[deg > 0] = deg[deg > 0] ** -0.5
    return inv[:, None] * adj * inv[None, :]


def row_formula(adj: np.ndarray) -> np.ndarray:
    deg = adj.astype(np.float64).sum(axis=1)
    inv = np.zeros_like(deg)
    inv[deg > 0] = 1.0 / deg[deg > 0]
    return inv[:, None] * adj


def test_gcn_norm_sym_matches_formula(graph, expected_adj):
    norm = to_dense(gcn_norm(graph, "sym"))
    np.testing.assert_allclose(norm, sym_formula(expected_adj), rtol=1e-6, atol=1e-7)
    # A few entries by hand: row sums are [2, 4, 3.5, 4.5, 2, 1].
    assert norm[0, 1] == pytest.approx(1 / np.sqrt(2 * 4))
    assert norm[2, 3] == pytest.approx(0.5 / np.sqrt(3.5 * 4.5))
    assert norm[3, 3] == pytest.approx(3 / 4.5)
    assert norm[5, 5] == pytest.approx(1.0)  # isolated node: 1 / 1 from its own self-loop


def test_gcn_norm_row_matches_formula(graph, expected_adj):
    norm = to_dense(gcn_norm(graph, "row"))
    np.testing.assert_allclose(norm, row_formula(expected_adj), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(norm.sum(axis=1), np.ones(6), rtol=1e-6)


def test_gcn_norm_none_is_identity(graph, expected_adj):
    np.testing.assert_array_equal(to_dense(gcn_norm(graph, "none")), expected_adj)


def test_gcn_norm_uses_row_sums_on_a_directed_graph(raw_edges):
    g, _ = build(raw_edges, symmetrize=False)
    adj = to_dense(g)
    assert not np.array_equal(adj, adj.T)  # row and column sums differ here
    np.testing.assert_allclose(to_dense(gcn_norm(g, "sym")), sym_formula(adj), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(to_dense(gcn_norm(g, "row")), row_formula(adj), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("norm", ["sym", "row"])
def test_zero_degree_node_gives_zero_not_nan(raw_edges, norm):
    g, _ = build(raw_edges, add_self_loops=False)
    gn = gcn_norm(g, norm)
    adj = to_dense(gn)
    assert np.all(np.isfinite(adj))
    assert float(gn.self_weights[5]) == 0.0
    np.testing.assert_array_equal(adj[5], np.zeros(6, np.float32))
    expected = sym_formula(to_dense(g)) if norm == "sym" else row_formula(to_dense(g))
    np.testing.assert_allclose(adj, expected, rtol=1e-6, atol=1e-7)
    x = np.ones((6, 2), np.float32)
    out = np.asarray(propagate(gn, x, backend="segment"))
    assert np.all(np.isfinite(out))
    np.testing.assert_array_equal(out[5], [0.0, 0.0])


def test_isolated_node_with_self_loop_passes_its_features_through(graph, node_features):
    out = np.asarray(propagate(gcn_norm(graph, "sym"), node_features, backend="segment"))
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out[5], node_features[5], rtol=1e-6)


def test_gcn_norm_rejects_unknown_norm(graph):
    with pytest.raises(ValueError, match=r"norm='l2' is not one of \('sym', 'row', 'none'\)"):
        gcn_norm(graph, "l2")


def test_gcn_norm_does_not_modify_its_input(graph, expected_adj):
    gcn_norm(graph, "sym")
    np.testing.assert_array_equal(to_dense(graph), expected_adj)


def test_with_dense_attaches_to_dense(graph, expected_adj):
    g = with_dense(gcn_norm(graph))
    np.testing.assert_array_equal(np.asarray(g.dense), to_dense(g))
    assert isinstance(g, Graph)


def test_gcn_norm_after_with_dense_does_not_leave_a_stale_dense_matrix(graph, node_features):
    g = gcn_norm(with_dense(graph), "sym")
    expected = to_dense(g) @ node_features
    np.testing.assert_allclose(np.asarray(propagate(g, node_features, backend="dense")), expected,
                               rtol=1e-5, atol=1e-5)
