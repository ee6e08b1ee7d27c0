"""Save and resume on every kind of run: one run (tests/test_checkpoint.py, tests/test_resume.py),
a batch of runs that stop at different epochs, the graph's rows sharded over 4 CPU devices, and a
job of 2 processes. Each cell kills a training process with SIGKILL while it writes checkpoints,
resumes it, and asserts the saved params equal an uninterrupted run's bit for bit."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from cli_run import run_main, unwrap
from conftest import closed_port
from tiny_datasets import write_multilabel_npz

from jaxgcn import datasets
from jaxgcn.store import batch_state, checkpoint
from jaxgcn.batched import entries_for, fit_runs
from jaxgcn.train import Patience, TrainConfig

# 300 noisy nodes: with patience 400 the three seeds stop at epochs 1023, 698 and 1163
# (the processes share the suite's persistent compilation cache: the resumed job's programs are
# the uninterrupted job's, and each later start is quicker)
SYNTHETIC = ["--dataset", "synthetic", "--nodes", "300", "--homophily", "0.3", "--lr", "0.005",
             "--early-stopping", "patience", "--quiet"]
KINDS = {
    # kind: (arguments, the epoch a checkpoint must show before the kill, checkpoints every)
    # --backend segment --devices 2: the batch on a 2-device mesh (the fused kernel keeps one device)
    "batched": (["--seeds", "3", "--epochs", "3000", "--patience", "400", "--backend", "segment", "--devices", "2"],
                750, 50),
    "shard-graph": (["--shard-graph", "--devices", "4", "--epochs", "800", "--patience", "5000"], 300, 100),
    # several 0/1 labels per node (npz:ml, tiny_datasets.write_multilabel_npz): a batch scored by ROC-AUC
    "multilabel": (["--dataset", "npz:ml", "--lr", "0.005", "--early-stopping", "patience", "--quiet", "--seeds",
                    "3", "--epochs", "800", "--patience", "5000"], 300, 100),
}


def _env() -> dict[str, str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)  # --devices 4 gives the process 4 CPU devices itself; else one per process
    return env


def _launch(args: list[str], cwd: Path, processes: int) -> list[subprocess.Popen]:
    """The command line in ``processes`` processes (a --distributed job on 127.0.0.1 when > 1)."""
    if processes == 1:
        commands = [args]
    else:
        port = closed_port()  # skips where the machine has no local sockets
        commands = [[*args, "--distributed", "--coordinator", f"127.0.0.1:{port}", "--num-processes",
                     str(processes), "--process-id", str(i)] for i in range(processes)]
    return [subprocess.Popen([sys.executable, "-m", "jaxgcn.cli", "train", *c], cwd=cwd, env=_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in commands]


def _finish(procs: list[subprocess.Popen]) -> list[str]:
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    return [out for out, _ in outs]


def _saved_epoch(ck: Path) -> int:
    """The epoch the run's last complete checkpoint holds (the least over a batch's slices)."""
    try:
        if (ck / batch_state.FOLDER).is_dir():
            return min(s["epoch"] for s in batch_state.load(ck)["slices"].values())
        return json.loads((ck / checkpoint.META).read_text())["epoch"]
    except (OSError, ValueError, KeyError):  # not written yet (each file appears by a rename)
        return 0


def _kill_after(procs: list[subprocess.Popen], ck: Path, epoch: int) -> int:
    deadline = time.time() + 300
    while time.time() < deadline and all(p.poll() is None for p in procs) and _saved_epoch(ck) < epoch:
        time.sleep(0.01)
    assert all(p.poll() is None for p in procs), "the run finished before it could be killed"
    for p in procs:
        p.send_signal(signal.SIGKILL)
    for p in procs:
        p.communicate()
    return _saved_epoch(ck)


def _params(directory: Path) -> list[dict[str, np.ndarray]]:
    """Every run's saved params (one run's checkpoint, or each run of a batch's save)."""
    runs = sorted(directory.glob("run-*")) or [directory]
    return [checkpoint.load(d).params for d in runs]


def _same_params(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for u, v in zip(jax.tree.leaves(x), jax.tree.leaves(y)):
            np.testing.assert_array_equal(u, v)


def _killed_and_resumed_equals_uninterrupted(tmp_path: Path, args: list[str], kill_at: int, every: int,
                                             processes: int) -> None:
    _finish(_launch([*args, "--save", "full", "--json", "full.json"], tmp_path, processes))
    killed = _launch([*args, "--save", "ck", "--checkpoint-every", str(every), "--json", "never.json"], tmp_path,
                     processes)
    saved = _kill_after(killed, tmp_path / "ck", kill_at)
    assert kill_at <= saved and not (tmp_path / "never.json").exists()
    _finish(_launch([*args, "--resume", "ck", "--save", "ck", "--json", "resumed.json"], tmp_path, processes))
    full, resumed = (json.loads((tmp_path / f).read_text()) for f in ("full.json", "resumed.json"))
    for key in ("test_acc", "val_acc", "epochs_run", "restored_epoch"):
        assert resumed[key] == full[key], key
    assert None not in resumed["restored_epoch"]  # patience: the epoch whose params each run returns
    _same_params(_params(tmp_path / "ck"), _params(tmp_path / "full"))
    assert not (tmp_path / "ck" / batch_state.FOLDER).exists()  # a finished batch holds no state
    # the saved model, evaluated on one device in this process, scores what training reported
    run = len(resumed["test_acc"]) - 1
    data = args[:args.index("--lr")]  # the dataset flags
    picked = ["--run", str(run)] if run else []
    assert run_main(["evaluate", "--checkpoint", tmp_path / "ck", *picked, *data, "--json", tmp_path / "ev.json"]) == 0
    scored = json.loads((tmp_path / "ev.json").read_text())
    assert abs(scored.get("accuracy", scored.get("rocauc")) - resumed["test_acc"][run]) < 1e-6


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_killed_run_of_each_kind_resumes_to_the_uninterrupted_params(tmp_path, kind):
    args, kill_at, every = KINDS[kind]
    if kind == "multilabel":
        # its own dataset flags in place of the synthetic graph's, the path absolute for evaluate here
        args = [f"npz:{write_multilabel_npz(tmp_path / 'ml')}" if a == "npz:ml" else a for a in args]
    _killed_and_resumed_equals_uninterrupted(tmp_path, args if kind == "multilabel" else [*SYNTHETIC, *args],
                                             kill_at, every, processes=1)
    if kind == "batched":  # the runs stopped at different epochs, some before the kill and some after
        epochs = json.loads((tmp_path / "full.json").read_text())["epochs_run"]
        assert min(epochs) < kill_at < max(epochs), epochs


def test_a_killed_two_process_job_resumes_to_the_uninterrupted_params(tmp_path):
    # 200 epochs (about 4 s of training for the job): killed after epoch 100, with 100 still to go
    args = [*SYNTHETIC, "--epochs", "200", "--patience", "5000"]
    _killed_and_resumed_equals_uninterrupted(tmp_path, args, 100, 25, processes=2)


def test_a_resume_on_another_layout_or_batch_is_refused_naming_the_values(tmp_path, capsys):
    base = [*SYNTHETIC, "--epochs", "40", "--patience", "400"]
    assert run_main(["train", *base, "--seeds", "3", "--save", tmp_path / "b", "--checkpoint-every", "10"]) == 0
    capsys.readouterr()
    assert run_main(["train", *base, "--seeds", "3", "--resume", tmp_path / "b"]) == 2  # finished: no state
    # what the folder holds instead (issue 43: it said "no checkpoint.json" when the flags were left out)
    assert "holds a finished --seeds 3 save (3 runs in runs.json, no batch state): nothing to resume" in unwrap(
        capsys.readouterr().err)
    # an interrupted batch (its state written, never removed)
    spec = ["--epochs", "40", "--patience", "400"]
    env = _env()
    cmd = [sys.executable, "-c", "import sys\nfrom jaxgcn.store import batch_state\nbatch_state.remove = None\n"
           "from jaxgcn.cli import main\nsys.exit(main(sys.argv[1:]))", "train", *SYNTHETIC, *spec, "--seeds", "3",
           "--save", str(tmp_path / "c"), "--checkpoint-every", "10"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and (tmp_path / "c" / batch_state.FOLDER / batch_state.MANIFEST).is_file()
    assert run_main(["train", *SYNTHETIC, *spec, "--seeds", "4", "--resume", tmp_path / "c"]) == 2
    assert "the checkpoint was trained with --seeds 3; this command gives --seeds 4" in unwrap(capsys.readouterr().err)
    assert run_main(["train", *SYNTHETIC, *spec, "--seeds", "3", "--lr", "0.01", "--resume", tmp_path / "c"]) == 2
    assert "trained with --lr 0.005; this command gives --lr 0.01" in unwrap(capsys.readouterr().err)
    # a state that records no options (an older jaxgcn's): the settings themselves are compared
    old = _without_options(tmp_path / "c", tmp_path / "old", f"{batch_state.FOLDER}/{batch_state.MANIFEST}")
    assert run_main(["train", *SYNTHETIC, *spec, "--seeds", "4", "--resume", old]) == 2
    assert "seeds: 3 -> 4" in unwrap(capsys.readouterr().err)
    assert run_main(["train", *SYNTHETIC, *spec, "--seeds", "3", "--lr", "0.01", "--resume", old]) == 2
    assert "train.lr: 0.005 -> 0.01" in unwrap(capsys.readouterr().err)


def _without_options(source: Path, to: Path, meta: str) -> Path:
    """A copy of a checkpoint folder whose ``meta`` JSON records no command options, as an older
    jaxgcn wrote it (the JSON is not hashed: the files it names are)."""
    shutil.copytree(source, to)
    saved = json.loads((to / meta).read_text())
    del saved["extra"]["options"]
    (to / meta).write_text(json.dumps(saved))
    return to


def test_a_sharded_checkpoint_resumes_on_its_own_device_count_only(tmp_path):
    args = [*SYNTHETIC, "--epochs", "40", "--patience", "400", "--shard-graph"]
    env = _env()

    def train(*more: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "jaxgcn.cli", "train", *args, *more], cwd=tmp_path, env=env,
                              capture_output=True, text=True)
    cmd = [sys.executable, "-c", "import sys\nfrom jaxgcn.store import checkpoint\nsave = checkpoint.save\n"
           "def killed(*a, **kw):\n    if kw.get('state') is None:\n        raise KeyboardInterrupt('killed')\n"
           "    return save(*a, **kw)\ncheckpoint.save = killed\nfrom jaxgcn.cli import main\n"
           "sys.exit(main(sys.argv[1:]))", "train", *args, "--devices", "4", "--save", "ck", "--checkpoint-every",
           "10"]
    four = {**env, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}  # jaxgcn imported before main
    killed = subprocess.run(cmd, cwd=tmp_path, env=four, capture_output=True, text=True)
    assert killed.returncode != 0 and checkpoint.load(tmp_path / "ck").meta["epoch"] == 30
    other = train("--devices", "2", "--resume", "ck")
    assert other.returncode == 2 and "trained with --devices 4; this command gives --devices 2" in \
        unwrap(other.stderr), other.stderr[-2000:]
    # a checkpoint that records no options (an older jaxgcn's): the layout itself is compared
    _without_options(tmp_path / "ck", tmp_path / "old", checkpoint.META)
    other = train("--devices", "2", "--resume", "old")
    assert other.returncode == 2 and "layout.devices: 4 -> 2" in unwrap(other.stderr), other.stderr[-2000:]
    one = subprocess.run([sys.executable, "-m", "jaxgcn.cli", "train", *args[:-1], "--resume", "old"], cwd=tmp_path,
                         env=env, capture_output=True, text=True)
    assert one.returncode == 2 and "layout: {'devices': 4, 'exchange'" in unwrap(one.stderr), one.stderr[-2000:]
    # --resume alone: --shard-graph --devices 4 (and every other setting) come from the checkpoint
    alone = subprocess.run([sys.executable, "-m", "jaxgcn.cli", "train", "--resume", "ck"], cwd=tmp_path, env=env,
                           capture_output=True, text=True)
    assert alone.returncode == 0 and "| 4 devices, " in alone.stdout, alone.stderr[-2000:]
    assert checkpoint.load(tmp_path / "ck").meta["epoch"] == 40


def test_every_slice_of_a_batch_resumes_from_any_of_its_checkpoints():
    # The library hooks: 3 runs in slices of 2 (the second padded), patience stops them at
    # different epochs; a job killed after any checkpoint resumes to the uninterrupted params.
    p = datasets.prepare(datasets.synthetic(300, n_classes=3, n_features=8, homophily=0.3, seed=0))
    config = TrainConfig(lr=0.005, epochs=300, early_stopping=Patience(40))
    entries = entries_for([0, 1, 2], config=config)
    saves: list[tuple[int, int, dict]] = []

    def fit(**hooks):
        return fit_runs(p.data, p.n_classes, entries, runs_per_device=2, checkpoint_every=25, **hooks)

    full = fit(on_checkpoint=lambda first, s: saves.append((first, int(s.step), checkpoint.state_arrays(s))))
    assert len(set(full.epochs_run.tolist())) == 3 and {f for f, _, _ in saves} == {0, 2}
    for cut in (3, len(saves) - 2):  # killed mid first slice; killed mid second slice, the first done
        latest = {first: (step, arrays) for first, step, arrays in saves[:cut + 1]}
        steps: dict[int, list[int]] = {}
        res = fit(resume=lambda first, template: checkpoint.restore_state(template, latest[first][1], "test")
                  if first in latest else None,
                  on_checkpoint=lambda first, s: steps.setdefault(first, []).append(int(s.step)))
        for first, (step, _) in latest.items():  # each slice went on from its saved epoch, not from 0
            assert steps[first][0] > step or steps[first] == [step], (first, step, steps[first])
        np.testing.assert_array_equal(res.epochs_run, full.epochs_run)
        np.testing.assert_array_equal(res.restored_epoch, full.restored_epoch)
        for a, b in zip(jax.tree.leaves(res.params), jax.tree.leaves(full.params)):
            np.testing.assert_array_equal(a, b)
