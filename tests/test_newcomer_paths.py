"""A newcomer's first hour without a surprise: ``~`` in every path argument and in the ``npz:DIR``
/ ``ogb:DIR`` dataset forms, Ctrl-C as one line and exit status 130, long errors printed as short
lines, and install instructions that work.

The ``~`` tests set ``HOME`` to ``tmp_path`` and give the CLI (in-process) arguments that start
with ``~/``, as no shell expands them inside an argument (``--json=~/r.json``, ``npz:~/graph``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from cli_run import run_main, unwrap
from conftest import closed_port

import jaxgcn.app.train
from jaxgcn.store import batch_state, checkpoint
from jaxgcn.app.saving import resumable_since
from jaxgcn.cli.parser import ERROR_WIDTH, error_text
from jaxgcn.datasets import download, load_dataset
from jaxgcn.host.interrupt import CtrlC, Terminated

ROOT = Path(__file__).resolve().parents[1]
N = 30  # nodes of the tiny graphs below: 3 classes of 10


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """``~`` is ``tmp_path/home``; the command runs in ``tmp_path/work`` (where a literal ``~`` folder
    would appear if a path were not expanded)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    return tmp_path / "home"


def write_npz_graph(root: Path) -> None:
    """A ``--dataset npz:DIR`` folder: a ring of N nodes, one-hot features, 3 classes, a split."""
    root.mkdir(parents=True)
    ring = np.arange(N)
    sp.save_npz(root / "adjacency.npz", sp.coo_matrix((np.ones(N), (ring, (ring + 1) % N)), shape=(N, N)))
    np.save(root / "features.npy", np.eye(N, dtype=np.float32))
    np.save(root / "labels.npy", ring % 3)
    np.savez(root / "splits.npz", train=ring[:9], val=ring[9:18], test=ring[18:])


def write_own_files(root: Path) -> None:
    """edges.csv, labels.csv and features.csv of a ring of N named nodes."""
    root.mkdir(parents=True)
    (root / "edges.csv").write_text("src,dst\n" + "".join(f"n{i},n{(i + 1) % N}\nn{i},n{(i + 7) % N}\n"
                                                          for i in range(N)))
    (root / "labels.csv").write_text("node,label\n" + "".join(f"n{i},{i % 3}\n" for i in range(N)))
    (root / "features.csv").write_text("node,f0,f1\n" + "".join(f"n{i},{i % 3},{i % 5}\n" for i in range(N)))


# --- npz:DIR without splits.npz (issue 43) ------------------------------------------------------------


def test_npz_without_a_split_file_names_the_random_split_it_draws_sized_by_the_flags(tmp_path, capsys):
    # it said "split public" for the random split it drew, drew 500/1000 whatever --val/--test asked,
    # and shrank them without the note the other random splits print
    write_npz_graph(tmp_path / "g")
    run = ["train", "--dataset", f"npz:{tmp_path / 'g'}", "--epochs", "1", "--no-compile-cache"]
    assert run_main([*run, "--data-seed", "3"]) == 0  # the folder holds splits.npz: its split
    assert "| split public: train 9, val 9, test 12 |" in capsys.readouterr().out
    (tmp_path / "g" / "splits.npz").unlink()
    named = f"split random (seed 3; npz:{tmp_path / 'g'} has no splits.npz)"
    assert run_main([*run, "--data-seed", "3", "--train-per-class", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"| {named}: train 12, val 6, test 12 |" in out[0]
    assert out[1] == ("note: --val 500 --test 1000 do not fit the 18 labelled nodes outside the train set (val takes "
                      "at most a third of them); using --val 6 --test 12 (give --val/--test to choose)")
    assert run_main([*run, "--data-seed", "3", "--train-per-class", "4", "--val", "3", "--test", "9"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"| {named}: train 12, val 3, test 9 |" in out[0] and not out[1].startswith("note:")


# --- ~ in path arguments -----------------------------------------------------------------------------


def test_tilde_in_the_npz_dataset_form_and_an_output_path(home, capsys):
    write_npz_graph(home / "graph")
    assert run_main(["info", "--dataset", "npz:~/graph", "--json=~/r.json"]) == 0
    assert capsys.readouterr().out.startswith("npz:graph: 30 nodes, 30 undirected edges")
    assert json.loads((home / "r.json").read_text())["nodes"] == 30
    assert not os.listdir(Path.cwd())  # no folder named ~ where the command ran
    # the library expands it too, and a message names the folder it looked at
    assert load_dataset("npz:~/graph").labels.size == 30
    assert run_main(["info", "--dataset", "npz:~/nowhere"]) == 2
    assert unwrap(capsys.readouterr().err) == (f"jaxgcn: error: npz:{home / 'nowhere'}: not a directory; pass the "
                                               "folder that holds adjacency.npz, features and labels.npy\n")
    with pytest.raises(ValueError, match=f"^data_dir={re.escape(str(home / 'planetoid'))}: not a directory"):
        load_dataset("cora", data_dir="~/planetoid")


def test_tilde_in_own_files_a_config_file_and_every_train_output(home, capsys):
    write_own_files(home / "g")
    (home / "c.toml").write_text('epochs = 2\njson = "~/from-config.json"\n')  # a --config value: expanded too
    argv = ["train", "--edges", "~/g/edges.csv", "--labels", "~/g/labels.csv", "--features=~/g/features.csv",
            "--config", "~/c.toml", "--train-per-class", "2", "--val", "6", "--test", "12", "--quiet",
            "--log", "~/out/log.jsonl", "--save-split", "~/split.csv", "--save", "~/model"]
    (home / "out").mkdir()
    assert run_main(argv) == 0, capsys.readouterr().err
    report = json.loads((home / "from-config.json").read_text())
    assert report["n_nodes"] == N and report["n_features"] == 2  # the features file was read
    assert len((home / "out" / "log.jsonl").read_text().splitlines()) >= 1
    assert (home / "split.csv").read_text().startswith("node,split\n")
    assert checkpoint.load(home / "model").meta["epoch"] == 2
    assert not os.listdir(Path.cwd())


# --- Ctrl-C ------------------------------------------------------------------------------------------

TINY = ["--dataset", "synthetic", "--nodes", "120", "--classes", "3", "--features", "4", "--quiet"]


def test_one_cache_root_holds_the_kernel_the_compile_cache_and_the_datasets(home, monkeypatch):
    from jaxgcn.host import caches
    from jaxgcn.native import kernel_build
    from jaxgcn.cli.runtime import enable_compile_cache

    monkeypatch.delenv("JAXGCN_DATA", raising=False)
    monkeypatch.delenv(caches.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "xdg"))  # the per-user cache folder, as platformdirs reads it
    assert caches.root() == home / "xdg" / "jaxgcn"
    monkeypatch.setenv(caches.ENV, "~/caches")  # one variable moves all three, ~ expanded
    assert caches.root() == home / "caches"
    assert download.data_root() == home / "caches" / "datasets"
    assert kernel_build._cache_dir() == home / "caches" / "kernels"
    import jax

    kept = (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs,
            jax.config.jax_persistent_cache_min_entry_size_bytes)
    try:
        jax.config.update("jax_compilation_cache_dir", None)  # as in a console process (the suite set its own)
        enable_compile_cache()
        assert jax.config.jax_compilation_cache_dir == str(home / "caches" / "xla")
    finally:
        jax.config.update("jax_compilation_cache_dir", kept[0])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", kept[1])
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", kept[2])
    monkeypatch.setenv("JAXGCN_DATA", "~/data")  # moves the datasets only
    assert download.data_root() == home / "data" and caches.root() == home / "caches"


def test_a_cache_dir_that_cannot_hold_the_compile_cache_is_one_note_naming_the_variable(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}  # the suite's own cache
    env.update(JAXGCN_CACHE_DIR=str(tmp_path / "file"), JAXGCN_DATA=str(tmp_path / "data"))
    cmd = [sys.executable, "-m", "jaxgcn", "train", *TINY, "--nodes", "200", "--epochs", "2", "--backend", "segment"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0 and proc.stdout.startswith("test accuracy "), proc.stderr[-2000:]  # the run goes on
    assert proc.stderr == (f"jaxgcn: note: JAXGCN_CACHE_DIR={tmp_path / 'file'}: {tmp_path / 'file' / 'xla'} cannot "
                           "hold JAX's compilation cache (Not a directory); compiling without it: set JAXGCN_CACHE_DIR "
                           "to a writable folder, or pass --no-compile-cache\n")


def interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def interrupt_inside_c(*args, **kwargs):
    """What Ctrl-C becomes inside a Python method that C code called (numpy asking for a dtype)."""
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt as err:
        raise SystemError("<function f> returned a result with an exception set") from err


def test_ctrl_c_is_one_line_and_exit_130(tmp_path, monkeypatch, capsys):
    for where in (interrupt, interrupt_inside_c):
        monkeypatch.setattr(jaxgcn.app.train, "run", where)
        assert run_main(["train", *TINY, "--json", tmp_path / "r.json"]) == 130
        assert capsys.readouterr().err == "jaxgcn: interrupted\n"
    # with --checkpoint-every but none written yet: nothing to resume, and no empty --save folder left
    argv = ["train", *TINY, "--save", tmp_path / "m", "--checkpoint-every", "5"]
    assert run_main(argv) == 130
    assert capsys.readouterr().err == ("jaxgcn: interrupted before the first checkpoint (--checkpoint-every 5); "
                                       "nothing to resume\n")
    assert sorted(os.listdir(tmp_path)) == []


def test_ctrl_c_during_the_final_save_leaves_no_half_written_model(tmp_path, monkeypatch, capsys):
    real = checkpoint.save

    def save_then_interrupt(*args, **kwargs):
        real(*args, **kwargs)
        raise KeyboardInterrupt
    monkeypatch.setattr(checkpoint, "save", save_then_interrupt)
    argv = ["train", *TINY, "--epochs", "2", "--save", tmp_path / "m", "--json", tmp_path / "r.json"]
    assert run_main(argv) == 130
    assert capsys.readouterr().err == "jaxgcn: interrupted\n"
    assert sorted(os.listdir(tmp_path)) == []  # no model folder, no JSON, no temporary file


def test_ctrl_c_after_a_checkpoint_says_where_it_is_and_how_to_resume(tmp_path, monkeypatch, capsys):
    real = checkpoint.save

    def killed_at_the_final_save(*args, **kwargs):
        if kwargs.get("state") is None:
            raise KeyboardInterrupt
        return real(*args, **kwargs)
    monkeypatch.setattr(checkpoint, "save", killed_at_the_final_save)
    ck = tmp_path / "ck"
    argv = ["train", *TINY, "--epochs", "4", "--early-stopping", "none", "--save", ck, "--checkpoint-every", "3"]
    assert run_main(argv) == 130
    assert checkpoint.load(ck).meta["epoch"] == 3
    assert capsys.readouterr().err == (f"jaxgcn: interrupted; the last checkpoint is in {ck} (epoch 3): resume with "
                                       f"--resume {ck}\n")


def test_resumable_state_is_named_only_when_this_run_wrote_it(tmp_path):
    (tmp_path / "checkpoint.json").write_text(json.dumps({"epoch": 7, "state_file": "state-1.npz"}))
    assert resumable_since(tmp_path, 0.0) == "epoch 7"
    os.utime(tmp_path / "checkpoint.json", (1e9, 1e9))  # written before this run started
    assert resumable_since(tmp_path, time.time() - 60) is None
    (tmp_path / "batch-state").mkdir()
    manifest = {"slices": {"0": {"epoch": 30}, "8": {"epoch": 25}}}
    (tmp_path / "batch-state" / "state.json").write_text(json.dumps(manifest))
    assert resumable_since(tmp_path, time.time() - 60) == "epochs 25-30"
    (tmp_path / "checkpoint.json").write_text(json.dumps({"epoch": 9, "state_file": None}))  # a final model
    (tmp_path / "batch-state" / "state.json").unlink()
    assert resumable_since(tmp_path, 0.0) is None


def test_the_console_handler_holds_ctrl_c_then_raises_it_until_main_has_it():
    ctrl_c = CtrlC()
    try:
        signal.raise_signal(signal.SIGINT)  # while JAX is imported: held
        time.sleep(0.01)
        with pytest.raises(KeyboardInterrupt):
            ctrl_c.release()
        try:
            signal.raise_signal(signal.SIGINT)
            time.sleep(0.01)
        except KeyboardInterrupt:
            pass  # dropped, as a garbage-collector callback drops it
        with pytest.raises(KeyboardInterrupt):  # raised again, within a second
            for _ in range(40):
                time.sleep(0.05)
    finally:
        ctrl_c.close()


def signalled(cmd: list[str], env: dict, cwd: Path, written: Path, signum: int, after: float = 0.0) -> tuple[int, str]:
    """Run ``cmd``, send it ``signum`` once it has written ``written`` (and ``after`` seconds more):
    its exit status and stderr."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    try:
        deadline = time.monotonic() + 240
        while not written.is_file():  # training has started and written a checkpoint
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
            time.sleep(0.05)
        time.sleep(after)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc.returncode, err


def test_sigint_during_training_ends_with_one_line_and_status_130(tmp_path):
    ck = tmp_path / "ck"
    env = {**os.environ, "JAXGCN_DATA": str(tmp_path / "data")}
    cmd = [sys.executable, "-m", "jaxgcn", "train", *TINY, "--nodes", "200", "--epochs", "1000000",
           "--early-stopping", "none", "--save", str(ck), "--checkpoint-every", "5", "--log-every", "5",
           "--log", str(tmp_path / "log.jsonl")]
    returncode, err = signalled(cmd, env, tmp_path, ck / "batch-state" / "state.json", signal.SIGINT)
    lines = [line for line in err.splitlines() if line.strip()]
    assert returncode == 130, err[-2000:]
    assert len(lines) == 1 and "Traceback" not in err, err[-2000:]
    epoch = batch_state.load(ck)["slices"]["0"]["epoch"]  # the resumable state's (the model may be one ahead)
    assert checkpoint.load(ck).meta["epoch"] in (epoch, epoch + 5)
    assert lines[0] == f"jaxgcn: interrupted; the last checkpoint is in {ck} (epoch {epoch}): resume with --resume {ck}"
    for line in (tmp_path / "log.jsonl").read_text().splitlines():
        json.loads(line)  # every logged line whole


def test_the_console_handler_raises_sigterm_as_terminated_and_restores_the_default():
    ctrl_c = CtrlC()
    try:
        signal.raise_signal(signal.SIGTERM)  # while JAX is imported: held, as Ctrl-C is
        time.sleep(0.01)
        with pytest.raises(Terminated):
            ctrl_c.release()
    finally:
        ctrl_c.close()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_sigterm_between_a_slice_and_its_manifest_leaves_the_previous_state_whole(tmp_path, monkeypatch, capsys):
    real, manifests = batch_state.write_atomic, []

    def terminated_at_the_second_manifest(path, data, **how):
        if Path(path).name == batch_state.MANIFEST:
            manifests.append(data)
            if len(manifests) == 2:
                raise Terminated
        return real(path, data, **how)
    monkeypatch.setattr(batch_state, "write_atomic", terminated_at_the_second_manifest)
    ck = tmp_path / "ck"
    argv = ["train", *TINY, "--seeds", "2", "--epochs", "9", "--early-stopping", "none", "--save", ck,
            "--checkpoint-every", "3"]
    assert run_main(argv) == 143
    assert capsys.readouterr().err == (f"jaxgcn: terminated (SIGTERM); the last checkpoint is in {ck} (epoch 3): "
                                       f"resume with --resume {ck}\n")
    manifest = batch_state.load(ck)
    assert sorted(os.listdir(ck / "batch-state")) == ["slice-00000-1.npz", "state.json"]  # not slice-00000-2
    assert [v["epoch"] for v in manifest["slices"].values()] == [3]


def test_sigterm_during_a_batch_ends_with_one_line_and_status_143(tmp_path):
    # SLURM and Kubernetes stop a job with SIGTERM: it ends as Ctrl-C does, its temporaries removed
    ck = tmp_path / "ck"
    env = {**os.environ, "JAXGCN_DATA": str(tmp_path / "data")}
    cmd = [sys.executable, "-m", "jaxgcn", "train", *TINY, "--nodes", "200", "--seeds", "2", "--epochs", "1000000",
           "--early-stopping", "none", "--save", str(ck), "--checkpoint-every", "1"]
    # a few checkpoints after the first slice state: the signal lands amid the writes of one
    returncode, err = signalled(cmd, env, tmp_path, ck / "batch-state" / "state.json", signal.SIGTERM, after=0.5)
    lines = [line for line in err.splitlines() if line.strip()]
    assert returncode == 143, err[-2000:]
    assert len(lines) == 1 and "Traceback" not in err, err[-2000:]
    manifest = batch_state.load(ck)
    epochs = sorted({v["epoch"] for v in manifest["slices"].values()})
    where = f"epoch {epochs[0]}" if len(epochs) == 1 else f"epochs {epochs[0]}-{epochs[-1]}"
    assert lines[0] == (f"jaxgcn: terminated (SIGTERM); the last checkpoint is in {ck} ({where}): "
                        f"resume with --resume {ck}")
    named = sorted(v["file"] for v in manifest["slices"].values())
    assert sorted(os.listdir(ck / "batch-state")) == [*named, "state.json"]  # no temporary, no unrecorded slice
    assert sorted(os.listdir(ck)) == [".jaxgcn.lock", "batch-state"]  # the folder's lock file stays, as after any run


# `python -m jaxgcn ARGS` (what runpy does for -m), with a finder in front of the others that says
# when MODULE starts to be imported and waits there for a line on stdin: a SIGINT sent then arrives
# at that point of the start-up, however slow the machine (a fixed delay after the start lands, on a
# loaded machine, in the interpreter's own start-up, where Python prints a traceback).
STOP_AT_IMPORT = """
import runpy, sys

MODULE = sys.argv.pop(1)

class StopAt:
    def find_spec(self, name, path=None, target=None):
        if name == MODULE:
            print("importing", name, flush=True)
            sys.stdin.readline()
        return None

sys.meta_path.insert(0, StopAt())
runpy.run_module("jaxgcn", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("module", ["jaxgcn.cli", "numpy"])
def test_ctrl_c_while_the_console_script_imports_the_cli_is_one_line_and_130(tmp_path, module):
    # jaxgcn.cli: the first import after the handler; NumPy: ~50 ms later (the parser's defaults).
    # Held, the Ctrl-C ends the command once JAX is imported too, before `datasets` lists anything.
    env = {**os.environ, "JAXGCN_DATA": str(tmp_path / "data")}
    proc = subprocess.Popen([sys.executable, "-c", STOP_AT_IMPORT, module, "datasets"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        line = proc.stdout.readline()
        assert line == f"importing {module}\n", proc.communicate()[1][-2000:]
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate("go\n", timeout=120)
    finally:
        proc.kill()
    assert (proc.returncode, err, out) == (130, "jaxgcn: interrupted\n", "")


def test_the_console_script_loads_nothing_heavy_before_its_ctrl_c_handler():
    # the console script's module; and jaxgcn.cli, which `python -m jaxgcn.cli` imports before main()
    script = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["jaxgcn"]
    module, _, function = script.partition(":")
    heavy = ("typing", "importlib.metadata", "argparse", "numpy")  # ~14 ms, ~30 ms, the parser's, ~50 ms
    light = "jaxgcn.host jaxgcn.host.interrupt jaxgcn.moved"  # the Ctrl-C handler's package and the old names' finder
    for statement, loaded in ((f"from {module} import {function}", f"jaxgcn jaxgcn.console {light}"),
                              ("from jaxgcn.cli import main", f"jaxgcn jaxgcn.cli {light}")):
        code = (f"import sys\n{statement}\n"
                f"print(' '.join(sorted(m for m in sys.modules if m.startswith('jaxgcn') or m in {heavy!r})))")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert (proc.returncode, proc.stdout) == (0, loaded + "\n"), (statement, proc.stderr)


# --- long errors as short lines ----------------------------------------------------------------------


def test_a_long_error_is_printed_as_short_lines(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JAXGCN_MIRROR", f"http://127.0.0.1:{closed_port()}")  # offline: nothing listens
    monkeypatch.setattr(download, "RETRIES", 0)
    with pytest.raises(ValueError) as raised:
        load_dataset("shchur-cora", data_root=tmp_path, progress=False)
    assert run_main(["train", "--dataset", "shchur-cora", "--data-root", tmp_path, "--quiet"]) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(str(raised.value)) > 3 * ERROR_WIDTH and len(lines) >= 4
    assert all(len(line) <= ERROR_WIDTH for line in lines), lines
    assert re.fullmatch(r"jaxgcn: error: dataset shchur-cora: could not download http://\S+/shchur-cora/cora\.npz",
                        lines[0]), lines[0]
    assert lines[1] == "  (ConnectionError: Connection refused);"  # what went wrong ends the first part
    assert lines[2].startswith("  on a machine without internet, run `jaxgcn download shchur-cora` where")
    assert all(line.startswith("  ") for line in lines[1:])
    assert " ".join(line.strip() for line in lines) == f"jaxgcn: error: {raised.value}"  # nothing lost


def test_short_errors_stay_one_line_and_commands_in_backquotes_are_not_broken(tmp_path, capsys):
    assert run_main(["train", *TINY, "--checkpoint-every", "5"]) == 2
    short = "jaxgcn: error: --checkpoint-every K needs --save DIR (where the checkpoints go)\n"
    assert capsys.readouterr().err == short
    message = f"{'a' * 60}: wrong; {'b' * 70} then run `jaxgcn download shchur-cora` here"
    assert error_text(message) == (f"jaxgcn: error: {'a' * 60}: wrong;\n  {'b' * 70} then run\n"
                                   "  `jaxgcn download shchur-cora` here")
    assert run_main(["train", "--backend", "nope"]) == 2  # argparse's own errors too
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("jaxgcn: error: argument --backend: invalid choice: 'nope'") and len(lines) == 2
    assert all(len(line) <= ERROR_WIDTH for line in lines) and lines[1].endswith("(see 'jaxgcn train --help')")


# --- install instructions ----------------------------------------------------------------------------


def test_no_page_says_to_pip_install_jaxgcn_from_an_index():
    """jaxgcn is not on PyPI: a shell block that runs `pip install jaxgcn` fails for every reader."""
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```(?:bash|sh|console)\n(.*?)```", page.read_text(), re.S):
            assert not re.search(r"pip install (-U )?['\"]?jaxgcn\b", block), f"{page.name}: {block}"
