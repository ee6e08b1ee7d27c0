"""Every capability on the accelerator's path, decided on the CPU with the platform faked (the arrays
stay on the CPU; the plan, the layout, the ops and the programs are the TPU's): a run resumed from a
checkpoint equals the uninterrupted one bit for bit on ``gather`` with its row plans, and the commands
(train with seeds and patience, save, evaluate, predict, sweep, --debug) run on ``auto`` (dense Â) and
``gather``. The chip itself is measured by benchmarks/bench_accelerator.py (docs/tpu.md)."""

from __future__ import annotations

import csv
import json

import jax
import numpy as np
import pytest
from cli_run import run_main

from jaxgcn import datasets, plan
from jaxgcn.host import memory
from jaxgcn.store import checkpoint
from jaxgcn.train import Patience, TrainConfig, fit

SYNTH = ["--dataset", "synthetic", "--nodes", "600", "--classes", "3", "--features", "12", "--quiet",
         "--no-compile-cache"]


@pytest.fixture
def on_tpu(monkeypatch):
    monkeypatch.setattr(plan, "current_platform", lambda: "tpu")
    monkeypatch.setattr("jaxgcn.app.data.current_platform", lambda: "tpu")  # imported there by name
    monkeypatch.setattr(memory, "device_budget", lambda device=None: memory.Budget(15 * 2**30, "TPU v5 lite (tpu:0)"))
    monkeypatch.setattr("jaxgcn.core.pallas_gather.MIN_TABLE_BYTES", 2**40)  # XLA's row sums: quick on a CPU


def test_a_resumed_gather_run_equals_the_uninterrupted_one_bit_for_bit(on_tpu):
    prepared = datasets.prepare(datasets.synthetic(1500, n_classes=4, n_features=16, homophily=0.5, signal=0.3,
                                                   seed=1, n_val=200, n_test=300), backend="gather")
    assert prepared.backend == "gather"
    chosen = plan.resolve(plan.Execution(), prepared.data, plan.GCNConfig(), prepared.n_classes)
    assert chosen.ops.row_plans
    config = TrainConfig(epochs=60, lr=0.1, early_stopping=Patience(10))
    states = {}

    def run(resume=None):
        states.clear()
        return fit(prepared.data, prepared.n_classes, config=config, key=jax.random.key(3), log=None,
                   execution=chosen, checkpoint_every=5, resume=resume,
                   on_checkpoint=lambda s: states.__setitem__(int(s.epoch), checkpoint.state_arrays(s)))

    whole = run()
    kept = dict(states)
    assert len(kept) >= 3
    cut = sorted(kept)[1]
    resumed = run(resume=lambda template: checkpoint.restore_state(template, kept[cut], "test"))
    assert resumed.epochs_run == whole.epochs_run and resumed.metrics == whole.metrics
    for got, want in zip(jax.tree.leaves(resumed.params), jax.tree.leaves(whole.params)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    for name, want in whole.history.items():
        np.testing.assert_array_equal(resumed.history[name], want)


@pytest.mark.parametrize("backend", ["auto", "gather"])
def test_the_commands_run_on_the_accelerators_plan(on_tpu, tmp_path, backend, capsys):
    model, out = tmp_path / "m", tmp_path / "r.json"
    assert run_main(["train", *SYNTH, "--backend", backend, "--seeds", "2", "--epochs", "30", "--early-stopping",
                     "patience", "--patience", "5", "--save", model, "--json", out, "--debug"]) == 0
    report = json.loads(out.read_text())
    assert report["backend"] == ("dense" if backend == "auto" else "gather")
    assert report["precision"] == "highest"
    best = json.loads((model / "runs.json").read_text())["best"]
    assert run_main(["evaluate", "--checkpoint", model, *SYNTH[:8], "--json", tmp_path / "e.json"]) == 0
    evaluated = json.loads((tmp_path / "e.json").read_text())
    assert evaluated["accuracy"] == pytest.approx(report["runs"][best]["test_acc"], abs=1e-6)
    assert run_main(["predict", "--checkpoint", model, *SYNTH[:8], "--out", tmp_path / "p.csv"]) == 0
    with open(tmp_path / "p.csv") as f:
        assert len(list(csv.reader(f))) == 601  # a header and every node
    assert run_main(["sweep", *SYNTH, "--backend", backend, "--epochs", "10", "--lr", "0.01,0.05", "--seeds", "2",
                     "--json", tmp_path / "s.json"]) == 0
    configurations = json.loads((tmp_path / "s.json").read_text())["configurations"]
    assert sorted(c["lr"] for c in configurations) == [0.01, 0.05]
    assert all(len(c["runs"]) == 2 for c in configurations)
