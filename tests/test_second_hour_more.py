"""A newcomer's second hour, continued (issue 58): a missing input file or ``--resume`` folder is
refused before JAX is imported and any data read, a finished checkpoint given to ``--resume`` before
the data is prepared; ``--checkpoint DIR/checkpoint.json`` names DIR; boolean split masks and PyG's
``edge_index`` from Python; ``predict``'s help and the README's dependencies say what is true;
``datasets`` and ``info`` print the same edge count."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from cli_run import run_main, unwrap

import jaxgcn
from jaxgcn.app import data as app_data
from jaxgcn.datasets import RawGraph
from jaxgcn.datasets.catalogue import CATALOGUE
from jaxgcn.datasets.stats import dataset_stats, describe, feature_nonzeros, listed_entries

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--dataset", "synthetic", "--nodes", "200", "--features", "8", "--hidden", "4",
        "--epochs", "2", "--early-stopping", "none", "--quiet"]

# runs every command line of argv (a JSON list) in one process, then says whether JAX was imported
EACH_WITHOUT_JAX = """
import json, sys
from jaxgcn.cli import main
for argv in json.loads(sys.argv[1]):
    print("code", main(argv), file=sys.stderr)
    print("----", file=sys.stderr)
print("imported:", "jax" if "jax" in sys.modules else "none", file=sys.stderr)
"""


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run's checkpoint (saved at its end: no run state to resume)."""
    ck = tmp_path_factory.mktemp("finished") / "ck"
    assert run_main(["train", *TINY, "--save", ck, "--checkpoint-every", "1"]) == 0
    return ck


@pytest.fixture
def no_data(monkeypatch):
    """Reading or preparing any data fails the test: a refusal must come before it."""
    def refuse(*a, **kw):
        raise AssertionError("the data was read")

    monkeypatch.setattr(app_data, "read", refuse)
    monkeypatch.setattr(app_data, "load", refuse)


def test_missing_inputs_and_resume_folders_are_refused_before_jax_is_imported(finished, tmp_path):
    d = tmp_path
    (d / "e.csv").write_text("src,dst\n0,1\n")
    (d / "l.csv").write_text("node,label\n0,0\n1,1\n")
    (d / "empty").mkdir()
    (d / "model.txt").write_text("not a folder\n")
    own = ["--edges", d / "e.csv", "--labels", d / "l.csv"]
    cases = [  # command line, what the one-line error says
        (["train", "--edges", d / "no-e.csv", "--labels", d / "l.csv"], f"--edges: edges file {d}/no-e.csv: not found"),
        (["train", "--edges", d / "e.csv", "--labels", d / "no-l.csv"],
         f"--labels: labels file {d}/no-l.csv: not found"),
        (["train", *own, "--features", d / "no-x.npy"], f"--features: features file {d}/no-x.npy: not found"),
        (["train", "--split-file", d / "no-s.csv"], f"--split-file: split file {d}/no-s.csv: not found"),
        (["evaluate", "--checkpoint", d / "no-ck"],
         f"--checkpoint {d}/no-ck: not a checkpoint directory (no such folder)"),
        (["predict", "--checkpoint", d / "empty", "--out", d / "p.csv"],
         f"--checkpoint {d}/empty: not a checkpoint directory (no checkpoint.json)"),
        (["evaluate", "--checkpoint", d / "model.txt"],
         f"--checkpoint {d}/model.txt: a file, not a checkpoint directory"),
        (["plot", "curves", "--log", d / "no.jsonl", "--out", d / "c.png"],
         f"--log {d}/no.jsonl: no such file; write it with `jaxgcn train --log {d}/no.jsonl`"),
        (["train", "--resume", d / "no-run"], f"--resume {d}/no-run: no such folder, nothing to resume"),
        (["sweep", "--resume", d / "no-sweep"], f"--resume {d}/no-sweep: no such folder, nothing to resume"),
        (["train", "--resume", d / "empty"], f"--resume {d}/empty: not a checkpoint directory (no checkpoint.json)"),
        (["train", "--resume", finished, "--log", d / "r.jsonl"], f"--resume {finished}: holds no run state to resume"),
    ]
    argvs = [[str(a) for a in argv] for argv, _ in cases]
    proc = subprocess.run([sys.executable, "-c", EACH_WITHOUT_JAX, json.dumps(argvs)], capture_output=True,
                          text=True, timeout=120)
    *answers, imported = unwrap(proc.stderr).split("----\n")
    assert imported == "imported: none\n", proc.stderr  # no case imported JAX
    for (argv, message), answer in zip(cases, answers, strict=True):
        assert answer.startswith(f"jaxgcn: error: {message}") and answer.endswith("code 2\n"), (argv, answer)
    assert proc.stdout == ""  # no dataset line, no "logging to", nothing prepared
    assert not (d / "r.jsonl").exists()


def test_a_finished_checkpoint_is_refused_before_the_data_and_the_log_line(finished, tmp_path, capsys, no_data):
    assert run_main(["train", "--resume", finished, "--log", tmp_path / "r.jsonl"]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # not "--log ...: the resumed run adds its new epochs to it"
    assert unwrap(err) == (f"jaxgcn: error: --resume {finished}: holds no run state to resume (it was saved at the end "
                           f"of a finished run); score it with `jaxgcn evaluate --checkpoint {finished}`, or train "
                           "again\n")


def test_a_resume_folder_without_a_checkpoint_is_refused_before_the_data(tmp_path, capsys, no_data):
    (tmp_path / "notes.txt").write_text("hi\n")
    assert run_main(["train", *TINY, "--resume", tmp_path]) == 2
    assert "not a checkpoint directory (no checkpoint.json)" in unwrap(capsys.readouterr().err)


def test_the_checkpoint_json_file_names_its_folder(finished, tmp_path, capsys):
    assert run_main(["evaluate", "--checkpoint", finished / "checkpoint.json"]) == 0
    out = capsys.readouterr().out
    assert f"split: the model's training split, saved in {finished} (public)\n" in out  # the folder, not the file
    assert re.search(r"^test: \d+ nodes \| accuracy ", out, re.M), out


def test_a_file_given_for_a_checkpoint_folder_says_to_pass_the_folder(tmp_path, capsys, no_data):
    (tmp_path / "model.safetensors").write_bytes(b"x")
    assert run_main(["evaluate", "--checkpoint", tmp_path / "model.safetensors"]) == 2
    assert "a file, not a checkpoint directory; pass the folder that `jaxgcn train --save DIR` wrote" in \
        unwrap(capsys.readouterr().err)


# --- from Python: boolean masks and edge_index, as PyG users write them ------------------------------

def toy(**splits) -> RawGraph:
    """Six nodes on a path 0-1-2-3-4-5, labels 0 1 0 1 0 1, with the ``splits`` given."""
    return RawGraph("toy", np.array([0, 1, 2, 3, 4]), np.array([1, 2, 3, 4, 5]), np.eye(6, dtype=np.float32),
                    np.array([0, 1, 0, 1, 0, 1]), splits)


def test_boolean_split_masks_are_accepted_and_equal_node_ids():
    ids = toy(train=np.array([0, 1]), val=np.array([2]), test=np.array([3, 5]))
    masks = toy(**{k: np.isin(np.arange(6), v) for k, v in ids.splits.items()})
    assert masks.splits["test"].dtype == bool
    by_ids, by_masks = jaxgcn.prepare(ids).data, jaxgcn.prepare(masks).data
    for split in ("train", "val", "test"):
        np.testing.assert_array_equal(np.asarray(by_masks.mask(split)), np.asarray(by_ids.mask(split)))
    assert by_masks.mask("test").tolist() == [False, False, False, True, False, True]
    assert np.asarray(by_masks.labels)[by_masks.mask("test")].tolist() == [1, 1]
    assert by_masks.test_mask.dtype == np.float32  # what the compiled loop multiplies by stays as it was


def test_a_boolean_mask_of_another_length_is_refused_naming_the_split():
    with pytest.raises(ValueError, match=r"toy: the val split is a boolean mask of shape \(5,\); a mask needs one "
                                         r"entry per node, shape \(6,\)"):
        jaxgcn.prepare(toy(train=np.array([0]), val=np.ones(5, bool), test=np.array([3])))


def test_raw_graph_has_pyg_masks_and_edge_index():
    raw = toy(train=np.array([0, 1]), val=np.array([2]), test=np.array([False, False, False, True, True, False]))
    assert raw.edge_index.tolist() == [[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]] and raw.edge_index.dtype == np.int64
    assert raw.labels[raw.test_mask].tolist() == [1, 0]
    assert raw.train_mask.tolist() == [True, True, False, False, False, False]
    assert raw.val_mask.sum() == 1


def test_prepared_data_has_a_boolean_mask_view_and_edge_index():
    data = jaxgcn.prepare(toy(train=np.array([0, 1]), val=np.array([2]), test=np.array([3, 4]))).data
    assert data.labels[data.mask("test")].tolist() == [1, 0]
    ei = data.edge_index
    assert ei.shape == (2, 10)  # the 5 path edges, both ways
    assert sorted(zip(ei[0].tolist(), ei[1].tolist())) == sorted([(i, i + 1) for i in range(5)] +
                                                                 [(i + 1, i) for i in range(5)])
    np.testing.assert_array_equal(ei[1], np.asarray(data.graph.receivers))  # receivers: row 1, as PyG's target
    with pytest.raises(ValueError, match=r"split='tset': choose one of 'train', 'val', 'test'"):
        data.mask("tset")


# --- what the help, the README, `datasets` and `info` say ---------------------------------------------

def test_predict_help_covers_multi_label_models(capsys):
    assert run_main(["--help"]) == 0
    out = capsys.readouterr().out
    predict = out[out.index("    predict"):]
    assert "class predictions" not in out and "multi-label model's labels" in " ".join(predict.split())


def test_the_readme_names_every_core_dependency():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = [re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower() for d in deps]
    readme = " ".join((ROOT / "README.md").read_text().split())
    sentence = readme[readme.index("Core dependencies:"):readme.index("optional:", readme.index("Core dependencies:"))]
    assert [n for n in names if n not in sentence] == []
    assert "psutil" in names


@pytest.mark.parametrize("name", ["cora", "citeseer"])
def test_info_prints_the_edge_count_datasets_lists(name):
    raw = jaxgcn.load_dataset(name)
    stats = dataset_stats(jaxgcn.prepare(raw, on_device=False), feature_nonzeros(raw.features))
    assert listed_entries(stats) == CATALOGUE[name].edges  # 10,556 and 9,104 (CiteSeer: self-loops aside)
    line = describe(stats)[1]
    assert line.startswith(f"  input: {raw.senders.size:,} edge entries as listed, {CATALOGUE[name].edges:,} distinct "
                           "without self-loops (the count `jaxgcn datasets` lists)")


def test_a_directed_graph_lists_its_directed_edges():
    assert listed_entries({"edges": 7, "one_way_edges_symmetrized": 0, "directed": True}) == 7
    assert listed_entries({"edges": 7, "one_way_edges_symmetrized": 3, "directed": False}) == 11
