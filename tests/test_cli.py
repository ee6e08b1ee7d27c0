"""The ``jaxgcn`` command line, in-process through ``cli.main`` and once as the installed script."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxgcn.datasets import prepare, synthetic
from jaxgcn.core.models import Execution, GCNConfig
from jaxgcn.train import TrainConfig, fit
from cli_run import run_main, unwrap

# 400 sparse nodes -> the "csr" backend (an accelerator's auto: dense Â on its MXU); "none" so every seed
# runs exactly --epochs epochs.
AUTO = "csr" if jax.default_backend() == "cpu" else "dense"
SYNTH = ["train", "--dataset", "synthetic", "--nodes", "400", "--classes", "3", "--features", "16",
         "--epochs", "30", "--early-stopping", "none", "--no-compile-cache"]

JSON_KEYS = {"dataset", "n_nodes", "n_edges", "backend", "config", "seeds", "test_acc", "test_acc_mean",
             "test_acc_std", "val_acc_mean", "epochs_run", "compile_seconds", "train_seconds"}

SUMMARY = re.compile(r"^test accuracy \d\.\d{4}( over 1 run| ± \d\.\d{4} over \d+ runs \(population std\)) "
                     r"\| val \d\.\d{4} \| "
                     r"epochs \d+(-\d+)? "
                     r"\| compile \d+\.\d\ds \| train \d+\.\d\ds \(\d+\.\d\d ms/epoch\)$")
EPOCH = re.compile(r"^Epoch +(\d+) \| loss \d\.\d{4} \| train \d\.\d{4} \| val \d\.\d{4}$")



def test_train_writes_consistent_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert run_main([*SYNTH, "--seeds", "2", "--json", str(out), "--quiet"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # no temp file left behind
    report = json.loads(out.read_text())
    assert JSON_KEYS <= set(report)
    assert report["dataset"] == "synthetic" and report["n_nodes"] == 400 and report["backend"] == AUTO
    assert report["n_features"] == 16 and report["n_classes"] == 3
    assert report["seeds"] == [0, 1]
    assert len(report["test_acc"]) == 2 and report["epochs_run"] == [30, 30]
    assert report["test_acc_mean"] == pytest.approx(np.mean(report["test_acc"]), abs=1e-9)
    assert report["test_acc_std"] == pytest.approx(np.std(report["test_acc"]), abs=1e-9)
    assert report["val_acc_mean"] == pytest.approx(np.mean(report["val_acc"]), abs=1e-9)
    assert report["compile_seconds"] >= 0 and report["train_seconds"] > 0
    assert report["config"]["train"]["epochs"] == 30 and report["config"]["train"]["lr"] == 0.01
    assert report["config"]["execution"]["backend"] == AUTO and report["config"]["model"]["dropout"] == 0.5
    assert "backend" not in report["config"]["model"]  # the architecture only
    assert report["config"]["norm"] == "sym" and report["config"]["feature_norm"] == "row"

    # The numbers are what the library computes for the same data, configs and seeds.
    prepared = prepare(synthetic(400, n_classes=3, n_features=16, seed=0))
    assert report["n_edges"] == prepared.info["undirected_edges"]
    model_config, execution = GCNConfig(), Execution(backend=AUTO)
    config = TrainConfig(epochs=30, early_stopping=None)
    expected = [fit(prepared.data, 3, model_config=model_config, execution=execution, config=config,
                    key=jax.random.key(s), log=None).metrics["test_acc"] for s in (0, 1)]
    assert report["test_acc"] == pytest.approx(expected, abs=1e-6)
    assert max(report["test_acc"]) > 0.6  # 3 classes: chance is 1/3

    stdout = capsys.readouterr().out.splitlines()
    assert len(stdout) == 1 and SUMMARY.match(stdout[0]), stdout  # --quiet: the summary only

    # The same job through the application layer, as a library caller runs it: the same runs, and
    # the notes the command would print come to `say` (nothing printed).
    from jaxgcn import app

    notes = []
    request = app.DataRequest("synthetic", features=16, synthetic={"n_nodes": 400, "n_classes": 3})
    outcome = app.run(app.Job(request, train=config, seeds=2), say=notes.append)
    assert [r.test_acc for r in outcome.runs] == report["test_acc"] and [r.seed for r in outcome.runs] == [0, 1]
    assert outcome.execution.backend == AUTO and outcome.batch is not None and outcome.fitted is None
    assert any(n.startswith("memory estimate ") for n in notes) and "2 runs (2 seeds x 1 split(s))" in " ".join(notes)
    assert capsys.readouterr().out == ""


def test_train_progress_lines(capsys):
    assert run_main([*SYNTH, "--log-every", "10"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = r"^synthetic: 400 nodes, [\d,]+ undirected edges, 16 features, 3 classes \| backend "
    assert re.match(head + AUTO, lines[0])
    epochs = [int(m.group(1)) for m in map(EPOCH.match, lines) if m]
    assert epochs == [10, 20, 30]
    assert any(line.startswith("Epoch  20 | loss ") for line in lines)
    assert SUMMARY.match(lines[-1]) and "over 1 run |" in lines[-1]


def test_verbose_says_where_the_time_went(capsys):
    # issue 26: each phase of the process, in order, adding up to the total, and where the kernel came from
    assert run_main([*SYNTH, "--quiet", "--verbose"]) == 0
    summary, phases = capsys.readouterr().out.splitlines()[-2:]
    assert SUMMARY.match(summary), summary
    match = re.fullmatch(r"phases: (.+) \| total (\d+\.\d\d)s \(kernel: (.+)\)", phases)
    assert match, phases
    parts = [part.rpartition(" ") for part in match[1].split(" | ")]
    assert [name for name, _, _ in parts] == ["start-up", "imports", "jax set-up",
                                             "data, kernel, plan, evaluate, report", "compile", "train"]
    seconds = [float(value.rstrip("s")) for _, _, value in parts]
    assert all(s >= 0 for s in seconds) and abs(sum(seconds) - float(match[2])) <= 0.05
    assert f"compile {seconds[4]:.2f}s | train {seconds[5]:.2f}s" in summary  # the summary's own figures
    assert match[3].startswith(("built ", "not used: "))


def test_process_start_is_read_from_proc():
    from jaxgcn.cli import since_process_start

    first = since_process_start()
    assert 0 < first < 3600 and since_process_start() >= first


def test_datasets_command_lists_bundled_data(capsys):
    assert run_main(["datasets"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert list(rows)[1:4] == ["cora", "citeseer", "pubmed"]  # after the header
    assert rows["cora"][1:5] == ["2,708", "10,556", "1,433", "7"] and rows["cora"][7] == "bundled"
    assert rows["citeseer"][1] == "3,327" and rows["ogbn-proteins"][-1] == "[multi-label]"
    assert rows["pubmed"][7] == "download" and "synthetic" in rows and "ogb:DIR" in rows


@pytest.mark.parametrize(("args", "match"), [
    (["train", "--dataset", "nope", "--no-compile-cache"], r"unknown dataset 'nope'"),
    (["train", "--epochs", "0"], r"argument --epochs: 0 is not a positive integer"),
    (["train", "--dataset", "synthetic", "--nodes", "100", "--classes", "2", "--dropout", "1.5",
      "--no-compile-cache"], r"--dropout 1\.5: the probability to drop must be in \[0, 1\); give a value such as 0\.5"),
    (["train", "--dataset", "synthetic", "--nodes", "100", "--classes", "2", "--lr", "-1",
      "--no-compile-cache"], r"--lr -1: the learning rate must be positive; give a value such as 0\.01"),
    (["train", "--backend", "sparse"], r"argument --backend: invalid choice: 'sparse'"),
    (["train", "--norm", "l2"], r"argument --norm: invalid choice: 'l2'"),
    (["frobnicate"], r"invalid choice: 'frobnicate'"),
])
def test_bad_arguments_exit_2_with_one_line(capsys, args, match):
    assert run_main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = unwrap(captured.err).splitlines()
    assert len(err) == 1, captured.err
    assert err[0].startswith("jaxgcn: error: ") and "Traceback" not in captured.err
    assert re.search(match, err[0])


def test_json_into_missing_folder_exits_2_and_writes_nothing(tmp_path, capsys):
    target = tmp_path / "missing" / "r.json"
    assert run_main(["train", "--json", str(target), "--no-compile-cache"]) == 2
    err = unwrap(capsys.readouterr().err).splitlines()
    assert len(err) == 1
    assert f"--json {target}: folder {target.parent} does not exist" in err[0]
    assert not target.parent.exists()
    assert list(tmp_path.iterdir()) == []


def test_diverging_run_exits_1(capsys):
    args = [*SYNTH, "--lr", "1e20", "--norm", "none", "--feature-norm", "none", "--quiet"]
    assert run_main(args) == 1
    err = unwrap(capsys.readouterr().err).splitlines()
    assert len(err) == 1
    assert err[0].startswith("jaxgcn: error: training diverged") and "learning rate" in err[0]


def test_top_level_error_hint_names_a_real_command(capsys):
    assert run_main(["frobnicate"]) == 2
    assert "(see 'jaxgcn --help')" in capsys.readouterr().err


def test_non_integer_count_message_is_user_facing(capsys):
    assert run_main(["train", "--epochs", "abc"]) == 2
    err = capsys.readouterr().err
    assert "'abc'" in err and "_positive_int" not in err


def test_error_advice_names_only_existing_options(capsys):
    assert run_main(["train", "--dataset", "synthetic", "--nodes", "50", "--classes", "3",
                     "--no-compile-cache"]) == 2
    err = capsys.readouterr().err
    suggested = set(re.findall(r"--[a-z][a-z-]+", err))
    assert suggested, err
    assert run_main(["train", "--help"]) == 0
    known = set(re.findall(r"--[a-z][a-z-]+", capsys.readouterr().out))
    assert "--nodes" in known
    assert suggested <= known, f"suggests unknown options {suggested - known}"


def console_script() -> list[str]:
    script = Path(sys.executable).parent / "jaxgcn"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "jaxgcn.cli"]


def test_installed_console_script(tmp_path):
    out = tmp_path / "r.json"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    cmd = [*console_script(), "train", "--dataset", "synthetic", "--nodes", "60", "--classes", "2",
           "--features", "8", "--epochs", "5", "--early-stopping", "none", "--json", str(out), "--quiet",
           "--no-compile-cache"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["n_nodes"] == 60 and report["epochs_run"] == [5] and len(report["test_acc"]) == 1
    assert 0.0 <= report["test_acc"][0] <= 1.0
    assert SUMMARY.match(proc.stdout.strip())

    bad = subprocess.run([*console_script(), "train", "--epochs", "0"], capture_output=True, text=True,
                         timeout=120, env=env, cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


# --- --optimizer: parsed, mapped to TrainConfig/Grid, reported, and it reaches the engine ---------

def _library_run(optimizer: str, seed: int = 0) -> dict:
    prepared = prepare(synthetic(400, n_classes=3, n_features=16, seed=0))
    config = TrainConfig(epochs=30, early_stopping=None, optimizer=optimizer)
    return fit(prepared.data, 3, model_config=GCNConfig(), execution=Execution(backend=AUTO), config=config,
               key=jax.random.key(seed), log=None).metrics


@pytest.mark.parametrize("seeds", [1, 2], ids=["single", "batched"])
def test_train_optimizer_reaches_the_engine_and_the_report(tmp_path, seeds):
    out = tmp_path / "r.json"
    assert run_main([*SYNTH, "--optimizer", "sgd", "--seeds", str(seeds), "--json", str(out), "--quiet"]) == 0
    report = json.loads(out.read_text())
    assert report["config"]["train"]["optimizer"] == "sgd"
    sgd = [_library_run("sgd", s)["test_acc"] for s in range(seeds)]
    assert report["test_acc"] == pytest.approx(sgd, abs=1e-6)
    adam = [_library_run("adam", s)["test_acc"] for s in range(seeds)]
    assert sgd != pytest.approx(adam, abs=1e-3)  # the flag changed the training, not only the report


def test_train_optimizer_defaults_to_adam_and_says_so(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert run_main([*SYNTH, "--epochs", "2", "--json", str(out), "--quiet"]) == 0
    assert json.loads(out.read_text())["config"]["train"]["optimizer"] == "adam"
    for command in ("train", "sweep"):
        capsys.readouterr()
        assert run_main([command, "--help"]) == 0
        help_text = " ".join(capsys.readouterr().out.split())
        assert re.search(r"--optimizer .*\(default: adam\)", help_text), command


def test_sweep_optimizer_is_a_grid_axis(tmp_path):
    out = tmp_path / "s.json"
    sweep = ["sweep", *SYNTH[1:], "--optimizer", "adam,sgd", "--json", str(out), "--quiet"]
    assert run_main(sweep) == 0
    report = json.loads(out.read_text())
    assert report["grid"]["optimizer"] == ["adam", "sgd"] and "optimizer" not in report["fixed"]
    by_optimizer = {c["optimizer"]: c["runs"][0] for c in report["configurations"]}
    assert set(by_optimizer) == {"adam", "sgd"}
    for name, run in by_optimizer.items():
        assert run["test_acc"] == pytest.approx(_library_run(name)["test_acc"], abs=1e-6), name


@pytest.mark.parametrize(("args", "match"), [
    (["train", "--optimizer", "rmsprop"], r"argument --optimizer: invalid choice: 'rmsprop'"),
    (["sweep", "--optimizer", "adam,rmsprop"], r"argument --optimizer: invalid choice: 'rmsprop' \(choose from "
                                                r"'adam', 'adamw', 'sgd', 'momentum'\)"),
    (["sweep", "--optimizer", ","], r"argument --optimizer: ',': give at least one value"),
])
def test_bad_optimizer_exits_2_with_one_line(capsys, args, match):
    assert run_main([*args, "--no-compile-cache"]) == 2
    captured = capsys.readouterr()
    err = unwrap(captured.err).splitlines()
    assert captured.out == "" and len(err) == 1 and re.search(match, err[0]), captured.err


def test_config_errors_name_the_flag(capsys):
    assert run_main([*SYNTH, "--lr", "-1"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["jaxgcn: error: --lr -1: the learning rate must be positive; give a value such as 0.01"]
