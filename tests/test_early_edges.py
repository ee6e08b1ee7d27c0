"""What the command line checks before JAX starts, at its edges (the fraction split's defaults in the
sum check; "did you mean" for a dataset name typed in capitals), and the old module names' table pinned
by a literal list: a name dropped from jaxgcn.moved's table would otherwise drop its own test."""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

import pytest

from jaxgcn import moved
from jaxgcn.cli.common import check_ranges
from jaxgcn.datasets.catalogue import check_name


def fractions(train, val=None, test=None) -> argparse.Namespace:
    return argparse.Namespace(train_frac=train, val_frac=val, test_frac=test)


@pytest.mark.parametrize("train", [0.7, 0.69, 0.5])
def test_train_fractions_that_fit_beside_the_default_val_and_test_fractions_pass(train):
    check_ranges(fractions(train))  # with --val-frac 0.1 and --test-frac 0.2 (app.data.DataRequest.fractions)
    check_ranges(fractions(train, val=0.1, test=0.2))


def test_fractions_that_sum_to_exactly_1_pass():
    assert 0.5 + 0.3 + 0.2 == 1.0
    check_ranges(fractions(0.5, val=0.3))
    check_ranges(fractions(0.4, val=0.3, test=0.3))


@pytest.mark.parametrize(("args", "named"), [
    (fractions(0.71), "--train-frac 0.71 --val-frac 0.1 --test-frac 0.2: together 1.01"),
    (fractions(0.5, val=0.31), "--train-frac 0.5 --val-frac 0.31 --test-frac 0.2: together 1.01"),
    (fractions(0.6, test=0.31), "--train-frac 0.6 --val-frac 0.1 --test-frac 0.31: together 1.01"),
])
def test_fractions_past_all_the_nodes_are_refused_naming_the_defaults_they_add(args, named):
    with pytest.raises(ValueError, match=rf"^{named}, more than all the labelled nodes; give fractions that sum "
                                         "to 1 or less$"):
        check_ranges(args)


def test_the_checks_defaults_are_the_splits_defaults():
    from jaxgcn.app.data import DataRequest

    assert DataRequest("cora", train_frac=0.7).fractions() == (0.7, 0.1, 0.2)


@pytest.mark.parametrize(("typed", "meant"), [("CORRA", "cora"), ("PUBMD", "pubmed"), ("CiteSer", "citeseer"),
                                              ("corra", "cora")])
def test_did_you_mean_a_dataset_ignores_case(typed, meant):
    with pytest.raises(ValueError, match=rf"^unknown dataset {typed!r} \(did you mean {meant}\?\); choose one of "):
        check_name(typed)


@pytest.mark.parametrize("typed", ["CORA", "Cora", "PubMed", "CITESEER"])
def test_a_dataset_name_in_any_case_is_the_dataset(typed):
    assert check_name(typed).name == typed.lower()


OLD_NAMES = {  # the table of jaxgcn.moved, written out: every old address that still imports for a release
    "jaxgcn.graph": "jaxgcn.core.graph", "jaxgcn.data": "jaxgcn.core.data",
    "jaxgcn.propagate": "jaxgcn.core.propagate", "jaxgcn.models": "jaxgcn.core.models",
    "jaxgcn.layers": "jaxgcn.core.layers", "jaxgcn.ops": "jaxgcn.core.ops", "jaxgcn.hyper": "jaxgcn.core.hyper",
    "jaxgcn.validate": "jaxgcn.core.validate", "jaxgcn.diagnostics": "jaxgcn.core.diagnostics",
    "jaxgcn.native_ops": "jaxgcn.core.native_ops",
    "jaxgcn.csr": "jaxgcn.native.csr", "jaxgcn.fused": "jaxgcn.native.fused",
    "jaxgcn.kernel_build": "jaxgcn.native.kernel_build",
    "jaxgcn.checkpoint": "jaxgcn.store.checkpoint", "jaxgcn.checkpoint_runs": "jaxgcn.store.checkpoint_runs",
    "jaxgcn.batch_state": "jaxgcn.store.batch_state", "jaxgcn.manifest": "jaxgcn.store.manifest",
    "jaxgcn.memory": "jaxgcn.host.memory", "jaxgcn.machine": "jaxgcn.host.machine",
    "jaxgcn.caches": "jaxgcn.host.caches", "jaxgcn.compiler": "jaxgcn.host.compiler",
    "jaxgcn.interrupt": "jaxgcn.host.interrupt",
    "jaxgcn.outputs": "jaxgcn.io.outputs", "jaxgcn.reports": "jaxgcn.io.reports", "jaxgcn.plots": "jaxgcn.io.plots",
    "jaxgcn.progress": "jaxgcn.io.progress", "jaxgcn.metrics": "jaxgcn.io.metrics",
}


def test_the_old_names_table_is_the_written_out_list():
    assert moved.NEW_NAME == OLD_NAMES


@pytest.mark.parametrize("old", sorted(OLD_NAMES))
def test_each_old_name_imports_its_moved_module(old, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)  # imported afresh: the finder answers, and warns
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is importlib.import_module(OLD_NAMES[old])
    assert module.__spec__.name == OLD_NAMES[old]
    assert [str(w.message) for w in caught if w.category is DeprecationWarning] == [
        f"{old} moved to {OLD_NAMES[old]}; import it from there (the old name goes in the next release)"]
