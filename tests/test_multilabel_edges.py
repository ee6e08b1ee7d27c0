"""Multi-label values at their boundaries: a 0.5 target is refused (targets are 1, 0 or missing), a
probability exactly at the threshold (a logit of exactly 0) is not a predicted label, in decoding, in
micro-F1 and in evaluate's per-label counts; ``npz:DIR`` takes the documented float ``labels.npy`` with
NaN for a missing target (and an integer one with -1)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

from jaxgcn.core import tasks
from jaxgcn.datasets.ogb import load_arrays, multilabel_targets
from jaxgcn.io.metrics import label_scores

F1 = tasks.TASKS["multilabel-f1"]


@pytest.mark.parametrize("value", [0.5, 2.0, -0.5, 1e-7, 0.9999999])
def test_a_target_that_is_not_1_0_or_missing_is_refused(value):
    labels = np.array([[1.0, 0.0], [np.nan, value]], np.float32)
    with pytest.raises(ValueError, match=rf"labels\.npy: label value {float(np.float32(value))}: multi-label "
                                         r"targets are 1, 0 or missing \(NaN\)"):
        tasks.MultiLabel().check_labels(labels, "labels.npy")
    with pytest.raises(ValueError, match=rf"l\.csv: row 2, label column 2 holds {float(np.float32(value))}; "
                                         "several label columns are multi-label targets"):
        multilabel_targets(labels, "l.csv", "row")


def test_targets_of_1_0_and_nan_are_taken():
    labels = np.array([[1.0, 0.0], [np.nan, 1.0]], np.float32)
    assert tasks.MultiLabel().check_labels(labels, "labels.npy") == 2
    np.testing.assert_array_equal(multilabel_targets(labels, "l.csv", "row"), labels)


def test_a_probability_exactly_at_the_threshold_is_not_a_label():
    logits = np.array([[0.0, 1e-9, -1e-9, 40.0]])  # probabilities 0.5, just above, just below, ~1
    assert tasks.MultiLabel().decode(logits, 0.5).tolist() == [[0, 1, 0, 1]]
    assert tasks.MultiLabel().decode(np.array([[np.log(3.0)]]), 0.75).tolist() == [[0]]  # sigmoid = 0.75


def test_micro_f1_counts_a_logit_of_zero_as_not_predicted():
    # one run, 2 nodes x 2 labels: targets [[1, 0], [1, NaN]]; logits 0 everywhere but node 1's label 0 (> 0)
    labels = jnp.asarray([[1.0, 0.0], [1.0, np.nan]], jnp.float32)
    logits = jnp.asarray([[[0.0, 0.0]], [[1e-3, 0.0]]], jnp.float32)  # [n, R, L]
    masks = jnp.ones((1, 2), jnp.float32)
    tp, fp, fn = (float(v[0]) for v in tasks._f1_sums(logits, labels, masks))
    assert (tp, fp, fn) == (1.0, 0.0, 1.0)
    _, f1 = F1.metrics(logits, labels, masks, lambda x: x)
    assert float(f1[0]) == pytest.approx(2 / 3)


def test_evaluates_per_label_counts_at_the_threshold():
    targets = np.array([[1.0, 0.0], [0.0, np.nan], [1.0, 1.0]])
    probabilities = np.array([[0.5, 0.5], [0.5, 0.9], [0.51, 0.49]])
    scores = label_scores(targets, probabilities, np.array([0.5, np.nan]), 0.5)
    assert scores.tp.tolist() == [1, 0] and scores.fp.tolist() == [0, 0] and scores.fn.tolist() == [1, 1]


def write_graph(root, labels):
    """A 6-node path graph in ``npz:DIR`` form with ``labels`` and a split."""
    root.mkdir()
    rows = np.arange(5)
    adj = sp.coo_matrix((np.ones(10, np.float32), (np.r_[rows, rows + 1], np.r_[rows + 1, rows])), shape=(6, 6))
    sp.save_npz(root / "adjacency.npz", adj.tocsr())
    np.save(root / "features.npy", np.eye(6, 3, dtype=np.float32))
    np.save(root / "labels.npy", labels)
    np.savez(root / "splits.npz", train=np.array([0, 1]), val=np.array([2, 3]), test=np.array([4, 5]))


def test_a_float_labels_npy_with_nan_for_missing_is_a_multilabel_graph(tmp_path):
    labels = np.array([[1, 0, np.nan], [0, 1, 1], [np.nan, np.nan, 0], [1, 1, 1], [0, 0, 0], [1, np.nan, 0]],
                      np.float64)
    write_graph(tmp_path / "g", labels)
    raw = load_arrays(tmp_path / "g")
    assert raw.labels.dtype == np.float32 and raw.labels.shape == (6, 3)
    np.testing.assert_array_equal(np.isnan(raw.labels), np.isnan(labels))
    np.testing.assert_array_equal(np.nan_to_num(raw.labels, nan=-7), np.nan_to_num(labels, nan=-7))
    assert tasks.task_of("auto", raw.labels).name == "multilabel"


def test_an_integer_labels_npy_marks_a_missing_target_with_minus_1(tmp_path):
    labels = np.array([[1, 0, -1], [0, 1, 1], [-1, -1, 0], [1, 1, 1], [0, 0, 0], [1, -1, 0]], np.int64)
    write_graph(tmp_path / "g", labels)
    raw = load_arrays(tmp_path / "g")
    np.testing.assert_array_equal(np.isnan(raw.labels), labels == -1)


def test_a_half_target_in_labels_npy_is_refused_naming_its_place(tmp_path):
    labels = np.zeros((6, 2), np.float32)
    labels[3, 1] = 0.5
    write_graph(tmp_path / "g", labels)
    with pytest.raises(ValueError, match=r"labels\.npy: row 4, label column 2 holds 0\.5; several label columns"):
        load_arrays(tmp_path / "g")
