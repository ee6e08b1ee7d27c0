"""The readers of the newer surfaces, fuzzed (issue 25): ``checkpoint.json``, ``partitions.json``, run
records (``--from-record``) and config files (``--config``). Each starts from a valid document, then
hypothesis replaces one of its values (or adds a key, or replaces the whole document) with arbitrary
JSON: nested lists and objects, nulls, booleans, huge integers, strings. Whatever the file holds, the
reader either accepts it or refuses it with one ValueError line; never another exception (a
traceback at the command line)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxgcn import datasets
from jaxgcn.store import checkpoint
from jaxgcn.cli import build_parser
from jaxgcn.cli.records import match_line, parse_args
from jaxgcn.core.models import GCNConfig
from jaxgcn.train import TrainConfig

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10)
FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _paths(doc, prefix=()):
    """Every path to a value inside a JSON document (object keys and list indices)."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


@st.composite
def edited(draw, doc):
    """``doc`` with the value at one of its paths (or a new key of the top object) replaced."""
    doc = json.loads(json.dumps(doc))
    paths = list(_paths(doc))
    path = draw(st.sampled_from(paths + [("new-key",)]))
    value = draw(JSON)
    if not path:
        return value
    node = doc
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return doc


def _one_line_or_accepted(read):
    try:
        read()
    except ValueError as err:
        assert "\n" not in str(err) and str(err), repr(err)


def _copy_edited(folder, name, tmp_path, data):
    """A copy of ``folder`` whose JSON file ``name`` is edited by hypothesis."""
    target = tmp_path / folder.name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(folder, target)
    doc = json.loads((folder / name).read_text())
    (target / name).write_text(json.dumps(data.draw(edited(doc))))
    return target


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ck") / "ck"
    params = {"layer_0": {"w": np.ones((3, 2), np.float32)}, "layer_1": {"w": np.ones((2, 2), np.float32)}}
    checkpoint.save(directory, params, model_config=GCNConfig(hidden=2), train_config=TrainConfig(),
                    info={"n_features": 3, "n_classes": 2, "class_names": ["a", "b"], "norm": "sym",
                          "feature_norm": "row"}, epoch=3, metrics={"test_acc": 0.5},
                    node_ids=np.array(["x", "y", "z"]), split=np.array([1, 2, 3], np.int8))
    return directory


@FUZZ
@given(data=st.data())
def test_checkpoint_json_fuzzed(saved, tmp_path, data):
    target = _copy_edited(saved, "checkpoint.json", tmp_path, data)
    _one_line_or_accepted(lambda: checkpoint.load(target))


@pytest.fixture(scope="module")
def partitions(tmp_path_factory):
    from jaxgcn.distributed import save_partitions

    host = datasets.prepare(datasets.synthetic(300, n_classes=3, n_features=4, seed=0), on_device=False)
    directory = tmp_path_factory.mktemp("parts") / "p"
    save_partitions(directory, host.data, 1, info=host.info)
    return directory


@FUZZ
@given(data=st.data())
def test_partition_meta_fuzzed(partitions, tmp_path, data):
    from jaxgcn.distributed import load_partitions, node_mesh

    target = _copy_edited(partitions, "partitions.json", tmp_path, data)
    _one_line_or_accepted(lambda: load_partitions(target, node_mesh(1)))


RECORD = {"record": {"format": 1, "command": "train", "argv": ["jaxgcn", "train"], "date": "2026-12-05T00:00:00",
                     "options": {"dataset": "cora", "lr": 0.01, "seeds": 2, "hidden": 16, "early_stopping": "kipf",
                                 "bias": False, "features": None},
                     "versions": {"jaxgcn": "1", "jax": "0.10.2"}, "platform": {"platform": "linux"},
                     "devices": {"count": 1, "process_count": 1,
                                 "devices": [{"platform": "cpu", "kind": "cpu", "name": "TFRT_CPU_0"}]},
                     "data_sha256": {"features": "a", "labels": "b", "graph": "c", "split": "d"}}}


@FUZZ
@given(data=st.data())
def test_run_record_fuzzed(tmp_path, data):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data.draw(edited(RECORD))))
    here = RECORD["record"]

    def read():
        args = parse_args(build_parser(), ["train", "--from-record", str(path)])
        match_line(args, here)  # what a re-run prints: compares versions, data and devices with the record
    _one_line_or_accepted(read)


@FUZZ
@given(data=st.data())
def test_config_file_fuzzed(tmp_path, data):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data.draw(edited({"lr": 0.05, "weight-decay": 0.001, "seeds": 3, "bias": True,
                                                 "early-stopping": "patience", "dataset": "citeseer"}))))
    _one_line_or_accepted(lambda: parse_args(build_parser(), ["train", "--config", str(path)]))
