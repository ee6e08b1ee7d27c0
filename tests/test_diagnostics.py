"""Diagnostics and the outcome a run reports (issue 14, items 3 and 6): the adjacency check of a
diverging run, the self-loop wording of ``info``, the summary line, the epoch patience restores,
and the composable layer defaults."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

from jaxgcn import datasets
from jaxgcn.batched import entries_for, fit_runs
from jaxgcn.native.csr import CSR
from jaxgcn.app.job import Outcome
from jaxgcn.cli.train import summary_line
from jaxgcn.datasets.stats import describe, self_loops_line
from jaxgcn.core.graph import from_edges, gcn_norm, to_dense, with_csr
from jaxgcn.core.layers import gcn_apply, gcn_init
from jaxgcn.io.reports import RunSummary, restored_line
from jaxgcn.core.diagnostics import (adjacency_cause, adjacency_of, adjacency_scale, divergence_hint, likely_causes,
                                row_sums_of)
from jaxgcn.train import Patience, TrainConfig, fit

from cli_run import run_main

SYNTH = ["train", "--dataset", "synthetic", "--nodes", "400", "--classes", "3", "--features", "16",
         "--epochs", "40", "--no-compile-cache"]



@pytest.fixture(scope="module")
def cora_raw():
    return datasets.load_dataset("cora")


@pytest.fixture(scope="module")
def cora(cora_raw):
    return datasets.prepare(cora_raw)  # the defaults: norm="sym", backend "auto" (csr)


@pytest.fixture(scope="module")
def cora_unnormalized(cora_raw):
    return datasets.prepare(cora_raw, norm="none")  # the raw A + I


# --- 1. the adjacency check of a diverging run -------------------------------------------------------


def test_sym_normalized_cora_is_not_called_unnormalized(cora):
    graph = cora.data.graph
    assert row_sums_of(graph).max() > 1.5  # what the old check flagged: rows of a sym Â may sum above 1
    assert adjacency_scale(graph) == pytest.approx(1.0, abs=1e-3)
    assert adjacency_cause(graph, "sym") is None and adjacency_cause(graph) is None
    causes = likely_causes(cora.data, TrainConfig(lr=1.0), norm="sym")
    assert "adjacency" not in causes and "the learning rate 1 is large (try lr=0.01)" in causes
    hint = divergence_hint(np.array([1.9, 50.0]), cora.data, TrainConfig(lr=1.0), norm="sym")
    assert hint is not None and "adjacency" not in hint


def test_raw_a_plus_i_is_called_unnormalized(cora_unnormalized):
    graph = cora_unnormalized.data.graph
    scale = adjacency_scale(graph)
    assert scale > 10  # Cora's A + I: about its largest degree's square root and more
    chosen = adjacency_cause(graph, "none")
    assert chosen.startswith("the adjacency is unnormalized: you chose no normalization (norm='none')")
    assert f"the largest eigenvalue of Â is {scale:.3g}" in chosen and chosen.endswith("use norm='sym'")
    unknown = adjacency_cause(graph)  # the library path (fit) does not know the normalization
    assert unknown.startswith("the adjacency is unnormalized (") and "use norm='sym'" in unknown
    assert "--norm" not in chosen + unknown  # library wording names parameters, not flags
    hint = divergence_hint(np.array([1.9, 50.0]), cora_unnormalized.data, TrainConfig(), norm="none")
    assert "you chose no normalization (norm='none')" in hint


def test_row_normalized_graph_needs_no_eigen_solver(cora_raw):
    graph = datasets.prepare(cora_raw, norm="row").data.graph
    assert adjacency_scale(graph) == pytest.approx(1.0, abs=1e-5)
    assert adjacency_cause(graph, "row") is None


def test_adjacency_scale_is_the_spectral_radius(raw_edges):
    graph, _ = from_edges(raw_edges.senders, raw_edges.receivers, raw_edges.weights, n_nodes=raw_edges.n_nodes,
                          add_self_loops=True)
    for g in (graph, gcn_norm(graph, "sym"), gcn_norm(graph, "row")):
        expected = np.max(np.abs(np.linalg.eigvals(to_dense(g).astype(np.float64))))
        assert adjacency_scale(g) == pytest.approx(expected, rel=1e-5)
        assert adjacency_scale(with_csr(g, keep_edges=False)) == pytest.approx(expected, rel=1e-5)
    assert adjacency_scale(gcn_norm(graph, "sym")) == pytest.approx(1.0, rel=1e-5)
    assert adjacency_cause(graph, "none") is not None and adjacency_cause(gcn_norm(graph, "sym"), "sym") is None


def test_large_graph_scale_uses_arpack_and_matches_power_iteration(cora_unnormalized):
    adj = adjacency_of(cora_unnormalized.data.graph)  # 2,708 nodes: above the dense-solver size
    assert adj.shape == (2708, 2708) and adj.diagonal().min() == 1.0  # A + I
    v = np.ones(adj.shape[0])
    for _ in range(300):
        v = adj @ v
        v /= np.linalg.norm(v)
    assert adjacency_scale(cora_unnormalized.data.graph) == pytest.approx(float(v @ (adj @ v)), rel=1e-3)


def test_cli_hint_on_cora_does_not_blame_the_default_normalization(capsys):
    args = ["train", "--dataset", "cora", "--lr", "100", "--feature-norm", "none", "--quiet", "--no-compile-cache"]
    assert run_main(args) == 0
    hint = [line for line in capsys.readouterr().out.splitlines() if line.startswith("hint:")]
    assert len(hint) == 1 and "the learning rate 100 is large (try lr=0.01)" in hint[0], hint
    assert "adjacency" not in hint[0] and "--norm sym" not in hint[0]


# --- 2. the self-loop wording of info -----------------------------------------------------------------


def test_input_self_loops_keep_their_weight(raw_edges):
    graph, report = from_edges(raw_edges.senders, raw_edges.receivers, raw_edges.weights,
                               n_nodes=raw_edges.n_nodes, add_self_loops=True)
    assert report["self_loops_found"] == 1 and float(graph.self_weights[3]) == 3.0  # kept, not replaced by 1


def test_info_says_input_self_loops_are_kept(tmp_path, capsys):
    assert run_main(["info", "--dataset", "citeseer", "--json", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    assert "248 self-loops in the input: their weights kept on the diagonal" in out
    assert "removed" not in out
    stats = json.loads((tmp_path / "s.json").read_text())
    assert stats["self_loops_found"] == 248 and "self_loops_removed" not in stats


def test_self_loops_line_forms():
    assert self_loops_line(0) == "no self-loops in the input"
    assert self_loops_line(1) == "1 self-loop in the input: their weights kept on the diagonal"
    stats = {"dataset": "d", "nodes": 3, "edges": 1, "input_edges": 2, "duplicates_merged": 0,
             "self_loops_found": 1, "one_way_edges_symmetrized": 1, "isolated_nodes": 1,
             "degree": {"min": 1, "median": 1.0, "mean": 1.0, "p99": 1.0, "max": 2}, "features": 2,
             "feature_nonzeros": 2, "feature_density": 0.3, "classes": {"a": 2, "b": 1}, "unlabelled_nodes": 0,
             "split_sizes": {"train": 1}, "directed": False}
    assert describe(stats)[1] == ("  input: 2 edge entries as listed, 1 distinct without self-loops (the count "
                                  "`jaxgcn datasets` lists); 0 duplicates merged, 1 one-way edges symmetrized; "
                                  "1 self-loop in the input: their weights kept on the diagonal")


# --- 3. the summary line -------------------------------------------------------------------------------


def outcome(runs):
    return Outcome(runs, 1.25, 0.5, np.zeros((len(runs), 1)), None, None, None, None, None, None, None)


def test_summary_line_of_one_run_has_no_spread():
    line = summary_line(outcome([RunSummary(0, 0, 0.8125, 0.79, 200, False)]))
    assert line == ("test accuracy 0.8125 over 1 run | val 0.7900 | epochs 200 | compile 1.25s | train 0.50s "
                    "(2.50 ms/epoch)")


def test_summary_line_of_many_runs_has_mean_std_and_epoch_range():
    runs = [RunSummary(0, 0, 0.80, 0.78, 150, True), RunSummary(1, 0, 0.82, 0.80, 200, False)]
    line = summary_line(outcome(runs))
    assert line == ("test accuracy 0.8100 ± 0.0100 over 2 runs (population std) | val 0.7900 | epochs 150-200 | "
                    "compile 1.25s | train 0.50s (2.50 ms/epoch)")
    same = summary_line(outcome([runs[1], runs[1]._replace(seed=2)]))
    assert "± 0.0000 over 2 runs" in same and "| epochs 200 |" in same


# --- 4. the epoch patience restores --------------------------------------------------------------------


@pytest.fixture(scope="module")
def synth():
    raw = datasets.synthetic(300, n_classes=3, n_features=16, homophily=0.7, signal=0.5, seed=0)
    return datasets.prepare(raw)


def best_epoch_by_rule(val_acc, val_loss):
    """Patience's best epoch, from the history: highest validation accuracy, ties: lower loss."""
    best, acc, loss = 0, -1.0, np.inf
    for e in range(len(val_acc)):
        if val_acc[e] > acc or (val_acc[e] == acc and val_loss[e] < loss):
            best, acc, loss = e + 1, val_acc[e], val_loss[e]
    return best


def test_fit_reports_the_restored_epoch(synth):
    config = TrainConfig(epochs=60, early_stopping=Patience(5))
    res = fit(synth.data, synth.n_classes, config=config, log=None)
    assert res.restored_epoch == best_epoch_by_rule(res.history["val_acc"], res.history["val_loss"])
    assert 1 <= res.restored_epoch <= res.epochs_run
    assert res.metrics["val_acc"] == pytest.approx(float(res.history["val_acc"][res.restored_epoch - 1]), abs=1e-6)
    assert fit(synth.data, synth.n_classes, config=TrainConfig(epochs=5), log=None).restored_epoch is None


def test_batch_reports_the_restored_epoch_per_run(synth):
    config = TrainConfig(epochs=60, early_stopping=Patience(5))
    res = fit_runs(synth.data, synth.n_classes, entries_for([0, 1, 2], config=config), log=None)
    assert res.restored_epoch.shape == (3,)
    for j in range(3):
        history = {k: v[j, : res.epochs_run[j]] for k, v in res.history.items()}
        assert res.restored_epoch[j] == best_epoch_by_rule(history["val_acc"], history["val_loss"])
    single = fit(synth.data, synth.n_classes, config=config, key=jax.random.key(1), log=None)
    assert int(res.restored_epoch[1]) == single.restored_epoch
    none = fit_runs(synth.data, synth.n_classes, entries_for([0, 1], config=TrainConfig(epochs=5)), log=None)
    assert none.restored_epoch is None


def test_restored_line_forms():
    assert restored_line([RunSummary(0, 0, 0.8, 0.75, 40, True)]) is None
    assert restored_line([RunSummary(0, 0, 0.8, 0.75, 40, True, 30)]) == (
        "patience: restored the params of epoch 30 (best validation accuracy 0.7500)")
    many = restored_line([RunSummary(0, 0, 0.8, 0.75, 40, True, 30), RunSummary(1, 0, 0.8, 0.77, 50, True, 12)])
    assert many == ("patience: restored each run's params of its best validation accuracy (epochs 12-30; mean best "
                    "validation accuracy 0.7600)")


@pytest.mark.parametrize("kind", ["single", "sharded"])
def test_cli_patience_run_reports_the_restored_epoch(tmp_path, capsys, kind):
    # sharded: the --shard-graph path on this process's one device (the same report, line and checkpoint)
    args = [*SYNTH, "--early-stopping", "patience", "--patience", "5", "--json", str(tmp_path / "r.json"),
            "--save", str(tmp_path / "model"), "--log", str(tmp_path / "log.jsonl"), "--log-every", "1",
            *(["--shard-graph", "--devices", "1"] if kind == "sharded" else [])]
    assert run_main(args) == 0
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "r.json").read_text())
    assert ("distributed" in report) == (kind == "sharded")
    epoch = report["runs"][0]["restored_epoch"]
    assert isinstance(epoch, int) and 1 <= epoch <= report["runs"][0]["epochs_run"]
    logged = [e for e in map(json.loads, (tmp_path / "log.jsonl").read_text().splitlines()) if "epoch" in e]
    assert [e["epoch"] for e in logged] == list(range(1, report["runs"][0]["epochs_run"] + 1))
    assert epoch == best_epoch_by_rule([e["val_acc"] for e in logged], [e["val_loss"] for e in logged])
    assert report["restored_epoch"] == [epoch]
    line = [s for s in out.splitlines() if s.startswith("patience:")]
    assert line == [f"patience: restored the params of epoch {epoch} (best validation accuracy "
                    f"{report['runs'][0]['val_acc']:.4f})"]
    meta = json.loads((tmp_path / "model" / "checkpoint.json").read_text())
    assert meta["extra"]["restored_epoch"] == epoch and meta["epoch"] == report["runs"][0]["epochs_run"]


def test_cli_batch_and_kipf_runs(tmp_path, capsys):
    args = [*SYNTH, "--early-stopping", "patience", "--patience", "5", "--seeds", "2", "--json",
            str(tmp_path / "b.json")]
    assert run_main(args) == 0
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "b.json").read_text())
    epochs = [r["restored_epoch"] for r in report["runs"]]
    assert all(isinstance(e, int) and e >= 1 for e in epochs)
    assert any(s.startswith("patience: restored each run's params") for s in out.splitlines())
    assert run_main([*SYNTH, "--json", str(tmp_path / "k.json"), "--save", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert "patience:" not in out
    assert json.loads((tmp_path / "k.json").read_text())["runs"][0]["restored_epoch"] is None
    assert json.loads((tmp_path / "m" / "checkpoint.json").read_text())["extra"]["restored_epoch"] is None


# --- 5. composable layer defaults ----------------------------------------------------------------------


def test_gcn_layer_defaults_work_on_a_default_prepared_graph(cora, cora_raw):
    params = gcn_init(jax.random.key(0), cora.info["n_features"], 16)
    assert set(params) == {"w"}  # no bias, as the model
    x = cora.data.x
    out = gcn_apply(params, cora.data.graph, x)  # the graph keeps only its CSR form: "segment" would raise
    graph, _ = from_edges(cora_raw.senders, cora_raw.receivers, cora_raw.weights, n_nodes=cora.info["n_nodes"],
                          add_self_loops=True)
    adj = to_dense(gcn_norm(graph, "sym")).astype(np.float64)
    if jax.default_backend() == "cpu":
        assert isinstance(x, CSR)  # the default sparse feature layout
        dense_x = sp.csr_matrix((np.asarray(x.data, np.float64), np.asarray(x.cols), np.asarray(x.indptr)),
                                shape=x.shape).toarray()
    else:  # an accelerator lays Cora's features out dense (plan.features_layout)
        assert isinstance(x, jax.Array)
        dense_x = np.asarray(x, np.float64)
    expected = adj @ (dense_x @ np.asarray(params["w"], np.float64))
    assert out.shape == (cora.info["n_nodes"], 16)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-4, atol=1e-5)
    assert jnp.allclose(jax.jit(gcn_apply)(params, cora.data.graph, x), out, atol=1e-6)
