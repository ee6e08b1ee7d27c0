"""The task is part of the model (issue 58): a checkpoint records the task its run resolved (never
``auto``), and ``predict`` and ``evaluate`` apply that task whatever labels they are given. A
multi-label model predicts each label's probability and the labels over ``--threshold`` on new,
unlabelled nodes; labels of the other form are refused on one line naming the checkpoint's task;
``info`` counts a multi-label graph's targets per label and split; ``jaxgcn.predict`` gives the
probabilities to NumPy in one call."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_run import run_main, unwrap

N, LABELS = 60, ("jazz", "pop", "rock")


def tiny_graph(root):
    """A 60-node graph as files: 3 groups (rings of 20, a few edges between them), features the
    group's one-hot plus noise; labels as 1/0 columns ('rock': group 0, 'pop': group 0 or 1,
    'jazz': group 2), a tenth of the nodes unlisted and some cells empty; and one class per node
    (its group) in another file."""
    root.mkdir()
    rng = np.random.default_rng(0)
    group = np.arange(N) // 20
    ids = [f"n{i:02d}" for i in range(N)]
    edges = [(i, 20 * (i // 20) + (i + 1) % 20) for i in range(N)] + [(0, 20), (25, 45), (10, 50)]
    (root / "e.csv").write_text("src,dst\n" + "".join(f"{ids[a]},{ids[b]}\n" for a, b in edges))
    x = np.eye(3)[group] + rng.normal(0.0, 0.2, (N, 3))
    (root / "f.csv").write_text("node,f0,f1,f2\n" + "".join(f"{ids[i]}," + ",".join(f"{v:.4f}" for v in x[i]) + "\n"
                                                             for i in range(N)))
    has = np.stack([group == 2, group <= 1, group == 0], axis=1).astype(int)
    cells = [[str(v) for v in row] for row in has]
    for i in range(3, N, 7):
        cells[i][i % 3] = ""  # a missing target
    (root / "labels.csv").write_text("node," + ",".join(LABELS) + "\n"
                                     + "".join(f"{ids[i]}," + ",".join(cells[i]) + "\n" for i in range(N) if i % 10))
    (root / "single.csv").write_text("node,label\n" + "".join(f"{ids[i]},g{group[i]}\n" for i in range(N)))
    target = has.astype(float)
    for i in range(3, N, 7):
        target[i, i % 3] = np.nan
    target[::10] = np.nan
    return root, target


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The graph, its multi-label model and a single-label model of the same graph, trained once."""
    root, target = tiny_graph(tmp_path_factory.mktemp("task") / "g")
    files = ["--edges", root / "e.csv", "--features", root / "f.csv"]
    for name, labels in (("multi", "labels.csv"), ("single", "single.csv")):
        assert run_main(["train", *files, "--labels", root / labels, "--train-frac", "0.5", "--epochs", "60",
                         "--early-stopping", "none", "--lr", "0.05", "--save", root / name, "--quiet",
                         "--no-compile-cache"]) == 0
    return root, files, target


def rows(path):
    lines = path.read_text().splitlines()
    return lines[0], [line.split(",") for line in lines[1:]]


def predicted(root, model: str, files, out: str, *more):
    """``predict`` of ``root/model`` into ``root/out``: its header, its rows and their probabilities."""
    assert run_main(["predict", "--checkpoint", root / model, *files, *more, "--out", root / out]) == 0
    head, body = rows(root / out)
    return head, body, np.array([[float(v) for v in r[2:]] for r in body])


def test_a_checkpoint_records_the_task_its_run_resolved(models):
    root, _, _ = models
    multi = json.loads((root / "multi" / "checkpoint.json").read_text())
    single = json.loads((root / "single" / "checkpoint.json").read_text())
    assert multi["task"] == {"name": "multilabel", "metric": "rocauc"} and multi["train"]["task"] == "multilabel"
    assert single["task"] == {"name": "multiclass", "metric": "accuracy"} and single["train"]["task"] == "multiclass"
    assert multi["extra"]["options"]["task"] == "auto"  # the command as typed stays recorded (--resume compares it)


def test_predict_without_labels_gives_each_labels_probability_and_the_labels_over_the_threshold(models, capsys):
    import jaxgcn

    root, files, target = models
    head, body, probs = predicted(root, "multi", files, "p.csv")
    assert head == "node,labels,prob_jazz,prob_pop,prob_rock" and len(body) == N
    assert np.abs(probs.sum(axis=1) - 1.0).max() > 0.3  # independent sigmoids, not a softmax
    for r, p in zip(body, probs):
        assert r[1].split() == [name for name, q in zip(LABELS, p) if q > 0.5], r
    known = ~np.isnan(target)
    assert np.mean((probs > 0.5)[known] == (target[known] == 1)) > 0.9  # it learned the labels
    # the library's one call: the same probabilities, to NumPy
    lib = jaxgcn.predict(root / "multi", root / "e.csv", root / "f.csv", say=lambda note: None)
    assert lib.shape == (N, 3) and lib.dtype == np.float64
    np.testing.assert_allclose(lib, probs, atol=5e-7)
    # --threshold picks the labels over it; with the labels given, the same model and rows
    head3, body3, _ = predicted(root, "multi", files, "p3.csv", "--labels", root / "labels.csv", "--threshold", "0.3")
    assert head3 == head and [r[2:] for r in body3] == [r[2:] for r in body]
    chosen = [r[1].split() for r in body3]
    assert chosen == [[name for name, q in zip(LABELS, p) if q > 0.3] for p in probs]
    assert chosen != [r[1].split() for r in body]  # the threshold changed some node's labels


def test_a_single_label_model_still_predicts_one_class_whose_probabilities_sum_to_one(models, capsys):
    import jaxgcn

    root, files, _ = models
    head, body, probs = predicted(root, "single", files, "s.csv")
    assert head == "node,label,prob_g0,prob_g1,prob_g2" and len(body) == N
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=2e-6)
    assert [r[1] for r in body] == [f"g{k}" for k in probs.argmax(axis=1)]
    np.testing.assert_allclose(jaxgcn.predict(root / "single", root / "e.csv", root / "f.csv"), probs, atol=5e-7)
    assert run_main(["predict", "--checkpoint", root / "single", *files, "--threshold", "0.7", "--out", "-"]) == 2
    assert "--threshold 0.7: --checkpoint" in unwrap(capsys.readouterr().err)


@pytest.mark.parametrize("command", ["evaluate", "predict"])
@pytest.mark.parametrize("model, labels, message", [
    ("multi", "single.csv", "single.csv: one class per node (single-label), but checkpoint {ck} holds a multi-label "
                            "model (task 'multilabel', metric ROC-AUC, 3 labels); give its labels as a 1/0 target per "
                            "label (node,labels rows, or a 1/0 column per label); predicting needs none"),
    ("single", "labels.csv", "labels.csv: 3 labels per node (multi-label), but checkpoint {ck} holds a single-label "
                             "model (task 'multiclass', metric accuracy, 3 classes); give its labels as one class per "
                             "node (node,label); predicting needs none"),
])
def test_labels_of_the_other_form_are_refused_naming_the_models_task(models, capsys, command, model, labels, message):
    root, files, _ = models
    out = ["--out", root / "x.csv"] if command == "predict" else []
    assert run_main([command, "--checkpoint", root / model, *files, "--labels", root / labels, *out]) == 2
    err = unwrap(capsys.readouterr().err)
    assert f"jaxgcn: error: {root / labels}: " + message.split(": ", 1)[1].format(ck=root / model) in err.splitlines()
    assert "--task" not in err and "Traceback" not in err and not (root / "x.csv").exists()


def test_evaluate_scores_a_multilabel_model_as_multilabel(models, capsys):
    root, files, _ = models
    assert run_main(["evaluate", "--checkpoint", root / "multi", *files, "--labels", root / "labels.csv",
                     "--json", root / "e.json"]) == 0
    e = json.loads((root / "e.json").read_text())
    assert e["task"] == "multilabel" and e["labels"] == list(LABELS) and e["rocauc"] > 0.9


def edit(root, name, change):
    """A copy of the checkpoint ``name`` whose checkpoint.json ``change`` edits (as older jaxgcn wrote it)."""
    import shutil

    copy = root / f"{name}-edited"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(root / name, copy)
    meta = json.loads((copy / "checkpoint.json").read_text())
    change(meta)
    (copy / "checkpoint.json").write_text(json.dumps(meta))
    return copy


def as_auto(meta):
    del meta["task"]
    meta["train"]["task"] = "auto"


def test_a_checkpoint_that_recorded_auto_is_decided_by_its_labels_and_says_so_without_them(models, capsys):
    root, files, _ = models
    old = edit(root, "multi", as_auto)
    assert run_main(["evaluate", "--checkpoint", old, *files, "--labels", root / "labels.csv", "--json",
                     root / "old.json"]) == 0
    assert json.loads((root / "old.json").read_text())["task"] == "multilabel"  # its labels chose, as they did
    capsys.readouterr()
    assert run_main(["predict", "--checkpoint", old, *files, "--out", root / "old.csv"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (f"checkpoint {old} records task 'auto' (saved by jaxgcn ") in out and (
        "and this data has no labels: applied as a single-label model; save it again with this jaxgcn, which "
        "records its task") in out
    assert rows(root / "old.csv")[0] == "node,label,prob_jazz,prob_pop,prob_rock"
    # written before the task seam (no train.task): single-label, the only task there was; no note
    older = edit(root, "single", lambda m: (m.pop("task"), m["train"].pop("task")))
    assert run_main(["predict", "--checkpoint", older, *files, "--out", root / "older.csv"]) == 0
    assert "records task" not in capsys.readouterr().out and rows(root / "older.csv")[0].startswith("node,label,")


@pytest.mark.parametrize("task, message", [
    ({"name": "ranking", "metric": "ndcg"}, "checkpoint {ck}: task 'ranking' is not one of this jaxgcn's tasks "
                                            "(multiclass, multilabel, multilabel-f1); apply it with the jaxgcn that "
                                            "saved it"),
    ({"name": 3}, "checkpoint {ck}/checkpoint.json: task is {{'name': 3}}, expected {{\"name\": NAME, \"metric\": "
                  "METRIC}}; the file was edited or corrupted"),
])
def test_a_task_this_jaxgcn_cannot_apply_is_named(models, capsys, task, message):
    root, files, _ = models
    bad = edit(root, "multi", lambda m: m.update(task=task))
    assert run_main(["predict", "--checkpoint", bad, *files, "--out", root / "bad.csv"]) == 2
    assert message.format(ck=bad) in unwrap(capsys.readouterr().err)


def test_info_counts_each_labels_targets_over_every_node_and_per_split(models, capsys):
    root, files, target = models
    assert run_main(["info", *files, "--labels", root / "labels.csv", "--train-frac", "0.6", "--json",
                     root / "i.json", "--save-split", root / "split.csv"]) == 0
    out = capsys.readouterr().out.splitlines()
    stats = json.loads((root / "i.json").read_text())
    want = {name: {"positive": int(np.sum(target[:, k] == 1)), "negative": int(np.sum(target[:, k] == 0))}
            for k, name in enumerate(LABELS)}
    assert stats["task"] == "multilabel" and stats["labels"] == want and stats["unlabelled_nodes"] == 6
    assert want["rock"] == {"positive": 17, "negative": 34}  # group 0: 20 nodes, 2 unlisted, 1 cell empty
    split = dict(line.split(",") for line in (root / "split.csv").read_text().splitlines()[1:])
    ids = [f"n{i:02d}" for i in range(N)]
    for part in ("train", "val", "test"):
        chosen = [i for i in range(N) if split.get(ids[i]) == part]
        assert stats["split_labels"][part] == {
            name: {"positive": int(np.sum(target[chosen, k] == 1)), "negative": int(np.sum(target[chosen, k] == 0))}
            for k, name in enumerate(LABELS)}, part
    line = ", ".join(f"{n} {c['positive']}/{c['negative']}" for n, c in want.items())
    assert f"  labels: 3 per node (multi-label; positive/negative targets): {line}; 6 nodes without a target" in out
    train = ", ".join(f"{n} {c['positive']}/{c['negative']}" for n, c in stats["split_labels"]["train"].items())
    assert f"    train split: {train}" in out


def test_a_model_trained_for_micro_f1_predicts_new_nodes_without_labels(models, capsys):
    """`train --task multilabel-f1` records that task (the run's, resolved as `--task multilabel` is); predict
    without labels applies it and names no --task, a flag predict does not have."""
    from jaxgcn.store.checkpoint import save
    from jaxgcn.core.models import GCNConfig
    from jaxgcn.training.config import TrainConfig

    root, files, _ = models
    f1 = edit(root, "multi", lambda m: m.update(task={"name": "multilabel-f1", "metric": "micro_f1"}))
    assert run_main(["predict", "--checkpoint", f1, *files, "--out", root / "f1.csv"]) == 0
    assert run_main(["predict", "--checkpoint", root / "multi", *files, "--out", root / "m.csv"]) == 0
    assert rows(root / "f1.csv")[0] == "node,labels,prob_jazz,prob_pop,prob_rock"
    assert rows(root / "f1.csv") == rows(root / "m.csv")  # the same params: the same labels and probabilities
    assert "--task" not in capsys.readouterr().err
    info = {"n_features": 3, "n_classes": 3, "task": "multilabel"}
    params = {"layer_0": {"w": np.zeros((3, 2), np.float32)}, "layer_1": {"w": np.zeros((2, 3), np.float32)}}
    meta = json.loads(save(root / "f1-saved", params, model_config=GCNConfig(hidden=2),
                           train_config=TrainConfig(task="multilabel-f1"), info=info, epoch=1, metrics={}).read_text())
    assert meta["task"] == {"name": "multilabel-f1", "metric": "micro_f1"} and meta["train"]["task"] == "multilabel-f1"
