"""What users see: progress display, the --log metrics file, plots, --debug, hints and `jaxgcn info`."""

from __future__ import annotations

import io
import json
import re
import struct
import sys

import numpy as np
import pytest

from jaxgcn.io.progress import Progress
from cli_run import run_main, unwrap

SYNTH = ["train", "--dataset", "synthetic", "--nodes", "400", "--classes", "3", "--features", "16",
         "--no-compile-cache"]



def png_size(path):
    """(width, height) from a PNG's IHDR chunk; raises if the file is not a PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def history(n_epochs, stop=None, runs=1):
    h = {k: np.full((runs, n_epochs), np.nan) for k in ("loss", "train_acc", "val_loss", "val_acc")}
    for r in range(runs):
        end = n_epochs if stop is None else stop[r]
        for k, base in (("loss", 2.0), ("train_acc", 0.5), ("val_loss", 2.5), ("val_acc", 0.4)):
            h[k][r, :end] = base + 0.001 * np.arange(end)
    return h


# --- progress ------------------------------------------------------------------------------------


def test_plain_lines_off_a_terminal_and_nothing_when_quiet():
    out = io.StringIO()
    p = Progress(60, every=20, stream=out, tty=False)
    p.compiling()
    p.compiled(1.234)
    p.epochs(40, history(60), 0.5)
    p.epochs(60, history(60), 1.0)
    p.done()
    lines = out.getvalue().splitlines()
    assert lines[0] == "compiled in 1.23s"  # compiling is its own phase
    assert [line.split(" |")[0] for line in lines[1:]] == ["Epoch  20", "Epoch  40", "Epoch  60"]
    assert lines[1] == "Epoch  20 | loss 2.0190 | train 0.5190 | val 0.4190"
    quiet = io.StringIO()
    q = Progress(60, every=20, stream=quiet, tty=False, quiet=True)
    q.compiled(1.0)
    q.epochs(60, history(60), 1.0)
    q.done()
    assert quiet.getvalue() == ""


def test_a_terminal_gets_a_bar_with_loss_and_validation_accuracy():
    out = io.StringIO()
    p = Progress(60, every=20, stream=out, tty=True)
    p.compiling()
    p.compiled(0.5)
    for epoch in (20, 40, 60):
        p.epochs(epoch, history(60), epoch / 60)
    p.done()
    text = out.getvalue()
    assert text.startswith("compiling…\r")
    assert "60/60" in text and "loss=2.0590" in text and "val=0.4590" in text
    assert "\r" in text and "Epoch  20 |" not in text  # the bar replaces the plain lines


def test_log_writes_one_line_per_logged_epoch_and_run_and_marks_early_stops(tmp_path):
    log = tmp_path / "m.jsonl"
    p = Progress(50, every=20, stream=io.StringIO(), tty=False, log_file=log, seeds=[7, 8])
    p.epochs(20, history(50, stop=[33, 50], runs=2), 0.25)
    p.epochs(40, history(50, stop=[33, 50], runs=2), 0.5)
    p.epochs(50, history(50, stop=[33, 50], runs=2), 0.625)
    p.done()
    records = [json.loads(line) for line in log.read_text().splitlines()]
    epochs = [(r["run"], r["epoch"]) for r in records if "epoch" in r]
    # every 20th epoch, the epoch a run stopped at, and the last epoch
    assert epochs == [(0, 20), (1, 20), (0, 33), (1, 40), (1, 50)]
    r33 = records[2]
    assert r33["seed"] == 7 and r33["loss"] == pytest.approx(2.032) and r33["elapsed"] == 0.5
    assert set(r33) == {"run", "seed", "epoch", "loss", "train_acc", "val_loss", "val_acc", "elapsed"}
    assert records[-1] == {"run": 0, "seed": 7, "stopped_early_at": 33}


def test_cli_log_matches_the_run_and_its_json(tmp_path, capsys):
    log, out = tmp_path / "m.jsonl", tmp_path / "r.json"
    args = [*SYNTH, "--epochs", "300", "--seeds", "3", "--log", str(log), "--json", str(out)]
    assert run_main(args) == 0
    printed = capsys.readouterr().out
    assert re.search(r"^compiled in \d+\.\d\ds$", printed, re.M)
    report = json.loads(out.read_text())
    records = [json.loads(line) for line in log.read_text().splitlines()]
    header, records = records[0], records[1:]  # the run's settings first, then every line names them by id
    assert header["settings"]["seeds"] == 3 and {r["config_id"] for r in records} == {header["config_id"]}
    for run, (epochs, stopped) in enumerate(zip(report["epochs_run"], report["stopped_early"])):
        mine = [r for r in records if r["run"] == run and "epoch" in r]
        assert mine[-1]["epoch"] == epochs and all(r["seed"] == run for r in mine)
        assert [r["epoch"] for r in mine[:-1]] == list(range(20, epochs, 20))
        assert np.all(np.diff([r["elapsed"] for r in mine]) >= 0)
        marks = [r["stopped_early_at"] for r in records if r.get("run") == run and "stopped_early_at" in r]
        assert marks == ([epochs] if stopped else [])
        assert mine[-1]["val_acc"] == pytest.approx(report["runs"][run]["val_acc"], abs=1e-6)
    assert any(report["stopped_early"])  # Kipf's rule fires within 300 epochs here


def _event_scalars(path) -> dict[str, dict[int, float]]:
    """The scalars of one TensorBoard event file: tag -> {step: value}. The file is TFRecord
    framing (8-byte length, 4-byte CRC, the record, 4-byte CRC) around Event protobufs."""
    from tensorboardX.proto import event_pb2

    out: dict[str, dict[int, float]] = {}
    data, pos = path.read_bytes(), 0
    while pos < len(data):
        (length,) = struct.unpack("<Q", data[pos:pos + 8])
        event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + length])
        pos += 12 + length + 4
        for value in event.summary.value:
            out.setdefault(value.tag, {})[event.step] = value.simple_value
    return out


def test_tensorboard_writes_each_runs_scalars(tmp_path, capsys):
    pytest.importorskip("tensorboardX")  # in the [test] extra: this runs in the README suite
    log = tmp_path / "log.jsonl"
    args = [*SYNTH, "--epochs", "20", "--seeds", "2", "--tensorboard", str(tmp_path / "tb"), "--log", str(log),
            "--quiet"]
    assert run_main(args) == 0
    records = [json.loads(line) for line in log.read_text().splitlines()]
    for run in (0, 1):
        files = list((tmp_path / "tb").glob(f"run-{run}-seed-{run}/events.out.tfevents.*"))
        assert len(files) == 1, sorted(p.name for p in (tmp_path / "tb").rglob("*"))
        scalars = _event_scalars(files[0])
        mine = [r for r in records if r.get("run") == run and "epoch" in r]
        assert mine and {"loss", "val_acc"} <= set(scalars)
        for r in mine:  # the same numbers as the JSON log, at the same epochs
            assert scalars["val_acc"][r["epoch"]] == pytest.approx(r["val_acc"], abs=1e-6)
            assert scalars["loss"][r["epoch"]] == pytest.approx(r["loss"], rel=1e-6)


def test_tensorboard_without_tensorboardx_says_so_and_trains(tmp_path, capsys, monkeypatch):
    pytest.importorskip("tqdm")
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # import raises ImportError, find_spec gives None
    assert run_main([*SYNTH, "--epochs", "20", "--tensorboard", str(tmp_path / "tb"), "--quiet"]) == 0
    captured = capsys.readouterr()
    warning = [line for line in captured.err.splitlines() if "tensorboardX is not installed" in line]
    assert len(warning) == 1 and warning[0].startswith("jaxgcn: warning: --tensorboard ")  # even with --quiet, once
    assert "no event files are written" in warning[0] and "tensorboardX" not in captured.out
    assert "test accuracy" in captured.out
    assert not any((tmp_path / "tb").rglob("events.out.tfevents.*"))


# --- hints and diagnostics -----------------------------------------------------------------------------


def test_lr_100_on_unnormalized_features_names_the_learning_rate(capsys):
    # Adam's bounded steps keep the loss finite, but it explodes (~2 -> ~6e4): the run says why
    args = ["train", "--dataset", "cora", "--lr", "100", "--feature-norm", "none", "--quiet", "--no-compile-cache"]
    assert run_main(args) == 0
    hint = [line for line in capsys.readouterr().out.splitlines() if line.startswith("hint:")]
    assert len(hint) == 1 and "training diverged" in hint[0], hint
    assert "the learning rate 100 is large (try lr=0.01)" in hint[0]
    assert "features are unnormalized" not in hint[0]  # Cora's raw features are 0/1: not the cause
    # a NaN ends the run with an error naming the learning rate too (exit status 1)
    nan = [*SYNTH, "--lr", "1e20", "--norm", "none", "--feature-norm", "none", "--epochs", "50", "--quiet"]
    assert run_main(nan) == 1
    err = capsys.readouterr().err
    assert "loss became NaN/inf" in err and "the learning rate 1e+20 is large" in err


def test_overfitting_prints_a_hint(capsys):
    # 4 weak features, edges ignoring the classes, 128 hidden units and no regularization: the 80 train
    # nodes are memorized (train 1.0) while validation stays near 0.46
    args = ["train", "--dataset", "synthetic", "--nodes", "600", "--classes", "4", "--features", "4",
            "--homophily", "0", "--hidden", "128", "--dropout", "0", "--weight-decay", "0", "--lr", "0.05",
            "--early-stopping", "none", "--epochs", "400", "--no-compile-cache"]
    assert run_main(args) == 0
    hint = [line for line in capsys.readouterr().out.splitlines() if line.startswith("hint:")]
    assert len(hint) == 1 and "the model overfits" in hint[0] and "--dropout" in hint[0]


def test_no_hint_for_the_paper_run(capsys):
    assert run_main(["train", "--dataset", "cora", "--no-compile-cache"]) == 0
    assert "hint:" not in capsys.readouterr().out


def test_debug_checks_the_first_step_and_says_so(capsys):
    import jax

    assert run_main([*SYNTH, "--epochs", "20", "--debug"]) == 0
    out = capsys.readouterr().out
    assert "debug: one training step ran with jax_debug_nans on and under checkify index/NaN/division checks" in out
    assert not jax.config.jax_debug_nans  # restored for the compiled loop


def test_info_prints_the_known_invariants_of_cora_and_citeseer(tmp_path, capsys):
    assert run_main(["info", "--dataset", "cora", "--json", str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cora: 2,708 nodes, 5,278 undirected edges (without self-loops)")
    assert "isolated nodes: 0" in out and "1,433 per node" in out and "training memory estimate" in out
    stats = json.loads((tmp_path / "c.json").read_text())
    assert stats["nodes"] == 2708 and stats["edges"] == 5278 and sum(stats["classes"].values()) == 2708
    assert stats["split_sizes"] == {"train": 140, "val": 500, "test": 1000}
    assert stats["degree"]["max"] == 168 and stats["feature_nonzeros"] == 49216
    assert run_main(["info", "--dataset", "citeseer"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("citeseer: 3,327 nodes, 4,552 undirected edges") and "isolated nodes: 48" in out


# --- plots ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    pytest.importorskip("matplotlib")

    d = tmp_path_factory.mktemp("trained")
    assert run_main(["train", "--dataset", "cora", "--seeds", "3", "--epochs", "300", "--log",
                     str(d / "m.jsonl"), "--quiet", "--no-compile-cache"]) == 0
    assert run_main(["train", "--dataset", "cora", "--save", str(d / "model"), "--quiet",
                     "--no-compile-cache"]) == 0
    assert run_main(["sweep", "--dataset", "cora", "--lr", "0.01,0.05", "--hidden", "8,16", "--epochs", "40",
                     "--json", str(d / "sweep.json"), "--quiet", "--no-compile-cache"]) == 0
    return d


def test_curves_png(trained, tmp_path):
    from jaxgcn.io.plots import read_log

    out = tmp_path / "curves.png"
    assert run_main(["plot", "curves", "--log", str(trained / "m.jsonl"), "--out", str(out)]) == 0
    assert png_size(out) == (1000, 400) and out.stat().st_size > 20_000
    runs = read_log(trained / "m.jsonl")
    assert sorted(runs) == [0, 1, 2] and all("stopped_early_at" in r for r in runs.values())


def test_embeddings_png(trained, tmp_path):
    out = tmp_path / "emb.png"
    assert run_main(["plot", "embeddings", "--checkpoint", str(trained / "model"), "--dataset", "cora",
                     "--out", str(out)]) == 0
    assert png_size(out) == (700, 600) and out.stat().st_size > 20_000


def test_embedding_projection_keeps_the_classes_apart():
    from jaxgcn.io.plots import project_2d

    rng = np.random.default_rng(0)
    h = np.concatenate([rng.normal(0, 0.1, (50, 16)), rng.normal(3, 0.1, (50, 16))])
    xy = project_2d(h, "pca")
    assert xy.shape == (100, 2)
    assert abs(xy[:50, 0].mean() - xy[50:, 0].mean()) > 10 * xy[:50, 0].std()  # PC 1 separates them


def test_a_heatmaps_bad_axis_is_named_before_matplotlib_is_needed(tmp_path, monkeypatch):
    """Without matplotlib (a TPU VM has none), a wrong axis is still the error the user reads first."""
    from jaxgcn.io import plots

    def missing():
        raise ValueError("plots need matplotlib: pip install 'jaxgcn[plot]' (or pip install matplotlib)")

    monkeypatch.setattr(plots, "_pyplot", missing)
    with pytest.raises(ValueError, match=r"^y='momentum' is not a swept hyperparameter"):
        plots.sweep_heatmap([{"lr": 0.01, "hidden": 16, "val_acc_mean": 0.5}], "lr", "momentum", tmp_path / "x.png")


def test_plot_library_errors_name_the_parameter(tmp_path):
    from jaxgcn.io.plots import project_2d, read_log, sweep_heatmap

    with pytest.raises(ValueError, match=r"^method='umap' must be pca or tsne$"):
        project_2d(np.zeros((4, 3)), "umap")
    configurations = [{"lr": 0.01, "hidden": 16, "val_acc_mean": 0.5}]
    with pytest.raises(ValueError, match=r"^y='momentum' is not a swept hyperparameter; choose from \['lr', 'hidden"):
        sweep_heatmap(configurations, "lr", "momentum", tmp_path / "x.png")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match=r"empty\.jsonl: no records; train with Progress\(log_file='.*empty\.jsonl'\)"):
        read_log(tmp_path / "empty.jsonl")


@pytest.mark.parametrize("depth", [33, 100_000])  # past the bound; past what json.loads can recurse
def test_plot_curves_refuses_a_deeply_nested_line_naming_it(tmp_path, capsys, depth):
    log = tmp_path / "deep.jsonl"
    deep = '{"run": 0, "epoch": 2, "x": ' + "[" * depth + "]" * depth + "}"
    log.write_text('{"run": 0, "epoch": 1, "loss": 1.0}\n' + deep + "\n")
    assert run_main(["plot", "curves", "--log", log, "--out", tmp_path / "c.png"]) == 2
    assert unwrap(capsys.readouterr().err) == (
        f"jaxgcn: error: {log}, line 2: not a jaxgcn training-log record (nested deeper than 32 levels: "
        f"{deep[:60]!r}); give the JSON-lines file that `jaxgcn train --log deep.jsonl` writes\n")
    assert not (tmp_path / "c.png").exists()


def test_sweep_heatmap_png(trained, tmp_path):
    out = tmp_path / "sweep.png"
    assert run_main(["plot", "sweep", "--sweep-json", str(trained / "sweep.json"), "--x", "lr", "--y", "hidden",
                     "--out", str(out)]) == 0
    assert png_size(out) == (700, 500) and out.stat().st_size > 10_000


@pytest.mark.parametrize("args, message", [
    (["plot", "curves"], "jaxgcn plot curves needs --log"),
    (["plot", "sweep", "--sweep-json", "SWEEP", "--x", "momentum"], "--x: x='momentum' is not a swept hyperparameter"),
    (["plot", "sweep", "--sweep-json", "SWEEP", "--y", "momentum"], "--y: y='momentum' is not a swept hyperparameter"),
    (["plot", "curves", "--log", "BAD"], r"bad.jsonl, line 1: not a jaxgcn training-log record"),
    (["plot", "curves", "--log", "MISSING"], r"no such file; write it with `jaxgcn train --log"),
])
def test_plot_errors_name_the_argument(tmp_path, capsys, trained, args, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("hello\n")
    swap = {"SWEEP": str(trained / "sweep.json"), "BAD": str(bad), "MISSING": str(tmp_path / "none.jsonl")}
    argv = [swap.get(a, a) for a in args] + ["--out", str(tmp_path / "x.png")]
    assert run_main(argv) == 2
    assert re.search(message, unwrap(capsys.readouterr().err))
    assert not (tmp_path / "x.png").exists()


def _three_way_sweep(tmp_path):
    """A sweep --json of lr x hidden x dropout whose best dropout differs between cells."""
    configurations = []
    for lr in (0.01, 0.05):
        for hidden in (8, 16):
            for dropout in (0.3, 0.5):
                acc = 0.5 + lr + hidden / 100 + (0.2 if (dropout == 0.3) == (hidden == 8) else 0.0)
                configurations.append({"lr": lr, "weight_decay": 5e-4, "dropout": dropout, "hidden": hidden,
                                       "layers": 2, "optimizer": "adam", "val_acc_mean": acc})
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"configurations": configurations}))
    return configurations, path


def test_plot_sweep_says_what_a_cell_takes_the_best_over_or_holds_it_with_fix(tmp_path, capsys):
    """A third swept setting: each cell is the best over it and the note names it with its values;
    --fix holds it, and each cell is then that configuration's own figure."""
    pytest.importorskip("matplotlib")
    from jaxgcn.io.plots import sweep_cells

    configurations, path = _three_way_sweep(tmp_path)
    kept, over = sweep_cells(configurations, "lr", "hidden")
    assert kept == configurations and over == {"dropout": [0.3, 0.5]}
    kept, over = sweep_cells(configurations, "lr", "hidden", {"dropout": "0.5"})
    assert over == {} and [c["dropout"] for c in kept] == [0.5] * 4
    assert {(c["lr"], c["hidden"]): round(c["val_acc_mean"], 4) for c in kept} == {
        (0.01, 8): 0.59, (0.01, 16): 0.87, (0.05, 8): 0.63, (0.05, 16): 0.91}
    assert run_main(["plot", "sweep", "--sweep-json", path, "--out", tmp_path / "a.png"]) == 0
    assert capsys.readouterr().err == ("jaxgcn: note: each cell is the best val_acc_mean over dropout (0.3, 0.5); "
                                       "hold one with --fix dropout=VALUE\n")
    assert run_main(["plot", "sweep", "--sweep-json", path, "--out", tmp_path / "b.png", "--fix", "dropout=0.5"]) == 0
    out = capsys.readouterr()
    assert out.err == "" and out.out == f"wrote {tmp_path / 'b.png'}\n"
    assert png_size(tmp_path / "b.png") == (700, 500)


@pytest.mark.parametrize("fix, message", [
    ("dropout=0.9", "--fix: fix=dropout=0.9: the sweep has no configuration with dropout 0.9; its values: 0.3, 0.5"),
    ("lr=0.01", "--fix: fix=lr=0.01: 'lr' is not a swept hyperparameter off the axes; choose from ['weight_decay', "
                "'dropout', 'layers', 'optimizer']"),
    ("momentum=1", "--fix: fix=momentum=1: 'momentum' is not a swept hyperparameter off the axes"),
    ("dropout", "argument --fix: 'dropout' is not NAME=VALUE, e.g. dropout=0.5"),
])
def test_plot_sweep_fix_errors_name_the_value(tmp_path, capsys, fix, message):
    _, path = _three_way_sweep(tmp_path)
    assert run_main(["plot", "sweep", "--sweep-json", path, "--out", tmp_path / "a.png", "--fix", fix]) == 2
    assert message in unwrap(capsys.readouterr().err)
    assert not (tmp_path / "a.png").exists()
