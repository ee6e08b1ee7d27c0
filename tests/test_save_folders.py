"""The folders jaxgcn saves into are its own (issue 43, section 4): a link planted at a name it
writes there is never followed (files outside stay untouched), a save replaces the other layout's
files (one run vs ``--seeds N``), a run folder that is not the run ``runs.json`` lists is refused,
and ``--resume DIR`` on something that cannot be resumed says what DIR holds."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

from jaxgcn.store import batch_state, checkpoint
from jaxgcn.core.models import GCNConfig
from jaxgcn.train import TrainConfig

from cli_run import run_main, unwrap

SYNTH = ["--dataset", "synthetic", "--nodes", "200"]
TRAIN = ["train", *SYNTH, "--epochs", "3", "--quiet", "--no-compile-cache"]
PARAMS = {"layer_0": {"w": np.ones((3, 2), np.float32)}, "layer_1": {"w": np.ones((2, 2), np.float32)}}


def save_small(directory: Path, **kw: Any) -> Path:
    return checkpoint.save(directory, PARAMS, model_config=GCNConfig(hidden=2), train_config=TrainConfig(),
                           info={"n_features": 3, "n_classes": 2}, epoch=1, metrics={}, **kw)


def victims(tmp_path: Path, *names: str) -> dict[Path, str]:
    """Files outside the save folder, each holding its own text, that a planted link points to."""
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    out = {}
    for name in names:
        (outside / name).write_text(f"keep {name}")
        out[outside / name] = f"keep {name}"
    return out


def untouched(files: dict[Path, str]) -> None:
    for path, text in files.items():
        assert path.read_text() == text, path
    assert sorted(p.name for p in next(iter(files)).parent.iterdir()) == sorted(p.name for p in files)


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = unwrap(err).splitlines()
    assert len(lines) == 1 and lines[0].startswith("jaxgcn: error: ") and "Traceback" not in err, err
    return lines[0]


# --- links at the final names -------------------------------------------------------------------------

def test_links_planted_at_a_checkpoints_final_names_are_replaced_not_written_through(tmp_path):
    # checkpoint.json, an old params file (removed by the save), the next node ids and split files,
    # runs.json: each a link to a file outside
    ck = tmp_path / "ck"
    ck.mkdir()
    names = ("checkpoint.json", "params-1.npz", "node_ids-2.npy", "split-2.npy", "runs.json")
    outside = victims(tmp_path, *names)
    for name in names:
        os.symlink(tmp_path / "outside" / name, ck / name)
    save_small(ck, node_ids=np.array(["a", "b", "c"]), split=np.array([1, 2, 3], np.int8))
    untouched(outside)
    assert sorted(p.name for p in ck.iterdir()) == ["checkpoint.json", "node_ids-2.npy", "params-2.npz", "split-2.npy"]
    assert not any(p.is_symlink() for p in ck.iterdir())
    assert checkpoint.load(ck).node_ids.tolist() == ["a", "b", "c"]
    # a several-run save's manifest the same way
    os.symlink(tmp_path / "outside" / "runs.json", ck / "runs.json")
    checkpoint.save_runs(ck, [{"seed": 0, "split": 0, "val_acc": 0.5, "test_acc": 0.5}])
    untouched(outside)
    assert not (ck / "runs.json").is_symlink() and json.loads((ck / "runs.json").read_text())["best"] == 0


def test_links_planted_in_a_partition_folder_are_replaced_not_written_through(tmp_path):
    out = tmp_path / "parts"
    argv = ["partition", *SYNTH, "--parts", "2", "--out", out]
    assert run_main(argv) == 0
    outside = victims(tmp_path, "partitions.json", "part-00001.npz")
    for name in outside:
        os.unlink(out / name.name)
        os.symlink(name, out / name.name)
    assert run_main(argv) == 0
    untouched(outside)
    assert not any(p.is_symlink() for p in out.iterdir())
    assert json.loads((out / "partitions.json").read_text())["parts"] == 2


class _Runs(NamedTuple):
    reason: Any


class _State(NamedTuple):
    runs: _Runs
    step: Any


def test_a_batch_state_folder_or_manifest_planted_as_a_link_is_never_written_through(tmp_path):
    state = _State(_Runs(np.zeros(2, np.int32)), np.int32(4))
    outside = victims(tmp_path, "state.json", "slice-00000-1.npz")
    save = tmp_path / "save"
    save.mkdir()
    os.symlink(tmp_path / "outside", save / "batch-state")  # the whole folder: refused
    with pytest.raises(ValueError, match=r"/save/batch-state: is a link \(to \S+/outside\); jaxgcn writes only "
                                         r"into a real folder it made there: remove the link"):
        batch_state.saver(save, extra={}, fingerprint={})(0, state)
    untouched(outside)
    os.unlink(save / "batch-state")
    (save / "batch-state").mkdir()
    os.symlink(tmp_path / "outside" / "state.json", save / "batch-state" / "state.json")  # the manifest: replaced
    batch_state.saver(save, extra={}, fingerprint={})(0, state)
    untouched(outside)
    assert json.loads((save / "batch-state" / "state.json").read_text())["slices"]["0"]["epoch"] == 4
    batch_state.remove(save)
    os.symlink(tmp_path / "outside", save / "batch-state")
    batch_state.remove(save)  # the link goes, not what it points to
    assert not os.path.lexists(save / "batch-state")
    untouched(outside)


@pytest.mark.parametrize("name", ["run-001", "batch-state"])
def test_train_refuses_a_save_folder_whose_run_or_state_folder_is_a_link(tmp_path, capsys, name):
    # checkpoint.save would also clear the other params-*.npz of the folder it writes: the target's
    outside = victims(tmp_path, "params-1.npz", "checkpoint.json")
    save = tmp_path / "save"
    assert run_main([*TRAIN, "--seeds", "2", "--save", save]) == 0
    shutil.rmtree(save / name, ignore_errors=True)
    os.symlink(tmp_path / "outside", save / name, target_is_directory=True)
    capsys.readouterr()
    assert run_main([*TRAIN, "--seeds", "2", "--save", save, "--checkpoint-every", "1"]) == 2
    assert re.search(rf"--save \S+/save: {name} is a link \(to \S+/outside\); jaxgcn writes only into real folders "
                     "it made inside its save folder: remove the link", error_line(capsys))
    untouched(outside)


def test_a_run_folder_link_met_while_saving_is_refused(tmp_path, capsys, monkeypatch):
    # the same refusal where the run folder is made: a link planted after the checks that run before
    # the work (here: those checks skipped) is refused at the save, and nothing outside is written
    from jaxgcn.cli import common

    monkeypatch.setattr(common, "refuse_linked_folders", lambda *a: None)
    outside = victims(tmp_path, "params-1.npz")
    save = tmp_path / "save"
    assert run_main([*TRAIN, "--seeds", "2", "--save", save]) == 0
    shutil.rmtree(save / "run-000")
    os.symlink(tmp_path / "outside", save / "run-000")
    capsys.readouterr()
    assert run_main([*TRAIN, "--seeds", "2", "--save", save]) == 2
    assert re.search(r"\S+/save/run-000: is a link \(to \S+/outside\); jaxgcn writes only into a real folder it made "
                     "there: remove the link", error_line(capsys))
    untouched(outside)


# --- one layout at a time -----------------------------------------------------------------------------

def test_a_save_replaces_the_other_layouts_files(tmp_path, capsys):
    # each save after the first gives other settings (--seeds, --seed): --overwrite replaces that model
    save = tmp_path / "save"
    assert run_main([*TRAIN, "--seeds", "3", "--save", save]) == 0
    assert run_main([*TRAIN, "--seeds", "2", "--save", save, "--overwrite"]) == 0  # a smaller batch: run-002 goes
    assert sorted(p.name for p in save.iterdir()) == [".jaxgcn.lock", "run-000", "run-001", "runs.json"]
    (save / "run-001" / "notes.txt").write_text("mine")  # not jaxgcn's: kept, with its folder
    (save / "batch-state").mkdir()  # an interrupted batch's state too: not this model's
    (save / "batch-state" / "state.json").write_text("{}")
    assert run_main([*TRAIN, "--save", save, "--seed", "7", "--overwrite"]) == 0  # one run: runs.json, run-* go
    assert sorted(p.name for p in save.iterdir()) == [".jaxgcn.lock", "checkpoint.json", "params-1.npz",
                                                      "run-001", "split-1.npy"]
    assert sorted(p.name for p in (save / "run-001").iterdir()) == ["notes.txt"]
    capsys.readouterr()
    assert run_main(["evaluate", "--checkpoint", save, "--json", tmp_path / "e.json"]) == 0
    assert "run " not in capsys.readouterr().out  # the one run, not a run of the old batch
    assert checkpoint.resolve_run(save, None) == (save, None)
    assert run_main([*TRAIN, "--seeds", "2", "--save", save, "--overwrite"]) == 0  # back: the one run's files go
    assert sorted(p.name for p in save.iterdir()) == [".jaxgcn.lock", "run-000", "run-001", "runs.json"]


def test_swapped_run_folders_are_refused_naming_both(tmp_path, capsys):
    save = tmp_path / "save"
    assert run_main([*TRAIN, "--seeds", "2", "--save", save]) == 0
    os.rename(save / "run-000", save / "tmp")
    os.rename(save / "run-001", save / "run-000")
    os.rename(save / "tmp", save / "run-001")
    capsys.readouterr()
    for run in ("0", "1"):
        assert run_main(["evaluate", "--checkpoint", save, "--run", run]) == 2
        other = "run-001" if run == "0" else "run-000"
        assert re.search(rf"checkpoint \S+/save: run-00{run} holds the model of seed {1 - int(run)}, split 0, but "
                         rf"runs.json lists run {run} as seed {run}, split 0 \(the model {other} holds\); the run "
                         "folders were swapped", error_line(capsys))


# --- --resume DIR that holds nothing to resume --------------------------------------------------------

def test_resume_of_a_finished_batch_says_so(tmp_path, capsys):
    save = tmp_path / "save"
    assert run_main([*TRAIN, "--seeds", "3", "--save", save, "--checkpoint-every", "1"]) == 0
    capsys.readouterr()
    assert run_main(["train", "--resume", save]) == 2
    assert re.search(r"--resume \S+/save: holds a finished --seeds 3 save \(3 runs in runs.json, no batch state\): "
                     r"nothing to resume; score it with `jaxgcn evaluate --checkpoint \S+/save`", error_line(capsys))


def _damage(save: Path, how: str) -> None:
    state = save / "batch-state"
    if how == "folder is a file":
        state.write_text("x")
        return
    if how == "folder is a link":
        os.symlink(save.parent, state)
        return
    state.mkdir()
    manifest = state / "state.json"
    if how == "manifest is a folder":
        manifest.mkdir()
    elif how != "no manifest":
        manifest.write_bytes({"empty": b"", "truncated": b'{"format": "jaxgcn-batch', "a list": b"[]",
                              "not UTF-8": b"\xff\xfe", "other format": b'{"format": "jaxgcn-checkpoint-1"}'}[how])


@pytest.mark.parametrize("how, why", [
    ("no manifest", r"batch-state/state.json is damaged \(missing\)"),
    ("manifest is a folder", r"batch-state/state.json is damaged \(Is a directory\)"),
    ("empty", r"batch-state/state.json is damaged \(JSONDecodeError\)"),
    ("truncated", r"batch-state/state.json is damaged \(JSONDecodeError\)"),
    ("not UTF-8", r"batch-state/state.json is damaged \(UnicodeDecodeError\)"),
    ("a list", r"batch-state/state.json is damaged \(not a jaxgcn-batch-state-1 manifest\)"),
    ("other format", r"batch-state/state.json is damaged \(not a jaxgcn-batch-state-1 manifest\)"),
    ("folder is a file", r"batch-state is a file, not the folder jaxgcn keeps a batch's state in"),
    ("folder is a link", r"batch-state is a link, not the folder jaxgcn keeps a batch's state in"),
])
def test_resume_of_a_damaged_batch_state_names_the_damage(tmp_path, capsys, how, why):
    save = tmp_path / "save"
    save.mkdir()
    _damage(save, how)
    assert run_main(["train", "--resume", save]) == 2
    line = error_line(capsys)
    assert re.search(rf"--resume \S+/save: {why}", line) and "no checkpoint.json" not in line, line


# --- what a checkpoint's and a batch state's records must hold -----------------------------------------

def test_a_side_file_whose_hash_entry_was_removed_is_refused(tmp_path):
    ck = tmp_path / "ck"
    save_small(ck, split=np.array([1, 2, 3], np.int8))
    meta = json.loads((ck / "checkpoint.json").read_text())
    del meta["files"]["split-1.npy"]  # then the file edited: without the entry nothing would check it
    (ck / "checkpoint.json").write_text(json.dumps(meta))
    np.save(ck / "split-1.npy", np.array([3, 3, 3], np.int8))
    with pytest.raises(ValueError, match=r"checkpoint \S+/ck/checkpoint\.json: files records no size and SHA-256 "
                                         r"for the split file split-1\.npy; the file was edited or corrupted"):
        checkpoint.load(ck)
    del meta["files"]  # a checkpoint of a jaxgcn before side files were hashed: read as it is
    (ck / "checkpoint.json").write_text(json.dumps(meta))
    assert checkpoint.load(ck).split.tolist() == [3, 3, 3]


@pytest.fixture(scope="module")
def batch_left(tmp_path_factory):
    """A --seeds 2 save whose batch state was kept (its removal skipped), to edit and resume."""
    from jaxgcn.app import saving

    save = tmp_path_factory.mktemp("batch") / "save"
    keep = saving.batch_state.remove
    saving.batch_state.remove = lambda directory: None
    try:
        assert run_main([*TRAIN, "--seeds", "2", "--save", save, "--checkpoint-every", "1"]) == 0
    finally:
        saving.batch_state.remove = keep
    return save, json.loads((save / "batch-state" / "state.json").read_text())


@pytest.mark.parametrize("edit, why", [
    (lambda s: {"\u0660": s["0"]}, r"slice key '\u0660' is not the first run of a slice \(a multiple of 2 below 2\)"),
    (lambda s: {"9" * 30: s["0"]}, r"slice key '9{20}' is not the first run of a slice"),
    (lambda s: {"00": s["0"]}, r"slice key '00' is not the first run of a slice"),
    (lambda s: {**s, "1": s["0"]}, r"slice key '1' is not the first run of a slice"),
    (lambda s: {"0": {**s["0"], "epoch": 4}}, r"slice 0 is at epoch 4, outside the run's 0-3"),
    (lambda s: {"0": {**s["0"], "epoch": -1}}, r"slice 0 is at epoch -1, outside the run's 0-3"),
])
def test_resume_refuses_edited_slice_keys_and_epochs(batch_left, tmp_path, capsys, edit, why):
    save = tmp_path / "save"
    shutil.copytree(batch_left[0], save)
    manifest = dict(batch_left[1], slices=edit(batch_left[1]["slices"]))
    (save / "batch-state" / "state.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert run_main(["train", "--resume", save]) == 2
    assert re.search(rf"--resume \S+/save/batch-state/state\.json: {why}[^;]*; it was edited", error_line(capsys))
