"""A checkpoint's recorded options as the defaults of the commands that read it.

``evaluate``, ``predict`` and ``plot embeddings`` given no ``--dataset``/``--edges`` use the data
the checkpoint was trained on and say so on one line; given other data, the error names the flag
that gives the right one. ``train --resume DIR`` alone continues the run with every recorded
setting (the result equals the uninterrupted run's), refuses a flag whose value differs from the
recorded one naming both, and its ms/epoch divides by the epochs it trained, not all of them.
"""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest
from cli_run import run_main, unwrap

from jaxgcn.store import batch_state, checkpoint
from jaxgcn.app.job import Outcome
from jaxgcn.cli import build_parser, records
from jaxgcn.cli import train as cli_train
from jaxgcn.io.reports import RunSummary

NOTE = "{} citeseer, the dataset the checkpoint records (--dataset to change)"


@pytest.fixture(scope="module")
def citeseer(tmp_path_factory):
    """A model trained on CiteSeer (bundled: no download), 3,703 features where Cora has 1,433."""
    d = tmp_path_factory.mktemp("citeseer")
    assert run_main(["train", "--dataset", "citeseer", "--epochs", "2", "--quiet", "--save", d / "m"]) == 0
    return d / "m"


def refused_with(argv, capsys) -> str:
    assert run_main(argv) == 2
    return unwrap(capsys.readouterr().err)


def test_evaluate_without_data_flags_evaluates_on_the_checkpoints_dataset(citeseer, tmp_path, capsys):
    assert run_main(["evaluate", "--checkpoint", citeseer, "--json", tmp_path / "default.json"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == NOTE.format("evaluating on")
    assert out[1] == f"split: the model's training split, saved in {citeseer} (public)"
    assert out[2].startswith("test: 1000 nodes | accuracy ")
    named = tmp_path / "named.json"
    assert run_main(["evaluate", "--checkpoint", citeseer, "--dataset", "citeseer", "--json", named]) == 0
    assert "the dataset the checkpoint records" not in capsys.readouterr().out  # named: nothing to say
    assert json.loads((tmp_path / "default.json").read_text()) == json.loads(named.read_text())


def test_evaluate_on_other_data_names_the_flag_of_the_checkpoints_dataset(citeseer, capsys):
    err = refused_with(["evaluate", "--checkpoint", citeseer, "--dataset", "cora"], capsys)
    assert err == (f"jaxgcn: error: checkpoint {citeseer} was trained on 3703 features; this data has 1433; it was "
                   "trained on citeseer: pass --dataset citeseer\n")


def test_predict_without_data_flags_predicts_on_the_checkpoints_dataset(citeseer, tmp_path, capsys):
    assert run_main(["predict", "--checkpoint", citeseer, "--out", tmp_path / "p.csv"]) == 0
    assert capsys.readouterr().out.splitlines() == [NOTE.format("predicting on"),
                                                    f"wrote 3327 predictions to {tmp_path / 'p.csv'}"]
    assert len((tmp_path / "p.csv").read_text().splitlines()) == 1 + 3327
    err = refused_with(["predict", "--checkpoint", citeseer, "--dataset", "cora", "--out", tmp_path / "q.csv"], capsys)
    assert err.endswith("this data has 1433; it was trained on citeseer: pass --dataset citeseer\n")
    assert not (tmp_path / "q.csv").exists()


def test_plot_embeddings_without_data_flags_plots_the_checkpoints_dataset(citeseer, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert run_main(["plot", "embeddings", "--checkpoint", citeseer, "--out", tmp_path / "e.png"]) == 0
    assert capsys.readouterr().out.splitlines() == [NOTE.format("plotting the embeddings of"),
                                                    f"wrote {tmp_path / 'e.png'}"]
    assert (tmp_path / "e.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    err = refused_with(["plot", "embeddings", "--checkpoint", citeseer, "--dataset", "cora", "--out",
                        tmp_path / "f.png"], capsys)
    assert err.endswith("it was trained on citeseer: pass --dataset citeseer\n")


def test_a_checkpoint_without_recorded_options_falls_back_to_its_catalogue_dataset(citeseer, tmp_path, capsys):
    old = tmp_path / "old"
    shutil.copytree(citeseer, old)
    meta = json.loads((old / "checkpoint.json").read_text())
    del meta["extra"]["options"]  # as an older jaxgcn wrote it (the JSON is not hashed, the params are)
    (old / "checkpoint.json").write_text(json.dumps(meta))
    assert run_main(["evaluate", "--checkpoint", old]) == 0
    assert capsys.readouterr().out.splitlines()[0] == NOTE.format("evaluating on")
    meta["dataset"] = "my-graph"
    (old / "checkpoint.json").write_text(json.dumps(meta))
    err = refused_with(["evaluate", "--checkpoint", old], capsys)
    assert err == (f"jaxgcn: error: --checkpoint {old}: records its data as 'my-graph', which --dataset cannot name "
                   "(files, or a checkpoint of an older jaxgcn); pass the data it was trained on with --dataset NAME "
                   "or --edges FILE --labels FILE [--features FILE]\n")


def test_a_model_of_own_files_asks_for_the_same_files(tmp_path, capsys):
    rng = np.random.default_rng(0)
    edges, labels = tmp_path / "e.csv", tmp_path / "l.csv"
    pairs = [(i, (i + 1) % 60) for i in range(60)] + [(s, t) for s, t in rng.integers(0, 60, (90, 2)) if s != t]
    edges.write_text("src,dst\n" + "".join(f"n{s},n{t}\n" for s, t in pairs))  # a ring: every node has an edge
    labels.write_text("node,label\n" + "".join(f"n{i},c{i % 2}\n" for i in range(60)))
    assert run_main(["train", "--edges", edges, "--labels", labels, "--train-per-class", "5", "--val", "10",
                     "--test", "20", "--epochs", "2", "--quiet", "--save", tmp_path / "m"]) == 0
    capsys.readouterr()
    err = refused_with(["evaluate", "--checkpoint", tmp_path / "m"], capsys)
    assert err == (f"jaxgcn: error: --checkpoint {tmp_path / 'm'}: the model was trained on your own files (--edges "
                   f"{edges} --labels {labels}); pass them again (or files in the same feature space) with --edges, "
                   "--labels and --features\n")
    assert run_main(["evaluate", "--checkpoint", tmp_path / "m", "--edges", edges, "--labels", labels]) == 0
    assert "the dataset the checkpoint records" not in capsys.readouterr().out


# --- train --resume DIR alone -------------------------------------------------------------------------

# not the defaults: the resumed run must take every one of them from the checkpoint
RUN = ["--dataset", "synthetic", "--nodes", "300", "--classes", "3", "--lr", "0.02", "--hidden", "8", "--epochs", "9",
       "--seed", "2", "--quiet"]


class Killed(SystemExit):
    """What the caller sees of a process killed after a checkpoint (run_main returns its code)."""


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """The uninterrupted run (``full``), and the same run killed after its checkpoint of epoch 3 (``ck``)."""
    d = tmp_path_factory.mktemp("resume")
    assert run_main(["train", *RUN, "--save", d / "full", "--json", d / "full.json"]) == 0
    real = checkpoint.save

    def killed_after_epoch_3(*a, **kw):
        if kw["epoch"] > 3:
            raise Killed("killed")
        return real(*a, **kw)

    checkpoint.save = killed_after_epoch_3
    try:
        assert run_main(["train", *RUN, "--save", d / "ck", "--checkpoint-every", "3"]) == "killed"
    finally:
        checkpoint.save = real
    meta = checkpoint.load(d / "ck").meta
    state = batch_state.load(d / "ck")  # the run's state: slice 0 of the one resumable-state format
    assert meta["epoch"] == 3 and meta["state_file"] is None
    assert state["single_run"] is True and list(state["slices"]) == ["0"] and state["slices"]["0"]["epoch"] == 3
    return d


def test_resume_alone_continues_the_run_with_every_recorded_setting(interrupted, tmp_path, monkeypatch, capsys):
    ck = tmp_path / "ck"
    shutil.copytree(interrupted / "ck", ck)
    seen = []
    monkeypatch.setattr(cli_train, "summary_line", lambda outcome: seen.append(outcome) or "summary")
    assert run_main(["train", "--resume", ck, "--json", tmp_path / "resumed.json"]) == 0
    out = capsys.readouterr().out
    assert "synthetic: 300 nodes" in out and f"resuming from epoch 3 of {ck}\n" in out  # --quiet is not restored
    assert seen[0].resumed_epoch == 3  # the epochs this process trained: 4..9
    full, resumed = (json.loads((p).read_text()) for p in (interrupted / "full.json", tmp_path / "resumed.json"))
    for key in ("test_acc", "val_acc", "epochs_run"):
        assert resumed[key] == full[key], key
    saved, want = checkpoint.load(ck), checkpoint.load(interrupted / "full")  # saved into DIR, as the run did
    assert saved.meta["state_file"] is None and saved.meta["epoch"] == 9
    assert not (ck / batch_state.FOLDER).exists()  # the finished run holds no state to resume
    assert (saved.meta["model"]["hidden"], saved.meta["train"]["lr"]) == (8, 0.02)
    for name in ("layer_0", "layer_1"):
        np.testing.assert_array_equal(saved.params[name]["w"], want.params[name]["w"])


def test_resume_takes_equal_flags_and_restores_the_rest_as_defaults(interrupted):
    ck = interrupted / "ck"
    args = records.parse_args(build_parser(), ["train", "--resume", str(ck), "--lr", "0.02", "--nodes", "300"])
    restored = (args.dataset, args.nodes, args.classes, args.hidden, args.epochs, args.seed)
    assert restored == ("synthetic", 300, 3, 8, 9, 2)
    assert (args.save, args.checkpoint_every, args.quiet, args.dataset_origin) == (ck, 3, False, f"--resume {ck}")


def test_resume_refuses_a_flag_that_differs_from_the_recorded_value(interrupted, capsys):
    ck = interrupted / "ck"
    err = refused_with(["train", "--resume", ck, "--lr", "0.05"], capsys)
    assert err == (f"jaxgcn: error: --resume {ck}: the checkpoint was trained with --lr 0.02; this command gives "
                   "--lr 0.05 (drop --lr to resume, or train afresh without --resume)\n")
    err = refused_with(["train", "--resume", ck, "--hidden", "16", "--bias", "--dataset", "cora"], capsys)
    assert err == (f"jaxgcn: error: --resume {ck}: the checkpoint was trained with no --bias, --dataset synthetic, "
                   "--hidden 8; this command gives --bias, --dataset cora, --hidden 16 (drop --bias, --dataset, "
                   "--hidden to resume, or train afresh without --resume)\n")
    assert checkpoint.load(ck).meta["epoch"] == 3  # refused before any work


def test_ms_per_epoch_divides_by_the_epochs_this_process_trained():
    assert cli_train.ms_per_epoch(0.5, 200) == 2.5
    assert cli_train.ms_per_epoch(0.5, 200, resumed_epoch=150) == 10.0
    assert cli_train.ms_per_epoch(0.5, 200, resumed_epoch=200) == 500.0  # nothing left: never a division by 0
    resumed = Outcome([RunSummary(0, 0, 0.8125, 0.79, 200, False)], 1.25, 0.5, np.zeros(200), None, None, None,
                      None, None, None, None, resumed_epoch=150)
    assert cli_train.summary_line(resumed) == ("test accuracy 0.8125 over 1 run | val 0.7900 | epochs 200 | compile "
                                               "1.25s | train 0.50s (10.00 ms/epoch)")


def test_the_parser_reads_the_checkpoint_files_the_library_writes():
    # named twice so that parsing the flags imports no JAX: the two must not drift apart
    from jaxgcn.store import batch_state
    from jaxgcn.cli.records import CHECKPOINT_JSON

    assert CHECKPOINT_JSON == (checkpoint.META, f"{batch_state.FOLDER}/{batch_state.MANIFEST}")


def old_layout(ck) -> None:
    """Rewrite a single run's interrupted save as jaxgcn before the one state format wrote it
    (25b15a8's ``checkpoint.save(..., state=state)``): the state's npz bytes as ``state-<n>.npz``
    beside the model, named by ``checkpoint.json``'s ``state_file`` and hashed in its ``files``; no
    ``batch-state/``. The npz is the same ``state_arrays`` either way, so the bytes carry over."""
    manifest = batch_state.load(ck)
    blob = (ck / batch_state.FOLDER / manifest["slices"]["0"]["file"]).read_bytes()
    meta = json.loads((ck / checkpoint.META).read_text())
    name = meta["params_file"].replace("params-", "state-")
    (ck / name).write_bytes(blob)
    meta["state_file"] = name
    meta["files"][name] = {"bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
    (ck / checkpoint.META).write_text(json.dumps(meta, indent=2) + "\n")
    shutil.rmtree(ck / batch_state.FOLDER)


def test_an_old_single_run_save_still_resumes_to_the_uninterrupted_result(interrupted, tmp_path, capsys):
    ck = tmp_path / "ck"
    shutil.copytree(interrupted / "ck", ck)
    old_layout(ck)
    assert run_main(["train", "--resume", ck, "--json", tmp_path / "resumed.json"]) == 0
    assert f"resuming from epoch 3 of {ck}\n" in capsys.readouterr().out
    full, resumed = (json.loads((p).read_text()) for p in (interrupted / "full.json", tmp_path / "resumed.json"))
    assert [resumed[k] for k in ("test_acc", "val_acc", "epochs_run")] == [full[k] for k in ("test_acc", "val_acc",
                                                                                            "epochs_run")]
    saved = checkpoint.load(ck)  # the finished run: the old state file is gone with the old layout
    assert saved.meta["state_file"] is None and not list(ck.glob("state-*.npz"))


def test_an_old_single_run_saves_damaged_state_is_refused(interrupted, tmp_path, capsys):
    ck = tmp_path / "ck"
    shutil.copytree(interrupted / "ck", ck)
    old_layout(ck)
    name = json.loads((ck / checkpoint.META).read_text())["state_file"]
    (ck / name).write_bytes((ck / name).read_bytes()[:-10])
    err = refused_with(["train", "--resume", ck], capsys)
    assert "bytes that do not match the recorded size/SHA-256" in err and name in err


def test_a_single_runs_state_is_one_slice_and_refused_when_damaged_or_a_batchs(interrupted, tmp_path, capsys):
    ck = tmp_path / "ck"
    shutil.copytree(interrupted / "ck", ck)
    manifest = batch_state.load(ck)
    slice_file = ck / batch_state.FOLDER / manifest["slices"]["0"]["file"]
    assert sorted(p.name for p in (ck / batch_state.FOLDER).iterdir()) == ["slice-00000-1.npz", "state.json"]
    good = slice_file.read_bytes()
    slice_file.write_bytes(good[:-10])
    err = refused_with(["train", "--resume", ck], capsys)
    assert "slice-00000-1.npz: " in err and "do not match the recorded size/SHA-256" in err
    slice_file.write_bytes(good)
    del manifest["single_run"]  # a batch's manifest: not this run's state
    (ck / batch_state.FOLDER / batch_state.MANIFEST).write_text(json.dumps(manifest))
    err = refused_with(["train", "--resume", ck], capsys)
    assert err == (f"jaxgcn: error: --resume {ck}: holds a batch's state (--seeds/--splits/sweep), not a single "
                   "run's; resume it with the command that wrote it\n")


def test_a_resumed_run_saving_into_its_folder_writes_a_new_slice_file_before_the_old_goes(interrupted, tmp_path,
                                                                                           monkeypatch):
    """Resumed into its own folder, the run keeps numbering its slice (``slice-00000-2.npz``): a
    rewrite of ``-1`` in place would leave, killed between the file and the manifest, a manifest
    whose file no longer matches (and the cleanup would delete the only state)."""
    ck = tmp_path / "ck"
    shutil.copytree(interrupted / "ck", ck)
    real = batch_state.Saver.__call__

    def killed_after_epoch_6(self, first, state):
        real(self, first, state)
        if int(state.epoch) >= 6:
            raise Killed("killed")

    monkeypatch.setattr(batch_state.Saver, "__call__", killed_after_epoch_6)
    assert run_main(["train", "--resume", ck]) == "killed"
    entry = batch_state.load(ck)["slices"]["0"]
    assert (entry["file"], entry["number"], entry["epoch"]) == ("slice-00000-2.npz", 2, 6)
    assert checkpoint.load(ck).meta["epoch"] == 6  # the model is written before the state, never after it
    assert sorted(p.name for p in (ck / batch_state.FOLDER).iterdir()) == ["slice-00000-2.npz", "state.json"]
