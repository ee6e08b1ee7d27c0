"""Failures that leave nothing behind, checkpoints that cannot lie, flags that mean what they say
(issue 12, sections 3, 4 and 5's flags).

Every refused case runs ``jaxgcn.cli.main`` in-process and checks: exit status 2, exactly one
stderr line ``jaxgcn: error: ...`` (no traceback) that matches, and the directory unchanged.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from jaxgcn import cli
from jaxgcn.io import outputs
from jaxgcn.store import batch_state, checkpoint
from jaxgcn.cli import common as cli_common
from jaxgcn.app import data as app_data

from cli_run import run_main, unwrap

SYNTH = ["--dataset", "synthetic", "--nodes", "200"]
TRAIN = ["train", *SYNTH, "--epochs", "2", "--quiet", "--no-compile-cache"]
RANDOM = ["--split", "random", "--train-per-class", "5", "--val", "30", "--test", "60"]
ROOT = os.geteuid() == 0



def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def refused(argv, capsys, match, root: Path) -> str:
    """Run ``argv``; assert exit 2, one ``jaxgcn: error:`` line matching ``match``, ``root`` unchanged."""
    before = listing(root)
    capsys.readouterr()
    assert run_main(argv) == 2
    err = capsys.readouterr().err
    lines = unwrap(err).splitlines()  # one message (wrapped into short lines when long)
    assert len(lines) == 1, err
    assert lines[0].startswith("jaxgcn: error: ") and "Traceback" not in err
    assert re.search(match, lines[0]), lines[0]
    assert listing(root) == before, "something was left behind"
    return lines[0]


def dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


@pytest.fixture
def no_loading(monkeypatch):
    """Output checks run before any work: loading data fails the test if reached."""
    def boom(*args, **kwargs):
        raise AssertionError("the data was loaded before the output paths were checked")
    monkeypatch.setattr(app_data, "read", boom)


def unwritable_folder(tmp_path: Path) -> Path:
    if not ROOT:
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o500)
        return d
    for candidate in (Path("/sys"), Path("/proc/sys")):  # root ignores permission bits; these refuse files
        try:
            with tempfile.TemporaryFile(dir=candidate):
                pass
        except OSError:
            return candidate
    pytest.skip("no folder this (root) process cannot write in")


# --- section 3: every output path checked before any work, one message, nothing written -------------

def _setup(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine\n")
    os.mkfifo(tmp_path / "fifo")
    os.symlink("/dev/full", tmp_path / "full-link")
    (tmp_path / "e.csv").write_text("src,dst\n0,1\n")
    (tmp_path / "l.csv").write_text("node,label\n0,a\n1,b\n")
    # a folder that passes the before-JAX look at --checkpoint (it holds a checkpoint.json): the output
    # paths are refused before the checkpoint is read
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "checkpoint.json").write_text("{}\n")


OUTPUT_CASES = [
    # (id, argv with {t} for tmp_path, message)
    ("json-dir", [*TRAIN, "--json", "{t}/dir"],
     r"--json \S+/dir: is a directory; give a file name, e\.g\. \S+/dir/results\.json"),
    ("json-missing-folder", [*TRAIN, "--json", "{t}/nope/r.json"],
     r"--json \S+: folder \S+/nope does not exist; create it first"),
    ("json-under-a-file", [*TRAIN, "--json", "{t}/file/r.json"],
     r"\S+/file is a file, not a folder; give a path in an existing folder"),
    ("json-device", [*TRAIN, "--json", "/dev/full"],
     r"--json /dev/full: is a character device, not a regular file;.*give a regular file path"),
    ("json-link-to-device", [*TRAIN, "--json", "{t}/full-link"],
     r"--json \S+/full-link \(a link to /dev/full\): is a character device"),
    ("json-fifo", [*TRAIN, "--json", "{t}/fifo"], r"--json \S+/fifo: is a named pipe, not a regular file"),
    ("save-split-dir", [*TRAIN, "--save-split", "{t}/dir"], r"--save-split \S+/dir: is a directory; .*split\.csv"),
    ("save-split-missing-folder", [*TRAIN, "--save-split", "{t}/nope/s.csv"],
     r"--save-split \S+: folder \S+/nope does not exist"),
    ("log-dir", [*TRAIN, "--log", "{t}/dir"], r"--log \S+/dir: is a directory; .*train\.jsonl"),
    ("log-missing-folder", [*TRAIN, "--log", "{t}/nope/l.jsonl"], r"--log \S+: folder \S+/nope does not exist"),
    ("log-device", [*TRAIN, "--log", "/dev/full"], r"--log /dev/full: is a character device"),
    ("save-existing-file", [*TRAIN, "--save", "{t}/file"],
     r"--save \S+/file: is a file, not a folder; --save needs a directory"),
    ("save-foreign-folder", [*TRAIN, "--save", "{t}/other"],
     r"--save \S+/other: holds other files \(notes\.txt\) and no checkpoint\.json"),
    ("save-missing-parent", [*TRAIN, "--save", "{t}/nope/m"], r"--save \S+/nope/m: folder \S+/nope does not exist"),
    ("tensorboard-file", [*TRAIN, "--tensorboard", "{t}/file"], r"--tensorboard \S+/file: is a file, not a folder"),
    ("json-and-split-same-file", [*TRAIN, "--json", "{t}/r.json", "--save-split", "{t}/r.json"],
     r"--save-split \S+/r\.json and --json \S+/r\.json name the same path"),
    ("output-overwrites-input", ["train", "--edges", "{t}/e.csv", "--labels", "{t}/l.csv", "--json", "{t}/e.csv"],
     r"--json \S+/e\.csv would overwrite the --edges input"),
    ("sweep-csv-dir", ["sweep", *SYNTH, "--no-compile-cache", "--csv", "{t}/dir"], r"--csv \S+/dir: is a directory"),
    ("sweep-json-missing-folder", ["sweep", *SYNTH, "--no-compile-cache", "--json", "{t}/nope/s.json"],
     r"folder \S+/nope does not exist"),
    ("evaluate-json-dir", ["evaluate", "--checkpoint", "{t}/m", *SYNTH, "--json", "{t}/dir"],
     r"--json \S+/dir: is a directory"),
    ("evaluate-save-split", ["evaluate", "--checkpoint", "{t}/m", *SYNTH, "--save-split", "{t}/s.csv"],
     r"`jaxgcn evaluate` takes no --save-split: it draws no split to save"),
    ("predict-threshold-range", ["predict", "--checkpoint", "{t}/m", *SYNTH, "--out", "{t}/p.csv", "--threshold", "1"],
     r"--threshold: 1 is not between 0 and 1 \(a probability threshold, e\.g\. 0\.5\)"),
    ("predict-out-dir", ["predict", "--checkpoint", "{t}/m", *SYNTH, "--out", "{t}/dir"],
     r"--out \S+/dir: is a directory; .*predictions\.csv"),
    ("predict-out-missing-folder", ["predict", "--checkpoint", "{t}/m", *SYNTH, "--out", "{t}/nope/p.csv"],
     r"folder \S+/nope does not exist"),
    ("plot-out-dir", ["plot", "curves", "--log", "{t}/l.csv", "--out", "{t}/dir"],
     r"--out \S+/dir: is a directory; .*plot\.png"),
    ("info-json-device", ["info", *SYNTH, "--json", "/dev/null"], r"--json /dev/null: is a character device"),
    ("info-save-split-dir", ["info", *SYNTH, "--save-split", "{t}/dir"], r"--save-split \S+/dir: is a directory"),
    ("partition-out-file", ["partition", *SYNTH, "--parts", "2", "--out", "{t}/file"],
     r"--out \S+/file: is a file, not a folder"),
    ("partition-out-foreign", ["partition", *SYNTH, "--parts", "2", "--out", "{t}/other"],
     r"holds other files \(notes\.txt\) and no partitions\.json"),
]


@pytest.mark.parametrize(("argv", "match"), [c[1:] for c in OUTPUT_CASES], ids=[c[0] for c in OUTPUT_CASES])
def test_bad_output_paths_are_refused_before_any_work(tmp_path, capsys, no_loading, argv, match):
    _setup(tmp_path)
    refused([a.format(t=tmp_path) for a in argv], capsys, match, tmp_path)
    assert (tmp_path / "fifo").is_fifo() and os.path.islink(tmp_path / "full-link")  # never replaced
    assert Path("/dev/full").is_char_device()


def test_unwritable_folder_is_refused(tmp_path, capsys, no_loading):
    folder = unwritable_folder(tmp_path)
    refused([*TRAIN, "--json", folder / "r.json"], capsys, r"cannot write in folder \S+ \(Permission denied\); "
            r"choose a writable folder", tmp_path)


def test_unreadable_input_is_named(tmp_path, capsys):
    labels = tmp_path / "l.csv"
    labels.write_text("node,label\n0,a\n1,b\n")
    if ROOT:  # permission bits do not stop root; this file fails every read with EIO
        edges = Path("/proc/self/mem")
    else:
        edges = tmp_path / "e.csv"
        edges.write_text("src,dst\n0,1\n")
        edges.chmod(0)
    refused(["train", "--edges", edges, "--labels", labels, "--no-compile-cache"], capsys,
            rf"--edges {re.escape(str(edges))}: cannot be read \(.+\); check that the file is readable", tmp_path)


# --- section 5: flags that would be ignored or contradict each other ---------------------------------

FLAG_CASES = [
    ("split-file-and-train-frac", [*TRAIN, "--split-file", "{t}/s.csv", "--train-frac", "0.5"],
     r"--split-file \S+ and --train-frac 0\.5 both choose the split; give one of them"),
    ("split-file-and-split-random", [*TRAIN, "--split-file", "{t}/s.csv", "--split", "random"],
     r"--split random would draw another"),
    ("several-splits-from-fractions", [*TRAIN, "--split", "random", "--splits", "2", "--train-frac", "0.5"],
     r"--splits 2 draws 2 Planetoid-style random splits .*--train-frac gives one split, so every run would get "
     r"the same one"),
    ("several-splits-from-a-file", [*TRAIN, "--split", "random", "--splits", "2", "--split-file", "{t}/s.csv"],
     r"--split-file \S+ gives the split"),
    ("val-frac-alone", [*TRAIN, "--val-frac", "0.3"], r"--val-frac/--test-frac .* need --train-frac"),
    ("weight-decay-overflows-float32", [*TRAIN, "--weight-decay", "1e39"],
     r"--weight-decay 1e\+39: larger than float32 holds \(max 3\.4e\+38\).*such as 5e-4"),
    ("weight-decay-inf", [*TRAIN, "--weight-decay", "inf"], r"--weight-decay inf: not a finite number"),
    ("lr-overflows-float32", [*TRAIN, "--lr", "1e300"], r"--lr 1e\+300: larger than float32 holds"),
    ("sweep-weight-decay-overflows", ["sweep", *SYNTH, "--no-compile-cache", "--weight-decay", "5e-4,1e40"],
     r"--weight-decay 1e\+40: larger than float32"),
]


@pytest.mark.parametrize(("argv", "match"), [c[1:] for c in FLAG_CASES], ids=[c[0] for c in FLAG_CASES])
def test_contradictory_flags_are_refused(tmp_path, capsys, no_loading, argv, match):
    refused([a.format(t=tmp_path) for a in argv], capsys, match, tmp_path)


def test_a_single_class_is_refused(tmp_path, capsys):
    refused([*TRAIN, "--classes", "1", "--json", tmp_path / "r.json"], capsys,
            r"--dataset synthetic: all 200 labelled nodes are in one class \(0\); a classifier needs at least 2 "
            r"classes \(with one, accuracy is 1\.0 by construction\)", tmp_path)


def test_tensorboard_without_tensorboardx_warns_even_when_quiet(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tensorboardX" else real(name, *a))
    args = cli.build_parser().parse_args(["train", "--quiet", "--tensorboard", str(tmp_path / "tb")])
    cli_common.warn_tensorboard(args)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("jaxgcn: warning: --tensorboard ")
    assert "tensorboardX is not installed" in err[0]
    assert args.tensorboard is None and not (tmp_path / "tb").exists()


# --- faults: locks, interrupted writes, failures after the work -------------------------------------

def test_a_second_writer_of_a_checkpoint_directory_is_refused(tmp_path, capsys):
    from filelock import FileLock

    model = tmp_path / "m"
    model.mkdir()
    with FileLock(model / outputs.LOCK_NAME):  # another jaxgcn process saving there
        refused([*TRAIN, "--save", model], capsys, rf"--save {re.escape(str(model))}: {re.escape(str(model))} is being "
                rf"written by another jaxgcn process \(lock \S+/\.jaxgcn\.lock\); wait for it to finish", tmp_path)


KILLED_WRITE = """
import os, signal, sys
from jaxgcn.io import outputs
os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)  # killed after writing, before the rename
outputs.write_atomic(sys.argv[1], '{"half": ')
"""


def test_the_next_write_removes_a_killed_writes_temporary_file(tmp_path, capsys):
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITE, str(tmp_path / "r.json")], capture_output=True)
    assert killed.returncode == -9
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and re.fullmatch(r"\.r\.json\.tmp\d+", left[0]), left  # the kill left its temporary
    pid = dead_pid()
    (tmp_path / f".s.csv.tmp{pid}").write_text("node,spl")
    busy = tmp_path / ".r.json.tmp1"  # PID 1 is alive: a write in progress is never touched
    busy.write_text("{")
    assert run_main(["info", *SYNTH, "--json", tmp_path / "r.json", "--save-split", tmp_path / "s.csv"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [busy.name, "r.json", "s.csv"]
    assert json.loads((tmp_path / "r.json").read_text())["nodes"] == 200
    assert (tmp_path / "s.csv").read_text().startswith("node,split\n")

    # checkpoints: a killed save's temporaries (any name) go on the next save into the folder
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / f".params-7.npz.tmp{pid}").write_bytes(b"PK")
    params = {"layer_0": {"w": np.ones((3, 2), np.float32)}, "layer_1": {"w": np.ones((2, 2), np.float32)}}
    from jaxgcn.core.models import GCNConfig
    from jaxgcn.train import TrainConfig

    checkpoint.save(ck, params, model_config=GCNConfig(hidden=2), train_config=TrainConfig(),
                    info={"n_features": 3, "n_classes": 2}, epoch=1, metrics={})
    assert sorted(p.name for p in ck.iterdir()) == ["checkpoint.json", "params-1.npz"]


def test_a_link_planted_at_the_temporary_name_is_never_followed(tmp_path):
    # Someone who can write in the output folder links the temporary name of this process's next
    # write to a file of theirs to overwrite: the write must neither touch that file nor leave the
    # output as a link to it (--json, a checkpoint's params, the parse cache, a download record).
    from jaxgcn.datasets import parsed, synthetic
    from jaxgcn.datasets.download import _write_atomic
    from jaxgcn.core.models import GCNConfig
    from jaxgcn.train import TrainConfig

    victim = tmp_path / "victim.txt"
    victim.write_text("keep")

    def plant(target: Path) -> None:
        os.symlink(victim, outputs.temp_path(target))

    out = tmp_path / "r.json"
    plant(out)
    assert run_main(["info", *SYNTH, "--json", out]) == 0
    ck = tmp_path / "ck"
    ck.mkdir()
    plant(ck / "params-1.npz")
    params = {"layer_0": {"w": np.ones((3, 2), np.float32)}, "layer_1": {"w": np.ones((2, 2), np.float32)}}
    checkpoint.save(ck, params, model_config=GCNConfig(hidden=2), train_config=TrainConfig(),
                    info={"n_features": 3, "n_classes": 2}, epoch=1, metrics={})
    cached = tmp_path / "cache.npz"
    plant(cached)
    parsed.save_raw(synthetic(50, n_classes=2, n_features=4, seed=0), cached)
    record = tmp_path / "record.txt"
    plant(record)
    _write_atomic(record, "sha256 size\n")

    assert victim.read_text() == "keep"
    for path in (out, ck / "params-1.npz", cached, record):
        assert path.is_file() and not path.is_symlink(), path
        assert not os.path.lexists(outputs.temp_path(path)), path  # the planted link went, not its target
    assert json.loads(out.read_text())["nodes"] == 200
    assert checkpoint.load(ck).params["layer_0"]["w"].shape == (3, 2)
    assert parsed.load_raw_npz(cached).labels.shape == (50,)
    assert record.read_text() == "sha256 size\n"


def test_symlinked_outputs_are_written_through(tmp_path):
    real = tmp_path / "runs" / "real.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "latest.json"
    os.symlink(real, link)
    assert outputs.check_file("--json", link) == real
    outputs.write_atomic(link, "new")
    assert os.path.islink(link) and real.read_text() == "new"
    assert sorted(p.name for p in real.parent.iterdir()) == ["real.json"]


def test_a_failure_at_the_end_leaves_no_output(tmp_path, capsys, monkeypatch):
    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device", str(tmp_path / "m" / "params-1.npz"))

    monkeypatch.setattr(checkpoint, "save", disk_full)
    refused([*TRAIN, "--save", tmp_path / "m", "--json", tmp_path / "r.json", "--save-split", tmp_path / "s.csv"],
            capsys, r"--save \S+/m/params-1\.npz: No space left on device", tmp_path)


def test_a_diverged_run_leaves_no_model_or_split(tmp_path, capsys):
    argv = ["train", *SYNTH, "--epochs", "30", "--early-stopping", "none", "--lr", "1e20", "--norm", "none",
            "--feature-norm", "none", "--quiet", "--save", tmp_path / "m", "--json", tmp_path / "r.json",
            "--save-split", tmp_path / "s.csv"]
    assert run_main(argv) == 1
    err = unwrap(capsys.readouterr().err).splitlines()
    assert len(err) == 1 and err[0].startswith("jaxgcn: error: training diverged")
    assert list(tmp_path.iterdir()) == []


# --- section 4: checkpoints that cannot lie ----------------------------------------------------------

@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A small model trained on a random split, saved with its split file."""

    d = tmp_path_factory.mktemp("model")
    assert run_main([*TRAIN, "--epochs", "20", *RANDOM, "--save", d / "m",
                     "--json", d / "r.json", "--save-split", d / "s.csv"]) == 0
    return d


def _edit_meta(meta, key, value):
    if value is DELETE:
        del meta[key]
    else:
        meta[key] = value


DELETE = object()


def _resave_params(d: Path, change) -> None:
    """Rewrite the params file and re-record its size and SHA-256 (a tampering the hash cannot catch)."""
    meta = json.loads((d / "checkpoint.json").read_text())
    path = d / meta["params_file"]
    with np.load(path, allow_pickle=True) as z:
        arrays = {k: z[k] for k in z.files}
    change(arrays)
    np.savez(path, **arrays)
    blob = path.read_bytes()
    import hashlib

    meta.update(params_bytes=len(blob), params_sha256=hashlib.sha256(blob).hexdigest())
    (d / "checkpoint.json").write_text(json.dumps(meta))


def _resave_side(d: Path, name: str, array: np.ndarray) -> None:
    """Rewrite a side file and re-record its size and SHA-256 in ``files`` (as a crafted checkpoint would)."""
    import hashlib

    np.save(d / name, array, allow_pickle=array.dtype == object)
    blob = (d / name).read_bytes()
    meta = json.loads((d / "checkpoint.json").read_text())
    meta["files"][name] = {"bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
    (d / "checkpoint.json").write_text(json.dumps(meta))


def _nan(a):
    a["layer_1/w"] = a["layer_1/w"].copy()
    a["layer_1/w"][0, 0] = np.nan


META_TAMPER = [
    ("no-model", lambda m: _edit_meta(m, "model", DELETE), r"key 'model' is missing"),
    ("no-n-features", lambda m: _edit_meta(m, "n_features", DELETE), r"key 'n_features' is missing"),
    ("model-is-a-number", lambda m: _edit_meta(m, "model", 5), r"model is 5, expected an object"),
    ("layers-3", lambda m: m["model"].update(layers=3), r"param layer_2/w is missing \(model layers=3, hidden=16"),
    ("hidden-abc", lambda m: m["model"].update(hidden="abc"), r"model\.hidden is 'abc', expected an integer"),
    ("hidden-true", lambda m: m["model"].update(hidden=True), r"model\.hidden is True, expected an integer"),
    ("layers-0", lambda m: m["model"].update(layers=0), r"model config invalid: layers=0"),
    ("unknown-model-field", lambda m: m["model"].update(heads=4), r"model\.heads is not a setting"),
    ("n-features-off", lambda m: _edit_meta(m, "n_features", 63),
     r"param layer_0/w is float32\[64, 16\], .* needs float32\[63, 16\]"),
    ("short-class-names", lambda m: _edit_meta(m, "class_names", ["0", "1"]),
     r"class_names lists 2 classes but n_classes is 5"),
    ("n-classes-off", lambda m: _edit_meta(m, "n_classes", 4),
     r"param layer_1/w is float32\[16, 5\], .* needs float32\[16, 4\]"),
    ("params-outside", lambda m: _edit_meta(m, "params_file", "../r.json"),
     r"params_file '\.\./r\.json' is not a file name jaxgcn writes"),
    ("epoch-text", lambda m: _edit_meta(m, "epoch", "20"), r"epoch is '20', expected an integer"),
    ("bad-norm", lambda m: _edit_meta(m, "norm", "l2"), r"norm is 'l2', expected one of sym, row, none"),
    ("standardize-without-stats", lambda m: _edit_meta(m, "feature_norm", "standardize"),
     r"feature_norm 'standardize' needs feature_stats"),
]
FILE_TAMPER = [
    ("wrong-shape-same-sha", lambda d: _resave_params(d, lambda a: a.update({"layer_0/w": a["layer_0/w"][:, :8]})),
     r"param layer_0/w is float32\[64, 8\], .* needs float32\[64, 16\]"),
    ("extra-param-same-sha", lambda d: _resave_params(d, lambda a: a.update({"layer_9/w": a["layer_0/w"]})),
     r"param layer_9/w is not part of the model"),
    ("nan-param-same-sha", lambda d: _resave_params(d, _nan),
     r"param layer_1/w holds 1 NaN or infinite values; .*train again"),
    ("object-array-same-sha",
     lambda d: _resave_params(d, lambda a: a.update({"layer_0/w": np.array([{"x": 1}], dtype=object)})),
     r"holds object arrays \(pickled Python objects\), which jaxgcn never writes and never loads"),
    ("object-split-file", lambda d: _resave_side(d, "split-1.npy", np.array([None], dtype=object)),
     r"split-1\.npy: the split file holds object arrays"),
    ("split-codes-out-of-range", lambda d: _resave_side(d, "split-1.npy", np.full(200, 9, np.int8)),
     r"the split must be int8 codes 0\.\.3"),
    ("split-file-edited", lambda d: np.save(d / "split-1.npy", np.full(200, 1, np.int8)),
     r"split-1\.npy: \d+ bytes that do not match the recorded size/SHA-256; the split file is truncated or "
     r"corrupted"),
]


TAMPER = [(name, "meta", fn, match) for name, fn, match in META_TAMPER] + \
    [(name, "files", fn, match) for name, fn, match in FILE_TAMPER]


@pytest.mark.parametrize(("kind", "tamper", "match"), [c[1:] for c in TAMPER], ids=[c[0] for c in TAMPER])
def test_a_tampered_checkpoint_is_refused(model, tmp_path, capsys, kind, tamper, match):
    d = tmp_path / "m"
    shutil.copytree(model / "m", d)
    if kind == "meta":
        meta = json.loads((d / "checkpoint.json").read_text())
        tamper(meta)
        (d / "checkpoint.json").write_text(json.dumps(meta))
    else:
        tamper(d)
    refused(["predict", "--checkpoint", d, *SYNTH, "--out", tmp_path / "p.csv"], capsys, match, tmp_path)
    with pytest.raises(ValueError, match=match):
        checkpoint.load(d)


def test_a_threshold_for_a_single_label_model_is_refused(model, tmp_path, capsys):
    """--threshold picks a multi-label model's labels: given for a single-label one, both commands say so."""
    refused(["evaluate", "--checkpoint", model / "m", *SYNTH, "--threshold", "0.3"], capsys,
            r"--threshold 0\.3: --checkpoint \S+/m is a single-label model, which predicts the class of highest "
            r"probability; the threshold picks a multi-label model's labels \(leave it out\)", tmp_path)
    refused(["predict", "--checkpoint", model / "m", *SYNTH, "--out", tmp_path / "p.csv", "--threshold", "0.7"],
            capsys, r"--threshold 0\.7: --checkpoint \S+/m is a single-label", tmp_path)
    assert not (tmp_path / "p.csv").exists()


def test_evaluate_uses_the_saved_split_and_refuses_an_overlapping_one(model, tmp_path, capsys):
    trained = json.loads((model / "r.json").read_text())
    assert trained["split"] == "random (seed 0)"
    capsys.readouterr()
    assert run_main(["evaluate", "--checkpoint", model / "m", *SYNTH, "--json", tmp_path / "ev.json"]) == 0
    assert "the model's training split, saved in" in capsys.readouterr().out
    ev = json.loads((tmp_path / "ev.json").read_text())
    assert ev["nodes"] == 60 and ev["accuracy"] == pytest.approx(trained["test_acc"][0], abs=1e-6)
    # the same split from its file scores the same; a fresh random split overlapping training nodes is refused
    assert run_main(["evaluate", "--checkpoint", model / "m", *SYNTH, "--split-file", model / "s.csv",
                     "--json", tmp_path / "ev2.json"]) == 0
    assert json.loads((tmp_path / "ev2.json").read_text())["accuracy"] == ev["accuracy"]
    (tmp_path / "ev.json").unlink()
    (tmp_path / "ev2.json").unlink()
    refused(["evaluate", "--checkpoint", model / "m", *SYNTH, *RANDOM, "--data-seed", "5",
             "--json", tmp_path / "x.json"], capsys,
            r"--on test: \d+ of the 60 test nodes of this split trained the model \(its split: random \(seed 0\)\)"
            r".*pass the file `jaxgcn train --save-split` wrote", tmp_path)


def _graph_files(d: Path, rename: dict[int, str] | None = None, permute: bool = False) -> dict[str, Path]:
    from jaxgcn.datasets import synthetic

    raw = synthetic(240, n_classes=3, n_features=8, seed=4)
    ids = [f"v{i:03d}" for i in range(240)]
    for i, new in (rename or {}).items():
        ids[i] = new
    labels = np.random.default_rng(1).permutation(raw.labels) if permute else raw.labels
    d.mkdir(parents=True, exist_ok=True)
    (d / "e.csv").write_text("src,dst\n" + "".join(f"{ids[s]},{ids[t]}\n" for s, t in zip(raw.senders, raw.receivers)))
    (d / "l.csv").write_text("node,label\n" + "".join(f"{ids[i]},c{labels[i]}\n" for i in range(240)))
    return {"edges": d / "e.csv", "labels": d / "l.csv"}


@pytest.fixture(scope="module")
def featureless(tmp_path_factory):
    """A model trained on own files without features (one-hot node ids)."""

    d = tmp_path_factory.mktemp("featureless")
    f = _graph_files(d / "g")
    assert run_main(["train", "--edges", f["edges"], "--labels", f["labels"], "--train-per-class", "10",
                     "--val", "40", "--test", "80", "--epochs", "60", "--quiet", "--no-compile-cache",
                     "--save", d / "m", "--json", d / "r.json"]) == 0
    return d


def _predictions(path: Path) -> dict[str, str]:
    return {line.split(",")[0]: line.split(",")[1] for line in path.read_text().splitlines()[1:]}


def test_a_featureless_model_predicts_by_node_id(featureless, tmp_path, capsys):
    f = featureless / "g"
    assert run_main(["predict", "--checkpoint", featureless / "m", "--edges", f / "e.csv",
                     "--out", tmp_path / "a.csv"]) == 0
    renamed = _graph_files(tmp_path / "g2", rename={120: "zzz"})  # one node renamed (sorts last now)
    capsys.readouterr()
    assert run_main(["predict", "--checkpoint", featureless / "m", "--edges", renamed["edges"],
                     "--out", tmp_path / "b.csv"]) == 0
    assert "1 node(s) of" in capsys.readouterr().out
    a, b = _predictions(tmp_path / "a.csv"), _predictions(tmp_path / "b.csv")
    same = [k for k in a if k in b]
    assert len(same) == 239
    # only the renamed node lost its identity: at most its neighbours may change (was 188 of 299 before)
    assert sum(a[k] != b[k] for k in same) <= 3

    # evaluate without a split file uses the training split saved in the checkpoint
    trained = json.loads((featureless / "r.json").read_text())
    assert run_main(["evaluate", "--checkpoint", featureless / "m", "--edges", f / "e.csv", "--labels", f / "l.csv",
                     "--json", tmp_path / "ev.json"]) == 0
    assert json.loads((tmp_path / "ev.json").read_text())["accuracy"] == pytest.approx(trained["test_acc"][0], abs=1e-6)


def test_own_files_without_a_saved_split_need_the_split_file(featureless, tmp_path, capsys):
    d = tmp_path / "m"
    shutil.copytree(featureless / "m", d)
    meta = json.loads((d / "checkpoint.json").read_text())
    meta["split_file"] = None  # as an older jaxgcn wrote it
    (d / "checkpoint.json").write_text(json.dumps(meta))
    f = featureless / "g"
    refused(["evaluate", "--checkpoint", d, "--edges", f / "e.csv", "--labels", f / "l.csv"], capsys,
            r"holds no training split for these nodes; pass the split it was trained on with --split-file FILE",
            tmp_path)
    feats = tmp_path / "f.csv"
    feats.write_text("node,f0\n" + "".join(f"v{i:03d},1.0\n" for i in range(240)))
    refused(["predict", "--checkpoint", d, "--edges", f / "e.csv", "--features", feats, "--out", tmp_path / "p.csv"],
            capsys, r"the model was trained on one-hot node ids .*without --features", tmp_path)


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """An interrupted --checkpoint-every run on own files (killed before its final save)."""

    d = tmp_path_factory.mktemp("interrupted")
    f = _graph_files(d / "g")

    def args(labels: Path) -> list:
        return ["train", "--edges", f["edges"], "--labels", labels, "--train-per-class", "10", "--val", "40",
                "--test", "80", "--epochs", "4", "--early-stopping", "none", "--quiet", "--no-compile-cache"]

    real = checkpoint.save

    def killed_at_the_end(*a, **kw):
        if kw.get("state") is None:
            raise KeyboardInterrupt("killed")
        return real(*a, **kw)

    checkpoint.save = killed_at_the_end
    try:
        # main turns Ctrl-C into exit status 130 (and one line naming the checkpoint)
        assert run_main([*args(f["labels"]), "--save", d / "ck", "--checkpoint-every", "2"]) == 130
    finally:
        checkpoint.save = real
    assert checkpoint.load(d / "ck").meta["state_file"] is None  # its state: slice 0 of batch-state/
    assert list(batch_state.load(d / "ck")["slices"]) == ["0"]
    return d, args


def test_resume_refuses_other_data_naming_what_differs(interrupted, tmp_path, capsys):
    d, args = interrupted
    permuted = _graph_files(tmp_path / "g", permute=True)
    refused([*args(permuted["labels"]), "--resume", d / "ck"], capsys, r"--resume \S+: the prepared labels, split "
            r"differ from the data the run was started on \(SHA-256 recorded in the checkpoint\)", tmp_path)
    meta = json.loads((d / "ck" / "checkpoint.json").read_text())
    assert set(meta["data_sha256"]) == {"features", "labels", "graph", "split"}
