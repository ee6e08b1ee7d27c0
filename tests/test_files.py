"""Generic graph files (jaxgcn.datasets.files): formats, id mapping, and every bad input named."""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sp
from cli_run import unwrap

from jaxgcn.datasets.files import load_files, read_edges, read_features, read_labels

EDGES_CSV = "src,dst\nalice,bob\nbob,carol\ncarol,dave\ndave,alice\n"
LABELS_CSV = "node,label\nalice,cat\nbob,dog\ncarol,cat\ndave,dog\n"
DENSE_CSV = "node,f0,f1\ndave,0,1\nalice,1,0\nbob,0.5,0.5\ncarol,2,0\n"
TRIPLETS_CSV = "node,feature,value\ndave,1,1\nalice,0,1\nbob,0,0.5\nbob,1,0.5\ncarol,0,2\n"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def adjacency(raw):
    n = raw.labels.size
    return sp.coo_matrix((np.ones(raw.senders.size), (raw.receivers, raw.senders)), shape=(n, n)).toarray()


def by_name(raw):
    """Features, labels and adjacency indexed by node NAME, so different node orders compare."""
    ids = list(raw.node_ids)
    order = [ids.index(name) for name in ("alice", "bob", "carol", "dave")]
    x = raw.features.toarray() if sp.issparse(raw.features) else raw.features
    adj = adjacency(raw)
    return x[order], raw.labels[order], adj[np.ix_(order, order)]


def test_dense_csv_and_triplets_give_the_same_graph(tmp_path):
    e, lab = write(tmp_path, "e.csv", EDGES_CSV), write(tmp_path, "l.csv", LABELS_CSV)
    dense = load_files(e, write(tmp_path, "d.csv", DENSE_CSV), lab)
    trip = load_files(e, write(tmp_path, "t.csv", TRIPLETS_CSV), lab)
    assert list(dense.node_ids) == ["dave", "alice", "bob", "carol"]  # the features file's order
    assert dense.class_names == ["cat", "dog"]
    for a, b in zip(by_name(dense), by_name(trip)):
        np.testing.assert_array_equal(a, b)
    x, labels, adj = by_name(dense)
    np.testing.assert_array_equal(x, [[1, 0], [0.5, 0.5], [2, 0], [0, 1]])
    assert labels.tolist() == [0, 1, 0, 1]
    assert adj[1, 0] == 1 and adj[0, 3] == 1  # alice->bob, dave->alice


def test_whitespace_edge_list_npy_features_and_integer_labels(tmp_path):
    e = write(tmp_path, "e.txt", "0 1\n1 2 2.5\n".replace(" 2.5", "") + "2 3\n3 0\n")
    np.save(tmp_path / "x.npy", np.eye(4, dtype=np.float32))
    lab = write(tmp_path, "l.csv", "node,label\n0,10\n1,2\n2,10\n")
    raw = load_files(e, tmp_path / "x.npy", lab)
    assert raw.class_names == ["2", "10"]  # integer labels sorted by value
    assert raw.labels.tolist() == [1, 0, 1, -1]  # node 3 has no label: unlabelled
    assert raw.senders.tolist() == [0, 1, 2, 3] and raw.receivers.tolist() == [1, 2, 3, 0]


def test_featureless_graph_gets_identity_features(tmp_path):
    raw = load_files(write(tmp_path, "e.csv", EDGES_CSV), None, write(tmp_path, "l.csv", LABELS_CSV))
    assert sp.issparse(raw.features) and raw.features.shape == (4, 4)
    assert sorted(raw.node_ids) == ["alice", "bob", "carol", "dave"]


def test_weighted_csv_edges(tmp_path):
    src, dst, w, line0 = read_edges(write(tmp_path, "e.csv", "dst,src,weight\n1,2,0.5\n2,3,2\n"))
    assert src.tolist() == ["2", "3"] and dst.tolist() == ["1", "2"] and w.tolist() == [0.5, 2.0] and line0 == 2


def test_a_large_file_loads_vectorized(tmp_path):
    rng = np.random.default_rng(0)
    n = 200_000
    edges = rng.integers(0, n, (300_000, 2))
    np.savetxt(tmp_path / "e.csv", edges, fmt="%d", delimiter=",", header="src,dst", comments="")
    labels = np.stack([np.arange(n), rng.integers(0, 5, n)], 1)
    np.savetxt(tmp_path / "l.csv", labels, fmt="%d", delimiter=",", header="node,label", comments="")
    raw = load_files(tmp_path / "e.csv", None, tmp_path / "l.csv")
    assert raw.senders.size == 300_000 and raw.labels.size == n


@pytest.mark.parametrize(("name", "text", "reader", "pattern"), [
    ("e.csv", "", read_edges, r"edges file .*e\.csv: empty \(no rows\)"),
    ("e.csv", "from,to\n1,2\n", read_edges, r"header from,to lacks column\(s\) src, dst; expected src,dst,weight"),
    ("e.csv", "src,dst,weight\n1,2,abc\n", read_edges, r"line 2, column 3: 'abc' is not a number"),
    ("e.csv", "src,dst,weight\n1,2,-1\n", read_edges, r"line 2: weight -1 must be finite and >= 0"),
    ("e.txt", "1 2 3 4\n", read_edges, r"4 columns; a header-less edge list has 'src dst'"),
    ("e.csv", "src,dst\n1,2\n3\n", read_edges, r"every row needs the same number of columns"),
    ("f.csv", "node,f0\na,1\nb,nan\n", read_features, r"features file .*: NaN or inf at line 3, column 2"),
    ("f.csv", "node,f0\na,1\na,2\n", read_features, r"node 'a' appears twice \(lines 2 and 3\)"),
    ("f.csv", "id,f0\na,1\n", read_features, r"the first column is 'id'; it must be 'node'"),
    ("f.csv", "node,f0\na,x\n", read_features, r"line 2, column 2: 'x' is not a number"),
    ("f.csv", "node,feature,value\na,1.5,1\n", read_features, r"feature index '1.5' must be an integer >= 0"),
    ("l.csv", "node,label\na,x\na,y\n", read_labels, r"node 'a' appears twice"),
    ("l.csv", "node,class\na,x\n", read_labels, r"lacks column\(s\) label"),
    ("l.csv", "node,label\n", read_labels, r"no data rows below the header"),
])
def test_bad_files_are_named(tmp_path, name, text, reader, pattern):
    with pytest.raises(ValueError, match=pattern):
        reader(write(tmp_path, name, text))


def test_missing_file_and_unknown_nodes(tmp_path):
    with pytest.raises(ValueError, match=r"edges file .*nope\.csv: not found"):
        read_edges(tmp_path / "nope.csv")
    e, lab = write(tmp_path, "e.csv", EDGES_CSV + "alice,eve\n"), write(tmp_path, "l.csv", LABELS_CSV)
    with pytest.raises(ValueError, match=r"edges file .*: node 'eve' \(line 6\) has no row in the features file "
                                         r".*d\.csv; "
                                         r"add its features or drop it"):
        load_files(e, write(tmp_path, "d.csv", DENSE_CSV), lab)
    lab2 = write(tmp_path, "l2.csv", LABELS_CSV + "zoe,cat\n")
    with pytest.raises(ValueError, match=r"labels file .*l2\.csv: node 'zoe' \(line 6\) has no row in the features"):
        load_files(write(tmp_path, "e2.csv", EDGES_CSV), tmp_path / "d.csv", lab2)
    np.save(tmp_path / "bad.npy", np.array([[1.0, np.inf]]))
    with pytest.raises(ValueError, match=r"NaN or inf at row 0, column 1"):
        read_features(tmp_path / "bad.npy")


def own_graph(tmp_path, n=300, n_classes=3, seed=0):
    """A homophilous graph with string ids, string labels and sparse triplet features, as files."""
    from jaxgcn.datasets import synthetic

    raw = synthetic(n, n_classes=n_classes, n_features=12, seed=seed)
    ids = np.array([f"n{i:04d}" for i in range(n)])
    names = np.array(["alpha", "beta", "gamma", "delta"])[:n_classes]
    with open(tmp_path / "edges.csv", "w") as f:
        f.write("src,dst\n" + "".join(f"{ids[s]},{ids[d]}\n" for s, d in zip(raw.senders, raw.receivers)))
    x = np.asarray(raw.features)
    rows, cols = np.nonzero(np.abs(x) > 0.5)
    with open(tmp_path / "feats.csv", "w") as f:
        f.write("node,feature,value\n" + "".join(f"{ids[r]},{c},{x[r, c]:.5f}\n" for r, c in zip(rows, cols)))
    with open(tmp_path / "labels.csv", "w") as f:
        f.write("node,label\n" + "".join(f"{ids[i]},{names[raw.labels[i]]}\n" for i in range(n)))
    return tmp_path / "edges.csv", tmp_path / "feats.csv", tmp_path / "labels.csv"


def test_cli_trains_own_files_and_the_saved_split_reproduces_the_run(tmp_path, capsys):
    from jaxgcn.cli import main

    edges, feats, labels = own_graph(tmp_path)
    base = ["train", "--edges", str(edges), "--features", str(feats), "--labels", str(labels), "--epochs", "30",
            "--train-per-class", "10", "--val", "60", "--test", "100", "--no-compile-cache", "--quiet"]
    assert main([*base, "--save-split", str(tmp_path / "split.csv")]) == 0
    first = capsys.readouterr().out
    lines = (tmp_path / "split.csv").read_text().splitlines()
    assert lines[0] == "node,split" and len(lines) == 1 + 30 + 60 + 100
    assert all(line.split(",")[0].startswith("n") for line in lines[1:])  # the files' own ids
    assert main([*base, "--split-file", str(tmp_path / "split.csv")]) == 0
    again = capsys.readouterr().out
    assert again.split(" | compile")[0] == first.split(" | compile")[0]  # same split and seed: same accuracies
    acc = float(first.split("test accuracy ")[1].split()[0])
    assert acc > 0.6  # 3 classes: chance is 1/3


def test_cli_fraction_split_and_errors(tmp_path, capsys):
    from jaxgcn.cli import main

    edges, feats, labels = own_graph(tmp_path)
    args = ["train", "--edges", str(edges), "--labels", str(labels), "--epochs", "5", "--no-compile-cache", "--quiet"]
    assert main([*args, "--train-frac", "0.5", "--val-frac", "0.2", "--test-frac", "0.3",
                 "--save-split", str(tmp_path / "s.csv")]) == 0
    kinds = [line.split(",")[1] for line in (tmp_path / "s.csv").read_text().splitlines()[1:]]
    counts = np.array([kinds.count("train"), kinds.count("val"), kinds.count("test")])
    assert np.all(np.abs(counts - [150, 60, 90]) <= 2), counts  # per-class rounding, 3 classes
    capsys.readouterr()
    assert main([*args, "--train-per-class", "500"]) == 2
    assert "fewer than the 500 train nodes per class" in unwrap(capsys.readouterr().err)
    (tmp_path / "bad.csv").write_text("node,split\nn0001,train\nzzz,val\n")
    out = tmp_path / "never.json"
    assert main([*args, "--split-file", str(tmp_path / "bad.csv"), "--json", str(out)]) == 2
    assert re.search(r"split file .*bad\.csv: line 3: node 'zzz' is not a node of the graph",
                     unwrap(capsys.readouterr().err))
    assert not out.exists()
