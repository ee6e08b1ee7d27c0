"""`jaxgcn plot` on the inputs an outside tester gave it (issue 58): a multi-label model's embeddings
coloured by one label the user names (or refused, naming --label), a --log line whose run, epoch or
early stop is Infinity, a --json report given as a --log, and sweep files of the wrong shape: each a
one-line error naming the file and what is expected, never a traceback."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from cli_run import run_main, unwrap
from tiny_datasets import write_multilabel_npz

from jaxgcn.io import plots

# --- embeddings of a multi-label model ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def multilabel_model(tmp_path_factory):
    """A 2-epoch multi-label model of write_multilabel_npz's graph (labels.npy [400, 4] int8, -1 missing)."""
    tmp = tmp_path_factory.mktemp("ml")
    root = write_multilabel_npz(tmp / "data")
    assert run_main(["train", "--dataset", f"npz:{root}", "--epochs", "2", "--save", tmp / "model",
                     "--no-compile-cache", "--quiet"]) == 0
    return root, tmp / "model"


def test_label_classes_are_has_it_has_it_not_and_missing():
    targets = np.array([[1, 0, np.nan], [0, np.nan, 1], [np.nan, 1, 1], [1, 1, 0]], np.float32)
    classes, names = plots.label_classes(targets, "jazz", ["rock", "pop", "jazz"])
    assert classes.tolist() == [-1, 1, 1, 0] and names == ["not jazz", "jazz"]
    assert plots.label_classes(targets, "1", ["rock", "pop", "jazz"])[0].tolist() == [0, -1, 1, 1]  # a column
    assert plots.label_classes(targets, 0, None)[0].tolist() == [1, 0, -1, 1]
    # a label named like a column is taken by its name
    assert plots.label_classes(targets, "2", ["2", "7", "10"])[0].tolist() == [1, 0, -1, 1]
    with pytest.raises(ValueError, match=r"^label='3' is not a label of the model; give one of its 3 label names "
                                         r"\(rock, pop, jazz\) or a column from 0 to 2$"):
        plots.label_classes(targets, "3", ["rock", "pop", "jazz"])


def test_the_library_refuses_multilabel_targets_without_a_label(tmp_path):
    with pytest.raises(ValueError, match=r"^labels: 3 labels per node \(a multi-label task\) give no one class .* "
                                         r"pass label=NAME_OR_INDEX"):
        plots.embeddings(np.zeros((4, 2)), np.zeros((4, 3)), tmp_path / "e.png")
    with pytest.raises(ValueError, match=r"^label='x' picks one label of multi-label targets"):
        plots.embeddings(np.zeros((4, 2)), np.zeros(4, np.int32), tmp_path / "e.png", label="x")
    assert not (tmp_path / "e.png").exists()


def test_plot_embeddings_of_a_multilabel_model_names_the_flag_to_use(multilabel_model, tmp_path, capsys):
    root, model = multilabel_model
    args = ["plot", "embeddings", "--checkpoint", model, "--dataset", f"npz:{root}", "--out", tmp_path / "e.png"]
    assert run_main(args) == 2
    err = unwrap(capsys.readouterr().err)
    assert err == (f"jaxgcn: error: checkpoint {model}: a multi-label model (4 labels: 0, 1, 2, 3) has no one class "
                   "to colour each node by; colour by one label with --label NAME_OR_INDEX (e.g. --label 0)\n")
    assert run_main([*args, "--label", "4"]) == 2
    assert "--label: label='4' is not a label of the model; give one of its 4 label names (0, 1, 2, 3) or a " \
           "column from 0 to 3" in unwrap(capsys.readouterr().err)
    assert not (tmp_path / "e.png").exists()


def test_plot_embeddings_colours_a_multilabel_model_by_the_label_named(multilabel_model, tmp_path, capsys,
                                                                        monkeypatch):
    root, model = multilabel_model
    y = np.load(root / "labels.npy")
    drawn = {}
    draw = plots.embeddings

    def spy(h, labels, out, **kw):
        drawn.update(labels=np.asarray(labels), **kw)
        return draw(h, labels, out, **kw)

    monkeypatch.setattr(plots, "embeddings", spy)
    out = tmp_path / "e.png"
    assert run_main(["plot", "embeddings", "--checkpoint", model, "--dataset", f"npz:{root}", "--out", out,
                     "--label", "2"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote {out}"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    counts = {c: int((drawn["labels"] == c).sum()) for c in (-1, 0, 1)}
    assert counts == {-1: int((y[:, 2] == -1).sum()), 0: int((y[:, 2] == 0).sum()), 1: int((y[:, 2] == 1).sum())}
    assert counts[-1] == 45 and drawn["class_names"] == ["not 2", "2"] and drawn["title"].endswith(
        ", coloured by label 2")


# --- curves ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("line, field, value", [
    ('{"run": Infinity, "epoch": 2, "loss": 1.0}', "run", "Infinity"),
    ('{"run": 0, "epoch": Infinity, "loss": 1.0}', "epoch", "Infinity"),
    ('{"run": 0, "epoch": -Infinity, "loss": 1.0}', "epoch", "-Infinity"),
    ('{"run": 0, "stopped_early_at": Infinity}', "stopped_early_at", "Infinity"),
    ('{"run": 0, "epoch": 2.5, "loss": 1.0}', "epoch", "2.5"),
    ('{"run": 0, "epoch": 2, "loss": "low"}', "loss", '"low"'),
])
def test_plot_curves_names_a_field_that_is_no_whole_number(tmp_path, capsys, line, field, value):
    log = tmp_path / "x.jsonl"
    log.write_text('{"run": 0, "epoch": 1, "loss": 1.0}\n' + line + "\n")
    assert run_main(["plot", "curves", "--log", log, "--out", tmp_path / "c.png"]) == 2
    kind = "a number" if field == "loss" else "a whole number"
    assert unwrap(capsys.readouterr().err) == (
        f"jaxgcn: error: {log}, line 2: field {field!r} is {value}, not {kind}; give the JSON-lines file that "
        "`jaxgcn train --log x.jsonl` writes\n")
    assert not (tmp_path / "c.png").exists()


def test_plot_curves_of_a_json_report_points_to_train_log(tmp_path, capsys):
    report = tmp_path / "results.json"
    report.write_text(json.dumps({"test_acc": [0.81], "epochs": [200]}, indent=2) + "\n")  # as --json writes it
    assert run_main(["plot", "curves", "--log", report, "--out", tmp_path / "c.png"]) == 2
    err = unwrap(capsys.readouterr().err)
    assert err == (f"jaxgcn: error: {report}: one JSON document (a report, such as `jaxgcn train --json` writes), "
                   "not a training log of one JSON line per epoch; give the JSON-lines file that `jaxgcn train --log "
                   "results.json` writes\n")
    assert "Progress(" not in err
    (tmp_path / "empty.jsonl").write_text("\n")
    assert run_main(["plot", "curves", "--log", tmp_path / "empty.jsonl", "--out", tmp_path / "c.png"]) == 2
    assert unwrap(capsys.readouterr().err).endswith(": no records; train with `jaxgcn train --log empty.jsonl` first\n")


def test_whole_float_epochs_are_read_as_before(tmp_path):
    log = tmp_path / "x.jsonl"
    log.write_text('{"run": 0, "epoch": 1.0, "loss": 1.0, "val_acc": null}\n{"run": 0, "epoch": 2, "loss": 0.5}\n'
                   '{"run": 0, "stopped_early_at": 2}\n')
    runs = plots.read_log(log)
    assert runs[0]["epoch"].tolist() == [1.0, 2.0] and runs[0]["stopped_early_at"].tolist() == [2]
    assert np.isnan(runs[0]["val_acc"]).all()


# --- sweep files ------------------------------------------------------------------------------------------------

EXPECTED = ('expected a file written by `jaxgcn sweep --json`: a JSON object whose "configurations" is a list of '
            'objects, one per configuration')
CONFIG = {"lr": 0.01, "hidden": 16, "dropout": 0.5, "val_acc_mean": 0.7}


@pytest.mark.parametrize("text, why", [
    ("[" * 100_000 + "]" * 100_000, "JSON nested deeper than 32 levels; " + EXPECTED),
    ('{"configurations": ' + "[" * 40 + "]" * 40 + "}", "JSON nested deeper than 32 levels; " + EXPECTED),
    ("[1, 2]", "holds a list; " + EXPECTED),
    ('"configurations"', "holds a string; " + EXPECTED),
    ('{"runs": []}', 'holds an object without "configurations"; ' + EXPECTED),
    ('{"configurations": 5}', '"configurations" is a number (5); ' + EXPECTED),
    ('{"configurations": {"lr": 1}}', '"configurations" is an object ({"lr": 1}); ' + EXPECTED),
    ('{"configurations": []}', "the sweep has no configurations"),
    ('{"configurations": [5]}', "configuration 1 is 5, not an object of hyperparameters and val_acc_mean"),
    (json.dumps({"configurations": [CONFIG, {**CONFIG, "val_acc_mean": "high"}]}),
     'configuration 2: val_acc_mean is "high", not a number'),
    (json.dumps({"configurations": [CONFIG, {"lr": 0.05, "hidden": 16, "val_acc_mean": 0.7}]}),
     "configuration 2 lacks dropout; every configuration of a sweep --json file names its hyperparameters (lr, "
     "dropout, hidden) and val_acc_mean"),
    (json.dumps({"configurations": [CONFIG, {**CONFIG, "lr": "0.05"}]}),
     'configuration 2: lr is "0.05", not a number or a name as a sweep writes it; configuration 1 gives a number'),
    (json.dumps({"configurations": [CONFIG, {**CONFIG, "hidden": [16]}]}),
     "configuration 2: hidden is [16], not a number or a name as a sweep writes it"),
    ("{", "not JSON (line 1, column 2: Expecting property name enclosed in double quotes); " + EXPECTED),
])
def test_plot_sweep_names_a_file_of_the_wrong_shape(tmp_path, capsys, text, why):
    sweep = tmp_path / "sweep.json"
    sweep.write_text(text)
    assert run_main(["plot", "sweep", "--sweep-json", sweep, "--out", tmp_path / "s.png"]) == 2
    err = unwrap(capsys.readouterr().err)
    assert err == f"jaxgcn: error: --sweep-json {sweep}: {why}\n"
    assert not (tmp_path / "s.png").exists()


def test_a_configuration_without_a_score_is_an_empty_cell(tmp_path, capsys):
    configurations = [{**CONFIG, "lr": lr, "hidden": h, "dropout": d,  # the cell's scored configuration first
                       "val_acc_mean": None if (lr, h, d) == (0.05, 32, 0.5) else 0.5}
                      for lr in (0.01, 0.05) for h in (16, 32) for d in (0.3, 0.5)]
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps({"configurations": configurations}))
    assert run_main(["plot", "sweep", "--sweep-json", sweep, "--out", tmp_path / "s.png"]) == 0
    assert re.search(r"^wrote .*s\.png$", capsys.readouterr().out, re.M)
