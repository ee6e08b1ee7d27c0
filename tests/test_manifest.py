"""One reader (jaxgcn.store.manifest.read_manifest) for the JSON manifests: a checkpoint's checkpoint.json,
a several-run save's runs.json and a batch's batch-state/state.json, and train --resume's check of
the batch state at parse time (issue 44)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jaxgcn.store import batch_state, checkpoint
from jaxgcn.store.manifest import BATCH_STATE, CHECKPOINT, RUNS, ManifestError, peek_manifest, read_manifest


def _write(path, data: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("data, why, said", [
    (b"{oops", "JSONDecodeError", "unreadable JSON (JSONDecodeError); it was edited or not written by this jaxgcn"),
    (b"\xff\xfe", "UnicodeDecodeError", "unreadable JSON (UnicodeDecodeError); it was edited"),
    (b"[" * 100_000 + b"]" * 100_000, "RecursionError", "unreadable JSON (RecursionError); it was edited"),
    (b"[]", "not a jaxgcn-batch-state-1 manifest", "not a jaxgcn-batch-state-1 manifest (format, extra, data_sha256"),
    (b'{"format": "jaxgcn-runs-1"}', "not a jaxgcn-batch-state-1 manifest", "not a jaxgcn-batch-state-1 manifest ("),
])
def test_a_damaged_manifest_is_refused_with_its_reason(tmp_path, data, why, said):
    path = _write(tmp_path / "state.json", data)
    with pytest.raises(ManifestError) as caught:
        read_manifest(path, BATCH_STATE)
    assert caught.value.why == why
    assert str(caught.value).startswith(f"--resume {path}: {said}"), str(caught.value)
    assert str(caught.value).endswith("; it was edited or not written by this jaxgcn: train again")


def test_a_missing_or_unreadable_manifest_and_the_owners_shape_check(tmp_path):
    with pytest.raises(ManifestError, match=r"runs\.json: cannot be read \(No such file or directory\); check its "
                                            r"permissions$") as caught:
        read_manifest(tmp_path / "runs.json", RUNS)
    assert caught.value.why == "missing"
    (tmp_path / "folder.json").mkdir()
    with pytest.raises(ManifestError, match=r"folder\.json: cannot be read \(Is a directory\)") as caught:
        read_manifest(tmp_path / "folder.json", RUNS)
    assert caught.value.why == "Is a directory"
    path = _write(tmp_path / "runs.json", b'{"format": "jaxgcn-runs-1", "best": 0}')
    assert read_manifest(path, RUNS) == {"format": "jaxgcn-runs-1", "best": 0}  # the format alone
    assert read_manifest(path, RUNS, lambda m: m["best"] == 0)["best"] == 0
    with pytest.raises(ManifestError, match=r"not a jaxgcn-runs-1 manifest \(format, best, and per run its dir, seed, "
                                            r"split, val_acc and test_acc\); it was edited or not written by this "
                                            r"jaxgcn: save the runs again$"):
        read_manifest(path, RUNS, lambda m: m["best"] == 1)


def test_a_checkpoint_manifest_names_the_json_error_and_the_format_found(tmp_path):
    path = _write(tmp_path / "checkpoint.json", b'{"format": 1,}')
    with pytest.raises(ManifestError, match=r"^checkpoint \S+checkpoint\.json: unreadable JSON \(Expecting property "
                                            r"name enclosed in double quotes: line 1 column 14 \(char 13\)\); the "
                                            r"file is corrupted$"):
        read_manifest(path, CHECKPOINT)
    _write(path, b'{"format": "jaxgcn-runs-1"}')
    with pytest.raises(ManifestError, match=r"format 'jaxgcn-runs-1', expected 'jaxgcn-checkpoint-1'; it was not "
                                            r"written by this jaxgcn$"):
        read_manifest(path, CHECKPOINT)


def test_the_three_readers_refuse_the_same_damage_through_the_one_reader(tmp_path):
    for folder in ("ck", "runs", "batch"):
        (tmp_path / folder).mkdir()
    _write(tmp_path / "ck" / checkpoint.META, b"{oops")
    _write(tmp_path / "runs" / checkpoint.RUNS, b"{oops")
    _write(tmp_path / "batch" / batch_state.FOLDER / batch_state.MANIFEST, b"{oops")
    with pytest.raises(ValueError, match=r"^checkpoint \S+/ck/checkpoint\.json: unreadable JSON \(Expecting"):
        checkpoint.load(tmp_path / "ck")
    with pytest.raises(ValueError, match=r"^checkpoint \S+/runs/runs\.json: unreadable JSON \(JSONDecodeError\); the "
                                         r"file is corrupted, save the runs again$"):
        checkpoint.resolve_run(tmp_path / "runs", None)
    with pytest.raises(ValueError, match=r"^--resume \S+/batch/batch-state/state\.json: unreadable JSON "
                                         r"\(JSONDecodeError\); it was edited"):
        batch_state.load(tmp_path / "batch")


def test_a_peek_gives_any_json_object_and_none_for_anything_else(tmp_path):
    # the options a save records are looked up leniently (train --resume's defaults, --save's check, which
    # run folder holds a seed): whatever is damaged there is named by the reader that needs the file
    assert peek_manifest(_write(tmp_path / "a.json", b'{"format": "other", "extra": {}}')) == \
        {"format": "other", "extra": {}}
    for name, data in {"b.json": b"{oops", "c.json": b"\xff", "d.json": b"[1]", "e.json": b"[" * 100_000}.items():
        assert peek_manifest(_write(tmp_path / name, data)) is None, name
    (tmp_path / "folder.json").mkdir()
    assert peek_manifest(tmp_path / "folder.json") is None and peek_manifest(tmp_path / "missing.json") is None


def test_the_reader_imports_nothing_but_the_standard_library():
    # train --resume reads a batch's state.json at parse time, before JAX (jaxgcn.cli.common.BEFORE_JAX)
    code = "import sys, jaxgcn.store.manifest; print(sorted({'jax', 'numpy'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.strip() == "[]"
