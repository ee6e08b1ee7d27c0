"""A batch's resumable state (jaxgcn.store.batch_state) against edited manifests and repeated resumes:
a slice file named by a path instead of a name, a slice key past the runs or written another way,
an epoch outside the run, a sweep's finished group of 0 epochs are refused before anything is read;
a batch killed three times inside the same slice and resumed into its own folder each time keeps a
folder whose manifest names exactly the files it holds, and ends where the uninterrupted batch does."""

from __future__ import annotations

import json
import shutil

import pytest
from cli_run import kill_after_save, Killed, run_main, unwrap

from jaxgcn.app import sweep as app_sweep
from jaxgcn.store import batch_state

# 3 seeds at hidden 128: slices of 2 runs (jaxgcn.plan.runs_per_device_for), runs 0-1 then run 2
BATCH = ["train", "--dataset", "synthetic", "--nodes", "120", "--classes", "3", "--features", "4", "--hidden", "128",
         "--epochs", "20", "--early-stopping", "none", "--seeds", "3", "--quiet"]
EVERY, EPOCHS = 5, 20
pytestmark = pytest.mark.usefixtures("cpu_slices")  # sliced as on the CPU, on an accelerator too




@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The uninterrupted batch (``full``, ``full.json``) and the same batch killed in its second slice
    right after that slice's first checkpoint (``ck``)."""
    d = tmp_path_factory.mktemp("hostile")
    assert run_main([*BATCH, "--save", d / "full", "--json", d / "full.json"]) == 0
    with pytest.MonkeyPatch.context() as m:
        kill_after_save(m, first=2, epoch=EVERY)
        assert run_main([*BATCH, "--save", d / "ck", "--checkpoint-every", EVERY]) == "killed"
    return d


def assert_whole(ck) -> dict:
    """The folder holds exactly the files its manifest names, each of its recorded size; the manifest."""
    manifest = batch_state.load(ck)
    names = sorted(entry["file"] for entry in manifest["slices"].values())
    assert sorted(p.name for p in batch_state.folder(ck).iterdir()) == sorted([*names, batch_state.MANIFEST])
    for entry in manifest["slices"].values():
        assert (batch_state.folder(ck) / entry["file"]).stat().st_size == entry["bytes"]
    return manifest


def edited(runs, tmp_path, edit) -> tuple[object, dict]:
    ck = tmp_path / "ck"
    shutil.copytree(runs / "ck", ck)
    path = batch_state.folder(ck) / batch_state.MANIFEST
    state = json.loads(path.read_text())
    edit(state)
    path.write_text(json.dumps(state))
    return ck, state


@pytest.mark.parametrize("name", ["../slice-00002-1.npz", "batch-state/slice-00002-1.npz", "/tmp/slice-00002-1.npz",
                                  "sub/../slice-00002-1.npz"])
def test_a_slice_file_named_by_a_path_is_refused(runs, tmp_path, name):
    ck, _ = edited(runs, tmp_path, lambda s: s["slices"]["2"].__setitem__("file", name))
    with pytest.raises(ValueError, match=r"state\.json: .*it was edited or not written by this jaxgcn: train again"):
        batch_state.load(ck)


def test_the_saved_manifest_is_taken_as_it_is(runs):
    manifest = assert_whole(runs / "ck")
    assert {k: (v["file"], v["epoch"]) for k, v in manifest["slices"].items()} == {
        "0": ("slice-00000-4.npz", EPOCHS), "2": ("slice-00002-1.npz", EVERY)}
    batch_state.check_slices(runs / "ck", manifest, 3, 2, EPOCHS)  # keys 0 and 2 of 3 runs in slices of 2


@pytest.mark.parametrize("key", ["2 ", "+2", "-0", "2.0", ""])
def test_a_slice_key_that_is_no_number_is_refused_on_loading(runs, tmp_path, key):
    ck, _ = edited(runs, tmp_path, lambda s: s["slices"].update({key: s["slices"].pop("2")}))
    with pytest.raises(ValueError, match=r"state\.json: not a jaxgcn-batch-state-1 manifest .* it was edited"):
        batch_state.load(ck)


@pytest.mark.parametrize(("key", "n_runs"), [("4", 4), ("4", 3), ("6", 5), ("02", 3), ("1", 3), ("１", 3)])
def test_a_slice_key_that_is_no_slices_first_run_is_refused(runs, tmp_path, key, n_runs):
    ck, state = edited(runs, tmp_path, lambda s: s["slices"].update({key: s["slices"].pop("2")}))
    with pytest.raises(ValueError, match=rf"slice key {key[:20]!r} is not the first run of a slice \(a multiple of "
                                         rf"2 below {n_runs}\)"):
        batch_state.check_slices(ck, batch_state.load(ck), n_runs, 2, EPOCHS)


@pytest.mark.parametrize(("epoch", "ok"), [(0, True), (EPOCHS, True), (EPOCHS + 1, False), (-1, False)])
def test_a_slice_epoch_outside_the_run_is_refused(runs, tmp_path, epoch, ok):
    ck, _ = edited(runs, tmp_path, lambda s: s["slices"]["2"].__setitem__("epoch", epoch))
    manifest = batch_state.load(ck)
    if ok:
        batch_state.check_slices(ck, manifest, 3, 2, EPOCHS)
        return
    with pytest.raises(ValueError, match=rf"slice 2 is at epoch {epoch}, outside the run's 0-{EPOCHS}"):
        batch_state.check_slices(ck, manifest, 3, 2, EPOCHS)


def test_a_batch_killed_three_times_in_one_slice_resumes_in_its_folder_to_the_same_runs(runs, tmp_path, monkeypatch):
    """Each resume into its own folder numbers the slice's next file on (``slice-00002-2``, ``-3``, ...)
    and removes the one before only after the manifest names the new one: after every kill the
    folder holds exactly what its manifest names, and the last resume ends with the uninterrupted runs."""
    ck = tmp_path / "ck"
    shutil.copytree(runs / "ck", ck)
    for kill in (2, 3):
        with monkeypatch.context() as m:
            kill_after_save(m, first=2, epoch=kill * EVERY)
            assert run_main(["train", "--resume", ck]) == "killed"
        manifest = assert_whole(ck)
        entry = manifest["slices"]["2"]
        assert (entry["file"], entry["number"], entry["epoch"]) == (f"slice-00002-{kill}.npz", kill, kill * EVERY)
        assert manifest["slices"]["0"]["epoch"] == EPOCHS  # the finished slice stays recorded
    assert run_main(["train", "--resume", ck, "--json", tmp_path / "resumed.json"]) == 0
    got, want = (json.loads(p.read_text()) for p in (tmp_path / "resumed.json", runs / "full.json"))
    for key in ("test_acc", "val_acc", "epochs_run"):
        assert got[key] == want[key], key
    assert not batch_state.folder(ck).exists()


# --- a sweep resumed into another folder, then interrupted again -------------------------------------

# Two groups: hidden 64 (runs 0-3, one slice) then hidden 128 (runs 4-7, slices of 2 at runs 4 and 6)
SWEEP = ["sweep", "--dataset", "synthetic", "--nodes", "120", "--classes", "3", "--features", "4", "--hidden",
         "64,128", "--lr", "0.01,0.05", "--seeds", "2", "--epochs", str(EPOCHS), "--early-stopping", "none",
         "--no-compile-cache", "--quiet"]


def kill_after_slice(monkeypatch, first: int | None, epoch: int | None) -> list:
    """Kill the sweep right after the slice whose first run is ``first`` saved its state of ``epoch``
    (None, None: after its first save, whichever it is); the (first, epoch) of every save."""
    real, seen = batch_state.Saver.__call__, []

    def save_then_kill(self, slice_first, state):
        real(self, slice_first, state)
        seen.append((slice_first, int(state.step)))
        if (slice_first, int(state.step)) == (first, epoch) or first is None:
            raise Killed("killed")
    monkeypatch.setattr(batch_state.Saver, "__call__", save_then_kill)
    return seen


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    """The uninterrupted saved sweep (``full``) and the same sweep killed in its second group, its first
    slice finished and its second at epoch 5 (``a``)."""
    d = tmp_path_factory.mktemp("sweeps")
    assert run_main([*SWEEP, "--save", d / "full"]) == 0
    with pytest.MonkeyPatch.context() as m:
        kill_after_slice(m, first=6, epoch=EVERY)
        assert run_main([*SWEEP, "--save", d / "a", "--checkpoint-every", EVERY]) == "killed"
    return d


def test_a_sweep_resumed_into_another_folder_and_killed_again_resumes_from_there(sweeps, tmp_path, monkeypatch,
                                                                                  capsys):
    """The finished group's results go on into the new folder and the slice files stay in the old one
    (which is left as it was): killed again, the new folder holds exactly what its manifest names, and
    resumed from there the sweep ends with the uninterrupted sweep's table."""
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(sweeps / "a", a)
    before = (batch_state.folder(a) / batch_state.MANIFEST).read_bytes()
    first = assert_whole(a)
    assert list(first["done"]) == ["0"] and first["slices"]["6"]["epoch"] == EVERY
    with monkeypatch.context() as m:  # killed right after its first save: one slice saved here, one not yet
        seen = kill_after_slice(m, None, None)
        assert run_main(["sweep", "--resume", a, "--save", b]) == "killed"
    second = assert_whole(b)
    assert second["done"] == first["done"]  # the finished group's results, carried over
    assert {k: v["epoch"] for k, v in second["slices"].items()} == {str(f): e for f, e in seen}
    assert (batch_state.folder(a) / batch_state.MANIFEST).read_bytes() == before and assert_whole(a) == first
    capsys.readouterr()
    assert run_main(["sweep", "--resume", b]) == 0
    assert "4 runs kept from the interrupted sweep" in capsys.readouterr().out
    assert (b / app_sweep.TABLE).read_bytes() == (sweeps / "full" / app_sweep.TABLE).read_bytes()
    assert not batch_state.folder(b).exists()


@pytest.mark.parametrize(("epochs", "ok"), [(0, False), (1, True), (EPOCHS + 1, False)])
def test_a_finished_sweep_group_of_0_epochs_is_refused(sweeps, tmp_path, capsys, epochs, ok):
    ck = tmp_path / "ck"
    shutil.copytree(sweeps / "a", ck)
    path = batch_state.folder(ck) / batch_state.MANIFEST
    state = json.loads(path.read_text())
    state["done"]["0"][1][2] = epochs
    path.write_text(json.dumps(state))
    if ok:  # 1 epoch is a run's least: taken as recorded (the table then differs from the full sweep's)
        assert run_main(["sweep", "--resume", ck]) == 0
        return
    capsys.readouterr()
    assert run_main(["sweep", "--resume", ck]) == 2
    err = unwrap(capsys.readouterr().err)
    assert len(err.splitlines()) == 1, err
    assert "done group 0 does not hold 4 runs' [val_acc, test_acc, epochs]" in err
    assert f"epochs in 1-{EPOCHS}" in err
