"""The per-run hyperparameters are declared once (jaxgcn.core.hyper.PER_RUN): a program's key, a batch's
and a single run's inputs and RunInputs' fields all follow the one table, and the sweep's axes are
one constant that the sweep, the CLI and the plots share."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from jaxgcn import sweep
from jaxgcn.core import hyper
from jaxgcn.io import plots
from jaxgcn.batched import Entry, program_key, program_of, run_inputs
from jaxgcn.cli import config as cli_config
from jaxgcn.core.models import GCNConfig, RunInputs, make_run_inputs
from jaxgcn.train import TrainConfig, make_runner
from cli_run import run_main

MODEL, TRAIN = GCNConfig(hidden=8), TrainConfig(optimizer="momentum", epochs=3)
# A per-run hyperparameter the engine does not have yet, added in ONE place: its row.
MOMENTUM = hyper.PerRun("momentum", "train", True, (hyper.Column("momentum", np.float32, float),))


def entry(seed=0, split=0, model=MODEL, **train):
    return Entry(model, dataclasses.replace(TRAIN, **train), seed, split)


def test_a_hyperparameter_added_to_the_table_is_an_input_of_the_program_not_part_of_it(monkeypatch):
    slow, fast = entry(momentum=0.5), entry(seed=1, split=1, momentum=0.9)
    assert program_key(slow) != program_key(fast)  # today: momentum is compiled into the program
    monkeypatch.setattr(hyper, "PER_RUN", (*hyper.PER_RUN, MOMENTUM))
    assert program_key(slow) == program_key(fast)
    assert program_of([slow, fast])[1].momentum == TrainConfig.momentum
    runs = run_inputs([slow, fast])
    assert runs._fields[-1] == "momentum" and runs.momentum.dtype == np.float32
    assert np.asarray(runs.momentum).tolist() == [0.5, np.float32(0.9)]
    assert np.asarray(runs.split).tolist() == [0, 1] and np.asarray(runs.lr).tolist() == [np.float32(0.01)] * 2
    one = make_runner(MODEL, dataclasses.replace(TRAIN, momentum=0.75), 5, 3).inputs()
    assert np.asarray(one.momentum).tolist() == [0.75] and np.asarray(one.lr).tolist() == [np.float32(0.01)]
    with pytest.raises(ValueError, match=r"differ in train\.epochs \(3 vs 9\): one program shares everything but lr, "
                                         r"weight_decay, dropout, momentum, seed and split"):
        program_of([slow, entry(epochs=9)])


def test_run_inputs_hold_each_run_s_declared_values():
    entries = [entry(0, 2, lr=0.05, weight_decay=0.0),
               entry(1, 0, model=dataclasses.replace(MODEL, dropout=0.25), weight_decay=1e-3)]
    runs = run_inputs(entries)
    assert type(runs) is RunInputs
    assert RunInputs._fields == ("lr", "weight_decay", "keep_threshold", "keep_scale", "hidden", "split")
    assert {k: str(v.dtype) for k, v in runs._asdict().items()} == {
        "lr": "float32", "weight_decay": "float32", "keep_threshold": "uint32", "keep_scale": "float32",
        "hidden": "int32", "split": "int32"}
    assert {k: np.asarray(v).tolist() for k, v in runs._asdict().items()} == {
        "lr": [np.float32(0.05), np.float32(0.01)], "weight_decay": [0.0, np.float32(1e-3)],
        "keep_threshold": [2**31, 2**30], "keep_scale": [0.5, 0.75], "hidden": [8, 8], "split": [2, 0]}
    one = make_runner(MODEL, dataclasses.replace(TRAIN, lr=0.05, weight_decay=0.0), 5, 3).inputs()
    assert {k: np.asarray(v).tolist() for k, v in one._asdict().items()} == {
        k: v[:1] for k, v in {k: np.asarray(v).tolist() for k, v in runs._asdict().items()}.items()} | {"split": [0]}


@pytest.mark.parametrize("field, value, shared", [
    ("lr", 0.2, True), ("weight_decay", 0.0, True), ("dropout", 0.1, True), ("hidden", 32, False),
    ("layers", 3, False), ("momentum", 0.5, False), ("optimizer", "sgd", False)])
def test_program_key_sets_aside_exactly_the_varying_inputs(field, value, shared):
    e = entry()
    holder = "model" if hasattr(e.model, field) else "train"
    other = e._replace(**{holder: dataclasses.replace(getattr(e, holder), **{field: value})})
    assert (program_key(other) == program_key(e)) == shared


def test_make_run_inputs_refuses_an_unknown_name_and_ragged_values():
    with pytest.raises(TypeError, match=r"^'momentum' is not a per-run input; the per-run inputs: \['lr', "
                                        r"'weight_decay', 'dropout', 'hidden', 'split'\]$"):
        make_run_inputs(dropout=[0.5], momentum=[0.9])
    with pytest.raises(ValueError, match=r"^per-run values of different lengths \{'dropout': 2, 'hidden': 1\}"):
        make_run_inputs(dropout=[0.5, 0.1], hidden=[16])
    runs = make_run_inputs(hidden=[16, 32])  # what is left out is 0 (dropout 0: keep everything)
    assert np.asarray(runs.keep_scale).tolist() == [1.0, 1.0] and np.asarray(runs.lr).tolist() == [0.0, 0.0]


def test_the_sweep_the_cli_and_the_plots_share_one_list_of_axes():
    assert hyper.GRID_KEYS == ("lr", "weight_decay", "dropout", "hidden", "layers", "optimizer")  # the CSV columns
    assert hyper.varying() == ("lr", "weight_decay", "dropout")  # the grid's axes inside one program
    assert sweep.GRID_KEYS is hyper.GRID_KEYS and cli_config.GRID_KEYS is hyper.GRID_KEYS
    assert plots.GRID_KEYS is hyper.GRID_KEYS
    assert tuple(f.name for f in dataclasses.fields(sweep.Grid)) == hyper.GRID_KEYS
    assert hyper.grid_keys_of("model") + hyper.grid_keys_of("train") == (
        "dropout", "hidden", "layers", "lr", "weight_decay", "optimizer")
    values = sweep.grid_values(sweep.lower(sweep.Grid(lr=(0.05,), hidden=(32,), optimizer=("sgd",)), [0])[0])
    assert values == {"lr": 0.05, "weight_decay": 5e-4, "dropout": 0.5, "hidden": 32, "layers": 2, "optimizer": "sgd"}


def test_the_declaration_imports_no_jax():
    code = "import sys, jaxgcn.core.hyper, jaxgcn.io.plots; print('jax' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_plot_sweep_draws_an_optimizer_axis_and_sorts_the_cells_once(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    configurations = [{"lr": lr, "weight_decay": 5e-4, "dropout": dropout, "hidden": 16, "layers": 2,
                       "optimizer": name, "val_acc_mean": 0.5 + lr + dropout}
                      for lr in (0.01, 0.05) for name in ("adam", "sgd") for dropout in (0.3, 0.5)]
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"configurations": configurations}))
    calls = []
    cells = plots.sweep_cells
    monkeypatch.setattr(plots, "sweep_cells", lambda *a, **k: calls.append(a[1:3]) or cells(*a, **k))
    out = tmp_path / "o.png"
    assert run_main(["plot", "sweep", "--sweep-json", path, "--x", "optimizer", "--y", "lr", "--out", out]) == 0
    assert calls == [("optimizer", "lr")]
    assert capsys.readouterr().err == ("jaxgcn: note: each cell is the best val_acc_mean over dropout (0.3, 0.5); "
                                       "hold one with --fix dropout=VALUE\n")
    assert out.stat().st_size > 10_000
    assert plots.best_over_text({"optimizer": ["adam", "sgd"], "lr": [0.01, 5e-4]}) == (
        "optimizer (adam, sgd) and lr (0.01, 0.0005)")
