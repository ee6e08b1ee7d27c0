"""jaxgcn.io.metrics against a confusion matrix worked out by hand (what `jaxgcn evaluate` reports)."""

from __future__ import annotations

import numpy as np
import pytest

from jaxgcn.io.metrics import classification, confusion_matrix

# 4 classes, 10 nodes. Class 3 is never the true class; class 2 is never predicted.
LABELS = np.array([0, 0, 0, 1, 1, 1, 1, 2, 2, 0])
PRED = np.array([0, 0, 1, 1, 1, 0, 3, 1, 0, 0])
# rows: true class, columns: predicted class
#   true 0: predicted 0,0,1,0     -> [3, 1, 0, 0]
#   true 1: predicted 1,1,0,3     -> [1, 2, 0, 1]
#   true 2: predicted 1,0         -> [1, 1, 0, 0]
#   true 3: none                  -> [0, 0, 0, 0]
CONFUSION = [[3, 1, 0, 0], [1, 2, 0, 1], [1, 1, 0, 0], [0, 0, 0, 0]]


def test_confusion_matrix_by_hand():
    assert confusion_matrix(LABELS, PRED, 4).tolist() == CONFUSION
    assert confusion_matrix(LABELS, PRED, 4).dtype == np.int64


def test_precision_recall_f1_by_hand():
    m = classification(LABELS, PRED, 4)
    # precision = diagonal / column sums (predicted): 3/5, 2/4, 0/0 -> 0, 0/1
    assert m.precision.tolist() == pytest.approx([3 / 5, 2 / 4, 0.0, 0.0])
    # recall = diagonal / row sums (present): 3/4, 2/4, 0/2, 0/0 -> 0
    assert m.recall.tolist() == pytest.approx([3 / 4, 2 / 4, 0.0, 0.0])
    # F1 = 2pr / (p + r): class 0: 2 * 0.6 * 0.75 / 1.35 = 2/3; class 1: 0.5; others 0
    assert m.f1.tolist() == pytest.approx([2 / 3, 0.5, 0.0, 0.0])
    assert m.macro_f1 == pytest.approx((2 / 3 + 0.5) / 4)
    assert m.accuracy == pytest.approx(5 / 10)
    assert m.n == 10 and m.support.tolist() == [4, 4, 2, 0]


def test_perfect_and_empty_predictions():
    perfect = classification(np.array([0, 1, 2]), np.array([0, 1, 2]), 3)
    assert perfect.accuracy == 1.0 and perfect.macro_f1 == 1.0
    assert perfect.confusion.tolist() == np.eye(3, dtype=int).tolist()
    empty = classification(np.array([], np.int64), np.array([], np.int64), 2)
    assert empty.n == 0 and empty.accuracy == 0.0 and empty.macro_f1 == 0.0


@pytest.mark.parametrize(("labels", "pred", "match"), [
    ([0, 3], [0, 1], r"labels: class 3 is outside \[0, 3\)"),
    ([0, 1], [0, -1], r"predicted: class -1 is outside \[0, 3\)"),
    ([0, 1], [0], r"must be two \[n\] vectors"),
])
def test_classes_outside_the_model_are_refused(labels, pred, match):
    with pytest.raises(ValueError, match=match):
        confusion_matrix(np.array(labels), np.array(pred), 3)
