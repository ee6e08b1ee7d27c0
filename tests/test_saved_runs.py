"""What a batch's checkpoints and a several-run save hold, as a user meets them: a batch interrupted
and resumed twice ends where the uninterrupted one does, a slice file restores the very state it
saved, each ``run-NNN`` keeps its own metrics, the best run's tie rule and a tampered ``runs.json``,
the resumed epoch when a slice never started, a ``--save`` folder that existed before a failing
run, a diverged run (an infinite loss counts) that never overwrites its last good checkpoint, and
the best-epoch tie rule."""

from __future__ import annotations

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cli_run import kill_after_save, run_main, unwrap

from jaxgcn import datasets
from jaxgcn.store import batch_state, checkpoint
from jaxgcn.batched import entries_for, fit_runs
from jaxgcn.cli import train as cli_train
from jaxgcn.core.models import GCNConfig
from jaxgcn.train import Patience, TrainConfig, TrainingDiverged, fit
from jaxgcn.training.state import init_run_state, record_epoch

# 3 seeds with --hidden 128: two runs execute together (jaxgcn.plan.runs_per_device_for), so the
# batch trains in two slices, runs 0-1 then run 2 (padded), each with its own slice file
BATCH = ["--dataset", "synthetic", "--nodes", "200", "--classes", "3", "--features", "8", "--hidden", "128",
         "--epochs", "30", "--early-stopping", "patience", "--patience", "8", "--seeds", "3", "--quiet"]
EVERY = 5
pytestmark = pytest.mark.usefixtures("cpu_slices")  # sliced as on the CPU, on an accelerator too




def slice_epochs(directory) -> dict[str, int]:
    return {k: v["epoch"] for k, v in batch_state.load(directory)["slices"].items()}


def saved_params(directory) -> list:
    return [checkpoint.load(checkpoint.run_dir(directory, j)).params for j in range(3)]


def assert_same_runs(tmp_path, directory, report, full) -> None:
    """The report and every run's saved params equal the uninterrupted batch's."""
    got, want = (json.loads((tmp_path / f).read_text()) for f in (report, "full.json"))
    for key in ("test_acc", "val_acc", "epochs_run", "restored_epoch"):
        assert got[key] == want[key], key
    for a, b in zip(saved_params(directory), saved_params(full)):
        for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
            np.testing.assert_array_equal(u, v)
    assert not (directory / batch_state.FOLDER).exists()  # a finished batch holds no state


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """The uninterrupted batch (``full``), and the same batch killed right after its first slice
    finished (``ck``: the second slice never started)."""
    d = tmp_path_factory.mktemp("batch")
    assert run_main(["train", *BATCH, "--save", d / "full", "--json", d / "full.json"]) == 0
    full = json.loads((d / "full.json").read_text())
    first_slice_end = max(full["epochs_run"][:2])  # the slice's shared epoch counter: its furthest run
    assert len(set(full["epochs_run"])) > 1 and first_slice_end > 3 * EVERY  # the runs stop at different epochs
    with pytest.MonkeyPatch.context() as m:
        kill_after_save(m, first=0, epoch=first_slice_end)
        assert run_main(["train", *BATCH, "--save", d / "ck", "--checkpoint-every", EVERY]) == "killed"
    assert slice_epochs(d / "ck") == {"0": first_slice_end}
    return d, full, first_slice_end


def test_a_batch_whose_last_slice_never_started_resumes_from_epoch_0(batch, tmp_path, monkeypatch, capsys):
    d, full, first_slice_end = batch
    ck = tmp_path / "ck"
    shutil.copytree(d / "ck", ck)
    seen = []
    monkeypatch.setattr(cli_train, "summary_line", lambda outcome: seen.append(outcome) or "summary")
    capsys.readouterr()
    assert run_main(["train", "--resume", ck, "--json", tmp_path / "resumed.json"]) == 0
    assert f"resuming 1 slice(s) of runs at epoch {first_slice_end} of {ck}\n" in capsys.readouterr().out
    assert seen[0].resumed_epoch == 0  # run 2 trained every epoch in this process: none was restored
    shutil.copy(d / "full.json", tmp_path / "full.json")
    assert_same_runs(tmp_path, ck, "resumed.json", d / "full")


def test_a_batch_resumed_twice_equals_the_uninterrupted_one(batch, tmp_path, monkeypatch, capsys):
    d, full, first_slice_end = batch
    ck = tmp_path / "ck"
    shutil.copytree(d / "ck", ck)
    with monkeypatch.context() as m:  # the first resume (its flags all restored) killed in the second slice
        kill_after_save(m, first=2, epoch=2 * EVERY)
        assert run_main(["train", "--resume", ck]) == "killed"
    # the first resume went on saving as the run did: its progress is what the second one starts from
    assert slice_epochs(ck) == {"0": first_slice_end, "2": 2 * EVERY}
    seen = []
    monkeypatch.setattr(cli_train, "summary_line", lambda outcome: seen.append(outcome) or "summary")
    capsys.readouterr()
    assert run_main(["train", "--resume", ck, "--json", tmp_path / "resumed.json"]) == 0
    assert f"resuming 2 slice(s) of runs at epoch {2 * EVERY}-{first_slice_end} of {ck}\n" in capsys.readouterr().out
    assert seen[0].resumed_epoch == 2 * EVERY  # the earliest slice's epoch
    shutil.copy(d / "full.json", tmp_path / "full.json")
    assert_same_runs(tmp_path, ck, "resumed.json", d / "full")


# --- a slice file's content ----------------------------------------------------------------------


def test_every_slice_file_restores_the_state_it_saved(tmp_path):
    p = datasets.prepare(datasets.synthetic(200, n_classes=3, n_features=8, homophily=0.5, seed=0))
    entries = entries_for([0, 1, 2], model_config=GCNConfig(hidden=8),
                          config=TrainConfig(epochs=12, early_stopping=Patience(4)))
    save = batch_state.saver(tmp_path, extra={}, fingerprint={})
    checked: list[tuple[int, int]] = []

    def on_checkpoint(first, state):
        save(first, state)
        manifest = batch_state.load(tmp_path)  # read back at once, as a process killed now would leave it
        entry = manifest["slices"][str(first)]
        reason = np.asarray(state.runs.reason)
        assert (entry["epoch"], entry["running"]) == (int(state.step), int(np.sum(reason == 0)))
        template = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype), state)
        restored = checkpoint.state_arrays(batch_state.slice_state(tmp_path, manifest, first, template))
        want = checkpoint.state_arrays(state)  # params, optimizer moments, key, early stopping, history, epoch
        assert sorted(restored) == sorted(want)
        for name, array in want.items():
            np.testing.assert_array_equal(restored[name], array, err_msg=f"slice {first} epoch {entry['epoch']}")
        checked.append((first, entry["epoch"]))

    fit_runs(p.data, p.n_classes, entries, runs_per_device=2, checkpoint_every=5, on_checkpoint=on_checkpoint)
    assert {f for f, _ in checked} == {0, 2} and len(checked) >= 5
    # the two slices' files hold different runs' states (a slice restored from the other's would differ)
    manifest = batch_state.load(tmp_path)
    files = {k: checkpoint.read_arrays(tmp_path / batch_state.FOLDER / v["file"], "test")
             for k, v in manifest["slices"].items()}
    assert any(not np.array_equal(files["0"][n], files["2"][n]) for n in files["0"])


def test_a_slice_file_changed_in_place_is_refused_by_its_sha256(tmp_path, capsys):
    """A same-size change (a flipped byte, a file swapped for another slice's) is caught by the
    recorded SHA-256, not only a truncation by the recorded size."""
    ck = tmp_path / "ck"
    with pytest.MonkeyPatch.context() as m:
        kill_after_save(m, first=2, epoch=EVERY)
        assert run_main(["train", *BATCH, "--save", ck, "--checkpoint-every", EVERY]) == "killed"
    manifest = batch_state.load(ck)
    path = ck / batch_state.FOLDER / manifest["slices"]["2"]["file"]
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0x01
    path.write_bytes(bytes(blob))
    capsys.readouterr()
    assert run_main(["train", "--resume", ck]) == 2
    err = unwrap(capsys.readouterr().err)
    assert f"--resume {path}: {len(blob)} bytes that do not match the recorded size/SHA-256" in err
    assert len(err.splitlines()) == 1


# --- the several-run save ------------------------------------------------------------------------


def test_each_saved_run_holds_its_own_metrics_epochs_and_seed(batch, tmp_path):
    d, full, _ = batch
    metrics = [checkpoint.load(checkpoint.run_dir(d / "full", j)).meta for j in range(3)]
    assert len({m["metrics"]["val_loss"] for m in metrics}) == 3  # three different runs
    for j, meta in enumerate(metrics):
        assert meta["metrics"]["test_acc"] == pytest.approx(full["test_acc"][j], abs=1e-7)
        assert meta["metrics"]["val_acc"] == pytest.approx(full["val_acc"][j], abs=1e-7)
        assert meta["epoch"] == full["epochs_run"][j] and meta["extra"]["restored_epoch"] == full["restored_epoch"][j]
        assert (meta["extra"]["seed"], meta["extra"]["split_index"]) == (j, 0)


def runs(*val_accs: float) -> list[dict]:
    return [{"seed": j, "split": 0, "val_acc": v, "test_acc": 0.5} for j, v in enumerate(val_accs)]


def test_the_best_run_is_the_first_of_equal_validation_accuracy(tmp_path):
    for accs, best in (((0.7, 0.8, 0.8), 1), ((0.8, 0.7, 0.8), 0), ((0.6, 0.7, 0.8), 2), ((0.5, 0.5, 0.5), 0)):
        checkpoint.save_runs(tmp_path, runs(*accs))
        assert json.loads((tmp_path / checkpoint.RUNS).read_text())["best"] == best, accs
        directory, note = checkpoint.resolve_run(tmp_path, None)
        assert directory == checkpoint.run_dir(tmp_path, best)
        assert f"run {best} of 3 (seed {best}, split 0, validation accuracy {accs[best]:.4f}" in note


@pytest.mark.parametrize("edit", [
    pytest.param(lambda m: m.update(best=3), id="best-past-the-last-run"),
    pytest.param(lambda m: m.update(best=-1), id="best-negative"),
    pytest.param(lambda m: m["runs"][0].update(dir="run-001"), id="dirs-swapped"),
    pytest.param(lambda m: m["runs"][1].update(seed="1"), id="seed-a-string"),
    pytest.param(lambda m: m["runs"][2].update(val_acc=True), id="accuracy-a-boolean"),
    pytest.param(lambda m: m["runs"][2].pop("test_acc"), id="accuracy-missing"),
    pytest.param(lambda m: m.update(format="jaxgcn-runs-2"), id="other-format"),
])
def test_a_tampered_runs_manifest_is_refused_in_one_line(batch, tmp_path, capsys, edit):
    d, _, _ = batch
    m = tmp_path / "m"
    shutil.copytree(d / "full", m)
    manifest = json.loads((m / checkpoint.RUNS).read_text())
    edit(manifest)
    (m / checkpoint.RUNS).write_text(json.dumps(manifest))
    capsys.readouterr()
    assert run_main(["evaluate", "--checkpoint", m, *BATCH[:8]]) == 2
    err = unwrap(capsys.readouterr().err)
    assert err == (f"jaxgcn: error: checkpoint {m / checkpoint.RUNS}: not a jaxgcn-runs-1 manifest (format, best, "
                   "and per run its dir, seed, split, val_acc and test_acc); it was edited or not written by this "
                   "jaxgcn: save the runs again\n")


# --- a failing run and the --save folder -----------------------------------------------------------

# the first Adam step puts weights near 1e20, whose squares overflow float32: the loss is NaN/inf at
# epoch 2 (exit status 1)
DIVERGING = ["--dataset", "synthetic", "--nodes", "200", "--epochs", "30", "--early-stopping", "none", "--lr",
             "1e20", "--norm", "none", "--feature-norm", "none", "--quiet"]


def files_of(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".jaxgcn.lock"}


def test_a_failing_run_leaves_a_save_folder_that_existed_as_it_was(tmp_path, capsys):
    # an earlier model of the same data (the failing run would have replaced it), and an empty folder
    kept, empty = tmp_path / "kept", tmp_path / "empty"
    assert run_main(["train", *DIVERGING[:4], "--epochs", "3", "--quiet", "--save", kept]) == 0
    before = files_of(kept)
    assert "checkpoint.json" in before
    empty.mkdir()
    for folder in (kept, empty):  # --overwrite: the earlier model's settings differ (train --save refuses it)
        assert run_main(["train", *DIVERGING, "--save", folder, "--overwrite"]) == 1
        assert unwrap(capsys.readouterr().err).startswith("jaxgcn: error: training diverged")
    assert files_of(kept) == before and checkpoint.load(kept).meta["epoch"] == 3
    assert empty.is_dir() and [p.name for p in empty.iterdir() if p.name != ".jaxgcn.lock"] == []
    # a folder the run created is removed again (tests/test_bad_outputs.py): only those two remain
    assert run_main(["train", *DIVERGING, "--save", tmp_path / "new"]) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "kept"]


@pytest.mark.parametrize("batch_args", [[], ["--seeds", "2"]], ids=["one-run", "batch"])
def test_a_diverged_run_keeps_its_last_good_checkpoint(tmp_path, capsys, batch_args):
    ck = tmp_path / "ck"
    assert run_main(["train", *DIVERGING, *batch_args, "--save", ck, "--checkpoint-every", "1"]) == 1
    assert "training diverged: the loss became NaN/inf at epoch 2" in unwrap(capsys.readouterr().err)
    if batch_args:  # the slice's state of epoch 1, every run still training: not epoch 2's diverged one
        assert [(s["epoch"], s["running"]) for s in batch_state.load(ck)["slices"].values()] == [(1, 2)]
    else:
        saved = checkpoint.load(ck)
        assert saved.meta["epoch"] == 1 and saved.meta["state_file"] is None  # its state: slice 0 of batch-state
        assert [(k, s["epoch"], s["running"]) for k, s in batch_state.load(ck)["slices"].items()] == [("0", 1, 1)]
        assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree.leaves(saved.params))
    assert "resuming" in _resumed_line(ck, capsys)  # the good state resumes (and diverges again, at epoch 2)


def _resumed_line(ck, capsys) -> str:
    assert run_main(["train", "--resume", ck]) == 1
    out = capsys.readouterr()
    assert "at epoch 2" in unwrap(out.err)
    return out.out


# --- divergence on an infinite loss, and the best-epoch tie rule -------------------------------------


class Seen:
    """A stand-in for jaxgcn.io.progress.Progress that keeps the last history it was shown."""

    def compiling(self) -> None:
        pass

    def compiled(self, seconds: float) -> None:
        pass

    def epochs(self, epoch: int, history: dict, elapsed: float) -> None:
        self.epoch, self.history = epoch, {k: np.asarray(v) for k, v in history.items()}


def test_an_infinite_loss_is_divergence_like_nan():
    # an L2 factor of 1e38 times the squared weights overflows float32: the first epoch's loss is
    # +inf, not NaN (the epoch after it would be NaN: a check for NaN alone would stop one epoch late)
    p = datasets.prepare(datasets.synthetic(200, n_classes=3, n_features=8, homophily=0.5, seed=0))
    config = TrainConfig(epochs=10, weight_decay=1e38, early_stopping=None)
    seen = Seen()
    with pytest.raises(TrainingDiverged, match=r"the loss became NaN/inf at epoch 1;"):
        fit(p.data, p.n_classes, config=config, log=None, progress=seen)
    assert seen.epoch == 1 and seen.history["loss"][0] == np.inf
    with pytest.raises(TrainingDiverged, match=r"run\(s\) \[0, 1\] \(seed 0, lr 0.01\): training diverged: the loss "
                       r"became NaN/inf at epoch 1;"):
        fit_runs(p.data, p.n_classes, entries_for([0, 1], config=config))


def _step(state, config, val_acc, val_loss, params):
    f = jnp.float32
    return record_epoch(state, config, True, params, state.opt_state, state.key, f(1.0), f(0.5), f(val_loss),
                        f(val_acc), f(val_loss))


def test_the_best_epoch_on_equal_accuracy_is_the_lower_loss_then_the_earlier():
    config = TrainConfig(epochs=10, early_stopping=Patience(50))
    params = {"w": jnp.zeros(2, jnp.float32)}
    state = init_run_state(config, params, jax.random.key(0), 0.01, 5e-4)
    state = _step(state, config, 0.5, 1.0, {"w": jnp.full(2, 1.0, jnp.float32)})  # epoch 1: the first best
    for val_acc, val_loss, best in ((0.5, 1.0, 1),  # the same accuracy and loss: the earlier epoch stays
                                    (0.5, 1.25, 1),  # the same accuracy, a higher loss
                                    (0.5, 0.75, 4),  # the same accuracy, a lower loss: this epoch
                                    (0.25, 0.1, 4),  # a lower accuracy, whatever its loss
                                    (0.75, 2.0, 6)):  # a higher accuracy, whatever its loss
        state = _step(state, config, val_acc, val_loss, {"w": jnp.full(2, float(state.epoch) + 1, jnp.float32)})
        assert int(state.best_epoch) == best, (val_acc, val_loss)
        np.testing.assert_array_equal(state.best_params["w"], [best, best])
        assert (float(state.best_val_acc), float(state.best_val_loss)) == {1: (0.5, 1.0), 4: (0.5, 0.75),
                                                                          6: (0.75, 2.0)}[best]


def test_a_patience_run_returns_the_lowest_loss_epoch_among_equal_best_accuracies():
    # 120 nodes: the validation accuracy is a multiple of 1/|val| and the best one is reached at
    # epochs 5-10 (measured) while the validation loss still falls: the run returns epoch 10
    p = datasets.prepare(datasets.synthetic(120, n_classes=3, n_features=8, homophily=0.6, seed=0))
    res = fit(p.data, p.n_classes, model_config=GCNConfig(hidden=8),
              config=TrainConfig(epochs=60, early_stopping=Patience(60)), key=jax.random.key(0), log=None)
    val_acc, val_loss = res.history["val_acc"], res.history["val_loss"]
    ties = np.flatnonzero(val_acc == val_acc.max())
    assert len(ties) > 1 and len(set(val_loss[ties].tolist())) == len(ties)  # a tie on accuracy, not on loss
    want = int(ties[np.argmin(val_loss[ties])]) + 1
    assert want != ties[0] + 1 and res.restored_epoch == want
    assert res.metrics["val_loss"] == pytest.approx(float(val_loss[want - 1]), rel=1e-5)
