"""Saved state and records that must not be silently wrong (issue 58): a sweep's finished group is
tied to its group (results moved under another group's key are refused, not reported as that
group's); ``--resume DIR`` writes the interrupted command's ``--json`` (and sweep's ``--csv``) at
its end, saying so; and a run's record, checkpoint and ``--log`` settings name only the data
options that applied to its data."""

from __future__ import annotations

import json
import shutil

import pytest
from cli_run import interrupt_after_groups, Killed, refused, run_main, unwrap

from jaxgcn.cli import build_parser, records
from jaxgcn.cli.records import parse_args
from jaxgcn.store import batch_state

# two groups of two runs each (hidden 8 at runs 0-1, hidden 16 at runs 2-3): one group's results fit
# under the other's key
SWEEP = ["sweep", "--dataset", "synthetic", "--nodes", "60", "--classes", "3", "--features", "6", "--train-per-class",
         "5", "--val", "15", "--test", "30", "--hidden", "8,16", "--seeds", "2",
         "--epochs", "3", "--early-stopping", "none", "--no-compile-cache"]
G8 = {"hidden": 8, "layers": 2, "optimizer": "adam"}
G16 = {"hidden": 16, "layers": 2, "optimizer": "adam"}
pytestmark = pytest.mark.usefixtures("cpu_slices")




def state(directory) -> dict:
    return json.loads((directory / batch_state.FOLDER / batch_state.MANIFEST).read_text())


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A sweep (with --json and --csv) interrupted right after its first group: its folder."""
    d = tmp_path_factory.mktemp("sweep")
    with pytest.MonkeyPatch.context() as m:
        interrupt_after_groups(m)
        assert run_main([*SWEEP, "--save", d / "a", "--json", d / "a.json", "--csv", d / "a.csv", "--quiet"]) == 130
    return d



@pytest.mark.parametrize("edit, holds", [
    (lambda s: s["done"].update({"2": s["done"].pop("0")}), "no recorded group"),
    (lambda s: (s["done"].update({"2": s["done"].pop("0")}), s["done_groups"].update({"2": s["done_groups"].pop("0")})),
     "hidden 8, layers 2, optimizer adam"),
], ids=["results_only", "results_and_group"])
def test_a_finished_groups_results_under_another_groups_key_are_refused(interrupted, tmp_path, capsys, edit, holds):
    ck = tmp_path / "ck"
    shutil.copytree(interrupted / "a", ck)
    saved = state(ck)
    assert saved["done_groups"] == {"0": G8} and list(saved["done"]) == ["0"]
    edit(saved)
    path = ck / batch_state.FOLDER / batch_state.MANIFEST
    path.write_text(json.dumps(saved))
    err = refused(["sweep", "--resume", ck], capsys)
    assert f"--resume {path}: done group 2 holds the results of {holds}, but the sweep's group at run 2 is hidden " \
           "16, layers 2, optimizer adam; it was edited or not written by this jaxgcn" in err


def test_done_groups_of_another_shape_are_refused(interrupted, tmp_path, capsys):
    ck = tmp_path / "ck"
    shutil.copytree(interrupted / "a", ck)
    saved = state(ck)
    saved["done_groups"]["0"] = [8, 2, "adam"]
    (ck / batch_state.FOLDER / batch_state.MANIFEST).write_text(json.dumps(saved))
    err = refused(["sweep", "--resume", ck], capsys)
    assert "its done_groups (which group each finished group's results are) is not a table" in err


def test_a_resumed_sweep_keeps_each_groups_key_and_writes_its_json_and_csv(interrupted, tmp_path, capsys):
    d = interrupted
    ck = tmp_path / "a"
    shutil.copytree(d / "a", ck)
    with pytest.MonkeyPatch.context() as m:  # resumed in its folder and in another, each stopped at its end
        interrupt_after_groups(m)
        assert run_main(["sweep", "--resume", ck, "--quiet"]) == 130
        assert run_main(["sweep", "--resume", d / "a", "--save", tmp_path / "b", "--quiet"]) == 130
    assert state(ck)["done_groups"] == state(tmp_path / "b")["done_groups"] == {"0": G8, "2": G16}
    assert not (d / "a.json").exists() and not (d / "a.csv").exists()  # a stopped sweep writes no results
    capsys.readouterr()
    assert run_main(["sweep", "--resume", ck]) == 0  # --json and --csv restored from the interrupted sweep
    out = capsys.readouterr().out
    assert f"--json {d / 'a.json'}: the resumed sweep writes it at its end" in out
    assert f"--csv {d / 'a.csv'}: the resumed sweep writes it at its end" in out
    report = json.loads((d / "a.json").read_text())
    assert report["configurations"] == json.loads((ck / "sweep.json").read_text())["configurations"]
    assert (d / "a.csv").read_bytes() == (ck / "sweep.csv").read_bytes()


# --- train --resume: the interrupted run's --json ------------------------------------------------

TRAIN = ["train", "--dataset", "synthetic", "--nodes", "60", "--classes", "3", "--features", "6", "--train-per-class",
         "5", "--val", "15", "--test", "30", "--epochs", "20",
         "--early-stopping", "none", "--no-compile-cache", "--quiet"]
TIMES = ("record", "compile_seconds", "train_seconds")  # what differs between two runs by construction


def results(path) -> dict:
    return {k: v for k, v in json.loads(path.read_text()).items() if k not in TIMES}


def test_train_resume_writes_the_interrupted_runs_json_equal_to_the_uninterrupted_one(tmp_path, monkeypatch,
                                                                                       capsys):
    assert run_main([*TRAIN, "--json", tmp_path / "full.json"]) == 0
    real = batch_state.Saver.__call__

    def save_then_kill(self, first, run_state):
        real(self, first, run_state)
        if int(run_state.epoch) == 10:
            raise Killed("killed")
    with monkeypatch.context() as m:
        m.setattr(batch_state.Saver, "__call__", save_then_kill)
        assert run_main([*TRAIN, "--json", tmp_path / "r.json", "--save", tmp_path / "ck", "--checkpoint-every",
                         "5"]) == "killed"
    assert not (tmp_path / "r.json").exists()
    other = parse_args(build_parser(), ["train", "--resume", str(tmp_path / "ck"), "--json", str(tmp_path / "o.json")])
    assert other.json == tmp_path / "o.json"  # another path given takes the results instead
    capsys.readouterr()
    assert run_main(["train", "--resume", tmp_path / "ck"]) == 0
    assert f"--json {tmp_path / 'r.json'}: the resumed train writes it at its end" in capsys.readouterr().out
    assert results(tmp_path / "r.json") == results(tmp_path / "full.json")
    assert results(tmp_path / "r.json")["epochs_run"] == [20]


# --- records name the options that applied to the run's data --------------------------------------

OTHER_SOURCES = {"files": ("dataset", "data_dir", "ogb_split", "nodes", "classes", "avg_degree", "homophily", "split"),
                 "synthetic": ("edges", "labels", "data_dir", "ogb_split"),
                 "named": ("edges", "labels", "features", "nodes", "classes", "avg_degree", "homophily")}


def parsed_options(*argv) -> dict:
    return records.options(parse_args(build_parser(), ["train", *map(str, argv)]))


@pytest.mark.parametrize("argv, source, kept", [
    (["--edges", "e.csv", "--labels", "l.csv"], "files", {"edges": "e.csv", "labels": "l.csv", "features": None}),
    (["--dataset", "synthetic", "--nodes", "60"], "synthetic",
     {"dataset": "synthetic", "nodes": 60, "split": "public"}),
    (["--dataset", "cora"], "named", {"dataset": "cora", "split": "public", "data_dir": None}),
    (["--dataset", "citeseer", "--split", "random"], "named", {"dataset": "citeseer", "split": "random"}),
], ids=["files", "synthetic", "cora", "random_split"])
def test_options_name_only_the_data_options_of_the_runs_source(argv, source, kept):
    options = parsed_options(*argv)
    assert not set(OTHER_SOURCES[source]) & set(options)
    assert {k: options[k] for k in kept} == kept and options["epochs"] == 200


def test_a_split_file_or_fractions_drop_the_split_protocol():
    assert "split" not in parsed_options("--dataset", "cora", "--split-file", "s.csv")
    assert "split" not in parsed_options("--dataset", "cora", "--train-frac", "0.5")


@pytest.fixture(scope="module")
def own_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("files")
    n = 40
    (d / "e.csv").write_text("src,dst\n" + "".join(f"{i},{(i + 1) % n}\n{i},{(i + 3) % n}\n" for i in range(n)))
    (d / "l.csv").write_text("node,label\n" + "".join(f"{i},{i % 2}\n" for i in range(n)))
    return d


def test_an_own_files_run_records_its_files_not_another_sources_defaults(own_files, tmp_path, capsys):
    d = own_files
    own = ["train", "--edges", d / "e.csv", "--labels", d / "l.csv", "--train-per-class", "4", "--val", "8", "--test",
           "16", "--epochs", "10", "--no-compile-cache", "--quiet"]
    assert run_main([*own, "--json", tmp_path / "r.json", "--log", tmp_path / "r.log", "--save", tmp_path / "ck",
                     "--checkpoint-every", "5"]) == 0
    record = json.loads((tmp_path / "r.json").read_text())["record"]["options"]
    settings = json.loads((tmp_path / "r.log").read_text().splitlines()[0])["settings"]
    saved = json.loads((tmp_path / "ck" / "checkpoint.json").read_text())["extra"]["options"]
    for options in (record, settings, saved):
        assert not set(OTHER_SOURCES["files"]) & set(options), sorted(options)
        assert (options["edges"], options["labels"], options["train_per_class"]) == (str(d / "e.csv"),
                                                                                       str(d / "l.csv"), 4)
    # a run on other data is refused the folder of this model, whose options name no --dataset
    capsys.readouterr()
    assert run_main(["train", "--dataset", "synthetic", "--epochs", "1", "--save", tmp_path / "ck"]) == 2
    assert f"--save {tmp_path / 'ck'}: holds the model of another run, trained with --edges {d / 'e.csv'}" in \
        unwrap(capsys.readouterr().err)
    # the record re-runs the same run on the same files
    assert run_main(["train", "--from-record", tmp_path / "r.json", "--json", tmp_path / "b.json", "--quiet"]) == 0
    assert results(tmp_path / "b.json") == results(tmp_path / "r.json")


def test_an_older_own_files_record_with_every_default_still_re_runs_on_its_files(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"record": {"command": "train", "options": {
        "edges": "e.csv", "labels": "l.csv", "dataset": "cora", "split": "public", "nodes": 2000, "classes": 5,
        "epochs": 30}}}))
    args = parse_args(build_parser(), ["train", "--from-record", str(old)])
    assert (str(args.edges), str(args.labels), args.epochs, args.dataset_origin) == ("e.csv", "l.csv", 30, None)
