"""What a run learns: THE task seam (the loss, the metric, how labels look, how logits decode).

Every layer above reads the :class:`Task` instead of assuming arg-max classification:

- :class:`MultiClass`: one class per node (labels ``[n]`` int, -1 = unlabelled), softmax
  cross-entropy, accuracy (Kipf & Welling's task; the default);
- :class:`MultiLabel`: several binary labels per node (labels ``[n, L]`` float, 1/0, NaN = a missing
  target), sigmoid binary cross-entropy per label masked where a target is missing, and ROC-AUC
  averaged over the labels as OGB's ``Evaluator`` computes it for ogbn-proteins (``"rocauc"``) or
  micro-F1 (``"micro_f1"``, PPI's).

A task is chosen once, by name (``TrainConfig.task``; ``"auto"``: by the labels' shape), through
:func:`task_of`. A new task is a class with the :class:`Task` methods and one :func:`register` call.
Losses are masked SUMS with their counts, so devices holding blocks of the nodes add them up before
dividing; a metric that is not a sum (ROC-AUC) is computed where every masked node is at hand.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

Total = Callable[[Any], Any]
Pair = tuple[jax.Array, jax.Array]  # sums a pytree over the devices holding blocks of the nodes (identity on one)


class Task(Protocol):
    """The one seam between the engine and what it learns.

    Attributes:
        name: the registered name (``TrainConfig.task``, checkpoints, ``--json``).
        metric: the metric's name (``"accuracy"``, ``"rocauc"``, ``"micro_f1"``); higher is better,
            which is what early stopping and "best" read.
        additive: whether the metric is a sum over nodes (then sharded runs add their blocks' parts).
    """

    name: str
    metric: str
    additive: bool

    def check_labels(self, labels: np.ndarray, where: str) -> int:
        """Validate host labels (``where`` names the file or argument) and return the model's output width."""

    def loss_count(self, labels: jax.Array, masks: jax.Array) -> jax.Array:
        """The loss's denominator per run ([R]): the masked targets."""

    def loss_sums(self, logits: jax.Array, labels: jax.Array, masks: jax.Array) -> jax.Array:
        """The summed loss per run ([R]) over the masked nodes (logits [n, R, C], masks [R, n])."""

    def metrics(self, logits: jax.Array, labels: jax.Array, masks: jax.Array, total: Total) -> Pair:
        """Each run's mean loss and metric over the masked nodes ([R] and [R]), summed over devices by ``total``."""

    def decode(self, logits: np.ndarray, threshold: float) -> np.ndarray:
        """Host predictions from one run's logits [n, C]: class ids [n], or 0/1 labels [n, C]."""


def _diagonals(masks: jax.Array, per_node: jax.Array) -> tuple[jax.Array, ...]:
    """masks [R, n] @ per_node [n, k*R] -> the k diagonals' values, k arrays [R]: per run, the masked
    sum of its own column of each block. A matrix product in both layouts as they are (R^2 n
    multiply-adds, nothing at R <= 100), where ``per_node.T * masks`` summed over the nodes cost XLA
    two transposes and a tree of partial reductions per call. A tuple, not a stack: the gradient of a
    diagonal nobody differentiates is then no scatter at all."""
    r = masks.shape[0]
    sums = jnp.matmul(masks.astype(per_node.dtype), per_node, precision=jax.lax.Precision.HIGHEST)
    runs = jnp.arange(r)
    return tuple(sums[runs, k * r + runs] for k in range(per_node.shape[1] // r))


def masked_sums(logits: jax.Array, labels: jax.Array, masks: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """THE cross-entropy: per run, over the masked nodes, the summed softmax cross-entropy, the
    correct predictions and the node count (logits [n, R, C], labels [n], masks [R, n] -> three [R]).
    Sums, so that devices holding blocks of the nodes can add them up before dividing."""
    logp = jax.nn.log_softmax(logits)
    # a one-hot product, not take_along_axis: its gradient would be a scatter (slow on the CPU)
    nll = -jnp.sum(jax.nn.one_hot(labels, logits.shape[-1], dtype=logp.dtype)[:, None, :] * logp, axis=-1)  # [n, R]
    hit = (jnp.argmax(logits, axis=-1) == labels[:, None]).astype(masks.dtype)  # [n, R]
    sums = _diagonals(masks, jnp.concatenate([nll, hit.astype(nll.dtype)], axis=1))
    return sums[0], sums[1], jnp.sum(masks, axis=1)


class MultiClass(NamedTuple):
    """One class per node: softmax cross-entropy and accuracy (arg-max), Kipf & Welling's task."""

    name: str = "multiclass"
    metric: str = "accuracy"
    additive: bool = True
    label_ndim: int = 1  # labels [n]

    def check_labels(self, labels: np.ndarray, where: str) -> int:
        if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"{where}: labels of shape {labels.shape} and dtype {labels.dtype}: a single-label "
                             "task needs one integer class id per node ([n_nodes], -1 = unlabelled); several "
                             "labels per node are a multi-label task ([n_nodes, n_labels] of 0/1)")
        return int(labels.max()) + 1 if labels.size else 0

    def loss_count(self, labels: jax.Array, masks: jax.Array) -> jax.Array:
        return jnp.sum(masks, axis=1)

    def loss_sums(self, logits: jax.Array, labels: jax.Array, masks: jax.Array) -> jax.Array:
        return masked_sums(logits, labels, masks)[0]

    def metrics(self, logits: jax.Array, labels: jax.Array, masks: jax.Array, total: Total) -> Pair:
        nll, hits, count = total(masked_sums(logits, labels, masks))
        count = jnp.maximum(count, 1.0)
        return nll / count, hits / count

    def decode(self, logits: np.ndarray, threshold: float) -> np.ndarray:
        return np.argmax(logits, axis=-1)


def _targets(labels: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Multi-label targets [n, L] (0/1; NaN: missing) -> (targets with 0 where missing, present: 1.0/0.0)."""
    valid = ~jnp.isnan(labels)
    return jnp.where(valid, labels, 0.0), valid.astype(labels.dtype)


def binary_cross_entropy(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """Sigmoid binary cross-entropy per entry, stable for any logit: ``softplus(z) - y z``
    (= ``-y log sigmoid(z) - (1 - y) log sigmoid(-z)``)."""
    return jax.nn.softplus(logits) - targets * logits


def rank_auc(scores: jax.Array, positive: jax.Array, negative: jax.Array) -> tuple[jax.Array, jax.Array]:
    """ROC-AUC of one column (scores [n], the 0/1 ``positive`` and ``negative`` nodes it counts;
    nodes that are neither are left out), by the Mann-Whitney U statistic with ties counted one half,
    as ``sklearn.metrics.roc_auc_score`` computes it: sort once, then per positive node the negatives
    below its group of equal scores plus half those inside it. Returns (auc, defined): the AUC is
    defined where the column has a positive and a negative node (else 0)."""
    n = scores.shape[0]
    counted = (positive + negative) > 0
    s, pos, neg = jax.lax.sort((jnp.where(counted, scores, jnp.inf), positive, negative), num_keys=1)
    idx = jnp.arange(n)
    starts = jnp.concatenate([jnp.ones((1,), bool), s[1:] != s[:-1]])
    ends = jnp.concatenate([s[1:] != s[:-1], jnp.ones((1,), bool)])
    first = jax.lax.cummax(jnp.where(starts, idx, 0))  # the first index of each node's group of ties
    last = jax.lax.cummin(jnp.where(ends, idx, n - 1), reverse=True)
    neg_upto = jnp.cumsum(neg.astype(jnp.int32))  # negatives at or before each index
    below = neg_upto[first] - neg[first].astype(jnp.int32)
    tied = neg_upto[last] - below
    u = jnp.sum(pos * (below.astype(jnp.float32) + 0.5 * tied.astype(jnp.float32)))
    n_pos, n_neg = jnp.sum(pos), jnp.sum(neg)
    defined = (n_pos > 0) & (n_neg > 0)
    return jnp.where(defined, u / jnp.maximum(n_pos * n_neg, 1.0), 0.0), defined


class MultiLabel(NamedTuple):
    """Several binary labels per node (labels [n, L]: 1, 0, NaN = missing): sigmoid binary
    cross-entropy averaged over the masked nodes' present targets, and ROC-AUC averaged over the
    labels that have both a positive and a negative node in the split (OGB's ``Evaluator`` for
    ogbn-proteins skips the others), or micro-F1 (true positives, false positives and false negatives
    summed over every present target; a label is predicted where its logit is > 0)."""

    name: str = "multilabel"
    metric: str = "rocauc"
    additive: bool = False
    label_ndim: int = 2  # labels [n, L]

    def check_labels(self, labels: np.ndarray, where: str) -> int:
        if labels.ndim != 2 or not np.issubdtype(labels.dtype, np.floating):
            raise ValueError(f"{where}: labels of shape {labels.shape} and dtype {labels.dtype}: a multi-label "
                             "task needs [n_nodes, n_labels] floats (1, 0, NaN for a missing target)")
        present = labels[~np.isnan(labels)]
        bad = present[(present != 0) & (present != 1)]
        if bad.size:
            raise ValueError(f"{where}: label value {float(bad[0])}: multi-label targets are 1, 0 or missing (NaN)")
        return labels.shape[1]

    def loss_count(self, labels: jax.Array, masks: jax.Array) -> jax.Array:
        _, valid = _targets(labels)
        return _diagonals(masks, jnp.broadcast_to(jnp.sum(valid, axis=1)[:, None],
                                                  (labels.shape[0], masks.shape[0])))[0]

    def loss_sums(self, logits: jax.Array, labels: jax.Array, masks: jax.Array) -> jax.Array:
        targets, valid = _targets(labels)
        entries = binary_cross_entropy(logits, targets[:, None, :])  # [n, R, L]
        per_node = jnp.sum(jnp.where(valid[:, None, :] > 0, entries, 0.0), axis=-1)
        return _diagonals(masks, per_node)[0]

    def metrics(self, logits: jax.Array, labels: jax.Array, masks: jax.Array, total: Total) -> Pair:
        loss, count = total((self.loss_sums(logits, labels, masks), self.loss_count(labels, masks)))
        loss = loss / jnp.maximum(count, 1.0)
        if self.metric == "micro_f1":
            return loss, _micro_f1(total(_f1_sums(logits, labels, masks)))
        return loss, _mean_auc(logits, labels, masks)

    def decode(self, logits: np.ndarray, threshold: float) -> np.ndarray:
        return (sigmoid(logits) > threshold).astype(np.int8)


def _mean_auc(logits: jax.Array, labels: jax.Array, masks: jax.Array) -> jax.Array:
    """Each run's ROC-AUC averaged over the labels defined in its split ([n, R, L], [n, L], [R, n] ->
    [R]; 0 where none is)."""
    auc, defined = jax.vmap(lambda s, m: label_aucs(s, labels, m), in_axes=(1, 0), out_axes=1)(logits, masks)
    auc, defined = auc.T, defined.T  # [R, L]
    return jnp.sum(jnp.where(defined, auc, 0.0), axis=1) / jnp.maximum(jnp.sum(defined, axis=1).astype(auc.dtype), 1.0)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Host probabilities of logits (float64), without overflow for large negative logits."""
    return np.exp(-np.logaddexp(0.0, -np.asarray(logits, np.float64)))


def label_aucs(scores: jax.Array, labels: jax.Array, mask: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """Each label's ROC-AUC over the nodes in ``mask`` ([n] 1/0; None: every node) by :func:`rank_auc`
    (scores [n, L], labels [n, L]: 1, 0, NaN missing), and whether it is defined: two [L] arrays (a
    run's metric, ``evaluate``'s per-label table)."""
    targets, valid = _targets(labels)
    inside = valid if mask is None else valid * mask[:, None].astype(valid.dtype)
    pos = inside * targets
    return jax.vmap(rank_auc, in_axes=(1, 1, 1))(scores.astype(jnp.float32), pos, inside - pos)


def _f1_sums(logits: jax.Array, labels: jax.Array, masks: jax.Array) -> jax.Array:
    """Per run, the masked true positives, false positives and false negatives (three [R])."""
    targets, valid = _targets(labels)
    predicted = (logits > 0).astype(valid.dtype) * valid[:, None, :]
    true = jnp.broadcast_to(targets[:, None, :], predicted.shape)
    tp = jnp.sum(predicted * true, axis=-1)
    fp = jnp.sum(predicted * (1.0 - true), axis=-1)
    fn = jnp.sum((1.0 - predicted) * true, axis=-1)
    return _diagonals(masks, jnp.concatenate([tp, fp, fn], axis=1))


def _micro_f1(sums: jax.Array) -> jax.Array:
    tp, fp, fn = sums
    return 2.0 * tp / jnp.maximum(2.0 * tp + fp + fn, 1.0)


def label_dtype(labels: np.ndarray) -> Any:
    """How labels are held: class ids as int32, multi-label targets as float32 (NaN = missing)."""
    return np.float32 if labels.ndim == 2 else np.int32


TASKS: dict[str, Task] = {}
TITLES = {"accuracy": "accuracy", "rocauc": "ROC-AUC", "micro_f1": "micro-F1"}  # a metric's name in a sentence


def register(task: Task) -> Task:
    """Make ``task`` choosable by its name (``TrainConfig.task``); returns it."""
    TASKS[task.name] = task
    return task


MULTICLASS = register(MultiClass())
register(MultiLabel())
register(MultiLabel(name="multilabel-f1", metric="micro_f1", additive=True))


def task_of(name: str, labels: Any) -> Task:
    """THE choice of the task: ``name`` as registered, or ``"auto"``: :class:`MultiClass` for labels
    ``[n]``, ``"multilabel"`` (ROC-AUC) for labels ``[n, L]``. Reads only the labels' shape, so it
    decides the same inside a compiled program as on the host."""
    if name == "auto":
        return TASKS["multilabel" if len(labels.shape) == 2 else "multiclass"]
    if name not in TASKS:
        raise ValueError(f"task={name!r} must be 'auto' or one of {tuple(TASKS)}")
    task = TASKS[name]
    ndim = getattr(task, "label_ndim", None)  # the labels' form the task reads, where it names one
    if ndim is not None and len(labels.shape) != ndim:
        form = "one class id per node" if len(labels.shape) == 1 else f"{labels.shape[-1]} labels per node"
        raise ValueError(f"task={name!r} reads labels of {ndim} dimension{'s' if ndim > 1 else ''}, and these "
                         f"have shape {tuple(labels.shape)} ({form}); use task 'auto' to let the labels decide")
    return task


def resolve(name: str, label_ndim: int) -> Task:
    """The task a run of ``TrainConfig.task`` ``name`` learns on labels of ``label_ndim`` dimensions
    (1: class ids, 2: targets per label): what a checkpoint records, never ``auto``.

    >>> resolve("auto", 2).name, resolve("multilabel-f1", 2).metric, resolve("auto", 1).name
    ('multilabel', 'micro_f1', 'multiclass')
    """
    return TASKS[name] if name in TASKS else task_of(name, np.empty((0,) * label_ndim))
