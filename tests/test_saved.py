"""A saved model applied to data (jaxgcn.app.inference), called directly on typed values: identity
features aligned by node id, the saved split matched to new nodes, the evaluation split refused
when it would score training nodes, and the saved model's logits against the dense formula."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from jaxgcn.store import checkpoint
from jaxgcn.app import inference
from jaxgcn.store.checkpoint import Checkpoint
from jaxgcn.datasets import RawGraph
from jaxgcn.core.models import GCNConfig
from jaxgcn.train import TrainConfig

TRAINED_IDS = np.array(["a", "b", "c", "d"])  # column j of a one-hot model is node TRAINED_IDS[j]
SPLIT = np.array([1, 2, 3, 0], np.int8)  # a: train, b: val, c: test, d: in no split


def ck(**meta) -> Checkpoint:
    base = {"n_features": 4, "identity_features": True, "dataset": "g", "split": "random (seed 0)"}
    return Checkpoint(params={}, meta={**base, **meta}, node_ids=TRAINED_IDS, split=SPLIT)


def raw(ids: list[str] | None, n: int | None = None, features=None, splits=None, name: str = "g") -> RawGraph:
    n = len(ids) if ids is not None else n
    return RawGraph(name, np.arange(n - 1), np.arange(1, n), features if features is not None else sp.eye(n).tocsr(),
                    np.zeros(n, np.int32), splits or {}, node_ids=None if ids is None else np.array(ids))


def test_positions_finds_each_id_and_marks_the_absent():
    np.testing.assert_array_equal(inference.positions(np.array(["n2", "n0", "n1"]), ["n1", "x", "n2", "n0", "n1"]),
                                  [2, -1, 0, 1, 2])
    np.testing.assert_array_equal(inference.positions(np.array([], str), ["a", "b"]), [-1, -1])


def test_identity_features_follow_the_node_ids_when_nodes_are_renamed_added_removed():
    # c renamed to zz (and so unseen), d and b reordered, e added, nothing else moved
    data = raw(["d", "b", "zz", "a", "e"])
    adapted = inference.identity_features(ck(), data, one_hot_now=True, path="ck", source="edges.csv")
    expected = np.zeros((5, 4), np.float32)
    expected[0, 3] = expected[1, 1] = expected[3, 0] = 1.0
    np.testing.assert_array_equal(adapted.raw.features.toarray(), expected)
    assert adapted.note == ("2 node(s) of edges.csv were not in the training graph: without identity features "
                            "their predictions come from their neighbours alone")
    assert adapted.raw.features.dtype == np.float32 and adapted.raw.node_ids is data.node_ids


def test_identity_features_of_the_same_nodes_in_another_order_say_nothing():
    adapted = inference.identity_features(ck(), raw(["c", "a", "d", "b"]), one_hot_now=True, path="ck")
    np.testing.assert_array_equal(adapted.raw.features.toarray().argmax(axis=1), [2, 0, 3, 1])
    assert adapted.raw.features.nnz == 4 and adapted.note is None


def test_an_older_checkpoint_is_recognized_as_one_hot_by_its_node_id_count():
    old = ck(identity_features=None)
    adapted = inference.identity_features(old, raw(["b", "a", "q", "c"]), one_hot_now=True, path="ck")
    np.testing.assert_array_equal(adapted.raw.features.toarray(),
                                  [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0]])
    assert adapted.note.startswith("1 node(s) of g were not in the training graph")


def test_a_model_with_real_features_keeps_the_data_as_it_is():
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    data = raw(["a", "b", "c", "d"], features=x)
    adapted = inference.identity_features(ck(identity_features=False, n_features=2), data, one_hot_now=False,
                                          path="ck")
    assert adapted.raw is data and adapted.note is None


def test_identity_features_are_refused_without_their_node_ids_or_with_features():
    with pytest.raises(inference.IdentityFeaturesNeeded, match=r"checkpoint ck: the model was trained on one-hot "
                       r"node ids .*one_hot_now=True"):
        inference.identity_features(ck(), raw(["a"], features=np.ones((1, 4), np.float32)), one_hot_now=False,
                                    path="ck")
    with pytest.raises(ValueError, match=r"checkpoint ck: .*one-hot node ids but the node id file is missing"):
        inference.identity_features(ck()._replace(node_ids=None), raw(["a"]), one_hot_now=True, path="ck")


def test_check_features_names_both_counts():
    inference.check_features(ck(), raw(["a", "b"], features=np.ones((2, 4), np.float32)), path="ck")
    with pytest.raises(ValueError, match=r"checkpoint ck was trained on 4 features; this data has 3"):
        inference.check_features(ck(), raw(["a", "b"], features=np.ones((2, 3), np.float32)), path="ck")


def test_saved_codes_match_by_id_or_by_position_on_the_same_dataset():
    np.testing.assert_array_equal(inference.saved_codes(ck(), raw(["c", "x", "a", "d"])), [3, 0, 1, 0])
    no_ids = ck()._replace(node_ids=None)
    np.testing.assert_array_equal(inference.saved_codes(no_ids, raw(None, n=4)), SPLIT)
    assert inference.saved_codes(no_ids, raw(None, n=4, name="other")) is None  # another dataset
    assert inference.saved_codes(no_ids, raw(None, n=5)) is None  # the same name, other nodes
    assert inference.saved_codes(ck(), raw(None, n=4)) is None  # ids on one side only
    assert inference.saved_codes(ck()._replace(split=None), raw(["a"])) is None


def test_evaluation_split_defaults_to_the_saved_training_split():
    adapted = inference.evaluation_split(ck(), raw(["d", "c", "b", "a", "new"]), split_given=False, own_split=False,
                                         on="test", path="ck")
    assert {k: v.tolist() for k, v in adapted.raw.splits.items()} == {"train": [3], "val": [2], "test": [1]}
    assert adapted.note == "split: the model's training split, saved in ck (random (seed 0))"


def test_evaluation_split_without_a_saved_one():
    data = raw(None, n=4, name="other", splits={"test": np.array([0])})
    assert inference.evaluation_split(ck(), data, split_given=False, own_split=True, on="test",
                                      path="ck") == (data, None)
    with pytest.raises(inference.NoSavedSplit, match=r"checkpoint ck: holds no training split for these nodes"):
        inference.evaluation_split(ck(), data, split_given=False, own_split=False, on="test", path="ck")


def test_evaluation_split_refuses_a_given_split_that_scores_training_nodes():
    ids = ["a", "b", "c", "d", "e"]  # a trained the model; b, c, d, e did not
    overlapping = raw(ids, splits={"train": np.array([1]), "val": np.array([4]), "test": np.array([0, 2, 3])})
    with pytest.raises(inference.InflatedScore, match=r"on='test': 1 of the 3 test nodes of this split trained the "
                       r"model \(its split: random \(seed 0\)\), so its score would be inflated") as info:
        inference.evaluation_split(ck(), overlapping, split_given=True, own_split=False, on="test", path="ck")
    assert (info.value.on, info.value.seen, info.value.total, info.value.trained_split) == \
        ("test", 1, 3, "random (seed 0)")
    # scoring the training nodes (or every labelled node) is asked for, not inflated by accident
    for on in ("train", "labelled"):
        assert inference.evaluation_split(ck(), overlapping, split_given=True, own_split=False, on=on,
                                          path="ck").raw is overlapping
    disjoint = overlapping._replace(splits={**overlapping.splits, "test": np.array([2, 3])})
    assert inference.evaluation_split(ck(), disjoint, split_given=True, own_split=False, on="test",
                                      path="ck") == (disjoint, None)


def test_the_saved_model_s_logits_are_the_dense_gcn_formula(tmp_path):
    w0 = np.array([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]], np.float32)
    w1 = np.array([[1.0, -2.0], [0.5, 3.0]], np.float32)
    info = {"n_features": 3, "n_classes": 2, "class_names": ["p", "q"], "feature_norm": "row", "norm": "sym"}
    checkpoint.save(tmp_path / "ck", {"layer_0": {"w": w0}, "layer_1": {"w": w1}}, model_config=GCNConfig(hidden=2),
                    train_config=TrainConfig(), info=info, epoch=3, metrics={})
    saved = checkpoint.load(tmp_path / "ck")
    x = np.array([[1, 0, 1], [0, 2, 0], [1, 1, 1], [3, 0, 1]], np.float32)
    data = RawGraph("path", np.array([0, 1, 2]), np.array([1, 2, 3]), x, np.array([0, 1, 0, 1], np.int32), {},
                    class_names=["p", "q"])
    prepared = inference.prepare_as_trained(saved, data, require_split=False)
    a = np.eye(4) + np.diag(np.ones(3), 1) + np.diag(np.ones(3), -1)  # the path 0-1-2-3 with self-loops
    d = a.sum(axis=1) ** -0.5
    a_hat = d[:, None] * a * d[None, :]
    h = np.maximum(a_hat @ (x / x.sum(axis=1, keepdims=True)) @ w0, 0.0)
    np.testing.assert_allclose(np.asarray(inference.logits(saved, prepared)), a_hat @ h @ w1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(inference.logits(saved, prepared, embed=True)), h, rtol=1e-5, atol=1e-6)
    config, params = inference.checkpoint_model(saved)
    assert config == GCNConfig(hidden=2)  # the architecture only: the backend follows the graph as prepared here
    np.testing.assert_array_equal(np.asarray(params["layer_0"]["w"]), w0)
    with pytest.raises(ValueError, match=r"labels\.csv: classes \['q', 'p'\] differ from the checkpoint's "
                       r"\['p', 'q'\]"):
        inference.prepare_as_trained(saved, data._replace(class_names=["q", "p"], splits={"train": np.array([0]),
                                     "val": np.array([1]), "test": np.array([2])}), require_split=True,
                                     labels_source="labels.csv")


def _path_model(tmp_path) -> tuple[Checkpoint, RawGraph, np.ndarray]:
    """A saved 2-layer model, a 4-node path graph with a split, and its logits by the dense formula."""
    w0 = np.array([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]], np.float32)
    w1 = np.array([[1.0, 0.0], [0.0, 5.0]], np.float32)
    info = {"n_features": 3, "n_classes": 2, "class_names": ["p", "q"], "feature_norm": "row", "norm": "sym"}
    checkpoint.save(tmp_path / "ck", {"layer_0": {"w": w0}, "layer_1": {"w": w1}}, model_config=GCNConfig(hidden=2),
                    train_config=TrainConfig(), info=info, epoch=3, metrics={})
    x = np.array([[1, 0, 1], [0, 2, 0], [1, 1, 1], [3, 0, 1]], np.float32)
    splits = {"train": np.array([0]), "val": np.array([1]), "test": np.array([2, 3])}
    data = RawGraph("path", np.array([0, 1, 2]), np.array([1, 2, 3]), x, np.array([1, 1, 0, 0], np.int32), splits,
                    class_names=["p", "q"])
    a = np.eye(4) + np.diag(np.ones(3), 1) + np.diag(np.ones(3), -1)
    d = a.sum(axis=1) ** -0.5
    a_hat = d[:, None] * a * d[None, :]
    return checkpoint.load(tmp_path / "ck"), data, a_hat @ np.maximum(a_hat @ (x / x.sum(axis=1, keepdims=True)) @ w0,
                                                                       0.0) @ w1


def test_evaluate_scores_the_chosen_nodes_and_predict_writes_every_node(tmp_path):
    saved, data, dense = _path_model(tmp_path)
    prepared = inference.prepare_as_trained(saved, data, require_split=True)
    predicted = dense.argmax(axis=1)
    assert predicted.tolist() == [1, 1, 0, 0]  # both classes predicted: the scores below are not trivial
    for on, nodes in (("test", [2, 3]), ("train", [0]), ("labelled", [0, 1, 2, 3])):
        m = inference.score(saved, prepared, on)
        assert (m.n, m.accuracy) == (len(nodes), 1.0)  # the nodes of ``on``, each predicted as labelled
    m = inference.score(saved, prepared._replace(data=prepared.data._replace(
        labels=np.array([1, 1, 1, 0], np.int32))), "test")  # node 2 now mislabelled: half the test nodes right
    assert (m.n, m.accuracy, m.confusion.tolist()) == (2, 0.5, [[1, 0], [1, 0]])
    inference.write_report(tmp_path / "r.json", "test", inference.class_names(saved), m, label="--json r.json")
    report = json.loads((tmp_path / "r.json").read_text())
    assert (report["on"], report["nodes"], report["accuracy"], report["classes"]) == ("test", 2, 0.5, ["p", "q"])
    text, n = inference.predictions_csv(saved, prepared, np.array(["n0", "n1", "n2", "n3"]))
    lines = text.splitlines()
    assert n == 4 and lines[0] == "node,label,prob_p,prob_q" and [r.split(",")[:2] for r in lines[1:]] == [
        ["n0", "q"], ["n1", "q"], ["n2", "p"], ["n3", "p"]]
    probs = np.exp(dense) / np.exp(dense).sum(axis=1, keepdims=True)
    np.testing.assert_allclose([[float(v) for v in r.split(",")[2:]] for r in lines[1:]], probs, atol=1e-5)
    assert inference.predictions_csv(saved, prepared, None)[0].splitlines()[1].startswith("0,q,")  # ids by position
    assert inference.class_names(saved._replace(meta={**saved.meta, "class_names": None})) == ["0", "1"]


def test_jaxgcn_inference_is_an_alias_of_the_application_layer_s():
    import jaxgcn.inference as alias

    for name in inference.__all__:
        assert getattr(alias, name) is getattr(inference, name), name


def test_as_trained_adapts_the_data_in_order_and_says_each_note():
    notes = []
    saved = ck(norm="sym", feature_norm="row", class_names=None)
    data = raw(["d", "c", "b", "a", "new"])._replace(labels=np.array([0, 1, 0, 1, 0], np.int32))
    got = inference.as_trained(saved, data, path="ck", scoring=True, one_hot_now=True, split_given=False,
                               own_split=False, source="edges.csv", say=notes.append)
    assert notes == ["1 node(s) of edges.csv were not in the training graph: without identity features their "
                     "predictions come from their neighbours alone",
                     "split: the model's training split, saved in ck (random (seed 0))"]
    d = got.prepared.data  # the saved split matched by id: a trains, b validates, c tests, d and new in none
    assert [np.flatnonzero(np.asarray(m).reshape(-1)).tolist() for m in (d.train_mask, d.val_mask, d.test_mask)] == [
        [3], [2], [1]]
    assert got.node_ids.tolist() == ["d", "c", "b", "a", "new"] and got.ck is saved
    drawn = inference.as_trained(saved, data, path="ck", scoring=True, one_hot_now=True, split_given=True,
                                 draw_split=lambda r: {"train": np.array([4]), "val": np.array([0]),
                                                       "test": np.array([1])}, say=notes.append)
    assert np.flatnonzero(np.asarray(drawn.prepared.data.test_mask).reshape(-1)).tolist() == [1]  # the drawn split
    with pytest.raises(inference.InflatedScore):  # node 3 ("a") trained the model: a drawn split scoring it is refused
        inference.as_trained(saved, data, path="ck", scoring=True, one_hot_now=True, split_given=True,
                             draw_split=lambda r: {"train": np.array([4]), "val": np.array([0]),
                                                   "test": np.array([3])}, say=notes.append)
