"""A saved model applied to data: the data aligned and prepared the way the model was trained, the
split that scores it honestly, its logits, and what ``evaluate`` and ``predict`` make of them (the
metrics and their JSON report, the predictions CSV).

This is what ``jaxgcn evaluate``, ``predict`` and ``plot embeddings`` compute, on typed values (a
:class:`~jaxgcn.store.checkpoint.Checkpoint`, a :class:`~jaxgcn.datasets.RawGraph`, plain flags). Nothing
here reads arguments or prints: what the user should be told comes back as a ``note``, and a refusal
whose fix the caller words in its own terms is a specific :class:`ValueError` subclass.
:mod:`jaxgcn.inference` is an alias of this module for users' code; no module of the package imports it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import numpy as np
import scipy.sparse as sp

from jaxgcn.core import tasks
from jaxgcn.core.tasks import Task, task_of
from jaxgcn.io import outputs, reports
from jaxgcn.store import checkpoint
from jaxgcn.store.checkpoint import SPLIT_CODES, Checkpoint
from jaxgcn.datasets import Prepared, RawGraph, prepare
from jaxgcn.datasets.loading import unlabelled_nodes
from jaxgcn.io.metrics import Classification, LabelScores, classification, label_scores
from jaxgcn.core.models import Execution, GCNConfig, gcn, precision_scope
from jaxgcn.plan import concrete

__all__ = [
    "Adapted", "IdentityFeaturesNeeded", "InflatedScore", "NoSavedSplit", "Saved", "as_trained", "check_features",
    "checkpoint_model", "class_names", "evaluation_split", "has_labels", "identity_features", "logits", "model_task",
    "positions", "predict", "predictions_csv", "prepare_as_trained", "probabilities", "saved_codes", "score",
    "task_name", "task_note", "write_report",
]


class Adapted(NamedTuple):
    """The data adapted to a saved model, and what to tell the user about it (None: nothing)."""

    raw: RawGraph
    note: str | None = None


class IdentityFeaturesNeeded(ValueError):
    """The model was trained on one-hot node ids, but the data comes with features of its own."""


class NoSavedSplit(ValueError):
    """Data without a split of its own, no split given, and no training split saved for its nodes."""


class InflatedScore(ValueError):
    """The nodes to score include nodes that trained the model.

    Attributes: ``on`` (the scored split), ``seen`` (its training nodes), ``total`` (its nodes),
    ``trained_split`` (the name of the split the model was trained on)."""

    def __init__(self, on: str, seen: int, total: int, trained_split: str) -> None:
        self.on, self.seen, self.total, self.trained_split = on, seen, total, trained_split
        super().__init__(f"on={on!r}: {seen} of the {total} {on} nodes of this split trained the model (its split: "
                         f"{trained_split}), so its score would be inflated; score the checkpoint's own split "
                         "(split_given=False) or give the split the model was trained on")


def positions(saved_ids: np.ndarray, ids: Any) -> np.ndarray:
    """For each of ``ids`` ([m]), its index in ``saved_ids`` ([n], unique), -1 where absent: [m] int64.

    >>> positions(np.array(["b", "a", "c"]), ["a", "z", "c"]).tolist()
    [1, -1, 2]
    """
    ids = np.asarray(ids)
    if saved_ids.size == 0:
        return np.full(ids.size, -1, np.int64)
    order = np.argsort(saved_ids, kind="stable")
    pos = np.clip(np.searchsorted(saved_ids[order], ids), 0, saved_ids.size - 1)
    return np.where(saved_ids[order][pos] == ids, order[pos], -1).astype(np.int64)


def identity_features(ck: Checkpoint, raw: RawGraph, *, one_hot_now: bool, path: str | Path,
                      source: str | Path | None = None) -> Adapted:
    """``raw`` with features in the columns a one-hot-node-id model reads.

    Such a model (trained on files without features) reads column ``j`` as node ``ck.node_ids[j]`` of
    its training graph: the one-hot features are rebuilt on those columns, by id, so renamed, added or
    removed nodes do not shift every other node's column. A node the model never saw gets an all-zero
    row (its prediction comes from its neighbours alone), and the note counts them. Any other model
    gets ``raw`` unchanged.

    Args:
        ck: the loaded checkpoint (``path``: its directory, named in messages).
        raw: the data; ``raw.node_ids`` ([n_nodes] str) name its nodes when ``one_hot_now``.
        one_hot_now: the data has no features of its own (one-hot node ids stand in for them).
        source: what the note calls the data (default ``raw.name``).

    Raises:
        IdentityFeaturesNeeded: the model was trained on one-hot node ids and ``one_hot_now`` is False.
        ValueError: the checkpoint lacks the node ids that give its columns their meaning.
    """
    trained = ck.meta.get("identity_features") or (  # checkpoints written before the flag: infer it
        ck.node_ids is not None and one_hot_now and ck.node_ids.size == ck.meta["n_features"])
    if trained and not one_hot_now:
        raise IdentityFeaturesNeeded(f"checkpoint {path}: the model was trained on one-hot node ids (identity "
                                     "features); give the graph without features (one_hot_now=True)")
    if not (trained and one_hot_now):
        return Adapted(raw)
    if ck.node_ids is None:
        raise ValueError(f"checkpoint {path}: the model was trained on one-hot node ids but the node id "
                         "file is missing; save the model again")
    pos = positions(ck.node_ids, raw.node_ids)
    rows = np.flatnonzero(pos >= 0)
    x = sp.csr_matrix((np.ones(rows.size, np.float32), (rows, pos[rows])), shape=(pos.size, ck.node_ids.size))
    unseen = pos.size - rows.size
    note = None if not unseen else (
        f"{unseen} node(s) of {source or raw.name} were not in the training graph: without identity features their "
        "predictions come from their neighbours alone")
    return Adapted(raw._replace(features=x), note)


def check_features(ck: Checkpoint, raw: RawGraph, *, path: str | Path,
                   fix: str = "give features in the same feature space") -> None:
    """Refuse data whose feature count is not the model's (``path``: the checkpoint, named in the
    message; ``fix``: how to give the right data, which ends it)."""
    n_features = int(raw.features.shape[1])
    if n_features != ck.meta["n_features"]:
        raise ValueError(f"checkpoint {path} was trained on {ck.meta['n_features']} features; this data has "
                         f"{n_features}; {fix}")


def saved_codes(ck: Checkpoint, raw: RawGraph) -> np.ndarray | None:
    """The checkpoint's training split on ``raw``'s nodes: [n_nodes] int8 codes of
    :data:`~jaxgcn.store.checkpoint.SPLIT_CODES` (0 for a node the model never saw), matched by node id, or
    by position on the same named dataset of the same size; None when the nodes cannot be matched
    (other node ids, another dataset) or no split was saved."""
    if ck.split is None:
        return None
    if ck.node_ids is not None and raw.node_ids is not None:
        pos = positions(ck.node_ids, raw.node_ids)
    elif ck.node_ids is None and raw.node_ids is None and raw.name == ck.meta.get("dataset") \
            and raw.labels.size == ck.split.size:
        pos = np.arange(raw.labels.size)
    else:
        return None
    return np.where(pos >= 0, ck.split[np.maximum(pos, 0)], 0).astype(np.int8)


def evaluation_split(ck: Checkpoint, raw: RawGraph, *, split_given: bool, own_split: bool, on: str,
                     path: str | Path) -> Adapted:
    """``raw`` with the split to score ``on`` (``"train"|"val"|"test"|"labelled"``).

    Without ``split_given`` that is the training split saved in the checkpoint (a note says so) when
    it matches ``raw``'s nodes, else the data's own split (``own_split``: a dataset's public split). A
    given split (``raw.splits``) is scored as it is unless its ``on`` nodes include nodes that trained
    the model (which would inflate the score).

    Raises:
        NoSavedSplit: no split given, none of the data's own, and none saved for these nodes.
        InflatedScore: the ``on`` nodes of the given split include training nodes.
    """
    codes = saved_codes(ck, raw)
    trained_split = ck.meta.get("split") or "public"
    if not split_given and codes is not None:
        return Adapted(raw._replace(splits={k: np.flatnonzero(codes == c) for k, c in SPLIT_CODES.items()}),
                       f"split: the model's training split, saved in {path} ({trained_split})")
    if not split_given and not own_split:
        raise NoSavedSplit(f"checkpoint {path}: holds no training split for these nodes; give the split it was "
                           "trained on (the file `jaxgcn train --save-split FILE` writes) with split_given=True")
    if codes is None or on in ("train", "labelled"):
        return Adapted(raw)
    scored = np.asarray(raw.splits.get(on, []), np.int64)
    seen = int(np.sum(codes[scored] == SPLIT_CODES["train"]))
    if seen:
        raise InflatedScore(on, seen, int(scored.size), trained_split)
    return Adapted(raw)


def prepare_as_trained(ck: Checkpoint, raw: RawGraph, *, require_split: bool,
                       labels_source: str | Path | None = None) -> Prepared:
    """``raw`` cleaned and normalized with the checkpoint's normalizations and feature statistics.

    With ``require_split`` (scoring) the data's class names, when both sides have them, must be the
    model's (``labels_source``: what the message calls the labels, default ``raw.name``)."""
    meta = ck.meta
    prepared = prepare(raw, norm=meta["norm"] or "sym", feature_norm=meta["feature_norm"] or "row",
                       require_split=require_split, feature_statistics=meta.get("feature_stats"))
    if require_split and raw.class_names and meta["class_names"] and raw.class_names != meta["class_names"]:
        raise ValueError(f"{labels_source or raw.name}: classes {raw.class_names} differ from the checkpoint's "
                         f"{meta['class_names']}")
    return prepared


class Saved(NamedTuple):
    """A saved model and the data prepared the way it was trained: what ``evaluate``, ``predict`` and
    ``plot embeddings`` compute on. ``node_ids``: the data's ([n_nodes] str), None when it has none."""

    ck: Checkpoint
    prepared: Prepared
    node_ids: np.ndarray | None


def as_trained(ck: Checkpoint, raw: RawGraph, *, path: str | Path, scoring: bool, one_hot_now: bool,
               split_given: bool = False, own_split: bool = True, on: str = "test", source: str | Path | None = None,
               features_fix: str = "give features in the same feature space",
               draw_split: Callable[[RawGraph], dict[str, np.ndarray]] | None = None,
               labels_source: str | Path | None = None, say: Callable[[str], None] = print) -> Saved:
    """``raw`` applied to the saved model ``ck`` (``path``: its directory, named in messages) as it was
    trained, in this order: its labels' form checked against the model's task (:func:`model_task`;
    :func:`task_note`), the one-hot node-id columns (:func:`identity_features`), the feature count
    checked (:func:`check_features`, ``features_fix`` ending its message), ``draw_split``'s split when
    given (a random split drawn as train draws it), with ``scoring`` (evaluate) the split that scores
    it honestly (:func:`evaluation_split`), then the checkpoint's normalizations
    (:func:`prepare_as_trained`). Notes go to ``say`` as they arise.

    Raises:
        IdentityFeaturesNeeded, NoSavedSplit, InflatedScore: for the caller to word in its own terms.
        ValueError: other data this model cannot be applied to (labels of the other task's form: one
            line naming the checkpoint ``path`` and its task).
    """
    def told(adapted: Adapted) -> RawGraph:
        if adapted.note is not None:
            say(adapted.note)
        return adapted.raw

    # the model's own task, whatever these labels are: labels of the other form are refused first
    model_task(ck, raw.labels, source=f"checkpoint {path}", labels_source=labels_source or raw.name)
    told(Adapted(raw, task_note(ck, raw.labels, source=f"checkpoint {path}")))
    raw = told(identity_features(ck, raw, one_hot_now=one_hot_now, path=path, source=source))
    check_features(ck, raw, path=path, fix=features_fix)
    if draw_split is not None:
        raw = raw._replace(splits=draw_split(raw))
    if scoring:
        raw = told(evaluation_split(ck, raw, split_given=split_given, own_split=own_split, on=on, path=path))
    return Saved(ck, prepare_as_trained(ck, raw, require_split=scoring, labels_source=labels_source), raw.node_ids)


def checkpoint_model(ck: Checkpoint) -> tuple[GCNConfig, Any]:
    """The saved model's architecture (checked when the checkpoint was loaded) and params (device
    arrays). How it ran is not needed: here the backend follows the graph as prepared."""
    return checkpoint.model_config(ck.meta), jax.tree.map(jax.numpy.asarray, ck.params)


def logits(ck: Checkpoint, prepared: Prepared, *, embed: bool = False, precision: str | None = None) -> Any:
    """The saved model's logits ([n_nodes, n_classes]) on the prepared graph, or with ``embed`` its last
    hidden layer ([n_nodes, hidden]; a 1-layer model's input features, possibly sparse), computed in the
    float32 matmul ``precision`` (None: the one the checkpoint records, :func:`jaxgcn.store.checkpoint.precision`;
    a recorded ``default`` is ``auto``: the CPU, where most models train, computes float32 exactly in its
    ``default``, so a TPU evaluating its model gives the CPU's answers in full float32 too)."""
    config, params = checkpoint_model(ck)
    graph, x = prepared.data.graph, prepared.data.x
    recorded = checkpoint.precision(ck.meta)
    # the backend the graph was prepared for, its ops; the precision decided for this platform
    execution = concrete(Execution(precision=precision or ("auto" if recorded == "default" else recorded)), graph)
    model = gcn(config, execution)
    with precision_scope(execution):
        return jax.jit(lambda p, g, x: model.apply(p, g, x, embed=embed))(params, graph, x)


def class_names(ck: Checkpoint) -> list[str]:
    """The saved model's class names: the ones it was trained with, else ``"0"``, ``"1"``, ..."""
    return ck.meta["class_names"] or [str(c) for c in range(ck.meta["n_classes"])]


def task_name(meta: dict[str, Any]) -> str | None:
    """The task a checkpoint's model learned (its ``checkpoint.json``: ``meta``): its recorded
    ``task.name``; ``multiclass`` before the task seam (no ``train.task``: the only task there was);
    None where ``train.task`` is ``auto`` (saved before the task was resolved: the labels decide).

    >>> task_name({"task": {"name": "multilabel"}}), task_name({"train": {}}), task_name({"train": {"task": "auto"}})
    ('multilabel', 'multiclass', None)
    """
    if isinstance(meta.get("task"), dict):
        return meta["task"]["name"]
    name = meta["train"].get("task", "multiclass") if isinstance(meta.get("train"), dict) else "multiclass"
    return None if name == "auto" else name


def has_labels(labels: Any) -> bool:
    """Whether ``labels`` say anything: multi-label targets ([n, L], any), or class ids ([n]) of which
    one at least is not -1 (a graph read without labels has only -1: nothing to check them against).

    >>> has_labels(np.full(3, -1)), has_labels(np.array([-1, 2])), has_labels(np.zeros((3, 2)))
    (False, True, True)
    """
    labels = np.asarray(labels)
    return labels.ndim == 2 or bool(np.any(labels >= 0))


def _labels_form(labels: np.ndarray) -> str:
    return "one class per node (single-label)" if labels.ndim == 1 else f"{labels.shape[1]} labels per node " \
        "(multi-label)"


def model_task(ck: Checkpoint, labels: Any = None, *, source: str = "the checkpoint",
               labels_source: str | Path | None = None) -> Task:
    """THE task a saved model is applied with (``evaluate``, ``predict``), whatever labels come with
    the data: the one its checkpoint records (:func:`task_name`). A checkpoint
    that recorded ``auto`` (saved before the task was resolved at save time) is decided as it was
    trained, by the labels' shape, when ``labels`` have any (:func:`has_labels`); without any it is
    taken as single-label, the only reading such data allows (:func:`task_note` says so).

    Args:
        ck: the loaded checkpoint (``source``: what messages call it, e.g. ``checkpoint DIR``).
        labels: the data's labels ([n] class ids or [n, L] targets), or None.
        labels_source: what messages call the labels (a file, a dataset).

    Raises:
        ValueError: labels of the other form than the model's task reads (class ids for a
            multi-label model, several labels per node for a single-label one), or a task this
            jaxgcn does not have; one line naming the checkpoint and its task.
    """
    name = task_name(ck.meta)
    labelled = labels is not None and has_labels(labels)
    if name is None:  # "auto" recorded: the labels chose when it trained, as they choose here
        return task_of("auto", np.asarray(labels) if labelled else np.empty(0))
    if name not in tasks.TASKS:
        raise ValueError(f"{source}: task {name!r} is not one of this jaxgcn's tasks ({', '.join(tasks.TASKS)}); "
                         f"apply it with the jaxgcn that saved it ({ck.meta.get('version')})")
    learned = tasks.TASKS[name]
    want = getattr(learned, "label_ndim", None)
    if labelled and want is not None and np.ndim(labels) != want:
        have = np.asarray(labels)
        kind, form = (("multi-label", "a 1/0 target per label (node,labels rows, or a 1/0 column per label)")
                      if want == 2 else ("single-label", "one class per node (node,label)"))
        raise ValueError(f"{labels_source or 'the labels'}: {_labels_form(have)}, but {source} holds a {kind} "
                         f"model (task {name!r}, metric {tasks.TITLES.get(learned.metric, learned.metric)}, "
                         f"{ck.meta['n_classes']} {'labels' if want == 2 else 'classes'}); give its labels as "
                         f"{form}; predicting needs none")
    return learned


def task_note(ck: Checkpoint, labels: Any, *, source: str = "the checkpoint") -> str | None:
    """What to tell the user when :func:`model_task` had to guess: a checkpoint that records ``auto``
    applied to data without labels is taken as single-label (None: nothing to tell)."""
    if task_name(ck.meta) is not None or (labels is not None and has_labels(labels)):
        return None
    return (f"{source} records task 'auto' (saved by jaxgcn {ck.meta.get('version')}, which kept the task the "
            "labels chose unrecorded) and this data has no labels: applied as a single-label model; save it "
            "again with this jaxgcn, which records its task")


def score(ck: Checkpoint, prepared: Prepared, on: str, precision: str | None = None,
          source: str = "checkpoint", threshold: float | None = None) -> Classification | LabelScores:
    """The saved model's metrics on the ``on`` nodes of the prepared graph (``"train"|"val"|"test"``:
    that split; anything else: every labelled node), in ``precision`` (:func:`logits`): a single-label
    model's :class:`~jaxgcn.io.metrics.Classification`, a multi-label model's
    :class:`~jaxgcn.io.metrics.LabelScores` (its labels predicted above ``threshold``, default 0.5;
    given for a single-label model, refused naming ``source``)."""
    learned = model_task(ck, prepared.data.labels, source=source)
    if learned.name == "multiclass":
        check_threshold(threshold, source)
    out = np.asarray(logits(ck, prepared, precision=precision))
    d = prepared.data
    labels = np.asarray(d.labels)
    mask = {"test": d.test_mask, "val": d.val_mask, "train": d.train_mask}.get(on)
    n = labels.shape[0]
    chosen = ~unlabelled_nodes(labels) if mask is None else (np.asarray(mask).reshape(-1, n)[0] > 0)
    if learned.name == "multiclass":
        return classification(labels[chosen], out.argmax(axis=1)[chosen], ck.meta["n_classes"])
    auc, defined = (np.asarray(a) for a in tasks.label_aucs(jax.numpy.asarray(out[chosen]),
                                                             jax.numpy.asarray(labels[chosen])))
    return label_scores(labels[chosen], tasks.sigmoid(out[chosen]), np.where(defined, auc, np.nan),
                        0.5 if threshold is None else threshold)


def check_threshold(threshold: float | None, source: str) -> None:
    """A ``--threshold`` is a multi-label model's: one given for a single-label model is refused."""
    if threshold is not None:
        raise ValueError(f"--threshold {threshold:g}: {source} is a single-label model, which predicts the class "
                         "of highest probability; the threshold picks a multi-label model's labels (leave it out)")


def write_report(path: str | Path, on: str, names: list[str], metrics: Classification | LabelScores, *,
                 label: str) -> None:
    """The evaluation's JSON report (:func:`jaxgcn.io.reports.evaluation_report`) written atomically to
    ``path`` (``label``: what an error calls it)."""
    outputs.write_atomic(path, reports.json_text(reports.evaluation_report(on, names, metrics)), label=label)


def probabilities(ck: Checkpoint, prepared: Prepared, precision: str | None = None,
                  learned: Task | None = None) -> np.ndarray:
    """The saved model's probabilities on every node of the prepared graph, [n_nodes, n_classes]
    float64, in ``precision`` (:func:`logits`): a single-label model's softmax (each row sums to 1),
    a multi-label model's sigmoid per label (independent: rows need not sum to 1). ``learned``: the
    model's task (default :func:`model_task` on the prepared labels)."""
    return _outputs(ck, prepared, precision, learned or model_task(ck, prepared.data.labels))[1]


def _outputs(ck: Checkpoint, prepared: Prepared, precision: str | None, learned: Task) -> tuple[np.ndarray, np.ndarray]:
    """The logits and :func:`probabilities` ([n_nodes, n_classes] each)."""
    out = np.asarray(logits(ck, prepared, precision=precision))
    if learned.name == "multiclass":
        return out, np.asarray(jax.nn.softmax(out, axis=-1), np.float64)  # float32 softmax, exactly widened
    return out, tasks.sigmoid(out)


def predictions_csv(ck: Checkpoint, prepared: Prepared, node_ids: np.ndarray | None,
                    precision: str | None = None, threshold: float | None = None,
                    source: str = "checkpoint") -> tuple[str, int]:
    """``node,label,prob_<class>...`` CSV text of every node of the prepared graph (named by
    ``node_ids`` ([n_nodes] str), else by position), and the number of nodes; in ``precision`` (:func:`logits`).
    The model's own task decides (:func:`model_task`, whatever labels the data has): a multi-label
    model's rows are ``node,labels,prob_<label>...``: the labels whose probability is over
    ``threshold`` (default 0.5; refused for a single-label model, naming ``source``), separated by
    spaces (:meth:`jaxgcn.core.tasks.Task.decode`), and each label's sigmoid."""
    learned = model_task(ck, prepared.data.labels, source=source)
    if learned.name == "multiclass":
        check_threshold(threshold, source)
    out, probs = _outputs(ck, prepared, precision, learned)
    names = np.asarray(class_names(ck), dtype=object)
    ids = node_ids if node_ids is not None else np.arange(out.shape[0]).astype(str)
    if learned.name == "multiclass":
        head, pred = "label", names[probs.argmax(axis=1)]
    else:
        chosen = learned.decode(out, 0.5 if threshold is None else threshold) > 0
        head, pred = "labels", np.array([" ".join(names[row]) for row in chosen], dtype=object)
    body = np.column_stack([ids.astype(str), pred.astype(str), np.char.mod("%.6f", probs).astype(str)])
    text = f"node,{head}," + ",".join(f"prob_{n}" for n in names) + "\n" + "\n".join(",".join(row) for row in body)
    return text + "\n", probs.shape[0]


def predict(checkpoint_dir: str | Path, graph: RawGraph | str | Path, features: str | Path | None = None, *,
            run: int | None = None, precision: str | None = None,
            say: Callable[[str], None] = print) -> np.ndarray:
    """A saved model's probabilities on a graph, in one call: [n_nodes, n_classes] float64 in the
    graph's node order, the class or label order of :func:`class_names`. A single-label model's
    rows are its softmax (they sum to 1; the prediction is their arg-max); a multi-label model's are
    each label's sigmoid (the labels predicted are those over a threshold, e.g. ``probs > 0.5``).
    The model's own task decides (:func:`model_task`); the graph needs no labels.

    Args:
        checkpoint_dir: what ``jaxgcn train --save`` wrote (a several-run save: the best validation
            run, or ``run``).
        graph: a :class:`~jaxgcn.datasets.RawGraph` (``jaxgcn.load_dataset``,
            ``jaxgcn.datasets.files.load_files``), or an edges file read with ``features`` (a
            features file; None: one-hot node ids, for a model trained on those).
        precision: the float32 matmul precision (None: the checkpoint's, :func:`logits`).
        say: where notes go (a checkpoint's run chosen, nodes a one-hot model never saw).

    Raises:
        ValueError: data this model cannot be applied to (other features; labels of the other form).

    >>> import jaxgcn
    >>> probs = jaxgcn.predict("model", "edges.csv", "features.csv")  # doctest: +SKIP
    >>> probs.shape, probs.argmax(axis=1)  # doctest: +SKIP
    ((120, 3), array([2, 0, 1, ...]))
    """
    directory, note = checkpoint.resolve_run(checkpoint_dir, run)
    if note is not None:
        say(note)
    ck = checkpoint.load(directory)
    if isinstance(graph, RawGraph):
        raw, one_hot_now = graph, bool(ck.meta.get("identity_features"))  # given as the model was trained
    else:
        from jaxgcn.datasets.files import load_files

        raw, one_hot_now = load_files(graph, features), features is None
    saved = as_trained(ck, raw._replace(splits={}), path=directory, scoring=False, one_hot_now=one_hot_now,
                       source=None if isinstance(graph, RawGraph) else graph, say=say)
    return probabilities(ck, saved.prepared, precision, model_task(ck, raw.labels, source=f"checkpoint {directory}"))
