"""Each catalogue dataset's evaluation protocol: Shchur et al.'s per-class random splits, WikiCS's
official splits, stacked for batched runs, mapped through a renumbering, and chosen by the CLI.

The gnn-benchmark file is one the tests write in the published layout (tests/tiny_datasets.py: 3
classes of 60 nodes), so that these run in every clone, without the published files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cli_run import run_main
from tiny_datasets import GB_NODES, write_gnnbench
from jaxgcn import datasets
from jaxgcn.cli.common import check_split_flags
from jaxgcn.cli.parser import build_parser
from jaxgcn.datasets.catalogue import CATALOGUE, PROTOCOLS
from jaxgcn.datasets.gnnbench import load_gnnbench
from jaxgcn.datasets.named import protocol_info, protocol_of, protocol_splits
from jaxgcn.datasets.splits import per_class_split


@pytest.fixture(scope="module")
def shchur_cora(tmp_path_factory):
    """A gnn-benchmark dataset as the catalogue's shchur-* rows are read (3 classes of 60 nodes)."""
    return load_gnnbench(write_gnnbench(tmp_path_factory.mktemp("gnnbench") / "tiny.npz"), "tiny-shchur")


def test_every_catalogue_row_names_a_known_protocol_and_format():
    for d in CATALOGUE.values():
        assert d.protocol in PROTOCOLS, d.name
        assert d.format in ("planetoid", "gnnbench", "wikics", "ogb", "ogb-bin"), d.name
        assert d.bundled == (not d.sources), d.name
        assert d.nodes > 0 and d.classes > 1 and d.licence and d.citation, d.name
    assert protocol_of("Amazon_Photo") == "per-class-20-30" and protocol_of("ogbn-arxiv") == "ogb"
    assert protocol_of("cora") == "planetoid" and protocol_of("ogb:somewhere") is None


def test_shchur_protocol_draws_20_30_per_class_with_seed_plus_k(shchur_cora):
    splits = protocol_splits(shchur_cora, "per-class-20-30", 3, seed=5)
    labels = shchur_cora.labels
    for k, split in enumerate(splits):
        assert np.bincount(labels[split["train"]], minlength=3).tolist() == [20] * 3
        assert np.bincount(labels[split["val"]], minlength=3).tolist() == [30] * 3
        assert len(split["test"]) == GB_NODES - 150
        assert not set(split["train"]) & set(split["val"]) and not set(split["val"]) & set(split["test"])
        same = per_class_split(labels, 20, 30, seed=5 + k)
        assert all(np.array_equal(split[n], same[n]) for n in ("train", "val", "test"))
    assert not np.array_equal(splits[0]["train"], splits[1]["train"])


def test_official_splits_are_taken_in_order_and_counted(shchur_cora):
    n = shchur_cora.labels.size
    official = tuple({"train": np.array([i]), "val": np.array([n - 1 - i]), "test": np.arange(100, 150)}
                     for i in range(4))
    raw = shchur_cora._replace(splits=official[0], official_splits=official)
    got = protocol_splits(raw, "wikics", 2)
    assert [int(s["train"][0]) for s in got] == [0, 1]
    with pytest.raises(ValueError, match=r"^--splits 5: dataset tiny-shchur ships 4 official split\(s\) \(wikics "
                                         r"protocol\); give at most 4"):
        protocol_splits(raw, "wikics", 5)
    # a dataset with one official split (Planetoid, OGB) has exactly that one
    assert protocol_splits(shchur_cora, "ogb", 1)[0] is shchur_cora.splits


def test_stacked_splits_follow_a_renumbering(shchur_cora):
    splits = protocol_splits(shchur_cora, "per-class-20-30", 2)
    plain = datasets.with_splits(datasets.prepare(shchur_cora), splits, "two")
    reordered = datasets.with_splits(datasets.prepare(shchur_cora, reorder="rcm"), splits, "two")
    assert reordered.info["node_order"] is not None and plain.data.train_mask.shape == (2, GB_NODES)
    assert plain.info["split"] == "two" and plain.info["split_sizes"] == {"train": 60, "val": 90, "test": 30}
    order = np.asarray(reordered.info["node_order"])  # prepared node i is input node order[i]
    for name in ("train_mask", "val_mask", "test_mask"):
        a, b = np.asarray(getattr(plain.data, name)), np.asarray(getattr(reordered.data, name))
        assert np.array_equal(a[:, order], b), name
        labels = np.asarray(reordered.data.labels)
        assert np.array_equal(np.bincount(labels[b[0] > 0], minlength=3),
                              np.bincount(shchur_cora.labels[a[0] > 0], minlength=3))


@pytest.mark.parametrize(("dataset", "ok"), [("cora", False), ("shchur-cora", True), ("wikics", True),
                                             ("ogbn-arxiv", False)])
def test_splits_k_needs_random_unless_the_protocol_has_several(dataset, ok):
    args = build_parser().parse_args(["train", "--dataset", dataset, "--splits", "3"])
    if ok:
        check_split_flags(args)
    else:
        with pytest.raises(ValueError, match=r"^--splits 3 needs --split random \(the public split is one split\)"):
            check_split_flags(args)


def test_cli_trains_a_shchur_row_on_its_protocol(gnnbench_mirror, monkeypatch, tmp_path, capsys):
    url, row = gnnbench_mirror
    monkeypatch.setenv("JAXGCN_MIRROR", url)
    monkeypatch.setitem(CATALOGUE, row.name, row)
    argv = ["train", "--dataset", row.name, "--data-root", tmp_path / "data", "--splits", "2", "--epochs",
            "3", "--early-stopping", "none", "--quiet", "--no-compile-cache", "--json", tmp_path / "r.json"]
    assert run_main(argv) == 0, capsys.readouterr().err
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["dataset"] == row.name and r["n_nodes"] == GB_NODES and len(r["test_acc"]) == 2
    assert r["split"] == "20/30 per class, rest test (seed 0..1)"
    assert r["split_sizes"] == {"train": 60, "val": 90, "test": 30}
    assert r["protocol"] == "per-class-20-30" and r["metric"] == "accuracy"
    assert protocol_info("ogbn-arxiv") == {"protocol": "ogb", "metric": "ogb:acc"} and protocol_info("x") == {}


def test_data_request_fractions_default_to_val_10_and_test_20_percent():
    # the documented defaults (--val-frac 0.1, --test-frac 0.2 with --train-frac), each replaced alone
    from jaxgcn.app.data import DataRequest

    assert DataRequest("cora", train_frac=0.5).fractions() == (0.5, 0.1, 0.2)
    assert DataRequest("cora", train_frac=0.5, val_frac=0.3).fractions() == (0.5, 0.3, 0.2)
    assert DataRequest("cora", train_frac=0.5, test_frac=0.4).fractions() == (0.5, 0.1, 0.4)
    assert DataRequest("cora", train_frac=0.6, data_seed=3).split_name() == "fractions 0.6/0.1/0.2 (seed 3)"


def _load(request):
    from jaxgcn.app.data import load

    said = []
    return load(request, said.append, on_device=False).prepared.info, said


def test_a_split_given_up_front_replaces_the_datasets_protocol(tmp_path):
    # a split file or fractions decide the split: the dataset's protocol (Planetoid's public split
    # for cora, Shchur et al.'s 20/30 per class for shchur-*) is neither used nor reported
    from jaxgcn.app.data import DataRequest

    for name in ("cora", "Amazon_Photo", "wikics"):
        assert DataRequest(name).protocol is not None
        for given in ({"split_file": tmp_path / "s.csv"}, {"train_frac": 0.5}):
            request = DataRequest(name, **given)
            assert request.protocol is None and not request.several_protocol_splits and not request.random_splits
    info, said = _load(DataRequest("cora"))
    assert info["protocol"] == "planetoid" and info["split_sizes"] == {"train": 140, "val": 500, "test": 1000}
    info, said = _load(DataRequest("cora", train_frac=0.5))
    assert info["split"] == "fractions 0.5/0.1/0.2 (seed 0)" and "protocol" not in info
    assert info["split_sizes"] == {"train": 1354, "val": 272, "test": 542}  # stratified per class: 10% and 20%
    split = tmp_path / "s.csv"
    split.write_text("node,split\n" + "".join(f"{i},{('train', 'val', 'test')[i % 3]}\n" for i in range(30)))
    info, said = _load(DataRequest("cora", split_file=split))
    assert info["split"] == f"file {split}" and "protocol" not in info
    assert info["split_sizes"] == {"train": 10, "val": 10, "test": 10}
    assert f"split file {split}: train 10, val 10, test 10" in said[0]
