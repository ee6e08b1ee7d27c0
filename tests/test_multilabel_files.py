"""Several labels per node from your own CSV files (jaxgcn.datasets.files): the two multi-label forms
of the labels file (a 1/0/empty column per label; one row per node and label), every bad form named
on one line, the split such targets get, and `jaxgcn train --edges --labels` training them."""

from __future__ import annotations

import re

import numpy as np
import pytest
from cli_run import run_main, unwrap

from jaxgcn.datasets.files import load_files, read_labels

NAN = np.nan
EDGES_CSV = "src,dst\na,b\nb,c\nc,d\nd,e\ne,a\n"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def by_node(raw, nodes):
    """The label rows of ``nodes`` (names), whatever order the graph holds them in."""
    ids = list(raw.node_ids)
    return raw.labels[[ids.index(v) for v in nodes]]


# --- the two forms, read to the exact targets ---------------------------------------------------------------

def test_label_columns_give_one_target_per_cell_and_nan_where_empty(tmp_path):
    path = write(tmp_path, "l.csv", "node,Sports,music,art\n"
                                    "c,1,0,\n"
                                    "a,0.0,,1.0\n"
                                    "b,,,\n"
                                    "d,0,1,1\n")
    ids, targets, names = read_labels(path)
    assert ids.tolist() == ["c", "a", "b", "d"] and names == ["Sports", "music", "art"]  # the headers, as written
    assert targets.dtype == np.float32
    np.testing.assert_array_equal(targets, [[1, 0, NAN], [0, NAN, 1], [NAN, NAN, NAN], [0, 1, 1]])
    raw = load_files(write(tmp_path, "e.csv", EDGES_CSV), None, path)
    assert raw.labels.shape == (5, 3) and raw.labels.dtype == np.float32 and raw.class_names == names
    np.testing.assert_array_equal(by_node(raw, ["a", "b", "c", "d", "e"]),
                                  [[0, NAN, 1], [NAN, NAN, NAN], [1, 0, NAN], [0, 1, 1], [NAN, NAN, NAN]])


def test_the_node_column_may_stand_anywhere(tmp_path):
    ids, targets, names = read_labels(write(tmp_path, "l.csv", "x,node,y\n1,a,0\n0,b,\n"))
    assert ids.tolist() == ["a", "b"] and names == ["x", "y"]
    np.testing.assert_array_equal(targets, [[1, 0], [0, NAN]])


def test_label_rows_give_one_for_listed_labels_and_zero_for_the_others(tmp_path):
    path = write(tmp_path, "l.csv", "node,labels\n"
                                    "b,10\n"
                                    "a,2\n"
                                    "b,7\n"
                                    "c,\n"          # listed with none of the labels: all 0, not unlabelled
                                    "a,10\n")
    ids, targets, names = read_labels(path)
    assert names == ["2", "7", "10"]  # integer names sorted by value, as class names are
    assert ids.tolist() == ["a", "b", "c"] and targets.dtype == np.float32
    np.testing.assert_array_equal(targets, [[1, 0, 1], [0, 1, 1], [0, 0, 0]])
    raw = load_files(write(tmp_path, "e.csv", EDGES_CSV), None, path)
    assert raw.class_names == ["2", "7", "10"]
    np.testing.assert_array_equal(by_node(raw, ["a", "b", "c", "d", "e"]),
                                  [[1, 0, 1], [0, 1, 1], [0, 0, 0], [NAN] * 3, [NAN] * 3])  # d, e: not in the file


def test_a_labels_cell_may_name_several_labels_as_predict_writes_them(tmp_path):
    rows = read_labels(write(tmp_path, "rows.csv", "node,labels\na,rock\na,jazz\nb,pop\n"))
    cells = read_labels(write(tmp_path, "cells.csv", "node,labels\na,jazz rock\nb,pop\n"))
    assert rows[2] == cells[2] == ["jazz", "pop", "rock"] and rows[0].tolist() == cells[0].tolist() == ["a", "b"]
    np.testing.assert_array_equal(rows[1], [[1, 0, 1], [0, 1, 0]])
    np.testing.assert_array_equal(cells[1], rows[1])


def test_label_rows_follow_the_features_file_and_name_a_missing_node_by_its_first_line(tmp_path):
    edges = write(tmp_path, "e.csv", "src,dst\na,b\nb,c\n")
    feats = write(tmp_path, "f.csv", "node,f0\nc,1\na,2\nb,3\n")
    raw = load_files(edges, feats, write(tmp_path, "l.csv", "node,labels\na,x\nc,y\na,y\n"))
    assert raw.node_ids.tolist() == ["c", "a", "b"]
    np.testing.assert_array_equal(raw.labels, [[0, 1], [1, 1], [NAN, NAN]])
    zoe = write(tmp_path, "zoe.csv", "node,labels\na,x\nzoe,y\nb,x\nzoe,x\n")
    with pytest.raises(ValueError) as err:
        load_files(edges, feats, zoe)
    assert str(err.value) == (f"labels file {zoe}: node 'zoe' (line 3) has no row in the features file {feats}; add "
                              "its features or drop it (nodes are not created implicitly)")


# --- every bad form: one line naming the file, the line (and column) and the fix ----------------------------

FORMS = ("node,label (one class per node), node,labels (several labels per node: one row per node and label) or "
         "node,<label1>,<label2>,... (a 1/0 column per label)")

BAD = [
    ("value-not-1-0-or-empty", "node,a,b\nn1,1,0\nn2,0,yes\n",
     "line 3, column 3 (label 'b'): 'yes' is not 1, 0 or empty; a label column holds 1 (the node has the label), 0 "
     "(it has not) or nothing (unknown); one class per node is a header node,label"),
    ("a-two-in-a-label-column", "node,a,b\nn1,2,0\n",
     "line 2, column 2 (label 'a'): '2' is not 1, 0 or empty; a label column holds 1 (the node has the label), 0 "
     "(it has not) or nothing (unknown); one class per node is a header node,label"),
    ("nan-is-not-empty", "node,a,b\nn1,1,0\nn2,nan,1\n",
     "line 3, column 2 (label 'a'): 'nan' is not 1, 0 or empty; a label column holds 1 (the node has the label), 0 "
     "(it has not) or nothing (unknown); one class per node is a header node,label"),
    ("label-and-label-columns", "node,label,x,y\nn1,a,1,0\n",
     f"line 1, column 3: the header node,label,x,y has a 'label' column and other columns (x,y); give {FORMS}, not "
     "a mix (drop the other columns)"),
    ("labels-and-a-label-column", "node,x,labels\nn1,1,a\n",
     f"line 1, column 2: the header node,x,labels has a 'labels' column and other columns (x); give {FORMS}, not a "
     "mix (drop the other columns)"),
    ("label-and-labels", "node,label,labels\nn1,a,b\n",
     f"line 1, column 3: the header node,label,labels has a 'label' column and other columns (labels); give {FORMS}, "
     "not a mix (drop the other columns)"),
    ("every-target-missing", "node,a,b\nn1,,\nn2,,\n",
     "every cell of the 2 label columns is empty, so no node has a target; give 1 or 0 where a node's label is known"),
    ("every-labels-cell-empty", "node,labels\nn1,\nn2,\n",
     "every cell of the labels column is empty, so no node has a label; list each node's labels, one row per node "
     "and label"),
    ("a-pair-twice", "node,labels\nn1,a\nn2,a\nn1,b\nn1,a\n",
     "node 'n1' has label 'a' twice (lines 2 and 5); list each (node, label) pair once"),
    ("a-pair-twice-in-one-cell", "node,labels\nn1,b a b\n",
     "node 'n1' has label 'b' twice (line 2); list each (node, label) pair once"),
    ("a-node-twice-under-label", "node,label\nn1,a\nn2,b\nn1,c\n",
     "node 'n1' appears twice (lines 2 and 4); give each node one row, or name the column labels (node,labels) for "
     "several labels per node, one row per node and label"),
    ("a-node-twice-in-label-columns", "node,a,b\nn1,1,0\nn1,0,1\n",
     "node 'n1' appears twice (lines 2 and 3); give each node one row"),
    ("a-label-column-named-twice", "node,a,b,a\nn1,1,0,1\n",
     "line 1, column 4: the header's column repeats the label name 'a'; name each label column once"),
    ("a-label-column-without-a-name", "node,a,,b\nn1,1,0,1\n",
     "line 1, column 3: the header's column has no name; name each label column once"),
    ("node-named-twice", "node,node,labels\nn1,n1,a\n",
     "line 1: the header names column 'node' twice (columns 1 and 2); give each column one name"),
    ("one-column-that-is-no-label", "node,class\nn1,a\n", f"header node,class lacks column(s) label; expected {FORMS}"),
    ("no-node-column", "id,a,b\nn1,1,0\n", f"header id,a,b lacks column(s) node; expected {FORMS}"),
    ("no-header", "1,0\n2,1\n", f"no header line; the first line must name the columns: {FORMS}"),
]


@pytest.mark.parametrize(("text", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_label_files_are_named_on_one_line(tmp_path, text, message):
    path = write(tmp_path, "l.csv", text)
    with pytest.raises(ValueError) as err:
        read_labels(path)
    assert str(err.value) == f"labels file {path}: {message}"


# --- the split multi-label targets get ---------------------------------------------------------------------

SPLIT_ERROR = ("the labels are 3 targets per node (a multi-label task): they have no classes to draw a per-class "
               "split from (--train-per-class; own files' default split, --split random); give the split with "
               "--train-frac F (a random fraction of the labelled nodes) or --split-file FILE")


def test_a_fraction_split_draws_from_the_labelled_nodes_only():
    from jaxgcn.datasets.splits import fraction_split

    labels = np.full((40, 3), NAN, np.float32)
    labels[::2] = [1, 0, NAN]  # the 20 even nodes are labelled; a node with one target present counts
    labels[1] = [NAN, NAN, 0]
    s = fraction_split(labels, 0.5, 0.2, 0.25, seed=3)
    assert [len(s[k]) for k in ("train", "val", "test")] == [10, 4, 5]  # of the 21 labelled nodes
    chosen = np.concatenate([s["train"], s["val"], s["test"]])
    assert np.unique(chosen).size == 19 and set(chosen.tolist()) <= set(range(0, 40, 2)) | {1}
    again = fraction_split(labels, 0.5, 0.2, 0.25, seed=3)
    assert all(np.array_equal(s[k], again[k]) for k in s)


def test_a_per_class_split_of_multilabel_targets_names_the_flags():
    from jaxgcn.datasets.splits import planetoid_split

    with pytest.raises(ValueError) as err:
        planetoid_split(np.zeros((30, 3), np.float32), per_class=2)
    assert str(err.value) == SPLIT_ERROR


def test_random_splits_of_prepared_multilabel_data_name_the_flags(tmp_path):
    from jaxgcn.datasets import prepare, with_random_splits
    from jaxgcn.datasets.splits import fraction_split

    edges, labels, _ = own_multilabel_graph(tmp_path)
    raw = load_files(edges, tmp_path / "feats.csv", labels)
    prepared = prepare(raw._replace(splits=fraction_split(raw.labels, 0.5, 0.2, 0.2)), backend="segment")
    with pytest.raises(ValueError) as err:
        with_random_splits(prepared, np.asarray(prepared.data.labels), 2)
    assert str(err.value) == SPLIT_ERROR


# --- the command line, end to end ---------------------------------------------------------------------------

def own_multilabel_graph(tmp_path, n=240, seed=0):
    """A homophilous graph as files (string ids; dense features: the class one-hot plus noise, and a
    column of noise) with 3 labels derived from its classes: 'rock' = class 0, 'pop' = class 0 or 1,
    'jazz' = class 2; a tenth of the nodes unlisted."""
    from jaxgcn.datasets import synthetic

    raw = synthetic(n, n_classes=3, n_features=4, seed=seed)
    ids = [f"n{i:03d}" for i in range(n)]
    edges = write(tmp_path, "edges.csv", "src,dst\n" + "".join(f"{ids[s]},{ids[d]}\n"
                                                                for s, d in zip(raw.senders, raw.receivers)))
    rng = np.random.default_rng(seed)
    x = np.eye(4)[raw.labels] + rng.normal(0.0, 0.5, (n, 4))
    write(tmp_path, "feats.csv", "node,f0,f1,f2,f3\n" + "".join(f"{ids[i]}," + ",".join(f"{v:.5f}" for v in x[i])
                                                                 + "\n" for i in range(n)))
    has = {"rock": raw.labels == 0, "pop": raw.labels <= 1, "jazz": raw.labels == 2}
    rows = "".join(f"{ids[i]},{name}\n" for i in range(n) if i % 10 for name in has if has[name][i])
    labels = write(tmp_path, "labels.csv", "node,labels\n" + rows)
    return edges, labels, has


def test_cli_trains_own_multilabel_files_and_scores_roc_auc(tmp_path, capsys):
    edges, labels, _ = own_multilabel_graph(tmp_path)
    args = ["train", "--edges", edges, "--features", tmp_path / "feats.csv", "--labels", labels, "--epochs", "5",
            "--no-compile-cache"]
    assert run_main([*args, "--train-frac", "0.5", "--val-frac", "0.2", "--test-frac", "0.3",
                     "--save-split", tmp_path / "s.csv"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("edges: 240 nodes") and ", 4 features, 3 labels | " in out[0]
    assert "| split fractions 0.5/0.2/0.3 (seed 0): train 108, val 43, test 65 |" in out[0]  # of 216 listed nodes
    summary = [line for line in out if line.startswith("test ")]
    assert len(summary) == 1 and summary[0].startswith("test ROC-AUC ")
    assert 0.0 <= float(summary[0].split()[2]) <= 1.0
    split = dict(line.split(",") for line in (tmp_path / "s.csv").read_text().splitlines()[1:])
    assert len(split) == 216 and not any(int(node[1:]) % 10 == 0 for node in split)  # unlisted: in no split


def test_cli_learns_own_multilabel_files(tmp_path, capsys):
    edges, labels, _ = own_multilabel_graph(tmp_path)
    assert run_main(["train", "--edges", edges, "--features", tmp_path / "feats.csv", "--labels", labels, "--epochs",
                     "100", "--early-stopping", "none", "--train-frac", "0.5", "--no-compile-cache", "--quiet"]) == 0
    summary = [line for line in capsys.readouterr().out.splitlines() if line.startswith("test ")]
    assert summary[0].startswith("test ROC-AUC ") and float(summary[0].split()[2]) > 0.95  # chance is 0.5


@pytest.mark.parametrize("extra", [[], ["--split", "random"]])
def test_cli_without_a_split_names_the_flags_for_multilabel_files(tmp_path, capsys, extra):
    edges, labels, _ = own_multilabel_graph(tmp_path)
    assert run_main(["train", "--edges", edges, "--labels", labels, "--epochs", "5", "--no-compile-cache",
                     *extra]) == 2
    err = unwrap(capsys.readouterr().err)
    assert re.search(r"^jaxgcn: error: .*" + re.escape(SPLIT_ERROR) + "$", err, re.M), err
    assert "Traceback" not in err
