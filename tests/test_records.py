"""Run records (``--json``'s "record"), ``--from-record`` re-runs, ``--config`` files and the devices
``info`` lists (docs/reproducibility.md)."""

from __future__ import annotations

import json
import re

import jax
import pytest

from jaxgcn.host import machine
from jaxgcn.io import reports
from jaxgcn.cli import build_parser
from jaxgcn.cli.records import parse_args
from cli_run import run_main, unwrap

CORA = ["train", "--dataset", "cora", "--epochs", "30", "--seeds", "2", "--quiet", "--no-compile-cache"]
NOT_COMPARED = ("argv", "json")  # what differs between a run and its re-run by construction


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A two-seed Cora run's --json report (the record under test)."""
    path = tmp_path_factory.mktemp("record") / "a.json"
    assert run_main([*CORA, "--json", path]) == 0
    return path


def _rerun(tmp_path, capsys, record: dict, *extra: str) -> tuple[dict, list[str]]:
    source = tmp_path / "r.json"
    source.write_text(json.dumps(record))
    capsys.readouterr()
    assert run_main(["train", "--from-record", source, "--json", tmp_path / "b.json", *extra]) == 0
    return json.loads((tmp_path / "b.json").read_text()), capsys.readouterr().out.splitlines()


def test_record_holds_versions_devices_command_and_fingerprint(recorded):
    report = json.loads(recorded.read_text())
    record = report["record"]
    assert record["command"] == "train" and record["argv"][1:] == [*map(str, CORA), "--json", str(recorded)]
    assert set(record["versions"]) == {"jaxgcn", "jax", "jaxlib", "numpy", "scipy", "optax", "python"}
    assert record["versions"]["jax"] == jax.__version__
    assert record["devices"]["count"] == len(jax.devices())
    assert record["machine"] == machine.report()  # the CPU facts and kernel settings it ran with (issue 26)
    assert [d["platform"] for d in record["devices"]["devices"]] == [d.platform for d in jax.devices()]
    assert record["platform"]["machine"] and record["platform"]["platform"]
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00$", record["date"])
    assert set(record["data_sha256"]) == {"features", "labels", "graph", "split"}
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in record["data_sha256"].values())
    options = record["options"]
    assert options["epochs"] == 30 and options["seeds"] == 2 and options["lr"] == 0.01
    assert options["dataset"] == "cora" and options["json"] == str(recorded) and options["no_compile_cache"] is True
    assert "from_record" not in options and "func" not in options
    assert len(report["test_acc"]) == 2  # the existing keys stay


def test_from_record_reruns_the_same_configuration(recorded, tmp_path, capsys):
    a = json.loads(recorded.read_text())
    b, out = _rerun(tmp_path, capsys, a)
    assert b["test_acc"] == a["test_acc"] and b["epochs_run"] == a["epochs_run"]
    same = {k: v for k, v in a["record"]["options"].items() if k not in NOT_COMPARED}
    assert {k: v for k, v in b["record"]["options"].items() if k not in NOT_COMPARED} == same
    assert b["record"]["data_sha256"] == a["record"]["data_sha256"]
    assert out[-1] == f"record {tmp_path / 'r.json'}: versions match; data matches"


def test_a_record_naming_a_package_that_was_not_installed_reruns(recorded, tmp_path, capsys, monkeypatch):
    """``versions`` records None for a package that is not installed (jaxgcn itself, run from a
    source tree on the path): the record jaxgcn wrote re-runs, and the line names the difference
    (with jaxgcn installed here, whether or not this checkout is)."""
    installed = reports.versions
    monkeypatch.setattr(reports, "versions", lambda: {**installed(), "jaxgcn": "0.1.0"})
    a = json.loads(recorded.read_text())
    a["record"]["versions"]["jaxgcn"] = None
    b, out = _rerun(tmp_path, capsys, a)
    assert b["test_acc"] == a["test_acc"]
    assert b["record"]["versions"]["jaxgcn"] == "0.1.0"
    assert out[-1] == f"record {tmp_path / 'r.json'}: versions differ: jaxgcn None recorded, 0.1.0 here; data matches"


def test_from_record_names_a_version_and_a_data_mismatch(recorded, tmp_path, capsys):
    a = json.loads(recorded.read_text())
    a["record"]["versions"]["jax"] = "0.0.1"
    a["record"]["data_sha256"]["graph"] = "0" * 64
    b, out = _rerun(tmp_path, capsys, a, "--epochs", "3")  # a flag given on the command line wins
    assert b["epochs_run"] == [3, 3] and b["record"]["options"]["seeds"] == 2
    assert out[-1] == (f"record {tmp_path / 'r.json'}: versions differ: jax 0.0.1 recorded, {jax.__version__} here; "
                       "data differs: graph (SHA-256 of the prepared arrays)")


def test_record_differences_names_versions_data_and_devices():
    cpu = {"count": 1, "devices": [{"platform": "cpu", "kind": "cpu", "name": "cpu:0"}]}
    gpu = {"count": 1, "devices": [{"platform": "gpu", "kind": "NVIDIA H200", "name": "cuda:0"}]}
    a = {"versions": {"jax": "0.10.2", "numpy": "2.0"}, "data_sha256": {"graph": "1", "labels": "2"}, "devices": cpu}
    assert reports.record_differences(a, a) == {"versions": [], "data": [], "devices": []}
    b = {"versions": {"jax": "0.10.3", "numpy": "2.0"}, "data_sha256": {"graph": "1", "labels": "3"}, "devices": gpu}
    assert reports.record_differences(a, b) == {
        "versions": ["jax 0.10.2 recorded, 0.10.3 here"], "data": ["labels"],
        "devices": ["1 x cpu (cpu:0) recorded, 1 x gpu (NVIDIA H200) here"]}
    assert reports.record_differences({**a, "data_sha256": None}, a)["data"] == ["no fingerprint recorded"]


FLAGS = ["--dataset", "citeseer", "--seeds", "10", "--lr", "0.05", "--weight-decay", "0.001", "--bias",
         "--early-stopping", "none"]
TOML = 'dataset = "citeseer"\nseeds = 10\nlr = 0.05\nweight-decay = 1e-3\nbias = true\nearly_stopping = "none"\n'
JSON = {"dataset": "citeseer", "seeds": 10, "lr": 0.05, "weight_decay": 0.001, "bias": True, "early-stopping": "none"}


def _parsed(argv: list) -> dict:
    args = vars(parse_args(build_parser(), [str(a) for a in argv]))
    return {k: v for k, v in args.items() if k not in ("argv", "config", "func", "setup", "dataset_origin")}


@pytest.mark.parametrize("suffix", ["toml", "json"])
def test_config_file_equals_the_flags(tmp_path, suffix):
    config = tmp_path / f"c.{suffix}"
    config.write_text(TOML if suffix == "toml" else json.dumps(JSON))
    assert _parsed(["train", "--config", config]) == _parsed(["train", *FLAGS])
    given = _parsed(["train", "--config", config, "--seeds", "3"])  # flags win
    assert given["seeds"] == 3 and given["lr"] == 0.05


def test_sweep_config_takes_lists(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("hidden = [16, 32]\nlr = [0.01, 0.05]\n")
    assert _parsed(["sweep", "--config", config]) == _parsed(["sweep", "--hidden", "16,32", "--lr", "0.01,0.05"])


@pytest.mark.parametrize("text, message", [
    ("weight_decy = 1e-3\n", r"--config \S+c\.toml: unknown option 'weight_decy' for `jaxgcn train`; "
                             r"did you mean weight-decay\?"),
    ("seeds = 0\n", r"--config \S+c\.toml: seeds = 0: invalid --seeds value \(0 is not a positive integer\)"),
    ("optimizer = \"adamm\"\n", r"--config \S+c\.toml: optimizer = 'adamm': --optimizer takes one of adam, "),
    ("bias = 1\n", r"--config \S+c\.toml: bias = 1: --bias is a switch; give true or false"),
    ("lr = \n", r"--config \S+c\.toml: not valid TOML"),
    ("lr = [[0.01]]\n", r"--config \S+c\.toml: lr = \[\[0\.01\]\]: --lr takes a value such as '0\.01'"),
    ("a = " + "[" * 5000 + "]" * 5000 + "\n", r"--config \S+c\.toml: nested deeper than Python's recursion limit"),
])
def test_bad_config_is_refused(tmp_path, capsys, text, message):
    config = tmp_path / "c.toml"
    config.write_text(text)
    with pytest.raises(ValueError, match=message):
        parse_args(build_parser(), ["train", "--config", str(config)])
    assert run_main(["train", "--config", config]) == 2
    assert re.search(message, unwrap(capsys.readouterr().err))


def test_bad_record_is_refused(tmp_path, recorded):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"test_acc": [0.8]}))
    with pytest.raises(ValueError, match=r"--from-record \S+other\.json: holds no \"record\" with \"options\""):
        parse_args(build_parser(), ["train", "--from-record", str(other)])
    with pytest.raises(ValueError, match=r"--from-record \S+a\.json: records a `jaxgcn train` run; re-run it with "
                                         r"`jaxgcn train --from-record"):
        parse_args(build_parser(), ["sweep", "--from-record", str(recorded)])
    with pytest.raises(ValueError, match=r"--config \S+c\.yaml: unknown suffix '\.yaml'"):
        parse_args(build_parser(), ["train", "--config", str(tmp_path / "c.yaml")])


@pytest.mark.parametrize("edit, message", [
    (lambda r: r.update(versions=["jax"]), r"its \"record\" has a 'versions' of the wrong type \(list\)"),
    (lambda r: r.update(data_sha256=5), r"its \"record\" has a 'data_sha256' of the wrong type \(int\)"),
    (lambda r: r.update(devices={"devices": [1]}), r"its \"record\" has a 'devices' of the wrong type \(dict\)"),
    (lambda r: r.update(command=3), r"its \"record\" has a 'command' of the wrong type \(int\)"),
    (lambda r: r["options"].update(lr=None), r"lr = null: --lr needs a value such as '0\.01' \(leave the key out"),
    (lambda r: r["options"].update(hidden=[[16]]), r"hidden = \[\[16\]\]: --hidden takes a value such as '16'"),
])
def test_a_record_of_the_wrong_shape_is_refused_in_one_line(tmp_path, recorded, capsys, edit, message):
    # issue 25: these were tracebacks (a record's versions, fingerprint or devices of another type, null)
    report = json.loads(recorded.read_text())
    edit(report["record"])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(report))
    assert run_main(["train", "--from-record", bad]) == 2
    err = unwrap(capsys.readouterr().err)
    assert len(err.strip().splitlines()) == 1 and re.search(message, err), err


def test_a_deeply_nested_json_file_is_refused_in_one_line(tmp_path, capsys):
    for flag, name in (("--config", "c.json"), ("--from-record", "r.json")):
        deep = tmp_path / name
        deep.write_text("[" * 100_000 + "]" * 100_000)
        assert run_main(["train", flag, deep]) == 2
        err = unwrap(capsys.readouterr().err)
        assert len(err.strip().splitlines()) == 1 and "nested deeper than Python's recursion limit" in err, err


def test_info_lists_devices(tmp_path, capsys):
    assert run_main(["info", "--dataset", "cora", "--json", tmp_path / "i.json"]) == 0
    *_, facts, line = capsys.readouterr().out.splitlines()
    platform = jax.devices()[0].platform
    assert re.fullmatch(rf"devices: {len(jax.devices())} x {platform} \(.+\)", line), line
    assert facts == machine.describe() and facts.startswith("machine: ")  # the CPU and the kernel settings
    stats = json.loads((tmp_path / "i.json").read_text())
    assert stats["machine"] == machine.report()
    devices = stats["devices"]
    assert devices["count"] == len(jax.devices()) and devices["devices"][0]["platform"] == platform


def test_a_named_dataset_and_own_files_together_are_refused(tmp_path, recorded, capsys):
    # issue 25: --dataset citeseer with --edges/--labels trained silently on the files, also when
    # --from-record or --config set one and the command line the other
    edges, labels = tmp_path / "e.csv", tmp_path / "l.csv"
    edges.write_text("src,dst\na,b\n")
    labels.write_text("node,label\na,0\nb,1\n")
    own = ["--edges", edges, "--labels", labels]
    config = tmp_path / "c.toml"
    config.write_text('dataset = "citeseer"\n')
    for argv, chosen in ((["--dataset", "citeseer", *own], "--dataset citeseer"),
                         (["--dataset=citeseer", *own], "--dataset citeseer"),  # argparse's other spelling
                         (["--config", config, *own], rf"--config {re.escape(str(config))} \(citeseer\)"),
                         (["--from-record", recorded, *own], rf"--from-record {re.escape(str(recorded))} \(cora\)")):
        assert run_main(["train", *argv, "--epochs", "1"]) == 2
        err = unwrap(capsys.readouterr().err)
        assert re.search(rf"{chosen} and --edges {re.escape(str(edges))} both choose the data \(a named dataset, "
                         r"your own graph\); give one of them", err), err
        assert len(err.strip().splitlines()) == 1



# where the original run wrote: a re-run of its record must write none of these unless given again
WRITES = {"json": "a.json", "save": "model-a", "save_split": "split-a.npz", "log": "a.log",
          "tensorboard": "tb-a", "checkpoint_every": 10}


def test_config_wins_over_the_record_flags_over_both_and_the_record_writes_nothing(tmp_path):
    # docs/reproducibility.md: the config's values win over the record's, flags given win over both,
    # and the options that say where a run writes are never taken over from the record (a re-run
    # would overwrite the original's model, report and log)
    record = tmp_path / "a.json"
    record.write_text(json.dumps({"record": {"command": "train", "options": {
        "dataset": "cora", "lr": 0.05, "hidden": 32, "seeds": 4, "epochs": 70, "dropout": 0.3, "csv": "a.csv",
        **WRITES}}}))
    config = tmp_path / "c.toml"
    config.write_text('dataset = "citeseer"\nlr = 0.02\nhidden = 64\n')
    both = ["train", "--from-record", record, "--config", config]
    got = _parsed([*both, "--hidden", "8"])
    assert (got["dataset"], got["lr"], got["hidden"], got["seeds"], got["epochs"], got["dropout"]) == \
        ("citeseer", 0.02, 8, 4, 70, 0.3)
    defaults = _parsed(["train"])
    assert {k: got[k] for k in WRITES} == {k: defaults[k] for k in WRITES} == dict.fromkeys(WRITES)
    args = parse_args(build_parser(), [str(a) for a in both])
    assert args.dataset_origin == f"--config {config}" and args.hidden == 64
    alone = _parsed(["train", "--from-record", record, "--save", tmp_path / "model-b"])
    assert (alone["dataset"], alone["lr"], alone["hidden"]) == ("cora", 0.05, 32)
    assert alone["save"] == tmp_path / "model-b" and alone["json"] is None
