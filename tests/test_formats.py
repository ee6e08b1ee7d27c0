"""Readers of published dataset formats: gnn-benchmark npz, WikiCS JSON, OGB's binary layout,
and the Shchur et al. per-class split."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from jaxgcn import datasets
from jaxgcn.datasets.gnnbench import load_gnnbench
from jaxgcn.datasets.ogb import load_ogb
from jaxgcn.datasets.splits import per_class_split
from jaxgcn.datasets.wikics import load_wikics

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"
GNNBENCH, PLANETOID = SHARED / "gnn-benchmark", SHARED / "planetoid"


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared dataset folder is not checked out here)")
    return path


def undirected_pairs(senders: np.ndarray, receivers: np.ndarray) -> int:
    """Distinct {i, j} pairs, i != j: the edge count after symmetrization and cleaning."""
    keep = senders != receivers
    lo, hi = np.minimum(senders[keep], receivers[keep]), np.maximum(senders[keep], receivers[keep])
    return np.unique(lo * (max(hi.max(initial=0), 0) + 1) + hi).size


# ----------------------------------------------------------------------------- per_class_split

def test_per_class_split_counts_order_and_determinism():
    labels = np.array([0] * 70 + [1] * 50 + [-1] * 9 + [2] * 61)
    s = per_class_split(labels, seed=3)
    assert [len(s[k]) for k in ("train", "val", "test")] == [60, 90, 20 + 0 + 11]
    for k in ("train", "val"):
        assert np.bincount(labels[s[k]]).tolist() == ([20] * 3 if k == "train" else [30] * 3)
    assert np.bincount(labels[s["test"]], minlength=3).tolist() == [20, 0, 11]
    everything = np.concatenate([s["train"], s["val"], s["test"]])
    assert np.array_equal(np.sort(everything), np.flatnonzero(labels >= 0))  # disjoint, all labelled, no -1
    assert all(np.array_equal(v, np.sort(v)) and v.dtype == np.int64 for v in s.values())
    again, other = per_class_split(labels, seed=3), per_class_split(labels, seed=4)
    assert all(np.array_equal(s[k], again[k]) for k in s)
    assert not np.array_equal(s["train"], other["train"])
    assert [len(v) for v in per_class_split(labels, 5, 10).values()] == [15, 30, 181 - 45]


def test_per_class_split_names_a_class_that_is_too_small():
    labels = np.array([0] * 60 + [1] * 49)
    with pytest.raises(ValueError, match=r"^class 'Rare' \(id 1\) has 49 labelled nodes, fewer than the 20 train "
                                         r"\+ 30 val per class the split needs; lower train_per_class"):
        per_class_split(labels, class_names=["Common", "Rare"])
    with pytest.raises(ValueError, match=r"^class 1 has 49 labelled nodes"):
        per_class_split(labels)
    with pytest.raises(ValueError, match=r"^val_per_class=-1: must be an integer >= 0"):
        per_class_split(labels, val_per_class=-1)
    assert len(per_class_split(labels, 19, 30)["test"]) == 60 - 49 + 0


# ----------------------------------------------------------------------------- gnn-benchmark npz

def test_gnnbench_cora_matches_the_file_and_the_planetoid_graph():
    g = load_gnnbench(need(GNNBENCH / "cora.npz"), "cora")
    assert g.features.shape == (2708, 1433) and sp.isspmatrix_csr(g.features) and g.features.dtype == np.float32
    assert g.features.nnz == 49216 and g.senders.size == 5429 and g.senders.dtype == g.receivers.dtype == np.int64
    assert g.labels.dtype == np.int32 and np.bincount(g.labels).tolist() == [298, 418, 818, 426, 217, 180, 351]
    assert g.class_names[2] == "Neural_Networks" and len(g.class_names) == 7 and g.node_ids[0] == "1000012"
    assert [len(g.splits[k]) for k in ("train", "val", "test")] == [140, 210, 2708 - 350]
    assert g.weights is None and g.official_splits is None
    with np.load(GNNBENCH / "cora.npz") as z:  # entry [i, j] (row i) is the edge i -> j
        row = int(np.flatnonzero(np.diff(z["adj_indptr"]))[0])
        first = int(z["adj_indices"][z["adj_indptr"][row]])
    assert (row, first) == (1, 2399) and (int(g.senders[0]), int(g.receivers[0])) == (row, first)
    p = datasets.load_raw(need(PLANETOID), "cora")
    # same 2,708 papers; 5,429 directed entries here vs Planetoid's 10,858 (both directions, 302
    # duplicates): after symmetrizing and cleaning both give Cora's 5,278 cleaned edges
    assert p.features.shape[0] == 2708 and p.senders.size == 10858
    assert undirected_pairs(g.senders, g.receivers) == undirected_pairs(p.senders, p.receivers) == 5278


def test_gnnbench_citeseer_has_no_padded_nodes():
    g = load_gnnbench(need(GNNBENCH), "citeseer")
    p = datasets.load_raw(need(PLANETOID), "citeseer")
    # Planetoid pads 15 isolated test ids with zero rows; gnn-benchmark's file has no such nodes
    assert p.features.shape[0] == 3327 and g.features.shape == (3312, 3703)
    assert g.senders.size == 4715 and int(np.sum(g.senders == g.receivers)) == 124
    assert undirected_pairs(g.senders, g.receivers) == 4536 and undirected_pairs(p.senders, p.receivers) == 4552
    assert np.bincount(g.labels).tolist() == [249, 596, 701, 508, 668, 590] and g.class_names[0] == "AI"
    assert [len(g.splits[k]) for k in ("train", "val", "test")] == [120, 180, 3012]


@pytest.mark.parametrize(("name", "nodes", "edges"), [("cora", 2485, 5069), ("citeseer", 2110, 3668)])
def test_gnnbench_largest_component_is_the_papers_table_1(name, nodes, edges):
    g = load_gnnbench(need(GNNBENCH / f"{name}.npz"), name, largest_component=True)
    assert g.features.shape[0] == g.labels.shape[0] == g.node_ids.shape[0] == nodes
    assert undirected_pairs(g.senders, g.receivers) == edges  # Shchur et al. 2018, Table 1
    assert g.senders.max() < nodes and sum(len(v) for v in g.splits.values()) == nodes


def write_gnnbench(path: Path, *, labels=None, n=4, **extra) -> Path:
    adj = sp.csr_matrix(np.array([[0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [1, 0, 0, 0]][:n], np.float32)[:, :n])
    arrays = {"adj_data": adj.data, "adj_indices": adj.indices, "adj_indptr": adj.indptr, "adj_shape": adj.shape,
              "attr_matrix": np.eye(n, 3, dtype=np.float64), "class_names": np.array(["a", "b"])}
    if labels is not None:
        arrays["labels"] = labels
    arrays.update(extra)
    arrays = {k: v for k, v in arrays.items() if v is not None}
    np.savez(path, **arrays)
    return path


def test_gnnbench_small_fixture_formats(tmp_path):
    # one-hot CSR labels (nodes 0..59 class 1, 60..119 class 0, 120 none), dense attributes, a
    # pickled metadata array that is skipped unread
    n = 121
    onehot = sp.csr_matrix((np.ones(120), ([*range(120)], [1] * 60 + [0] * 60)), shape=(n, 2))
    adj = sp.csr_matrix((np.full(3, 2.0), ([5, 6, 7], [6, 7, 5])), shape=(n, n))
    np.savez(tmp_path / "g.npz", adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr,
             adj_shape=adj.shape, attr_matrix=np.arange(n * 2, dtype=np.float64).reshape(n, 2),
             labels_data=onehot.data, labels_indices=onehot.indices, labels_indptr=onehot.indptr,
             labels_shape=onehot.shape, metadata=np.array([{"pickled": True}], dtype=object))
    g = load_gnnbench(tmp_path / "g.npz", "g")
    assert g.labels[0] == 1 and g.labels[60] == 0 and g.labels[120] == -1 and g.labels.dtype == np.int32
    assert sp.isspmatrix_csr(g.features) and g.features.dtype == np.float32 and g.features[3, 1] == 7.0
    assert g.senders.tolist() == [5, 6, 7] and g.receivers.tolist() == [6, 7, 5] and g.weights.tolist() == [2.0] * 3
    assert [len(g.splits[k]) for k in ("train", "val", "test")] == [40, 60, 20] and g.class_names is None


def test_gnnbench_drops_classes_of_50_or_fewer_nodes_like_cora_full(tmp_path):
    labels = np.array([0] * 51 + [1] * 50 + [2] * 55, np.int8)
    n = labels.size
    adj = sp.csr_matrix((np.ones(2), ([0, 60], [60, 101])), shape=(n, n))  # 60 is in the dropped class 1
    np.savez(tmp_path / "full.npz", adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr,
             adj_shape=adj.shape, labels=labels, class_names=np.array(["A", "B", "C"]),
             node_names=np.array([f"n{i}" for i in range(n)]))
    g = load_gnnbench(tmp_path, "full")
    assert g.labels.shape == (106,) and np.bincount(g.labels).tolist() == [51, 55] and g.class_names == ["A", "C"]
    assert g.senders.size == 0 and g.node_ids[51] == "n101" and g.features.shape == (106, 106)
    assert [len(g.splits[k]) for k in ("train", "val", "test")] == [40, 60, 6]


def test_gnnbench_errors_name_the_file_and_the_array(tmp_path):
    labels = np.zeros(4, np.int64)
    with pytest.raises(ValueError, match=r"gnn-benchmark file .*g\.npz: lacks the arrays adj_indptr of the adj matrix"):
        load_gnnbench(write_gnnbench(tmp_path / "g.npz", labels=labels, adj_indptr=None), "g")
    with pytest.raises(ValueError, match=r"g\.npz: labels have shape \(3,\) and dtype int64; expected 4 integer"):
        load_gnnbench(write_gnnbench(tmp_path / "g.npz", labels=labels[:3]), "g")
    with pytest.raises(ValueError, match=r"g\.npz: no labels \(neither a labels array nor labels_data"):
        load_gnnbench(write_gnnbench(tmp_path / "g.npz"), "g")
    with pytest.raises(ValueError, match=r"g\.npz: the features have 3 rows for the 4 nodes of adj_shape"):
        load_gnnbench(write_gnnbench(tmp_path / "g.npz", labels=labels, attr_matrix=np.ones((3, 2))), "g")
    with pytest.raises(ValueError, match=r"g\.npz: label 5 but class_names has 2 names"):
        load_gnnbench(write_gnnbench(tmp_path / "g.npz", labels=np.array([0, 1, 5, 0])), "g")
    with pytest.raises(ValueError, match=r"adj_shape \(4, 5\) is not square"):
        load_gnnbench(write_gnnbench(tmp_path / "g.npz", labels=labels, adj_shape=(4, 5)), "g")
    two = sp.csr_matrix(np.array([[1, 1], [1, 0], [0, 1], [1, 0]]))
    with pytest.raises(ValueError, match=r"g\.npz: node 0 has 2 labels: a multi-label dataset"):
        load_gnnbench(write_gnnbench(tmp_path / "g.npz", labels_data=two.data, labels_indices=two.indices,
                                     labels_indptr=two.indptr, labels_shape=two.shape), "g")
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ValueError, match=r"bad\.npz: not a readable \.npz archive"):
        load_gnnbench(tmp_path, "bad")
    with pytest.raises(ValueError, match=r"missing\.npz: not found"):
        load_gnnbench(tmp_path, "missing")


# ----------------------------------------------------------------------------- WikiCS JSON

def wikics_data(n_splits: int = 20) -> dict:
    """Seven nodes, two classes, WikiCS's keys; split i trains on node i % 3."""
    def mask(ids):
        return [int(i in ids) for i in range(7)]
    return {"features": [[float(i), 0.5, -1.0] for i in range(7)], "labels": [0, 1, 0, 1, 0, 1, 1],
            "links": [[1, 2], [0], [], [4, 5, 6], [], [3], [0]],
            "train_masks": [mask({i % 3, 3}) for i in range(n_splits)],
            "val_masks": [mask({4}) for _ in range(n_splits)],
            "stopping_masks": [mask({5 - i % 2}) for i in range(n_splits)],
            "test_mask": mask({6})}


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_wikics_reads_20_official_splits(tmp_path):
    g = load_wikics(write_json(tmp_path / "data.json", wikics_data()).parent)
    assert g.name == "wikics" and g.features.shape == (7, 3) and g.features.dtype == np.float32
    assert g.features[4, 0] == 4.0 and g.labels.tolist() == [0, 1, 0, 1, 0, 1, 1] and g.labels.dtype == np.int32
    assert g.senders.tolist() == [0, 0, 1, 3, 3, 3, 5, 6] and g.receivers.tolist() == [1, 2, 0, 4, 5, 6, 3, 0]
    assert g.senders.dtype == np.int64 and len(g.official_splits) == 20
    assert g.splits is g.official_splits[0]
    s7 = g.official_splits[7]  # 7 % 3 = 1; stopping node 5 - 1 = 4: val is the stopping set
    assert s7["train"].tolist() == [1, 3] and s7["val"].tolist() == [4] and s7["test"].tolist() == [6]
    assert s7["val_select"].tolist() == [4] and g.official_splits[0]["val"].tolist() == [5]
    assert g.official_splits[19]["train"].tolist() == [1, 3]
    prepared = datasets.prepare(g, on_device=False)  # the extra val_select key rides along
    assert prepared.n_classes == 2 and prepared.info["split_sizes"] == {"train": 2, "val": 1, "test": 1,
                                                                        "val_select": 1}


def test_wikics_errors_name_the_key_and_the_fix(tmp_path):
    path = tmp_path / "data.json"
    data = wikics_data()
    del data["stopping_masks"]
    with pytest.raises(ValueError, match=r"WikiCS file .*data\.json: lacks the keys stopping_masks"):
        load_wikics(write_json(path, data))
    data = wikics_data()
    data["features"][3] = [1.0, 2.0]
    with pytest.raises(ValueError, match=r"features\[3\] has 2 entries but features\[0\] has 3"):
        load_wikics(write_json(path, data))
    data = wikics_data()
    data["links"][3] = [4, 7]
    with pytest.raises(ValueError, match=r"links\[3\] names node 7, outside \[0, 7\)"):
        load_wikics(write_json(path, data))
    data = wikics_data()
    data["val_masks"] = data["val_masks"][:19]
    with pytest.raises(ValueError, match=r"20 train_masks, 19 val_masks, 20 stopping_masks and 1 test_mask lists"):
        load_wikics(write_json(path, data))
    data = wikics_data()
    data["train_masks"][2][0] = 2
    with pytest.raises(ValueError, match=r"'train_masks' holds 2; a mask entry is 0 or 1"):
        load_wikics(write_json(path, data))
    data = wikics_data()
    data["labels"][1] = 1.5
    with pytest.raises(ValueError, match=r"'labels' must be a non-empty list of integer class ids"):
        load_wikics(write_json(path, data))
    path.write_text('{"features": [1,', encoding="utf-8")
    with pytest.raises(ValueError, match=r"data\.json: not valid JSON \(line 1, column"):
        load_wikics(path)


# ----------------------------------------------------------------------------- OGB, both layouts

def write_gz(path: Path, rows: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(",".join(str(v) for v in np.atleast_1d(row)) + "\n")


GRAPH = {"edges": np.array([[0, 1], [1, 2], [2, 0], [3, 4], [4, 5], [5, 3], [0, 5]]),
         "feat": np.round(np.linspace(-1, 1, 18).reshape(6, 3), 3).astype(np.float32),
         "labels": np.array([[0.0], [2.0], [np.nan], [1.0], [0.0], [2.0]])}


def write_ogb(root: Path, layout: str, labels: np.ndarray = GRAPH["labels"]) -> Path:
    raw = root / "raw"
    raw.mkdir(parents=True)
    if layout == "csv":
        write_gz(raw / "edge.csv.gz", GRAPH["edges"])
        write_gz(raw / "node-feat.csv.gz", GRAPH["feat"])
        write_gz(raw / "node-label.csv.gz", labels)
        write_gz(raw / "num-node-list.csv.gz", np.array([6]))
    else:
        np.savez(raw / "data.npz", edge_index=GRAPH["edges"].T, node_feat=GRAPH["feat"],
                 node_year=np.arange(2010, 2016)[:, None], num_nodes_list=np.array([6]),
                 num_edges_list=np.array([len(GRAPH["edges"])]))
        np.savez(raw / "node-label.npz", node_label=labels)
    for name, ids in (("train", [0, 1]), ("valid", [3]), ("test", [4, 5])):
        write_gz(root / "split" / "time" / f"{name}.csv.gz", np.array(ids))
    return root


def test_ogb_binary_and_csv_layouts_give_the_same_graph(tmp_path):
    a, b = load_ogb(write_ogb(tmp_path / "csv", "csv")), load_ogb(write_ogb(tmp_path / "bin", "binary"))
    assert b.senders.tolist() == [0, 1, 2, 3, 4, 5, 0] and b.receivers.tolist() == [1, 2, 0, 4, 5, 3, 5]
    assert b.labels.tolist() == [0, 2, -1, 1, 0, 2] and b.labels.dtype == np.int32 and b.senders.dtype == np.int64
    assert b.features.dtype == np.float32 and b.features[1, 2] == GRAPH["feat"][1, 2]
    assert {k: v.tolist() for k, v in b.splits.items()} == {"train": [0, 1], "val": [3], "test": [4, 5]}
    for field in ("senders", "receivers", "features", "labels"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field
    assert all(np.array_equal(a.splits[k], b.splits[k]) for k in a.splits)


@pytest.mark.parametrize("layout", ["csv", "binary"])
def test_ogb_reads_a_multi_label_table_and_names_a_bad_target(tmp_path, layout):
    labels = np.tile(np.array([[0.0], [1.0]]), (3, 112))  # 6 nodes x 112 binary tasks, like ogbn-proteins
    labels[2, 5] = np.nan  # a missing target
    raw = load_ogb(write_ogb(tmp_path / layout, layout, labels))
    assert raw.labels.shape == (6, 112) and raw.labels.dtype == np.float32
    assert np.array_equal(raw.labels, labels.astype(np.float32), equal_nan=True)
    labels[4, 7] = 2.0
    with pytest.raises(ValueError, match=r"node-label\.(csv\.gz|npz): (line|entry|row) 5, label column 8 holds 2\.0; "
                                         r"several label columns are multi-label targets: 1, 0, or missing"):
        load_ogb(write_ogb(tmp_path / f"{layout}-bad", layout, labels))


def test_ogb_binary_layout_errors(tmp_path):
    root = write_ogb(tmp_path / "a", "binary")
    np.savez(root / "raw" / "data.npz", edge_index=GRAPH["edges"].T, num_nodes_list=np.array([6]),
             num_edges_list=np.array([9]))
    with pytest.raises(ValueError, match=r"data\.npz: num_edges_list says 9 edges but edge_index holds 7"):
        load_ogb(root)
    np.savez(root / "raw" / "data.npz", edge_index=GRAPH["edges"].T, num_edges_list=np.array([7]))
    with pytest.raises(ValueError, match=r"data\.npz: lacks the array 'num_nodes_list'; OGB's binary layout"):
        load_ogb(root)
    np.savez(root / "raw" / "data.npz", edge_index=GRAPH["edges"], num_nodes_list=np.array([6]),
             num_edges_list=np.array([7]))
    with pytest.raises(ValueError, match=r"edge_index has shape \(7, 2\) .*expected \[2, n_edges\]"):
        load_ogb(root)
    np.savez(root / "raw" / "data.npz", edge_index=np.array([[0, 1], [1, 6]]), num_nodes_list=np.array([6]),
             num_edges_list=np.array([2]))
    with pytest.raises(ValueError, match=r"data\.npz \(edge_index\): entry 2 has node id \[1, 6\] outside \[0, 6\)"):
        load_ogb(root)
    np.savez(root / "raw" / "node-label.npz", node_label=GRAPH["labels"][:5])
    with pytest.raises(ValueError, match=r"node-label\.npz: 5 labels for 6 nodes \(.*data\.npz \(num_nodes_list\)\)"):
        load_ogb(root)
    (root / "raw" / "data.npz").unlink()
    with pytest.raises(ValueError, match=r"raw: neither edge\.csv\.gz \(OGB's CSV layout\) nor data\.npz"):
        load_ogb(root)
