"""Dataset loading, cleaning invariants, the safe unpickler, splits and the synthetic generator."""

from __future__ import annotations

import builtins
import collections
import io
import os
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

from jaxgcn import datasets
from jaxgcn.datasets import load_dataset, load_raw, normalize_features, planetoid_split, prepare, synthetic
from jaxgcn.datasets.base import RawGraph
from jaxgcn.datasets.planetoid import RestrictedUnpickler, safe_load_pickle
from jaxgcn.core.layers import matmul
from jaxgcn.core.models import Execution, GCNConfig, gcn
from jaxgcn.core.propagate import propagate
from tiny_datasets import P_ALLX, P_F, P_TEST, write_planetoid

ON_CPU = jax.default_backend() == "cpu"


@pytest.fixture(scope="module")
def cora():
    raw = load_dataset("cora")
    return raw, prepare(raw)


@pytest.fixture(scope="module")
def citeseer():
    raw = load_dataset("citeseer")
    return raw, prepare(raw)


def assert_disjoint_splits(splits, n_nodes):
    ids = np.concatenate([splits[k] for k in ("train", "val", "test")])
    assert np.unique(ids).size == ids.size, "splits overlap"
    assert ids.min() >= 0 and ids.max() < n_nodes


def row_sums(features):
    return np.asarray(abs(features).sum(axis=1)).ravel()


# --- bundled Planetoid ------------------------------------------------------------------------------


def test_cora_invariants(cora):
    raw, p = cora
    assert raw.name == "cora"
    assert raw.features.shape == (2708, 1433)
    assert p.info["n_nodes"] == 2708 and p.data.graph.n_nodes == 2708
    assert p.info["undirected_edges"] == 5278 and p.data.graph.n_edges == 2 * 5278
    assert p.info["duplicates_merged"] == 302
    assert p.info["self_loops_found"] == 0 and p.info["edges_symmetrized"] == 0
    assert p.info["isolated_nodes"] == 0
    assert p.n_classes == 7 and sorted(np.unique(raw.labels)) == list(range(7))
    assert {k: len(v) for k, v in raw.splits.items()} == {"train": 140, "val": 500, "test": 1000}
    assert_disjoint_splits(raw.splits, 2708)
    np.testing.assert_array_equal(raw.splits["train"], np.arange(140))  # Planetoid public split
    np.testing.assert_array_equal(raw.splits["val"], np.arange(140, 640))
    # the fused kernel builds on every machine with a C++ compiler; an accelerator's auto: dense Â on its MXU
    assert p.backend == ("csr" if ON_CPU else "dense")


def edge_arrays(g):
    """(senders, receivers, weights) of a prepared graph, from its edge list or its CSR form."""
    if g.has_edge_list:
        return tuple(np.asarray(a) for a in (g.senders, g.receivers, g.weights))
    indptr = np.asarray(g.csr.indptr)
    rows = np.repeat(np.arange(g.n_nodes), np.diff(indptr))
    return np.asarray(g.csr.cols), rows, np.asarray(g.csr.data)


def test_cleaned_cora_graph_is_symmetric(cora):
    _, p = cora
    g = p.data.graph
    if ON_CPU:
        assert not g.has_edge_list and g.csr.symmetric  # csr: the adjacency is held once
    s, r, w = edge_arrays(g)
    forward = dict(zip(zip(s.tolist(), r.tolist()), w.tolist()))
    assert all(forward[(b, a)] == pytest.approx(v) for (a, b), v in forward.items())
    # All raw weights are 1, so sym normalization gives 1/deg on the diagonal (deg counts the
    # self-loop) and 1/sqrt(deg_i deg_j) on the edges.
    deg = np.bincount(r, minlength=g.n_nodes) + 1.0
    np.testing.assert_allclose(np.asarray(g.self_weights), 1.0 / deg, rtol=1e-6)
    np.testing.assert_allclose(w, 1.0 / np.sqrt(deg[r] * deg[s]), rtol=1e-6)


def test_citeseer_invariants(citeseer):
    raw, p = citeseer
    assert raw.features.shape == (3327, 3703)
    assert p.info["undirected_edges"] == 4552
    assert p.info["self_loops_found"] == 248
    assert p.info["duplicates_merged"] == 236
    assert p.n_classes == 6
    assert {k: len(v) for k, v in raw.splits.items()} == {"train": 120, "val": 500, "test": 1000}
    assert_disjoint_splits(raw.splits, 3327)
    # The 15 test-range ids missing from test.index are unlabelled and in no split.
    unlabelled = np.flatnonzero(raw.labels < 0)
    assert unlabelled.size == 15
    assert not np.isin(unlabelled, np.concatenate(list(raw.splits.values()))).any()
    assert np.all(row_sums(raw.features)[unlabelled] == 0)


def test_citeseer_isolated_nodes_give_finite_outputs(citeseer):
    _, p = citeseer
    g = p.data.graph
    degree = np.bincount(edge_arrays(g)[1], minlength=g.n_nodes)
    isolated = np.flatnonzero(degree == 0)
    assert isolated.size == p.info["isolated_nodes"] == 48
    # Their normalized self weight is 1/1: propagation passes their features through unchanged.
    np.testing.assert_allclose(np.asarray(g.self_weights)[isolated], 1.0, rtol=1e-6)
    model = gcn(GCNConfig(), Execution(backend=p.backend))
    params = model.init(jax.random.key(0), 3703, p.n_classes)
    logits = np.asarray(model.apply(params, g, p.data.x))
    assert np.all(np.isfinite(logits))
    h = matmul(p.data.x, params["layer_0"]["w"])
    out = np.asarray(propagate(g, h, backend=p.backend))
    np.testing.assert_allclose(out[isolated], np.asarray(h)[isolated], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ["cora", "citeseer"])
def test_features_are_row_normalized(name, cora, citeseer):
    raw, p = {"cora": cora, "citeseer": citeseer}[name]
    sums = row_sums(normalize_features(raw.features))
    assert np.all((np.abs(sums - 1.0) < 1e-5) | (sums == 0.0))
    assert np.count_nonzero(sums == 0.0) == np.count_nonzero(row_sums(raw.features) == 0)
    # The device copy (sparse BCOO) too.
    device_sums = np.asarray(matmul(p.data.x, jnp.ones((raw.features.shape[1], 1), jnp.float32)))[:, 0]
    np.testing.assert_allclose(device_sums, sums, atol=1e-5)


def test_prepared_masks_match_splits(cora):
    raw, p = cora
    for name, mask in (("train", p.data.train_mask), ("val", p.data.val_mask), ("test", p.data.test_mask)):
        np.testing.assert_array_equal(np.flatnonzero(np.asarray(mask)), np.sort(raw.splits[name]))


def test_load_dataset_unknown_name():
    with pytest.raises(ValueError, match=r"unknown dataset 'pubmd' \(did you mean pubmed\?\); choose one of cora, "
                                         r"citeseer, pubmed, "):
        load_dataset("pubmd")


def test_load_bundled_unknown_name():
    with pytest.raises(ValueError, match=r"unknown bundled dataset 'x'"):
        datasets.load_bundled("x")


# --- raw Planetoid files -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cora", "citeseer"])
def test_load_raw_matches_bundled_npz(planetoid_dir, name):
    raw = load_raw(planetoid_dir, name)
    bundled = load_dataset(name)
    assert raw.features.shape == bundled.features.shape
    assert (raw.features != bundled.features).nnz == 0
    np.testing.assert_array_equal(raw.labels, bundled.labels)
    np.testing.assert_array_equal(raw.senders, bundled.senders)
    np.testing.assert_array_equal(raw.receivers, bundled.receivers)
    for split in ("train", "val", "test"):
        np.testing.assert_array_equal(raw.splits[split], bundled.splits[split])


def test_load_dataset_with_data_dir_reads_raw_files(planetoid_dir):
    raw = load_dataset("cora", data_dir=planetoid_dir)
    assert raw.features.shape == (2708, 1433) and raw.senders.size == 10858


# The tests of how a folder is read (not of the published files' content) read small files in the
# Planetoid format that they write (tests/tiny_datasets.py: 560 nodes, 8 features), in every clone.

def test_load_raw_needs_a_name_when_the_folder_holds_several(tmp_path):
    for stem in ("cora", "citeseer"):
        write_planetoid(tmp_path, stem)
    with pytest.raises(ValueError, match=r"^data_dir=.*: expected exactly one ind\.<name>\.graph file, found "
                                         r"citeseer, cora; pass the dataset name \(e\.g\. name='pubmed'\)"):
        load_raw(tmp_path)


def test_load_raw_infers_the_only_name(tmp_path):
    write_planetoid(tmp_path, "cora")
    raw = load_raw(tmp_path)
    assert raw.name == "cora" and raw.features.shape == (P_ALLX + P_TEST, P_F)


def test_load_raw_names_missing_files(tmp_path):
    for part in ("x", "y", "tx", "allx", "ally", "graph"):
        (tmp_path / f"ind.mini.{part}").write_bytes(b"")
    with pytest.raises(ValueError, match=r"^data_dir=.*: missing ind\.mini\.ty, ind\.mini\.test\.index"):
        load_raw(tmp_path, "mini")


def test_load_raw_rejects_a_missing_directory(tmp_path):
    with pytest.raises(ValueError, match=r"^data_dir=.*nope: not a directory"):
        load_raw(tmp_path / "nope", "cora")


class _Exploit:
    """Unpickling this calls ``func(*args)``: the classic pickle code-execution payload."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def payloads(marker):
    return {
        "os.system": _Exploit(os.system, f"touch {marker}"),
        "builtins.exec": _Exploit(builtins.exec, f"open({str(marker)!r}, 'w').close()"),
        "nested-in-list": [1, _Exploit(os.system, f"touch {marker}")],
    }


@pytest.mark.parametrize("kind", ["os.system", "builtins.exec", "nested-in-list"])
def test_restricted_unpickler_refuses_code_execution(tmp_path, kind):
    marker = tmp_path / "pwned"
    data = pickle.dumps(payloads(marker)[kind], protocol=2)
    with pytest.raises(pickle.UnpicklingError, match="refusing to load global"):
        RestrictedUnpickler(io.BytesIO(data)).load()
    path = tmp_path / "ind.evil.graph"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=r"ind\.evil\.graph: not a readable Planetoid pickle \(refusing"):
        safe_load_pickle(path)
    assert not marker.exists()


def test_load_raw_refuses_a_malicious_graph_file(tmp_path):
    marker = tmp_path / "pwned"
    write_planetoid(tmp_path, "cora", graph=pickle.dumps(_Exploit(os.system, f"touch {marker}")))
    with pytest.raises(ValueError, match=r"ind\.cora\.graph: not a readable Planetoid pickle"):
        load_raw(tmp_path, "cora")
    assert not marker.exists()


def test_safe_load_pickle_reads_a_graph_dict(tmp_path):
    # The .graph files are a defaultdict(list) of adjacency lists.
    path = tmp_path / "ind.mini.graph"
    path.write_bytes(pickle.dumps(collections.defaultdict(list, {0: [1, 2], 2: [0]}), protocol=2))
    obj = safe_load_pickle(path)
    assert isinstance(obj, dict) and dict(obj) == {0: [1, 2], 2: [0]}


# --- feature normalization and prepare() -----------------------------------------------------------


def test_normalize_features_variants():
    x = np.array([[1.0, -3.0, 0.0], [0.0, 0.0, 0.0], [2.0, 2.0, 4.0]])
    np.testing.assert_allclose(normalize_features(x, "row"), [[0.25, -0.75, 0.0], [0, 0, 0], [0.25, 0.25, 0.5]])
    np.testing.assert_allclose(normalize_features(sp.csr_matrix(x), "row").toarray(),
                               normalize_features(x, "row"), rtol=1e-6)
    std = normalize_features(x, "standardize")
    np.testing.assert_allclose(std.mean(axis=0), 0.0, atol=1e-6)
    np.testing.assert_allclose(std.std(axis=0), 1.0, rtol=1e-5)
    assert normalize_features(x, "none") is x
    with pytest.raises(ValueError, match=r"feature normalization 'l1' is not one of"):
        normalize_features(x, "l1")


def tiny_raw(**overrides):
    features = np.eye(4, dtype=np.float32)
    base = RawGraph("tiny", np.array([0, 1, 2]), np.array([1, 2, 3]), features, np.array([0, 1, 0, 1], np.int32),
                    {"train": np.array([0, 1]), "val": np.array([2]), "test": np.array([3])})
    return base._replace(**overrides)


@pytest.mark.parametrize(("overrides", "match"), [
    (dict(labels=np.array([0, 1, 0, 1, 0], np.int32)), r"tiny: labels have shape \(5,\), expected \(4,\)"),
    (dict(features=np.array([[np.nan, 0], [0, 1], [1, 0], [0, 1]], np.float32)), r"tiny: features contain NaN"),
    (dict(labels=np.array([0, 1, 0], np.int32)), r"tiny: labels have shape \(3,\), expected \(4,\)"),
    (dict(splits={"train": np.array([0]), "val": np.array([], np.int64), "test": np.array([3])}),
     r"tiny: the val split is empty"),
    (dict(splits={"train": np.array([0, 7]), "val": np.array([2]), "test": np.array([3])}),
     r"tiny: train split holds node id 7 outside \[0, 4\)"),
    (dict(labels=np.array([0, 1, -1, 1], np.int32)), r"tiny: the val split contains unlabelled nodes"),
    (dict(senders=np.array([0, 1, 9])), r"tiny: sender id 9 at position 2"),
])
def test_prepare_errors(overrides, match):
    with pytest.raises(ValueError, match=match):
        prepare(tiny_raw(**overrides))


def test_prepare_error_names_a_negative_split_id():
    raw = tiny_raw(splits={"train": np.array([-3, 1]), "val": np.array([2]), "test": np.array([3])})
    with pytest.raises(ValueError, match=r"node id -3"):
        prepare(raw)


def test_prepare_tiny_graph_end_to_end():
    p = prepare(tiny_raw(), norm="row", feature_norm="none", backend="segment")
    assert p.backend == "segment" and p.n_classes == 2
    assert p.info["undirected_edges"] == 3 and p.info["split_sizes"] == {"train": 2, "val": 1, "test": 1}
    np.testing.assert_array_equal(np.asarray(p.data.train_mask), [1, 1, 0, 0])
    # Row-normalized path graph 0-1-2-3 with self-loops: node 1 averages nodes 0, 1, 2.
    out = np.asarray(propagate(p.data.graph, jnp.asarray(np.arange(4, dtype=np.float32)[:, None]), backend="segment"))
    np.testing.assert_allclose(out[:, 0], [0.5, 1.0, 2.0, 2.5], rtol=1e-6)
    assert prepare(tiny_raw()).backend == "dense"
    assert prepare(tiny_raw()).data.graph.dense is not None


# --- splits -------------------------------------------------------------------------------------------


def test_planetoid_split_per_class_counts_and_disjointness():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 400).astype(np.int32)
    labels[:10] = -1  # unlabelled: never used
    s = planetoid_split(labels, per_class=7, n_val=50, n_test=100, seed=3)
    np.testing.assert_array_equal(np.bincount(labels[s["train"]], minlength=3), [7, 7, 7])
    assert (len(s["val"]), len(s["test"])) == (50, 100)
    assert_disjoint_splits(s, 400)
    used = np.concatenate(list(s.values()))
    assert np.all(labels[used] >= 0)
    for k in s:
        assert np.all(np.diff(s[k]) > 0)
    again = planetoid_split(labels, per_class=7, n_val=50, n_test=100, seed=3)
    other = planetoid_split(labels, per_class=7, n_val=50, n_test=100, seed=4)
    for k in s:
        np.testing.assert_array_equal(again[k], s[k])
    assert not np.array_equal(other["train"], s["train"])


def test_planetoid_split_shrinks_val_and_test_on_small_graphs():
    labels = np.array([0, 1] * 20)
    s = planetoid_split(labels, per_class=5, n_val=500, n_test=1000)
    assert len(s["train"]) == 10
    assert len(s["val"]) == 30 // 3 and len(s["test"]) == 20  # val at most a third of the rest
    assert_disjoint_splits(s, 40)


def test_planetoid_split_rejects_too_small_class():
    labels = np.array([0] * 30 + [1] * 4 + [2] * 30)
    with pytest.raises(ValueError, match=r"class 1 has 4 labelled nodes, fewer than the 5 .*train-per-class"):
        planetoid_split(labels, per_class=5)


# --- synthetic ----------------------------------------------------------------------------------------


def test_synthetic_sizes_and_labels():
    g = synthetic(600, n_classes=5, n_features=12, avg_degree=6.0, seed=2)
    assert g.features.shape == (600, 12) and g.features.dtype == np.float32
    assert g.labels.shape == (600,) and g.labels.min() == 0 and g.labels.max() == 4
    assert g.senders.size == g.receivers.size == 1800  # n * avg_degree / 2
    assert g.senders.min() >= 0 and max(g.senders.max(), g.receivers.max()) < 600
    np.testing.assert_array_equal(np.bincount(g.labels[g.splits["train"]]), [20] * 5)
    assert_disjoint_splits(g.splits, 600)


def same_class_fraction(g):
    return float(np.mean(g.labels[g.senders] == g.labels[g.receivers]))


def test_synthetic_homophily_is_visible():
    c = 4
    high = synthetic(2000, n_classes=c, homophily=0.8, seed=0)
    none = synthetic(2000, n_classes=c, homophily=0.0, seed=0)
    # Expected same-class fraction: h + (1 - h) / c (about 0.85 here) vs 1 / c = 0.25 by chance.
    assert same_class_fraction(high) == pytest.approx(0.8 + 0.2 / c, abs=0.03)
    assert same_class_fraction(none) == pytest.approx(1 / c, abs=0.03)


def test_synthetic_features_carry_the_class_signal():
    g = synthetic(2000, n_classes=3, n_features=8, signal=2.0, seed=0)
    means = np.stack([g.features[g.labels == k].mean(axis=0) for k in range(3)])
    nearest = np.argmin(((g.features[:, None, :] - means[None]) ** 2).sum(-1), axis=1)
    assert np.mean(nearest == g.labels) > 0.8
    noise = synthetic(2000, n_classes=3, n_features=8, signal=0.0, seed=0)
    assert np.abs(noise.features.mean(axis=0)).max() < 0.1


def test_synthetic_is_deterministic_per_seed():
    a, b, c = synthetic(300, seed=5), synthetic(300, seed=5), synthetic(300, seed=6)
    np.testing.assert_array_equal(a.features, b.features)
    np.testing.assert_array_equal(a.senders, b.senders)
    assert not np.array_equal(a.labels, c.labels)


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(n_nodes=0), r"n_nodes=0 must be >= 1"),
    (dict(n_features=0), r"n_features=0 must be >= 1"),
    (dict(n_nodes=7, n_classes=4), r"n_nodes=7 is too small for 4 classes"),
    (dict(homophily=1.5), r"homophily=1\.5 must be in \[0, 1\]"),
    (dict(avg_degree=-1.0), r"avg_degree >= 0"),
])
def test_synthetic_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        synthetic(**kwargs)


def test_split_codes_are_in_the_input_node_order_after_a_reorder():
    """The split saved with a model (and written by --save-split) is per INPUT node: a prepared graph
    renumbered by RCM must give the same codes as the unreordered one, not its own numbering's."""
    raw = synthetic(300, n_classes=3, n_features=8, seed=4)
    plain, reordered = prepare(raw, on_device=False), prepare(raw, reorder="rcm", on_device=False)
    order = np.asarray(reordered.info["node_order"])
    assert not np.array_equal(order, np.arange(300))  # the renumbering really moved nodes
    codes = datasets.split_codes(plain)
    assert sorted(np.unique(codes).tolist()) == [1, 2, 3]
    np.testing.assert_array_equal(datasets.split_codes(reordered), codes)
    np.testing.assert_array_equal(codes[raw.splits["train"]], 1)


# --- catalogue sizes ------------------------------------------------------------------------------


def test_catalogue_download_sizes_are_shown_exact_approximate_or_unknown(tmp_path):
    from jaxgcn.cli.datasets import status
    from jaxgcn.datasets.catalogue import CATALOGUE, lookup

    shown = {name: status(lookup(name), tmp_path) for name in ("pubmed", "amazon-computers", "ogbn-arxiv",
                                                                 "ogbn-proteins", "ogbn-products", "ogbn-papers100M",
                                                                 "cora-full", "cora")}
    assert shown == {"pubmed": "download 8.7 MB", "amazon-computers": "download 31.9 MB",
                     "ogbn-arxiv": "download ~83 MB", "ogbn-proteins": "download ~225 MB",
                     "ogbn-products": "download ~1.5 GB", "ogbn-papers100M": "download ~60.3 GB",
                     "cora-full": "download ? MB", "cora": "bundled"}
    # OGB's bar of N steps (int(size / MiB) + 2) puts the file between N - 2 and N - 1 MiB: the middle is stored
    assert lookup("ogbn-arxiv").sources[0].size == 79 * 2**20 + 2**19
    approximate = {d.name for d in CATALOGUE.values() if d.download_approx}
    assert approximate == {"ogbn-arxiv", "ogbn-products", "ogbn-papers100M", "ogbn-proteins"}
