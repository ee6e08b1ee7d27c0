"""Classification metrics of predicted classes: confusion matrix, per-class precision, recall, F1;
and of a multi-label model's labels (:class:`LabelScores`: ROC-AUC, precision, recall, F1 per label).

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


class LabelScores(NamedTuple):
    """Metrics of a multi-label model's ``L`` labels on ``n`` nodes (see :func:`label_scores`).

    Attributes:
        auc: [L] float64 ROC-AUC per label; NaN where the scored nodes hold no positive or no negative
            target of it (OGB's ``Evaluator`` leaves those labels out of the mean).
        positive, negative: [L] int64, the present targets of each label that are 1 / 0.
        tp, fp, fn: [L] int64 true positives, false positives, false negatives at ``threshold``, over the
            present targets only.
        n: the scored nodes.
        threshold: a label is predicted where its probability is above it.
    """

    auc: np.ndarray
    positive: np.ndarray
    negative: np.ndarray
    tp: np.ndarray
    fp: np.ndarray
    fn: np.ndarray
    n: int
    threshold: float

    @property
    def labels_defined(self) -> int:
        """The labels whose ROC-AUC is defined on the scored nodes."""
        return int(np.sum(~np.isnan(self.auc)))

    @property
    def mean_auc(self) -> float:
        """ROC-AUC averaged over the labels where it is defined (0.0 where none is)."""
        defined = ~np.isnan(self.auc)
        return float(self.auc[defined].mean()) if defined.any() else 0.0

    @property
    def precision(self) -> np.ndarray:
        return _ratio(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> np.ndarray:
        return _ratio(self.tp, self.tp + self.fn)

    @property
    def f1(self) -> np.ndarray:
        return _ratio(2 * self.tp, 2 * self.tp + self.fp + self.fn)

    @property
    def micro_f1(self) -> float:
        """F1 of the true/false positive and false negative counts summed over every label."""
        tp, fp, fn = int(self.tp.sum()), int(self.fp.sum()), int(self.fn.sum())
        return 2 * tp / max(2 * tp + fp + fn, 1)

    @property
    def macro_f1(self) -> float:
        """The unweighted mean of the per-label F1 scores."""
        return float(self.f1.mean()) if self.f1.size else 0.0


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.zeros(num.shape), where=den > 0)


def label_scores(targets: np.ndarray, probabilities: np.ndarray, auc: np.ndarray, threshold: float) -> LabelScores:
    """Per-label counts of ``probabilities`` [n, L] against ``targets`` [n, L] (1, 0, NaN: missing, not
    counted), a label predicted where its probability is above ``threshold``; ``auc``: the [L] ROC-AUCs
    computed beside them (NaN: undefined).

    >>> y = np.array([[1, 0], [0, np.nan], [1, 1]])
    >>> s = label_scores(y, np.array([[0.9, 0.6], [0.7, 0.9], [0.2, 0.8]]), np.array([0.5, np.nan]), 0.5)
    >>> s.tp.tolist(), s.fp.tolist(), s.fn.tolist(), s.positive.tolist(), s.negative.tolist()
    ([1, 1], [1, 1], [1, 0], [2, 1], [1, 1])
    >>> round(s.micro_f1, 4), s.f1.round(4).tolist(), s.mean_auc
    (0.5714, [0.5, 0.6667], 0.5)
    """
    targets, probabilities = np.asarray(targets, np.float64), np.asarray(probabilities)
    present = ~np.isnan(targets)
    true = present & (targets == 1)
    predicted = present & (probabilities > threshold)
    count = lambda m: m.sum(axis=0).astype(np.int64)  # noqa: E731
    return LabelScores(np.asarray(auc, np.float64), count(true), count(present & ~true), count(predicted & true),
                       count(predicted & ~true), count(~predicted & true), int(targets.shape[0]), float(threshold))
