"""Checkpoints (jaxgcn.store.checkpoint) and the evaluate / predict commands."""

from __future__ import annotations

import io
import hashlib
import json
import os
import re

import numpy as np
import pytest
from cli_run import unwrap

from jaxgcn.store import batch_state, checkpoint
from jaxgcn.cli import main
from jaxgcn.core.models import Execution, GCNConfig
from jaxgcn.train import TrainConfig

PARAMS = {"layer_0": {"w": np.arange(6, dtype=np.float32).reshape(3, 2)}, "layer_1": {"w": np.ones((2, 2), np.float32)}}
INFO = {"n_features": 3, "n_classes": 2, "class_names": ["a", "b"], "feature_norm": "row", "norm": "sym"}


def save(directory, params=PARAMS, **kwargs):
    return checkpoint.save(directory, params, model_config=GCNConfig(hidden=2), train_config=TrainConfig(), info=INFO,
                           epoch=kwargs.get("epoch", 7), metrics={"test_acc": 0.5}, node_ids=kwargs.get("node_ids"),
                           execution=kwargs.get("execution"))


def test_round_trip_and_old_params_removed(tmp_path):
    save(tmp_path / "ck", node_ids=np.array(["x", "y", "z"]))
    save(tmp_path / "ck", {"layer_0": {"w": PARAMS["layer_0"]["w"] * 2}, "layer_1": PARAMS["layer_1"]}, epoch=9)
    ck = checkpoint.load(tmp_path / "ck")
    np.testing.assert_array_equal(ck.params["layer_0"]["w"], PARAMS["layer_0"]["w"] * 2)
    assert ck.meta["epoch"] == 9 and ck.meta["class_names"] == ["a", "b"] and ck.meta["model"]["hidden"] == 2
    assert ck.meta["version"] and ck.meta["train"]["lr"] == 0.01
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["checkpoint.json", "params-2.npz"]
    assert ck.node_ids is None


def test_a_run_state_goes_to_its_writer_after_the_model_and_never_to_the_old_layout(tmp_path):
    # the state-<n>.npz layout of earlier versions is read (checkpoint.load_state), no longer written:
    # a state without the writer of the one format is refused before any file is written
    kwargs = dict(model_config=GCNConfig(hidden=2), train_config=TrainConfig(), info=INFO, epoch=3, metrics={})
    state = {"leaf": np.arange(3, dtype=np.float32)}
    with pytest.raises(ValueError, match=r"^checkpoint\.save: state= needs write_state= \(e\.g\. a "
                                         r"jaxgcn\.store\.batch_state\.saver\(.*the state-<n>\.npz layout of earlier "
                                         r"versions is read, no longer written$"):
        checkpoint.save(tmp_path / "ck", PARAMS, state=state, **kwargs)
    assert not (tmp_path / "ck").exists()
    written = []
    checkpoint.save(tmp_path / "ck", PARAMS, state=state, **kwargs,
                    write_state=lambda s: written.append((s, (tmp_path / "ck" / checkpoint.META).is_file())))
    assert [(s is state, after) for s, after in written] == [(True, True)]  # to its writer once, after the JSON
    assert checkpoint.load(tmp_path / "ck").meta["state_file"] is None
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["checkpoint.json", "params-1.npz"]


def test_the_execution_is_recorded_beside_the_architecture(tmp_path):
    save(tmp_path / "ck", execution=Execution(backend="csr", aggregate_first=True))
    ck = checkpoint.load(tmp_path / "ck")
    assert ck.meta["execution"] == {"backend": "csr", "dropout_rng": "hash", "chunk_edges": None,
                                    "aggregate_first": True, "kernels": None, "precision": "auto"}
    assert "backend" not in ck.meta["model"] and "aggregate_first" not in ck.meta["model"]
    assert checkpoint.model_config(ck.meta) == GCNConfig(hidden=2)
    save(tmp_path / "none")
    assert checkpoint.load(tmp_path / "none").meta["execution"] is None


def test_an_older_checkpoint_with_execution_settings_in_its_model_still_loads(tmp_path):
    """Checkpoints written before the config split kept backend, dropout_rng, chunk_edges and
    aggregate_first inside "model" (and had no "execution"): they load, giving the architecture."""
    save(tmp_path / "ck")
    meta_path = tmp_path / "ck" / "checkpoint.json"
    meta = json.loads(meta_path.read_text())
    meta.pop("execution")
    meta["model"].update(backend="segment", dropout_rng="jax", chunk_edges=1000, aggregate_first=True)
    meta_path.write_text(json.dumps(meta))
    ck = checkpoint.load(tmp_path / "ck")
    assert checkpoint.model_config(ck.meta) == GCNConfig(hidden=2)
    np.testing.assert_array_equal(ck.params["layer_0"]["w"], PARAMS["layer_0"]["w"])


def test_a_write_killed_before_the_metadata_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    save(tmp_path / "ck", epoch=1)
    real_replace = os.replace

    def crash_on_meta(src, dst):
        if str(dst).endswith("checkpoint.json"):
            raise KeyboardInterrupt("killed")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_meta)
    with pytest.raises(KeyboardInterrupt):
        save(tmp_path / "ck", {"layer_0": {"w": np.zeros((3, 2), np.float32)}}, epoch=2)
    monkeypatch.setattr(os, "replace", real_replace)
    ck = checkpoint.load(tmp_path / "ck")
    assert ck.meta["epoch"] == 1
    np.testing.assert_array_equal(ck.params["layer_0"]["w"], PARAMS["layer_0"]["w"])


def test_corrupted_truncated_and_foreign_checkpoints_are_named(tmp_path):
    with pytest.raises(ValueError, match=r"not a checkpoint directory \(no checkpoint\.json\); pass the folder"):
        checkpoint.load(tmp_path)
    save(tmp_path / "ck")
    params = tmp_path / "ck" / "params-1.npz"
    params.write_bytes(params.read_bytes()[:-10])
    with pytest.raises(ValueError, match=r"params-1\.npz: \d+ bytes that do not match the recorded size/SHA-256; "
                                         r"the params file is truncated or corrupted"):
        checkpoint.load(tmp_path / "ck")
    save(tmp_path / "ck")  # a flipped bit in a weight: same size, so only the SHA-256 can tell
    params = next((tmp_path / "ck").glob("params-*.npz"))
    blob = bytearray(params.read_bytes())
    w = np.asarray(PARAMS["layer_0"]["w"], np.float32).tobytes()
    at = bytes(blob).index(w)  # the weight's bytes inside the (uncompressed) npz
    blob[at] ^= 0x01
    params.write_bytes(bytes(blob))
    with pytest.raises(ValueError, match=r"params-\d+\.npz: \d+ bytes that do not match the recorded size/SHA-256"):
        checkpoint.load(tmp_path / "ck")
    (tmp_path / "ck" / "checkpoint.json").write_text("{oops")
    with pytest.raises(ValueError, match=r"checkpoint\.json: unreadable JSON .*corrupted"):
        checkpoint.load(tmp_path / "ck")
    (tmp_path / "ck" / "checkpoint.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError, match=r"format 'other', expected 'jaxgcn-checkpoint-1'"):
        checkpoint.load(tmp_path / "ck")


def _npy_with_header(shape, dtype="|i1") -> bytes:
    """An .npy file whose header declares ``shape`` over a few bytes of data."""
    header = repr({"descr": dtype, "fortran_order": False, "shape": shape}).encode()
    header += b" " * (63 - (len(header) + 10) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\0" * 16


def test_side_files_are_verified_like_the_params(tmp_path):
    # issue 25: node ids, split and run state were not covered by the checkpoint's hashes, and a huge
    # .npy header in one gave an out-of-memory traceback
    ck = tmp_path / "ck"
    checkpoint.save(ck, PARAMS, model_config=GCNConfig(hidden=2), train_config=TrainConfig(), info=INFO, epoch=1,
                    metrics={}, node_ids=np.array(["x", "y", "z"]), split=np.array([1, 2, 3], np.int8))
    meta = json.loads((ck / "checkpoint.json").read_text())
    assert set(meta["files"]) == {"node_ids-1.npy", "split-1.npy"}
    split = ck / "split-1.npy"
    good = split.read_bytes()
    buf = io.BytesIO()
    np.save(buf, np.array([3, 2, 1], np.int8))  # a valid split, not the one saved: only the hash can tell
    split.write_bytes(buf.getvalue())
    with pytest.raises(ValueError, match=r"split-1\.npy: \d+ bytes that do not match the recorded size/SHA-256; "
                                         r"the split file is truncated or corrupted, save the model again"):
        checkpoint.load(ck)
    huge = _npy_with_header((10**13,))  # and its hash recorded, as a crafted checkpoint would
    split.write_bytes(huge)
    meta["files"]["split-1.npy"] = {"bytes": len(huge), "sha256": hashlib.sha256(huge).hexdigest()}
    (ck / "checkpoint.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"split-1\.npy: its header declares 9\.1 TiB of data but 16 bytes follow "
                                         r"it; the file is corrupted or was not written by jaxgcn"):
        checkpoint.load(ck)
    split.write_bytes(good)
    (ck / "checkpoint.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=r"checkpoint\.json: nested deeper than Python's recursion limit"):
        checkpoint.load(ck)


def test_a_reader_racing_a_run_that_saves_reads_the_newer_checkpoint(tmp_path, monkeypatch):
    # a reader that read checkpoint.json just before a --checkpoint-every save replaced it found its
    # files gone ("params file ... is missing", 3 times in 4): it now reads the newer checkpoint
    ck = tmp_path / "ck"
    save(ck)
    old = (ck / "checkpoint.json").read_text()
    save(ck, {"layer_0": {"w": PARAMS["layer_0"]["w"] * 3}, "layer_1": PARAMS["layer_1"]}, epoch=20)
    real, reads = checkpoint._meta_text, []

    def racing(directory):  # the first read sees the JSON of the save that was just replaced
        reads.append(1)
        return old if len(reads) == 1 else real(directory)

    monkeypatch.setattr(checkpoint, "_meta_text", racing)
    loaded = checkpoint.load(ck)
    assert loaded.meta["epoch"] == 20 and np.array_equal(loaded.params["layer_0"]["w"], PARAMS["layer_0"]["w"] * 3)
    monkeypatch.setattr(checkpoint, "_meta_text", lambda directory: old)  # no newer save: the error stands
    with pytest.raises(ValueError, match=r"params file params-1\.npz is missing"):
        checkpoint.load(ck)


def write_graph(tmp_path, n_extra=0):
    """Files with string ids and names; ``n_extra`` new nodes attached to the first ones."""
    from jaxgcn.datasets import synthetic

    raw = synthetic(240, n_classes=3, n_features=8, seed=4)
    ids = [f"v{i}" for i in range(240 + n_extra)]
    x = np.vstack([raw.features, raw.features[:n_extra] + 0.01])
    src = list(raw.senders) + list(range(240, 240 + n_extra))
    dst = list(raw.receivers) + list(range(n_extra))
    d = tmp_path / f"g{n_extra}"
    d.mkdir()
    (d / "e.csv").write_text("src,dst\n" + "".join(f"{ids[s]},{ids[t]}\n" for s, t in zip(src, dst)))
    (d / "f.csv").write_text("node," + ",".join(f"f{j}" for j in range(8)) + "\n"
                             + "".join(f"{ids[i]}," + ",".join(f"{v:.5f}" for v in x[i]) + "\n"
                                       for i in range(len(ids))))
    names = ["red", "green", "blue"]
    (d / "l.csv").write_text("node,label\n" + "".join(f"{ids[i]},{names[raw.labels[i]]}\n" for i in range(240)))
    return d


def test_train_save_evaluate_predict_on_own_files(tmp_path, capsys):
    g = write_graph(tmp_path)
    data = ["--edges", str(g / "e.csv"), "--features", str(g / "f.csv"), "--labels", str(g / "l.csv"),
            "--train-per-class", "10", "--val", "50", "--test", "100"]
    assert main(["train", *data, "--epochs", "40", "--save", str(tmp_path / "m"), "--json", str(tmp_path / "r.json"),
                 "--save-split", str(tmp_path / "s.csv"), "--quiet", "--no-compile-cache"]) == 0
    trained = json.loads((tmp_path / "r.json").read_text())
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(tmp_path / "m"), *data[:6], "--split-file", str(tmp_path / "s.csv"),
                 "--json", str(tmp_path / "ev.json")]) == 0
    ev = json.loads((tmp_path / "ev.json").read_text())
    assert ev["nodes"] == 100 and ev["accuracy"] == pytest.approx(trained["test_acc"][0], abs=1e-6)
    assert ev["classes"] == ["blue", "green", "red"] and np.array(ev["confusion"]).sum() == 100
    out = capsys.readouterr().out
    assert re.search(r"^test: 100 nodes \| accuracy \d\.\d{4} \| macro-F1 \d\.\d{4}$", out, re.M)

    # Predict on the graph extended with 5 NEW nodes (same feature space), unlabelled.
    g5 = write_graph(tmp_path, n_extra=5)
    assert main(["predict", "--checkpoint", str(tmp_path / "m"), "--edges", str(g5 / "e.csv"), "--features",
                 str(g5 / "f.csv"), "--out", str(tmp_path / "p.csv")]) == 0
    lines = (tmp_path / "p.csv").read_text().splitlines()
    assert lines[0] == "node,label,prob_blue,prob_green,prob_red" and len(lines) == 1 + 245
    rows = {line.split(",")[0]: line.split(",") for line in lines[1:]}
    assert {f"v{i}" for i in range(240, 245)} <= set(rows)  # the new nodes got predictions
    for row in rows.values():
        assert row[1] in ("red", "green", "blue") and abs(sum(map(float, row[2:])) - 1.0) < 1e-4


def test_predict_refuses_a_different_feature_space_and_writes_nothing(tmp_path, capsys):
    assert main(["train", "--dataset", "synthetic", "--nodes", "200", "--features", "8", "--epochs", "3",
                 "--save", str(tmp_path / "m"), "--quiet", "--no-compile-cache"]) == 0
    capsys.readouterr()
    code = main(["predict", "--checkpoint", str(tmp_path / "m"), "--dataset", "synthetic", "--nodes", "200",
                 "--features", "9", "--out", str(tmp_path / "p.csv")])
    assert code == 2 and not (tmp_path / "p.csv").exists()
    assert re.search(r"was trained on 8 features; this data has 9", unwrap(capsys.readouterr().err))
    assert main(["predict", "--checkpoint", str(tmp_path / "nope"), "--out", str(tmp_path / "p.csv")]) == 2
    assert "not a checkpoint directory" in unwrap(capsys.readouterr().err)
    # a batch checkpoints too (tests/test_run_kinds.py); once finished, its save holds no state
    assert main(["train", "--dataset", "synthetic", "--nodes", "200", "--seeds", "2", "--save", str(tmp_path / "x"),
                 "--checkpoint-every", "5", "--epochs", "12", "--quiet"]) == 0
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == [".jaxgcn.lock", "run-000", "run-001", "runs.json"]


SEVERAL = ["--dataset", "synthetic", "--nodes", "300", "--classes", "3", "--features", "8", "--epochs", "40",
           "--no-compile-cache"]


def test_save_with_seeds_and_splits_keeps_every_run_and_evaluate_picks_one(tmp_path, capsys):
    # 2 seeds x 2 random splits: 4 runs saved; each evaluates (on its own split) to the accuracy the
    # training reported for it, and the default is the run with the best validation accuracy
    m = tmp_path / "m"
    assert main(["train", *SEVERAL, "--seeds", "2", "--splits", "2", "--split", "random", "--save", str(m),
                 "--json", str(tmp_path / "r.json")]) == 0
    assert "saved the 4 runs' models to" in capsys.readouterr().out
    runs = json.loads((tmp_path / "r.json").read_text())["runs"]
    manifest = json.loads((m / "runs.json").read_text())
    assert [(r["seed"], r["split"]) for r in manifest["runs"]] == [(r["seed"], r["split"]) for r in runs]
    assert sorted({r["split"] for r in runs}) == [0, 1]
    best = max(range(4), key=lambda j: (runs[j]["val_acc"], -j))
    assert manifest["best"] == best != 0  # not the first run: the default must really choose
    splits = [np.load(next((m / f"run-{j:03d}").glob("split-*.npy"))) for j in range(4)]
    for j in range(4):  # each run keeps the split it trained on
        assert [np.array_equal(splits[j], splits[i]) for i in range(4)] == [
            runs[i]["split"] == runs[j]["split"] for i in range(4)]
    for j in (None, 0, 1, 3):
        out = tmp_path / f"ev{j}.json"
        assert main(["evaluate", "--checkpoint", str(m), *SEVERAL[:8], "--json", str(out),
                     *([] if j is None else ["--run", str(j)])]) == 0
        said = capsys.readouterr().out
        k = best if j is None else j
        assert f"run {k} of 4 (seed {runs[k]['seed']}, split {runs[k]['split']}" in said
        assert ("the best validation accuracy" in said) == (j is None)
        assert json.loads(out.read_text())["accuracy"] == pytest.approx(runs[k]["test_acc"], abs=1e-6)
    assert main(["predict", "--checkpoint", str(m), "--run", "1", *SEVERAL[:8], "--out", str(tmp_path / "p.csv")]) == 0
    assert len((tmp_path / "p.csv").read_text().splitlines()) == 301
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(m), "--run", "4", *SEVERAL[:8]]) == 2
    err = unwrap(capsys.readouterr().err)
    assert "--run 4: checkpoint" in err and "holds runs 0-3; pick one of them" in err
    assert main(["evaluate", "--checkpoint", str(m / "run-000"), "--run", "0", *SEVERAL[:8]]) == 2
    assert "holds one run (no runs.json); drop --run" in unwrap(capsys.readouterr().err)
    (m / "runs.json").write_text('{"format": "jaxgcn-runs-1", "best": 7, "runs": []}')
    assert main(["evaluate", "--checkpoint", str(m), *SEVERAL[:8]]) == 2
    assert "runs.json: not a jaxgcn-runs-1 manifest" in unwrap(capsys.readouterr().err)


def test_a_killed_run_resumes_to_the_uninterrupted_result(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    args = ["train", "--dataset", "synthetic", "--nodes", "300", "--epochs", "4000", "--early-stopping", "patience",
            "--patience", "5000", "--lr", "0.005", "--log-every", "1000", "--no-compile-cache", "--quiet"]
    assert main([*args, "--json", str(tmp_path / "full.json")]) == 0
    full = json.loads((tmp_path / "full.json").read_text())

    ck = tmp_path / "ck"
    cmd = [sys.executable, "-c", "import sys; from jaxgcn.cli import main; sys.exit(main(sys.argv[1:]))",
           *args, "--save", str(ck), "--checkpoint-every", "100", "--json", str(tmp_path / "never.json")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    epoch = 0
    while time.time() < deadline and proc.poll() is None:
        meta = ck / "checkpoint.json"
        if meta.exists():
            epoch = json.loads(meta.read_text())["epoch"]
            if epoch >= 300:
                break
        time.sleep(0.02)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert not (tmp_path / "never.json").exists()
    saved, state = checkpoint.load(ck), batch_state.load(ck)
    # the state is written after the model: a kill between the two leaves it one checkpoint behind
    assert 300 <= saved.meta["epoch"] < 4000 and saved.meta["state_file"] is None
    assert state["slices"]["0"]["epoch"] in (saved.meta["epoch"], saved.meta["epoch"] - 100)

    assert main([*args, "--resume", str(ck), "--save", str(ck), "--json", str(tmp_path / "resumed.json")]) == 0
    resumed = json.loads((tmp_path / "resumed.json").read_text())
    for key in ("test_acc", "val_acc", "epochs_run"):
        assert resumed[key] == full[key], key
    assert checkpoint.load(ck).meta["state_file"] is None  # the finished run's checkpoint holds no state
    assert not (ck / batch_state.FOLDER).exists()


def test_resume_refuses_other_settings_and_non_checkpoints(tmp_path, capsys):
    base = ["train", "--dataset", "synthetic", "--nodes", "200", "--epochs", "30", "--no-compile-cache", "--quiet"]
    assert main([*base, "--save", str(tmp_path / "ck"), "--checkpoint-every", "10", "--early-stopping", "none"]) == 0
    capsys.readouterr()
    assert main([*base, "--resume", str(tmp_path / "ck")]) == 2  # finished: no state left
    assert "holds no run state to resume" in unwrap(capsys.readouterr().err)
    assert main([*base, "--resume", str(tmp_path)]) == 2
    assert "not a checkpoint directory" in unwrap(capsys.readouterr().err)
    assert main([*base, "--checkpoint-every", "5"]) == 2
    assert "--checkpoint-every K needs --save DIR" in unwrap(capsys.readouterr().err)


def test_standardize_statistics_travel_with_the_checkpoint(tmp_path, capsys):
    from jaxgcn import datasets

    raw = datasets.synthetic(200, n_classes=2, n_features=4, seed=3)
    p = datasets.prepare(raw, feature_norm="standardize")
    stats = p.info["feature_stats"]
    np.testing.assert_allclose(stats["mean"], np.asarray(raw.features, np.float64).mean(axis=0))
    # Applied to other data, the saved statistics are used, not that data's own.
    other = raw._replace(features=np.asarray(raw.features) + 5.0)
    q = datasets.prepare(other, feature_norm="standardize", feature_statistics=stats)
    np.testing.assert_allclose(np.asarray(q.data.x), np.asarray(p.data.x) + 5.0 / np.asarray(stats["std"]),
                               rtol=1e-4, atol=1e-4)
    assert main(["train", "--dataset", "synthetic", "--nodes", "200", "--features", "4", "--epochs", "3",
                 "--feature-norm", "standardize", "--save", str(tmp_path / "m"), "--quiet", "--no-compile-cache"]) == 0
    assert len(checkpoint.load(tmp_path / "m").meta["feature_stats"]["std"]) == 4
