"""``jaxgcn sweep --save DIR [--checkpoint-every K]`` and ``--resume DIR``: a sweep killed in its
second group, or right after its first, resumes to the uninterrupted sweep's table bit for bit,
without training a finished group again and from the interrupted slice's last checkpoint; what a
finished saved sweep holds; and the folders a save or a resume refuses, in one line, status 2."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from cli_run import interrupt_after_groups, Killed, refused, run_main

from jaxgcn import sweep
from jaxgcn.store import batch_state
from jaxgcn.app import sweep as app_sweep

# Two groups: hidden 64 (4 runs, one slice of 4) then hidden 128 (4 runs, slices of 2 starting at
# runs 4 and 6: jaxgcn.plan.runs_per_device_for), so the sweep can be killed inside a group.
SWEEP = ["sweep", "--dataset", "synthetic", "--nodes", "200", "--classes", "3", "--features", "8", "--hidden",
         "64,128", "--lr", "0.01,0.05", "--seeds", "2", "--epochs", "30", "--early-stopping", "patience",
         "--patience", "8", "--no-compile-cache"]
EVERY = 5
pytestmark = pytest.mark.usefixtures("cpu_slices")  # sliced as on the CPU, on an accelerator too



def kill_after_slice(monkeypatch, first: int, epoch: int, seen: list | None = None) -> None:
    """Kill the sweep right after the slice whose first run is ``first`` saved its state of
    ``epoch``; ``seen`` collects every (first, epoch) saved."""
    real = batch_state.Saver.__call__

    def save_then_kill(self, slice_first, state):
        real(self, slice_first, state)
        if seen is not None:
            seen.append((slice_first, int(state.step)))
        if (slice_first, int(state.step)) == (first, epoch):
            raise Killed("killed")
    monkeypatch.setattr(batch_state.Saver, "__call__", save_then_kill)



def count_programs(monkeypatch) -> list[int]:
    """The hidden width of every chunk the sweep trains (one fit_runs call each)."""
    calls: list[int] = []
    real = sweep.fit_runs

    def counted(data, n_classes, entries, **kwargs):
        calls.append(entries[0].model.hidden)
        return real(data, n_classes, entries, **kwargs)
    monkeypatch.setattr(sweep, "fit_runs", counted)
    return calls


def manifest(directory) -> dict:
    return batch_state.load(directory)


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """The uninterrupted saved sweep (its folder and --json report)."""
    d = tmp_path_factory.mktemp("sweep")
    assert run_main([*SWEEP, "--save", d / "full", "--json", d / "full.json", "--quiet"]) == 0
    return d


def assert_same_table(directory, full) -> None:
    """The saved report's configurations and the table equal the uninterrupted sweep's, bit for bit."""
    got, want = (json.loads((f / app_sweep.REPORT).read_text()) for f in (directory, full / "full"))
    assert got["configurations"] == want["configurations"]  # every run's float val/test accuracy and epochs
    assert (directory / app_sweep.TABLE).read_bytes() == (full / "full" / app_sweep.TABLE).read_bytes()
    assert not (directory / batch_state.FOLDER).exists()  # a finished sweep holds no state


def test_a_finished_saved_sweep_holds_its_report_table_and_record(full):
    saved = json.loads((full / "full" / app_sweep.REPORT).read_text())
    report = json.loads((full / "full.json").read_text())
    assert saved["configurations"] == report["configurations"] and len(saved["configurations"]) == 4
    assert saved["record"]["command"] == "sweep" and saved["record"]["options"]["hidden"] == [64, 128]
    lines = (full / "full" / app_sweep.TABLE).read_text().splitlines()
    assert lines[0].startswith("lr,weight_decay,") and len(lines) == 5
    assert sorted(p.name for p in (full / "full").iterdir() if not p.name.startswith(".")) == [
        app_sweep.TABLE, app_sweep.REPORT]


def test_a_sweep_killed_inside_a_group_and_resumed_twice_ends_with_the_same_table(full, tmp_path, monkeypatch,
                                                                                   capsys):
    ck = tmp_path / "ck"
    with monkeypatch.context() as m:
        kill_after_slice(m, first=6, epoch=2 * EVERY)
        assert run_main([*SWEEP, "--save", ck, "--checkpoint-every", EVERY, "--quiet"]) == "killed"
    state = manifest(ck)
    assert list(state["done"]) == ["0"] and len(state["done"]["0"]) == 4  # group 1 finished: its results kept
    assert state["slices"]["6"]["epoch"] == 2 * EVERY and "0" not in state["slices"]  # its slice went
    assert state["extra"]["command"] == "sweep" and state["extra"]["layout"]["slices"] == [0, 4, 6]
    programs = count_programs(monkeypatch)
    seen: list = []
    with monkeypatch.context() as m:  # the first resume (its flags all restored) killed again
        kill_after_slice(m, first=6, epoch=3 * EVERY, seen=seen)
        capsys.readouterr()
        assert run_main(["sweep", "--resume", ck]) == "killed"
    out = capsys.readouterr().out
    assert f"resuming {ck}: 1 of 2 group(s) finished, 2 slice(s) of runs at epoch" in out
    assert "group 1/2 (layers 2, adam, hidden 64): 4 runs kept from the interrupted sweep" in out
    assert programs == [128]  # the finished group compiled and trained nothing
    # the interrupted slice went on from its checkpoint: its first save is the next one after it
    assert [e for f, e in seen if f == 6] == [3 * EVERY]
    state = manifest(ck)  # the first resume went on saving as the sweep did, the finished group included
    assert list(state["done"]) == ["0"] and state["slices"]["6"]["epoch"] == 3 * EVERY
    assert run_main(["sweep", "--resume", ck, "--quiet"]) == 0
    assert programs == [128, 128]
    assert_same_table(ck, full)


def test_a_sweep_killed_after_a_group_without_checkpoints_resumes_to_the_same_table(full, tmp_path, monkeypatch,
                                                                                    capsys):
    ck = tmp_path / "ck"
    with monkeypatch.context() as m:
        interrupt_after_groups(m)
        capsys.readouterr()
        assert run_main([*SWEEP, "--save", ck, "--quiet"]) == 130
    assert capsys.readouterr().err == (f"jaxgcn: interrupted; the last checkpoint is in {ck} (1 finished group): "
                                       f"resume with --resume {ck}\n")
    assert manifest(ck)["slices"] == {} and list(manifest(ck)["done"]) == ["0"]
    programs = count_programs(monkeypatch)
    assert run_main(["sweep", "--resume", ck, "--quiet"]) == 0
    assert programs == [128]
    assert_same_table(ck, full)


def test_a_resumed_sweep_keeps_the_chunks_it_started_with(tmp_path, monkeypatch, capsys):
    """The default memory budget is half the free memory, which changes between processes: the
    resumed sweep runs the chunks the killed one started with (3 + 1 runs of width 64, 1 run at a
    time of width 128), so its table equals the uninterrupted sweep's in those chunks."""
    from jaxgcn.core.models import GCNConfig
    from jaxgcn.plan import batch_bytes

    # the free memory is sized on the data and plan the sweep itself decided (the CPU's kernel, an
    # accelerator's dense adjacency at its precision): twice 3 runs of width 64, whatever the platform
    seen, chunk_sizes = {}, app_sweep.chunk_sizes

    def spy(data, n_classes, entries, *, execution, memory_budget=None):
        seen.update(data=data, execution=execution)
        return chunk_sizes(data, n_classes, entries, execution=execution, memory_budget=memory_budget)

    def small() -> int:
        return 2 * 3 * batch_bytes(seen["data"], GCNConfig(hidden=64), 1, 3, seen["execution"])

    monkeypatch.setattr(app_sweep, "chunk_sizes", spy)
    monkeypatch.setattr(sweep, "device_budget", lambda: None)  # an accelerator's too: the budget given here
    monkeypatch.setattr(sweep, "available_bytes", small)
    assert run_main([*SWEEP, "--save", tmp_path / "full", "--quiet"]) == 0
    ck = tmp_path / "ck"
    with monkeypatch.context() as m:
        kill_after_slice(m, first=3, epoch=EVERY)
        assert run_main([*SWEEP, "--save", ck, "--checkpoint-every", EVERY, "--quiet"]) == "killed"
    assert manifest(ck)["extra"]["layout"] == {"chunks": [3, 1], "groups": [0, 4], "slices": [0, 3, 4, 5, 6, 7]}
    monkeypatch.setattr(sweep, "available_bytes", lambda: 1000 * small())  # now every group would fit at once
    capsys.readouterr()
    assert run_main(["sweep", "--resume", ck]) == 0
    assert "group 1: 4 runs need ~0.0 GiB, over the budget the sweep started with: running 2 chunks of <= 3 " \
           "runs" in capsys.readouterr().out
    assert_same_table(ck, tmp_path)


def test_a_sweep_killed_with_sigkill_resumes_to_the_same_table(tmp_path):
    """A real kill: a sweep process SIGKILLed while its second group writes checkpoints, resumed in
    this process, ends with the table of the same sweep run uninterrupted here."""
    long = [*SWEEP[:SWEEP.index("--epochs")], "--epochs", "600", "--early-stopping", "none", "--no-compile-cache"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.Popen([sys.executable, "-m", "jaxgcn.cli", *long, "--save", "ck", "--checkpoint-every", "50",
                             "--quiet"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def in_group_2() -> bool:  # group 1 finished and a slice of group 2 saved past epoch 100
        try:
            state = batch_state.load(tmp_path / "ck")
        except ValueError:  # not written yet (each file appears by a rename)
            return False
        return "0" in state.get("done", {}) and any(v["epoch"] >= 100 for v in state["slices"].values())
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline and not in_group_2():
        time.sleep(0.01)
    assert proc.poll() is None, f"the sweep finished before it could be killed: {proc.stderr.read()[-2000:]}"
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert run_main(["sweep", "--resume", tmp_path / "ck", "--quiet"]) == 0
    assert run_main([*long, "--save", tmp_path / "full", "--quiet"]) == 0
    assert_same_table(tmp_path / "ck", tmp_path)


# --- refusals ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """A sweep killed in its second group, with a slice saved (copied by each test that edits it)."""
    d = tmp_path_factory.mktemp("killed") / "ck"
    with pytest.MonkeyPatch.context() as m:
        kill_after_slice(m, first=4, epoch=EVERY)
        assert run_main([*SWEEP, "--save", d, "--checkpoint-every", EVERY, "--quiet"]) == "killed"
    return d



def edited(killed, tmp_path, edit) -> object:
    ck = tmp_path / "ck"
    shutil.copytree(killed, ck)
    path = ck / batch_state.FOLDER / batch_state.MANIFEST
    state = json.loads(path.read_text())
    edit(state)
    path.write_text(json.dumps(state))
    return ck


@pytest.mark.parametrize("edit, match", [
    (lambda s: s["done"].update({"1": s["done"].pop("0")}), "done key '1' is not the first run of one of the sweep's"),
    (lambda s: s["done"]["0"].pop(), "done group 0 does not hold 4 runs' [val_acc, test_acc, epochs]"),
    (lambda s: s["done"]["0"][0].__setitem__(2, 31), "done group 0 does not hold 4 runs'"),
    (lambda s: s["slices"].update({"5": s["slices"].pop("4")}), "slice key '5' is not the first run of one of the"),
    (lambda s: s["slices"]["4"].__setitem__("epoch", 31), "slice 4 is at epoch 31, outside the runs' 0-30"),
    (lambda s: s["extra"]["layout"].__setitem__("chunks", [4]), "its layout's chunks are not 2 positive run counts"),
    # slices of 4 runs where this machine makes slices of 2 (another device count would)
    (lambda s: s["extra"]["layout"].__setitem__("slices", [0, 4]), "the run was started with different layout"),
    (lambda s: s["extra"]["grid"].__setitem__("lr", [0.02, 0.05]), "the run was started with different grid"),
], ids=["done_key", "done_short", "done_epochs", "slice_key", "slice_epoch", "chunks_damaged", "other_slices",
        "grid"])
def test_a_damaged_or_edited_state_is_refused_in_one_line(killed, tmp_path, capsys, edit, match):
    ck = edited(killed, tmp_path, edit)
    err = refused(["sweep", "--resume", ck], capsys)
    assert match in err


def test_a_train_batch_state_is_refused_by_sweep_resume_and_a_sweep_state_by_train(killed, tmp_path, capsys):
    batch = tmp_path / "batch"
    with pytest.MonkeyPatch.context() as m:  # a train batch killed with its state saved
        real = batch_state.Saver.__call__

        def save_then_kill(self, first, state):
            real(self, first, state)
            raise Killed("killed")
        m.setattr(batch_state.Saver, "__call__", save_then_kill)
        assert run_main(["train", *SWEEP[1:9], "--hidden", "8", "--seeds", "2", "--epochs", "10", "--save", batch,
                         "--checkpoint-every", "5", "--quiet"]) == "killed"
    err = refused(["sweep", "--resume", batch], capsys)
    assert f"--resume {batch}: holds the save of a `jaxgcn train` run, not of a `jaxgcn sweep` one; resume it with " \
           f"`jaxgcn train --resume {batch}`" in err
    err = refused(["train", "--resume", killed], capsys)
    assert f"--resume {killed}: holds the save of a sweep, not of a `jaxgcn train` one" in err


def test_a_resume_with_another_grid_value_is_refused_naming_both(killed, capsys):
    err = refused(["sweep", "--resume", killed, "--lr", "0.02,0.05"], capsys)
    assert "the checkpoint was trained with --lr 0.01,0.05; this command gives --lr 0.02,0.05" in err


def test_a_finished_sweep_has_nothing_to_resume(full, capsys):
    err = refused(["sweep", "--resume", full / "full"], capsys)
    assert "holds a finished sweep (sweep.json, sweep.csv, no batch state): nothing to resume" in err


def test_a_sweep_stopped_before_saving_anything_has_nothing_to_resume(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    err = refused([*SWEEP, "--resume", tmp_path / "empty"], capsys)
    assert f"--resume {tmp_path / 'empty'}: holds no sweep progress to resume (no batch-state/state.json: the " \
           "sweep was stopped before its first group finished" in err


def test_a_save_of_another_sweep_is_refused_unless_overwrite(full, tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(full / "full", other)
    err = refused([*SWEEP, "--hidden", "16", "--save", other], capsys)
    assert f"--save {other}: holds the model of another run, trained with --hidden 64,128; this run gives " \
           "--hidden 16" in err
    assert run_main([*SWEEP, "--hidden", "16", "--epochs", "5", "--save", other, "--overwrite", "--quiet"]) == 0
    assert json.loads((other / app_sweep.REPORT).read_text())["grid"]["hidden"] == [16]


@pytest.mark.parametrize("argv, match", [
    (["--checkpoint-every", "5"], "--checkpoint-every K needs --save DIR"),
    (["--save", "{tmp}/d", "--distributed"], "--save {tmp}/d with --distributed: a sweep's progress is kept by a"),
    (["--save", "{tmp}/train"], "holds the save of a `jaxgcn train` run, not of a `jaxgcn sweep` one"),
    (["--save", "{tmp}/linked"], "batch-state is a link"),
], ids=["every_without_save", "distributed", "train_folder", "linked_state"])
def test_save_flags_refused(tmp_path, capsys, argv, match):
    (tmp_path / "train" / batch_state.FOLDER).mkdir(parents=True)
    (tmp_path / "train" / batch_state.FOLDER / batch_state.MANIFEST).write_text(json.dumps({"extra": {}}))
    (tmp_path / "linked").mkdir()
    os.symlink(tmp_path, tmp_path / "linked" / batch_state.FOLDER)
    err = refused([*SWEEP, *(a.format(tmp=tmp_path) for a in argv)], capsys)
    assert match.format(tmp=tmp_path) in err
