"""Readers of the user's own files on the inputs an outside tester gave them (issue 58): a wide CSV
read in memory proportional to its size, a tab-separated file with an empty cell, an npz:DIR split
whose sets overlap, and the documented float forms of a multi-label labels.npy (-1 or NaN missing)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from jaxgcn.datasets.files import read_features, read_labels
from jaxgcn.datasets.ogb import load_arrays
from jaxgcn.datasets.readers import read_table

# --- a wide table ---------------------------------------------------------------------------------------------


def wide_csv(path, columns, rows):
    path.write_text("node," + ",".join(f"f{j}" for j in range(columns)) + "\n" + "".join(
        f"n{i}," + ",".join("1" if (i + j) % 7 == 0 else "0" for j in range(columns)) + "\n" for i in range(rows)))
    return path


def peak_bytes(read, *args):
    """The most memory ``read(*args)`` held at once (tracemalloc sees NumPy's allocations), and its result."""
    tracemalloc.start()
    try:
        out = read(*args)
        return tracemalloc.get_traced_memory()[1], out
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("reader", ["features", "labels"])
def test_a_wide_csv_is_read_in_memory_proportional_to_its_size(tmp_path, reader):
    """2,000 columns x 10 rows (51 kB): NumPy's loadtxt, left to itself, reads text cells in blocks
    of 50,000 rows of object pointers whatever the file holds (50,000 x 2,001 x 8 bytes = 800 MB
    here; 7.45 GiB for the tester's 20,000 columns), so the reader bounds the block by the file's lines."""
    path = wide_csv(tmp_path / f"{reader}.csv", 2000, 10)
    size = path.stat().st_size
    peak, out = peak_bytes(read_features if reader == "features" else read_labels, path)
    assert peak < 100 * size, (peak, size)
    values = out[1]
    assert values.shape == (10, 2000) and values[3, 4] == 1.0 and values[3, 5] == 0.0  # (3 + 4) % 7 == 0
    assert values.sum() == sum((i + j) % 7 == 0 for i in range(10) for j in range(2000))


def test_a_table_of_one_row_and_of_many_rows_reads_whole(tmp_path):
    """max_rows bounds the block, never the rows read: lines past 50,000 and a file of a header and one row."""
    path = tmp_path / "e.csv"
    path.write_text("src,dst\n" + "".join(f"{i},{i + 1}\n" for i in range(50_003)))
    table = read_table(path, "edges")
    assert table.cells.shape == (50_003, 2) and table.cells[-1].tolist() == ["50002", "50003"]
    path.write_text("\n\nsrc,dst\n\n1,2\n")
    table = read_table(path, "edges")
    assert table.cells.tolist() == [["1", "2"]] and table.line(0) == 5


# --- tab-separated cells --------------------------------------------------------------------------------------


def test_a_tab_separated_label_table_keeps_its_empty_cells_in_their_columns(tmp_path):
    path = tmp_path / "labels.tsv"
    path.write_text("node\trock\tpop\tjazz\na\t1\t\t0\nb\t0\t1\t\nc\t\t1\t1\n")
    ids, targets, names = read_labels(path)
    assert ids.tolist() == ["a", "b", "c"] and names == ["rock", "pop", "jazz"]
    np.testing.assert_array_equal(targets, [[1, np.nan, 0], [0, 1, np.nan], [np.nan, 1, 1]])


def test_a_tab_separated_label_file_names_its_empty_cell(tmp_path):
    path = tmp_path / "labels.tsv"
    for ids in ("abc", "012"):  # string node ids, and numbers (whose header a line of numbers tells)
        path.write_text(f"node\tlabel\n{ids[0]}\t1\n{ids[1]}\t\n{ids[2]}\t0\n")
        with pytest.raises(ValueError, match=r"^labels file .*labels\.tsv: line 3 has an empty label; leave "
                                             r"unlabelled nodes out$"):
            read_labels(path)
    path.write_text("node\tx\ty\na\t1\t2\nb\t\t3\n")
    with pytest.raises(ValueError, match=r"^features file .*labels\.tsv: line 3, column 2: '' is not a number$"):
        read_features(path)


def test_a_ragged_tab_separated_file_names_the_empty_cell(tmp_path):
    """Tabs that do not make the rows even (a line with one tab too many) cannot be read either way;
    the message says where the empty cell is, not only that the counts differ."""
    path = tmp_path / "labels.tsv"
    path.write_text("node\trock\tpop\na\t1\t0\nb\t\t\t1\n")
    with pytest.raises(ValueError, match=r"^labels file .*labels\.tsv: line 3 has 2 column\(s\) but line 2 has 3 "
                                         r"\(line 3, column 2 is empty: tabs with nothing between them; fill the cell"):
        read_labels(path)


def test_whitespace_aligned_columns_are_read_as_before(tmp_path):
    path = tmp_path / "e.txt"
    path.write_text("1\t\t2\n3\t\t4\n10 11\n")  # double tabs for alignment: whitespace, not empty cells
    assert read_table(path, "edges").cells.tolist() == [["1", "2"], ["3", "4"], ["10", "11"]]


# --- npz:DIR ------------------------------------------------------------------------------------------------------


def npz_dir(root, labels, splits=None):
    root.mkdir()
    n = labels.shape[0]
    ring = np.arange(n)
    sp.save_npz(root / "adjacency.npz", sp.coo_matrix((np.ones(n), (ring, (ring + 1) % n)), shape=(n, n)).tocsr())
    np.save(root / "features.npy", np.eye(n, 3, dtype=np.float32))
    np.save(root / "labels.npy", labels)
    if splits is not None:
        np.savez(root / "splits.npz", **splits)
    return root


SPLIT = {"train": np.array([0, 1, 2]), "val": np.array([3, 4]), "test": np.array([5, 6, 7])}


@pytest.mark.parametrize("a, b, shared, first", [("train", "val", [4, 1], 1), ("train", "test", [7], 7),
                                                 ("val", "test", [5, 6], 5)])
def test_npz_splits_whose_sets_overlap_are_refused(tmp_path, a, b, shared, first):
    splits = dict(SPLIT)
    splits[b] = np.concatenate([splits[b], shared])
    splits[a] = np.concatenate([splits[a], shared])
    root = npz_dir(tmp_path / "g", np.arange(8) % 2, splits)
    with pytest.raises(ValueError, match=rf"^.*splits\.npz: {a} and {b} share {len(shared)} node\(s\), the first node "
                                         rf"{first}; a node belongs to one set: remove it from all but one$"):
        load_arrays(root)


def test_npz_splits_that_do_not_overlap_load(tmp_path):
    raw = load_arrays(npz_dir(tmp_path / "g", np.arange(8) % 2, SPLIT))
    assert {k: v.tolist() for k, v in raw.splits.items()} == {k: v.tolist() for k, v in SPLIT.items()}


@pytest.mark.parametrize("missing", [-1.0, np.nan])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_float_multilabel_labels_npy_marks_missing_with_minus_one_or_nan(tmp_path, missing, dtype):
    """docs/datasets.md: labels.npy [n_nodes, n_labels] holds 1, 0, and -1 or NaN for a missing target."""
    y = np.array([[1, 0], [0, missing], [missing, 1], [1, 1], [0, 0], [1, 0], [0, 1], [1, missing]], dtype)
    raw = load_arrays(npz_dir(tmp_path / "g", y, SPLIT))
    want = np.where(np.isnan(y) | (y == -1), np.nan, y).astype(np.float32)
    assert raw.labels.dtype == np.float32
    np.testing.assert_array_equal(raw.labels, want)
    assert int(np.isnan(raw.labels).sum()) == 3


def test_a_multilabel_labels_npy_refuses_other_values_naming_them(tmp_path):
    y = np.array([[1, 0], [0, -2.0], [1, 1], [0, 0], [1, 0], [0, 1], [1, 0], [0, 1]], np.float32)
    with pytest.raises(ValueError, match=r"labels\.npy: row 2, label column 2 holds -2\.0; several label columns are "
                                         r"multi-label targets: 1, 0, or missing \(empty, NaN or -1\)$"):
        load_arrays(npz_dir(tmp_path / "g", y, SPLIT))


def test_a_ragged_csv_is_never_read_again_at_tabs(tmp_path):
    path = tmp_path / "f.csv"
    path.write_text("node,x\tnote\n1,2\n3\n")  # a tab inside a CSV header cell
    with pytest.raises(ValueError, match=r"^features file .*f\.csv: line 3 has 1 column\(s\) but line 2 has 2; every "
                                         r"row needs the same number of columns$"):
        read_table(path, "features")
