"""Classification metrics of predicted classes: confusion matrix, per-class precision, recall, F1.

Host-side NumPy on [n] vectors of true and predicted classes (what ``jaxgcn evaluate`` reports). A
class that is never predicted has precision 0, one that never occurs has recall 0, and F1 is 0 where
precision + recall is 0 (scikit-learn's ``zero_division=0``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Classification(NamedTuple):
    """Metrics of ``n_classes`` classes (see :func:`classification`).

    Attributes:
        confusion: [n_classes, n_classes] int64; row: true class, column: predicted class.
        precision: [n_classes] float64, correct / predicted per class.
        recall: [n_classes] float64, correct / present per class.
        f1: [n_classes] float64, the harmonic mean of precision and recall.
    """

    confusion: np.ndarray
    precision: np.ndarray
    recall: np.ndarray
    f1: np.ndarray

    @property
    def support(self) -> np.ndarray:
        """[n_classes] int64: the nodes of each true class."""
        return self.confusion.sum(axis=1)

    @property
    def n(self) -> int:
        """The number of scored nodes."""
        return int(self.confusion.sum())

    @property
    def accuracy(self) -> float:
        """Correct / scored (0.0 when nothing is scored)."""
        return float(np.trace(self.confusion) / max(self.n, 1))

    @property
    def macro_f1(self) -> float:
        """The unweighted mean of the per-class F1 scores."""
        return float(self.f1.mean())


def confusion_matrix(labels: np.ndarray, predicted: np.ndarray, n_classes: int) -> np.ndarray:
    """[n_classes, n_classes] counts of (true class, predicted class) pairs.

    Args:
        labels: [n] true classes in [0, n_classes).
        predicted: [n] predicted classes in [0, n_classes).
        n_classes: the number of classes (rows and columns).

    >>> confusion_matrix(np.array([0, 0, 1, 2]), np.array([0, 1, 1, 0]), 3).tolist()
    [[1, 1, 0], [0, 1, 0], [1, 0, 0]]
    """
    labels, predicted = np.asarray(labels), np.asarray(predicted)
    if labels.shape != predicted.shape or labels.ndim != 1:
        raise ValueError(f"labels {labels.shape} and predicted {predicted.shape} must be two [n] vectors")
    for name, values in (("labels", labels), ("predicted", predicted)):
        bad = values[(values < 0) | (values >= n_classes)]
        if bad.size:
            raise ValueError(f"{name}: class {int(bad[0])} is outside [0, {n_classes}); give classes of the "
                             f"{n_classes} the model was trained on")
    conf = np.zeros((n_classes, n_classes), np.int64)
    np.add.at(conf, (labels, predicted), 1)
    return conf


def classification(labels: np.ndarray, predicted: np.ndarray, n_classes: int) -> Classification:
    """Confusion matrix and per-class precision, recall and F1 of ``predicted`` against ``labels``.

    Args:
        labels: [n] true classes in [0, n_classes).
        predicted: [n] predicted classes in [0, n_classes).
        n_classes: the number of classes.

    >>> m = classification(np.array([0, 0, 1, 1, 2]), np.array([0, 1, 1, 1, 0]), 3)
    >>> m.precision.round(4).tolist(), m.recall.tolist(), m.f1.round(4).tolist()
    ([0.5, 0.6667, 0.0], [0.5, 1.0, 0.0], [0.5, 0.8, 0.0])
    >>> m.accuracy, round(m.macro_f1, 4), m.support.tolist()
    (0.6, 0.4333, [2, 2, 1])
    """
    conf = confusion_matrix(labels, predicted, n_classes)
    tp = np.diag(conf).astype(float)
    predicted_n, present_n = conf.sum(axis=0), conf.sum(axis=1)
    precision = np.divide(tp, predicted_n, out=np.zeros(n_classes), where=predicted_n > 0)
    recall = np.divide(tp, present_n, out=np.zeros(n_classes), where=present_n > 0)
    both = precision + recall
    f1 = np.divide(2 * precision * recall, both, out=np.zeros(n_classes), where=both > 0)
    return Classification(conf, precision, recall, f1)
