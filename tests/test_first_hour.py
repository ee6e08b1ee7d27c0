"""A newcomer's first hour without a surprise: --log never splices runs silently, small graphs say
how their split was sized, and the printed text reads right (plurals, no ± for one run, integer
epochs, CSV numbers without float noise, a labelled confusion matrix, predict to stdout, no
overfitting hint after a few epochs, a line when a sweep group starts)."""

from __future__ import annotations

import csv
import io
import json
import re

import numpy as np
import pytest

from cli_run import run_main

TINY = ["--dataset", "synthetic", "--nodes", "120", "--classes", "3", "--features", "8", "--epochs", "3",
        "--no-compile-cache"]


def one_line(text: str) -> str:
    """An error message as one line (the CLI wraps long ones at spaces)."""
    return " ".join(text.split())


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- --log: one run per file unless asked, and plot never merges different settings -----------------


def test_log_refuses_another_runs_file_and_plot_refuses_to_merge_settings(tmp_path, capsys):
    log, png = tmp_path / "m.jsonl", tmp_path / "c.png"
    assert run_main(["train", *TINY, "--quiet", "--log", log, "--log-every", "1"]) == 0  # (not a setting)
    first = log.read_text()
    n_lines = len(first.splitlines())
    capsys.readouterr()

    # a second training into the same file is refused before any work; the file is untouched
    assert run_main(["train", *TINY, "--quiet", "--lr", "0.05", "--log", log]) == 2
    captured = capsys.readouterr()
    assert one_line(captured.err) == (
        f"jaxgcn: error: --log {log}: already holds {n_lines} lines of another run, and --log adds to its file "
        "(`jaxgcn plot curves` would draw both runs as one); give another path (one log per run), or --log-append "
        "to add this run to it")
    assert captured.out == "" and log.read_text() == first

    # --log-append adds it; every line names its run's settings by their id
    assert run_main(["train", *TINY, "--quiet", "--lr", "0.05", "--log", log, "--log-append"]) == 0
    lines = records(log)
    headers = [r for r in lines if "settings" in r]
    assert [h["settings"]["lr"] for h in headers] == [0.01, 0.05] and lines[0] == headers[0]
    ids = [h["config_id"] for h in headers]
    assert len(set(ids)) == 2 and all(r["config_id"] in ids for r in lines)
    assert {r["config_id"] for r in lines[n_lines:]} == {ids[1]}
    capsys.readouterr()

    # plot refuses to draw the two as one run, naming the file, what differs and how to plot one
    assert run_main(["plot", "curves", "--log", log, "--out", png]) == 2
    assert one_line(capsys.readouterr().err) == (
        f"jaxgcn: error: {log}: holds the runs of 2 trainings with different settings: {ids[0]} (lr 0.01); "
        f"{ids[1]} (lr 0.05); plot one with --config-id {ids[0]}, or train each configuration into its own --log "
        "file")
    assert not png.exists()
    assert run_main(["plot", "curves", "--log", log, "--config-id", "nope", "--out", png]) == 2
    assert f"no line has config_id nope; give one of its config ids ({ids[0]}, {ids[1]})" in one_line(
        capsys.readouterr().err)

    from jaxgcn.io.plots import read_log

    assert read_log(log, config_id=ids[0])[0]["epoch"].tolist() == [1.0, 2.0, 3.0]  # not replaced by the other's
    second = read_log(log, config_id=ids[1])
    assert list(second) == [0] and second[0]["epoch"].tolist() == [3.0]
    assert second[0]["val_acc"][0] == [r for r in lines if r.get("config_id") == ids[1] and "epoch" in r][0]["val_acc"]
    assert run_main(["plot", "curves", "--log", log, "--config-id", ids[1], "--out", png]) == 0
    assert capsys.readouterr().out == f"wrote {png}\n" and png.read_bytes()[:4] == b"\x89PNG"


# --- small graphs: the split's sizes are printed, and a shrunk one says so --------------------------


NOTE = ("note: --val 500 --test 1000 do not fit the 200 labelled nodes outside the train set (val takes at most "
        "a third of them); using --val 66 --test 134 (give --val/--test to choose)")


def test_small_graph_prints_its_split_sizes_and_why_they_are_smaller(capsys):
    small = ["train", "--dataset", "synthetic", "--nodes", "300", "--epochs", "3", "--no-compile-cache"]
    assert run_main(small) == 0
    out = capsys.readouterr().out.splitlines()
    assert " | split public: train 100, val 66, test 134 | read and prepared in " in out[0]
    assert out[1] == NOTE
    # sizes that fit are used as given: no note
    assert run_main([*small, "--val", "40", "--test", "100"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert " | split public: train 100, val 40, test 100 | " in out[0] and not any(
        line.startswith("note:") for line in out)
    # random splits drawn after preparation say it too (and one seed is "1 seed")
    assert run_main([*small, "--split", "random", "--splits", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert " | split 2 random (seed 0..1): train 100, val 66, test 134 | " in out[0] and out[1] == NOTE
    assert "4 runs" not in " ".join(out) and "2 runs (1 seed x 2 split(s)) in one compiled program" in out


def test_info_says_the_split_was_shrunk(capsys):
    assert run_main(["info", "--dataset", "synthetic", "--nodes", "300"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "  split: train 100, val 66, test 134" in out and NOTE in out


# --- cosmetics -----------------------------------------------------------------------------------------


def test_sweep_of_one_run_reads_right_and_says_when_a_group_starts(tmp_path, capsys):
    out_csv = tmp_path / "grid.csv"
    assert run_main(["sweep", *TINY, "--csv", out_csv]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "sweep: 1 configuration x 1 seed x 1 split(s) = 1 run" in out
    start = out.index("group 1/1 (layers 2, adam, hidden 16): training 1 run")
    assert out[start + 1] == "group 1/1: 1 configuration x 1 run = 1 run; compiling its program ..."
    assert out[start + 2].startswith("Epoch   3 | runs training 0/1 | val mean ")  # the last epoch's line
    assert out[start + 3].startswith("group 1/1 (layers 2, adam, hidden 16): 1 runs in one program | compile ")
    assert out[start + 4].startswith("group 1/1 done in ")
    row, best = out[-2], out[-1]
    assert "±" not in row and "±" not in best  # one run has no spread
    assert re.fullmatch(r"\s+0\.01\s+0\.0005\s+0\.5\s+16\s+2\s+adam\s+1\s+\d\.\d{4}\s+\d\.\d{4}\s+3", row), row
    assert re.fullmatch(r"best: .* \(val \d\.\d{4}, test \d\.\d{4}\)", best), best
    table = list(csv.reader(io.StringIO(out_csv.read_text())))
    fields = dict(zip(table[0], table[1]))
    assert fields["epochs_mean"] == "3" and fields["val_acc_std"] == "0" and fields["test_acc_std"] == "0"
    for key in ("val_acc_mean", "test_acc_mean"):  # float32 results, no float64 noise
        assert re.fullmatch(r"0\.\d{1,6}|1|0", fields[key]), fields
    assert run_main(["sweep", *TINY, "--quiet"]) == 0
    assert "training 1 run" not in capsys.readouterr().out


def test_confusion_matrix_has_column_headers():
    from jaxgcn.cli.evaluate import describe
    from jaxgcn.io.metrics import classification

    m = classification(np.array([0, 1, 2, 2, 1]), np.array([0, 1, 2, 1, 1]), 3)
    lines = describe("test", ["red", "green", "Probabilistic_Methods"], m)
    at = lines.index("confusion matrix (rows: true class, columns: predicted):")
    assert lines[at + 1:] == [
        "                      red        green Probabilist…",
        "         red            1            0            0",
        "       green            0            2            0",
        "Probabilistic_Methods            0            1            1"]
    short = describe("test", ["a", "b", "c"], m)
    assert short[-4:] == ["                 a     b     c", "           a     1     0     0",
                          "           b     0     2     0", "           c     0     1     1"]


def test_predict_writes_the_csv_to_stdout_with_out_dash(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_main(["train", *TINY, "--quiet", "--save", tmp_path / "m"]) == 0
    capsys.readouterr()
    (tmp_path / "-").mkdir()  # a folder named "-" here is not where the CSV goes: it is not even looked at
    assert run_main(["predict", "--checkpoint", tmp_path / "m", *TINY[:8], "--out", "-"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0] == "node,label,prob_0,prob_1,prob_2" and len(lines) == 1 + 120
    assert all(re.fullmatch(r"\d+,[012](,[01]\.\d{6}){3}", line) for line in lines[1:])
    assert "wrote" not in captured.out and not any((tmp_path / "-").iterdir())


def test_no_overfitting_hint_after_a_few_epochs(capsys):
    # 6 train nodes, no regularization, edges ignoring the classes: memorized within 5 epochs
    args = ["train", "--dataset", "synthetic", "--nodes", "200", "--classes", "3", "--features", "32",
            "--train-per-class", "2", "--homophily", "0", "--hidden", "128", "--lr", "0.1", "--dropout", "0",
            "--weight-decay", "0", "--early-stopping", "none", "--no-compile-cache", "--quiet"]
    assert run_main([*args, "--epochs", "5"]) == 0
    assert "hint:" not in capsys.readouterr().out
    assert run_main([*args, "--epochs", "20"]) == 0
    hint = [line for line in capsys.readouterr().out.splitlines() if line.startswith("hint:")]
    assert len(hint) == 1 and hint[0].startswith("hint: train accuracy 1.000 but validation ")


def test_an_empty_log_or_a_resumed_run_needs_no_log_append(tmp_path):
    from argparse import Namespace

    from jaxgcn.cli.common import check_new_log

    log = tmp_path / "l.jsonl"
    log.write_text("\n")  # blank lines hold no run
    check_new_log(Namespace(log_append=False, resume=None), "--log", log, log)
    log.write_text('{"run": 0, "epoch": 1}\n')
    check_new_log(Namespace(log_append=False, resume=tmp_path / "ck"), "--log", log, log)  # continues its run
    check_new_log(Namespace(log_append=True, resume=None), "--log", log, log)
    with pytest.raises(ValueError, match=r"l\.jsonl: already holds 1 line of another run"):
        check_new_log(Namespace(log_append=False, resume=None), "--log", log, log)


LOG = ('{"config_id": "0a1b2c3d", "settings": {"lr": 0.01, "hidden": [16]}}\n'
       '{"run": 0, "seed": 0, "epoch": 1, "loss": 1.09, "train_acc": 0.4, "val_loss": null, "val_acc": 0.3, '
       '"elapsed": 0.1, "config_id": "0a1b2c3d"}\n'
       '{"run": 0, "seed": 0, "stopped_early_at": 1}\n')


@pytest.mark.parametrize("content, line, problem", [
    ("epoch,loss\n1,0.5\n", 1, "Expecting value: line 1 column 1 (char 0)"),  # a CSV
    ('{"name": "results"}\n', 1, "no run number"),  # another program's JSON lines
    ("[1, 2]\n", 1, "not a JSON object"),
    (LOG + '{"run": 0, "epoch": "2"}\n', 4, "no epoch"),
    (LOG + '{"run": 0, "epoch": 2, "loss": "low"}\n', 4, "loss not a number"),
    (LOG + '{"run": true, "epoch": 2}\n', 4, "no run number"),
    ('{"settings": {}}\n', 1, "settings without a config_id"),
    ('{"run": 0, "stopped_early_at": 1.5}\n', 1, "stopped_early_at is not an epoch"),
    ('{"run": 0, "epoch": 1, "x": ' + "[" * 33 + "]" * 33 + "}\n", 1, "nested deeper than 32 levels"),
    ("\n\xe9t\xe9\n", 2, "not UTF-8 text"),
])
def test_log_append_adds_only_to_a_jaxgcn_log(tmp_path, capsys, content, line, problem):
    log = tmp_path / "notes.txt"
    log.write_bytes(content.encode("latin-1" if "not UTF-8" in problem else "utf-8"))
    before = log.read_bytes()
    assert run_main(["train", *TINY, "--quiet", "--log", log, "--log-append"]) == 2
    err = one_line(capsys.readouterr().err)
    assert err.startswith(f"jaxgcn: error: --log {log}, line {line}: not a jaxgcn --log line ({problem}: "), err
    assert err.endswith("only a log that `jaxgcn train --log` wrote is added to: give a new path for this run's log")
    assert log.read_bytes() == before


def test_log_append_accepts_every_kind_of_log_line(tmp_path):
    from jaxgcn.io.progress import check_log

    log = tmp_path / "l.jsonl"
    log.write_text(LOG + "\n" + '{"run": 1, "epoch": 2, "loss": 1, "val_acc": null}\n')  # older lines: no config_id
    check_log(log, "--log")
    check_log(tmp_path / "none.jsonl", "--log")  # a new file


def test_a_logs_config_id_names_what_trains_not_how_it_is_shown_or_joined():
    from jaxgcn.cli import build_parser
    from jaxgcn.cli.records import parse_args
    from jaxgcn.cli.train import log_settings
    from jaxgcn.io.progress import config_id

    def tag(*flags: str) -> str:
        return config_id(log_settings(parse_args(build_parser(), ["train", *TINY, *flags])))

    plain = tag()
    # how the run is shown, computed or how long a process waits for its peers: the same model
    for flags in (["--verbose"], ["--log-every", "5"], ["--join-timeout", "5"], ["--backend", "dense"]):
        assert tag(*flags) == plain, flags
    assert tag("--lr", "0.05") != plain and tag("--seed", "3") != plain
