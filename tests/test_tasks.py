"""The task seam (jaxgcn.core.tasks): the multi-label loss and metrics against scikit-learn and OGB's
definition, hand-computed cases, training through the engine, a batch equal to its single runs, and a
third task added by registration only."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.metrics import f1_score, roc_auc_score

from jaxgcn.core import tasks
from jaxgcn.core.models import Execution, GCNConfig
from jaxgcn.datasets import prepare, synthetic
from jaxgcn.batched import Entry, fit_runs
from jaxgcn.train import TrainConfig, fit
from tiny_datasets import write_multilabel_npz

EXEC = Execution(backend="dense")


def ogb_rocauc(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """OGB's Evaluator._eval_rocauc for ogbn-proteins, as published: per label with a positive and a
    negative node, sklearn's ROC-AUC over the present targets; the mean of those."""
    scores = []
    for i in range(y_true.shape[1]):
        if np.sum(y_true[:, i] == 1) > 0 and np.sum(y_true[:, i] == 0) > 0:
            present = y_true[:, i] == y_true[:, i]
            scores.append(roc_auc_score(y_true[present, i], y_pred[present, i]))
    return sum(scores) / len(scores)


def labels_with_gaps(rng: np.random.Generator, n: int, n_labels: int) -> np.ndarray:
    y = (rng.random((n, n_labels)) < 0.3).astype(np.float32)
    y[rng.random((n, n_labels)) < 0.2] = np.nan
    y[:, 0] = np.where(np.isnan(y[:, 0]), np.nan, 1.0)  # a label with no negative node: skipped
    return y


def test_rank_auc_of_a_hand_computed_case():
    # positives 0.35 and 0.8 against negatives 0.1 and 0.4: 3 of the 4 pairs ordered, AUC 0.75;
    # a tie between a positive and a negative counts one half
    auc, defined = tasks.rank_auc(jnp.array([0.1, 0.4, 0.35, 0.8]), jnp.array([0.0, 0, 1, 1]),
                                  jnp.array([1.0, 1, 0, 0]))
    assert bool(defined) and float(auc) == 0.75
    auc, _ = tasks.rank_auc(jnp.array([0.5, 0.5, 0.9]), jnp.array([1.0, 0, 0]), jnp.array([0.0, 1, 1]))
    assert float(auc) == 0.25
    auc, defined = tasks.rank_auc(jnp.array([0.5, 0.2]), jnp.array([1.0, 1]), jnp.array([0.0, 0]))
    assert not bool(defined) and float(auc) == 0.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_multilabel_rocauc_is_ogbs_per_run_and_split(seed):
    rng = np.random.default_rng(seed)
    n, n_labels, runs = 300, 6, 2
    y = labels_with_gaps(rng, n, n_labels)
    # rounded scores: many ties, which sklearn counts one half
    logits = np.round(rng.normal(size=(n, runs, n_labels)), 1).astype(np.float32)
    masks = (rng.random((runs, n)) < 0.5).astype(np.float32)
    loss, score = tasks.MultiLabel().metrics(jnp.asarray(logits), jnp.asarray(y), jnp.asarray(masks), lambda t: t)
    for r in range(runs):
        m = masks[r] > 0
        assert float(score[r]) == pytest.approx(ogb_rocauc(y[m], logits[m, r]), abs=1e-6)
        present = ~np.isnan(y[m])
        z, t = logits[m, r][present], y[m][present]
        want = np.mean(np.logaddexp(0, z) - t * z)  # BCE over the present targets
        assert float(loss[r]) == pytest.approx(want, rel=1e-5)


def test_multilabel_micro_f1_is_sklearns_over_the_present_targets():
    rng = np.random.default_rng(3)
    n, n_labels = 200, 5
    y = labels_with_gaps(rng, n, n_labels)
    logits = rng.normal(size=(n, 1, n_labels)).astype(np.float32)
    mask = (rng.random((1, n)) < 0.6).astype(np.float32)
    task = tasks.TASKS["multilabel-f1"]
    _, score = task.metrics(jnp.asarray(logits), jnp.asarray(y), jnp.asarray(mask), lambda t: t)
    m = mask[0] > 0
    present = ~np.isnan(y[m])
    # micro-F1 over the labels is the binary F1 of every present (node, label) target
    want = f1_score(y[m][present].astype(int), (logits[m, 0][present] > 0).astype(int), average="binary")
    assert float(score[0]) == pytest.approx(want, abs=1e-6)
    full = np.nan_to_num(y, nan=0.0)  # no target missing: sklearn's multi-label micro average itself
    _, score = task.metrics(jnp.asarray(logits), jnp.asarray(full), jnp.asarray(mask), lambda t: t)
    want = f1_score(full[m].astype(int), (logits[m, 0] > 0).astype(int), average="micro")
    assert float(score[0]) == pytest.approx(want, abs=1e-6)


def test_a_missing_target_adds_nothing_to_the_loss_or_its_count():
    logits = jnp.array([[[3.0, -1.0]], [[100.0, 2.0]]])  # [n=2, R=1, L=2]
    y = jnp.array([[1.0, np.nan], [np.nan, 0.0]])
    task = tasks.MultiLabel()
    mask = jnp.ones((1, 2))
    assert float(task.loss_count(y, mask)[0]) == 2.0
    want = np.logaddexp(0, 3.0) - 3.0 + np.logaddexp(0, 2.0)
    # rel 1e-5: a TPU's softplus is within 4e-6 of NumPy's (a missing target would add >= 0.12 or NaN)
    assert float(task.loss_sums(logits, y, mask)[0]) == pytest.approx(want, rel=1e-5)


def test_the_labels_shape_chooses_the_task_and_bad_labels_are_named():
    assert tasks.task_of("auto", np.zeros(4, np.int32)).name == "multiclass"
    assert tasks.task_of("auto", np.zeros((4, 3), np.float32)).name == "multilabel"
    assert tasks.task_of("multilabel-f1", np.zeros((4, 3))).metric == "micro_f1"
    with pytest.raises(ValueError, match=r"task='ranking' must be 'auto' or one of \('multiclass', 'multilabel', "):
        fit(multilabel_data(), 4, execution=EXEC, config=TrainConfig(task="ranking", epochs=1), log=None)
    with pytest.raises(ValueError, match=r"labels\.npy: label value 2\.0: multi-label targets are 1, 0 or missing"):
        tasks.MultiLabel().check_labels(np.array([[1.0, 2.0]]), "labels.npy")
    with pytest.raises(ValueError, match=r"y: labels of shape \(3, 2\) and dtype float64: a single-label task"):
        tasks.MultiClass().check_labels(np.zeros((3, 2)), "y")
    assert tasks.MultiLabel().check_labels(np.array([[1.0, np.nan, 0.0]]), "y") == 3


def multilabel_data():
    """A synthetic graph (homophilous classes, class-correlated features) with 4 labels that are known
    functions of a node's class: one per class, and "class 0 or 1"; some targets missing."""
    data = prepare(synthetic(300, n_classes=3, n_features=8, seed=0), backend="dense").data
    c = np.asarray(data.labels)
    y = np.stack([c == 0, c == 1, c == 2, c <= 1], axis=1).astype(np.float32)
    y[::7, 1] = np.nan  # missing targets
    return data._replace(labels=jnp.asarray(y))


def test_a_multilabel_gcn_learns_labels_that_are_a_function_of_the_features():
    data = multilabel_data()
    res = fit(data, 4, model_config=GCNConfig(hidden=32, dropout=0.0), execution=EXEC,
              config=TrainConfig(lr=0.05, weight_decay=0.0, epochs=200, early_stopping=None),
              key=jax.random.key(0), log=None)
    assert res.metrics["test_acc"] > 0.95  # the task's metric: ROC-AUC over the labels
    assert res.metrics["test_loss"] < 0.4


def test_a_multilabel_batch_equals_its_single_runs():
    data = multilabel_data()
    config = TrainConfig(epochs=30, early_stopping=None, task="multilabel")
    entries = [Entry(GCNConfig(hidden=16), dataclasses.replace(config, lr=lr), seed)
               for lr, seed in ((0.01, 0), (0.05, 1), (0.02, 2))]
    batch = fit_runs(data, 4, entries, execution=EXEC)
    for i, e in enumerate(entries):
        one = fit(data, 4, model_config=e.model, execution=EXEC, config=e.train, key=jax.random.key(e.seed), log=None)
        for k in ("train_loss", "val_acc", "test_acc"):
            assert float(batch.metrics[k][i]) == pytest.approx(float(one.metrics[k]), rel=1e-5, abs=1e-6), k


class Regression(NamedTuple):
    """A third task, here only: node regression by mean squared error (higher metric = better: -MSE)."""

    name: str = "test-regression"
    metric: str = "neg_mse"
    additive: bool = True

    def check_labels(self, labels, where):
        return 1

    def loss_count(self, labels, masks):
        return jnp.sum(masks, axis=1)

    def loss_sums(self, logits, labels, masks):
        return jnp.diagonal(masks @ jnp.square(logits[:, :, 0] - labels[:, None]))

    def metrics(self, logits, labels, masks, total):
        sums, count = total((self.loss_sums(logits, labels, masks), self.loss_count(labels, masks)))
        mse = sums / jnp.maximum(count, 1.0)
        return mse, -mse

    def decode(self, logits, threshold):
        return logits[:, 0]


def test_a_third_task_needs_only_its_module_and_one_registration(request):
    tasks.register(Regression())
    request.addfinalizer(lambda: tasks.TASKS.pop("test-regression"))
    data = prepare(synthetic(200, n_classes=3, n_features=8, seed=1), backend="dense").data
    data = data._replace(labels=(data.labels == 0).astype(jnp.float32))  # a class's indicator, as a number
    res = fit(data, 1, model_config=GCNConfig(hidden=16, dropout=0.0), execution=EXEC,
              config=TrainConfig(lr=0.05, weight_decay=0.0, epochs=100, early_stopping=None, task="test-regression"),
              key=jax.random.key(0), log=None)
    variance = float(np.var(np.asarray(data.labels)[np.asarray(data.test_mask) > 0]))
    assert -res.metrics["test_acc"] < 0.5 * variance  # it learned: well under predicting the mean


def test_a_multilabel_npz_graph_trains_saves_and_predicts_labels(tmp_path, capsys):
    from cli_run import run_main

    root = write_multilabel_npz(tmp_path / "ml")
    assert run_main(["train", "--dataset", f"npz:{root}", "--epochs", "100", "--early-stopping", "none", "--save",
                     tmp_path / "model", "--json", tmp_path / "r.json", "--no-compile-cache"]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["task_metric"] == "rocauc" and report["n_classes"] == 4 and report["test_acc"][0] > 0.95
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("npz:ml: 400 nodes") and ", 8 features, 4 labels | " in out[0]
    summary = [line for line in out if line.startswith("test ")]
    assert len(summary) == 1 and summary[0].startswith("test ROC-AUC ") and float(summary[0].split()[2]) > 0.95
    for threshold in (None, 0.9):  # the labels over the threshold the user sets (default 0.5)
        given = [] if threshold is None else ["--threshold", str(threshold)]
        assert run_main(["predict", "--checkpoint", tmp_path / "model", "--dataset", f"npz:{root}", "--out",
                         tmp_path / "p.csv", *given]) == 0
        lines = (tmp_path / "p.csv").read_text().splitlines()
        assert lines[0] == "node,labels,prob_0,prob_1,prob_2,prob_3" and len(lines) == 401
        for line in lines[1:]:
            node, chosen, *probs = line.split(",")
            assert chosen.split() == [str(j) for j, p in enumerate(map(float, probs)) if p > (threshold or 0.5)], line
        assert sum(len(line.split(",")[1].split()) for line in lines[1:]) > 50  # labels were chosen
    capsys.readouterr()
    # evaluate: the model's test ROC-AUC as train reported it, and per label its counts at the threshold
    assert run_main(["evaluate", "--checkpoint", tmp_path / "model", "--dataset", f"npz:{root}", "--json",
                     tmp_path / "e.json", "--threshold", "0.3"]) == 0
    out = capsys.readouterr().out.splitlines()
    e = json.loads((tmp_path / "e.json").read_text())
    assert e["task"] == "multilabel" and e["nodes"] == 200 and e["labels"] == ["0", "1", "2", "3"]
    assert e["rocauc"] == pytest.approx(report["test_acc"][0], abs=1e-6) and e["labels_defined"] == 4
    y = np.load(root / "labels.npy")[np.load(root / "splits.npz")["test"]]
    assert e["positive"] == (y == 1).sum(axis=0).tolist() and e["negative"] == (y == 0).sum(axis=0).tolist()
    assert e["threshold"] == 0.3 and 0.8 < e["micro_f1"] <= 1.0
    assert out[0] == (f"test: 200 nodes, 4 labels | ROC-AUC {e['rocauc']:.4f} (4 of 4 labels have a positive and a "
                      f"negative target here) | at threshold 0.3: micro-F1 {e['micro_f1']:.4f}, macro-F1 "
                      f"{e['macro_f1']:.4f}")
    assert out[2].split()[0] == "0" and float(out[2].split()[1]) == pytest.approx(e["auc"][0], abs=1e-4)


def test_a_multilabel_npz_graph_needs_its_split_file(tmp_path):
    from jaxgcn.datasets.ogb import load_arrays

    root = write_multilabel_npz(tmp_path / "ml")
    (root / "splits.npz").unlink()
    with pytest.raises(ValueError, match=r"labels\.npy holds 4 label columns \(a multi-label graph\) and there is no "
                                         r"splits\.npz; give the split as splits\.npz"):
        load_arrays(root)


def test_a_resumed_multilabel_run_equals_the_uninterrupted_one_bit_for_bit():
    """Early stopping by patience on the validation ROC-AUC, checkpoints every 10 epochs: resumed
    from epoch 20's state, the run ends with the uninterrupted run's params, metrics and history."""
    from jaxgcn.store import checkpoint
    from jaxgcn.train import Patience

    data = multilabel_data()
    config = TrainConfig(epochs=80, lr=0.05, early_stopping=Patience(10))

    def run(resume=None):
        states = {}
        res = fit(data, 4, model_config=GCNConfig(hidden=16), execution=EXEC, config=config, key=jax.random.key(3),
                  log=None, checkpoint_every=10, resume=resume,
                  on_checkpoint=lambda s: states.__setitem__(int(s.epoch), checkpoint.state_arrays(s)))
        return res, states

    whole, states = run()
    assert 20 < whole.epochs_run and 0.9 < whole.metrics["val_acc"] <= 1.0
    resumed, _ = run(resume=lambda template: checkpoint.restore_state(template, states[20], "test"))
    assert resumed.epochs_run == whole.epochs_run and resumed.metrics == whole.metrics
    for got, want in zip(jax.tree.leaves(resumed.params), jax.tree.leaves(whole.params)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_on_a_sharded_graph_rocauc_reads_every_devices_rows_and_micro_f1_sums_their_parts():
    from jaxgcn.distributed.sharded import NODES
    from jaxgcn.training.step import LOCAL, Step

    # ROC-AUC ranks the split's nodes of every device: each device's rows are gathered (two devices'
    # blocks faked by a gather that appends a copy) and scored as on one device, not summed per block
    logits = jnp.array([[[2.0, 0.0]], [[1.0, 1.0]], [[0.0, 2.0]]])
    y = jnp.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    twice = NODES._replace(total=lambda t: jax.tree.map(lambda a: 2 * a, t),
                           gather=lambda x, axis: jnp.concatenate([x, -x if x.ndim == 3 else x], axis=axis))
    step = Step(GCNConfig(), TrainConfig(), EXEC, None, twice)
    loss, auc = step.metrics(logits, y, jnp.ones((1, 3)))
    alone, want = Step(GCNConfig(), TrainConfig(), EXEC, None, LOCAL).metrics(
        jnp.concatenate([logits, -logits]), jnp.concatenate([y, y]), jnp.ones((1, 6)))
    assert float(auc[0]) == pytest.approx(float(want[0])) and float(loss[0]) == pytest.approx(float(alone[0]))
    assert float(auc[0]) != pytest.approx(float(tasks.MultiLabel().metrics(logits, y, jnp.ones((1, 3)),
                                                                           lambda t: t)[1][0]))
    # micro-F1 is a sum: its parts go through the devices' total (here the identity of one device)
    f1 = Step(GCNConfig(), TrainConfig(task="multilabel-f1"), EXEC, None, NODES._replace(total=lambda t: t))
    loss, score = f1.metrics(jnp.array([[[1.0, -1.0]], [[1.0, 1.0]], [[-1.0, -1.0]]]),
                             jnp.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]), jnp.ones((1, 3)))
    assert float(score[0]) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))  # tp 2, fp 1, fn 1


def test_a_sharded_graph_trains_micro_f1_and_rocauc_as_one_device_and_a_mismatch_is_named(tmp_path, capsys):
    from cli_run import run_main

    root = write_multilabel_npz(tmp_path / "ml")

    # One process of its own (--devices 2 makes 2 CPU devices) runs both sharded trainings, micro-F1
    # then ROC-AUC, each as the console script does (main() reading sys.argv): one interpreter start
    # and JAX import instead of two. The first sets the 2 devices; the second finds JAX running on them.
    common = ["jaxgcn", "train", "--dataset", f"npz:{root}", "--shard-graph", "--devices", "2", "--quiet", "--epochs",
              "60", "--dropout", "0"]
    script = ("import sys\nfrom jaxgcn.cli import main\n"
              f"sys.argv = {[*common, '--task', 'multilabel-f1']!r}\nprint('RC', main(), flush=True)\n"
              f"sys.argv = {common!r}\nprint('RC', main(), flush=True)\n")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**env, "JAX_PLATFORMS": "cpu"}, timeout=300)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and [line for line in lines if line.startswith("RC ")] == ["RC 0", "RC 0"], (
        done.stderr[-2000:])
    f1_summary, auc_summary = (lines[i - 1] for i, line in enumerate(lines) if line.startswith("RC "))

    summary = f1_summary
    assert summary.startswith("test micro-F1 ") and "2 devices" in summary
    assert run_main(["train", "--dataset", f"npz:{root}", "--epochs", "60", "--task", "multilabel-f1", "--dropout",
                     "0", "--quiet", "--no-compile-cache"]) == 0
    one = capsys.readouterr().out.splitlines()[-1]  # without dropout the sharded run scores as one device's
    assert one.split()[:3] == summary.split()[:3] and float(one.split()[2]) > 0.9
    # ROC-AUC: every device's rows gathered, the sharded run scores as one device's too
    summary = auc_summary
    assert summary.startswith("test ROC-AUC ") and "2 devices" in summary, done.stderr[-2000:]
    assert run_main(["train", "--dataset", f"npz:{root}", "--epochs", "60", "--dropout", "0", "--quiet",
                     "--no-compile-cache"]) == 0
    one = capsys.readouterr().out.splitlines()[-1]
    assert one.split()[:3] == summary.split()[:3] and float(one.split()[2]) > 0.9
    assert run_main(["train", "--dataset", "cora", "--task", "multilabel", "--epochs", "2", "--quiet"]) == 2
    assert ("--task: task='multilabel' reads labels of 2 dimensions, and these have shape (2708,) (one class id "
            "per node); use task 'auto' to let the labels decide") in " ".join(capsys.readouterr().err.split())


def test_evaluate_label_scores_equal_scikit_learn_per_label():
    """``evaluate``'s per-label table: each label's ROC-AUC (undefined, NaN, without a negative), and its
    precision, recall and F1 at the threshold over the present targets, as scikit-learn scores them."""
    from sklearn.metrics import precision_recall_fscore_support

    from jaxgcn.io.metrics import label_scores

    rng = np.random.default_rng(3)
    y = (rng.random((60, 5)) < 0.4).astype(np.float64)
    y[:, 3] = 1.0  # no negative node: its AUC is undefined and left out of the mean
    y[rng.random(y.shape) < 0.2] = np.nan
    probs = np.round(rng.random((60, 5)), 1)  # ties
    auc, defined = (np.asarray(a) for a in tasks.label_aucs(jnp.asarray(probs), jnp.asarray(y, jnp.float32)))
    s = label_scores(y, probs, np.where(defined, auc, np.nan), 0.45)
    want_auc = []
    for k in range(5):
        present = ~np.isnan(y[:, k])
        t, p = y[present, k], probs[present, k]
        want_auc.append(roc_auc_score(t, p) if 0 < t.sum() < t.size else np.nan)
        prec, rec, f1, _ = precision_recall_fscore_support(t, p > 0.45, average="binary", zero_division=0)
        assert (s.precision[k], s.recall[k], s.f1[k]) == pytest.approx((prec, rec, f1), abs=1e-12)
        assert (s.positive[k], s.negative[k]) == (int(t.sum()), int(t.size - t.sum()))
    np.testing.assert_allclose(s.auc, want_auc, atol=1e-6)
    assert np.isnan(s.auc[3]) and s.mean_auc == pytest.approx(np.nanmean(want_auc), abs=1e-6)
    present = ~np.isnan(y)
    assert s.micro_f1 == pytest.approx(f1_score(y[present], probs[present] > 0.45), abs=1e-12)
    assert s.macro_f1 == pytest.approx(np.mean(s.f1)) and s.n == 60


def test_a_multilabel_sweep_and_a_patience_run_name_the_task_metric(tmp_path, capsys):
    from cli_run import run_main

    root = write_multilabel_npz(tmp_path / "ml")
    assert run_main(["sweep", "--dataset", f"npz:{root}", "--lr", "0.01,0.05", "--epochs", "20",
                     "--no-compile-cache", "--quiet"]) == 0
    out = capsys.readouterr().out.splitlines()
    head = next(line for line in out if line.lstrip().startswith("lr "))
    assert head.split()[-5:] == ["val", "ROC-AUC", "test", "ROC-AUC", "epochs"]
    assert run_main(["train", "--dataset", f"npz:{root}", "--epochs", "60", "--early-stopping", "patience",
                     "--patience", "5", "--no-compile-cache"]) == 0
    assert any(line.startswith("patience: restored the params of epoch ") and "(best validation ROC-AUC 0." in line
               for line in capsys.readouterr().out.splitlines())


def test_a_multilabel_log_names_its_metric_and_plot_curves_labels_by_it(tmp_path, monkeypatch):
    from cli_run import run_main

    from jaxgcn.io import plots

    root = write_multilabel_npz(tmp_path / "ml")
    log = tmp_path / "l.jsonl"
    assert run_main(["train", "--dataset", f"npz:{root}", "--epochs", "30", "--log", log, "--no-compile-cache",
                     "--quiet"]) == 0
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["metric"] for r in records if "metric" in r] == ["rocauc"] and plots.log_metric(log) == "rocauc"
    assert list(plots.read_log(log)) == [0] and plots.read_log(log)[0]["epoch"][-1] == 30  # the line is read past
    drawn = {}
    curves = plots.training_curves
    monkeypatch.setattr(plots, "training_curves", lambda *a, **kw: drawn.update(kw) or curves(*a, **kw))
    assert run_main(["plot", "curves", "--log", log, "--out", tmp_path / "c.png"]) == 0
    assert drawn["metric"] == "ROC-AUC" and (tmp_path / "c.png").stat().st_size > 0
    single = tmp_path / "s.jsonl"  # a single-label run's log names no metric: accuracy
    assert run_main(["train", "--dataset", "synthetic", "--nodes", "200", "--epochs", "5", "--log", single,
                     "--no-compile-cache", "--quiet"]) == 0
    assert '"metric"' not in single.read_text() and plots.log_metric(single) == "accuracy"
