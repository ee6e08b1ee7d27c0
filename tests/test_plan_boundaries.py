"""The accelerator plan's rules at their boundaries, decided on the CPU with the platform faked as a TPU:
one value below and one at each threshold (the dense adjacency's byte limit, the runs from which a TPU
job takes neighbour lists, the aggregate-first tie, the runs one program holds when dense features add
their dropped copies), and a batch whose runs have different splits on the row-planned path, which
must train each run as its single run on its own split."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxgcn import datasets, plan
from jaxgcn.batched import entries_for, fit_runs
from jaxgcn.core.data import with_focus
from jaxgcn.core.models import Execution, GCNConfig
from jaxgcn.host import memory
from jaxgcn.host.memory import GiB, Budget
from jaxgcn.train import Kipf, TrainConfig, fit

SIDE = 16_384  # 4 x 16,384² bytes = 2**30: the largest graph whose float32 adjacency is exactly the limit


@pytest.fixture
def on_tpu(monkeypatch):
    """Planned as if JAX ran on a TPU with 15 GiB free (the arrays stay on the CPU)."""
    monkeypatch.setattr(plan, "current_platform", lambda: "tpu")
    monkeypatch.setattr(memory, "device_budget", lambda device=None: Budget(15 * GiB, "TPU v5 lite (tpu:0)"))


def test_the_dense_adjacency_limit_is_inclusive():
    assert 4 * SIDE * SIDE == plan.ACCEL_DENSE_BYTES == 2**30
    assert plan.backend_for("auto", SIDE - 1, 100, "gpu") == "dense"
    assert plan.backend_for("auto", SIDE, 100, "gpu") == "dense"  # exactly at the limit: still on the MXU
    assert plan.backend_for("auto", SIDE + 1, 100, "gpu") == "gather"


def test_a_tpu_job_takes_neighbour_lists_from_eight_runs_on():
    assert plan.LISTS_MIN_RUNS == 8
    assert plan.backend_for("auto", 2708, 10556, "tpu", runs=7) == "dense"
    assert plan.backend_for("auto", 2708, 10556, "tpu", runs=8) == "gather"
    assert plan.backend_for("auto", 2708, 10556, "gpu", runs=8) == "dense"  # a GPU: by the adjacency's size only
    assert plan.backend_for("dense", 2708, 10556, "tpu", runs=100) == "dense"  # asked for: kept


def test_the_features_are_lists_for_eight_runs_where_the_kernel_holds_them():
    assert plan.features_layout("gather", 2708, 1433, "tpu", 16 * GiB, nnz=49_216, runs=7) == "dense"
    assert plan.features_layout("gather", 2708, 1433, "tpu", 16 * GiB, nnz=49_216, runs=8) == "lists"
    four = 4 * 2708 * 1433  # the dense features' bytes: dense while a quarter of the free bytes hold them
    assert plan.features_layout("gather", 2708, 1433, "tpu", 4 * four) == "dense"
    assert plan.features_layout("gather", 2708, 1433, "tpu", 4 * four - 1) == "lists"


@pytest.mark.parametrize(("features", "hidden", "want"), [(23, 16, True), (24, 16, False), (25, 16, False),
                                                          (2, 1, False), (1, 1, True)])
def test_aggregate_first_auto_at_its_tie(features, hidden, want):
    # 2 x features < 3 x hidden: at 2 x 24 == 3 x 16 the backward pass would need the propagation either way
    assert plan.aggregate_first("auto", features, hidden, True) is want
    assert plan.aggregate_first("auto", features, hidden, False) is False  # sparse inputs: A (X W)


def small_graph(n_features=8, **kwargs):
    raw = datasets.synthetic(300, n_classes=3, n_features=n_features, avg_degree=3.0, seed=2, **kwargs)
    return raw


@pytest.mark.parametrize(("features", "want"), [(23, True), (24, False)])
def test_the_plan_decides_aggregate_first_at_the_tie_on_a_tpu(on_tpu, features, want):
    prepared = datasets.prepare(small_graph(features))
    assert prepared.backend == "dense" and prepared.data.x.shape[1] == features
    chosen = plan.resolve(Execution(), prepared.data, GCNConfig(hidden=16), prepared.n_classes, aggregate="auto")
    assert chosen.execution.aggregate_first is want


def test_runs_per_program_with_dense_features_count_their_dropped_copies(on_tpu, monkeypatch):
    """A run of a batch with dense features holds its dropped copy of them and that copy's twin of the
    gradient pass (8 x nodes x features bytes): one byte of memory less than 5 such runs in half of the
    device's free memory, and 10 runs go in programs of 4 (then 4, then 2 padded to 4), not of 5."""
    prepared = datasets.prepare(small_graph(64))
    data, n = prepared.data, 300
    assert data.x.shape == (n, 64) and not hasattr(data.x, "nse")
    per_run = memory.per_run_bytes(n, int(data.graph.n_edges), 16, 16, hidden=16) + 8 * n * 64
    assert plan._per_run_bytes(16, data.graph, 64) == per_run
    for free, want in ((2 * 5 * per_run, 5), (2 * 5 * per_run - 2, 4)):
        monkeypatch.setattr(memory, "device_budget", lambda device=None, free=free: Budget(free, "a chip"))
        chosen = plan.resolve(Execution(), data, GCNConfig(hidden=16), prepared.n_classes, n_runs=10, devices=1)
        assert chosen.runs == want, free


# --- a batch of runs on different splits, each layer at the rows its logits read -------------------


@pytest.fixture(scope="module")
def two_splits():
    """A sparse 1,000-node graph with two random splits of few nodes: the row plans of the batch cover the
    union of the splits' nodes, well under 3/4 of the graph."""
    raw = datasets.synthetic(1000, n_classes=3, n_features=8, avg_degree=2.0, homophily=0.7, seed=4)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(plan, "current_platform", lambda: "tpu")
        prepared = datasets.prepare(raw, backend="dense")
    return datasets.with_random_splits(prepared, raw.labels, 2, per_class=4, n_val=20, n_test=50, seed=3)


def test_a_batch_of_two_splits_on_row_plans_equals_its_single_runs(on_tpu, two_splits):
    data = two_splits.data
    execution = Execution(backend="dense")
    model, config = GCNConfig(hidden=8), TrainConfig(epochs=25, lr=0.05, early_stopping=Kipf(5))
    train = np.asarray(data.train_mask)
    assert train.shape == (2, 1000) and np.flatnonzero(train[1] > train[0]).size > 0  # each split its own nodes
    decided = plan.resolve(execution, data, model, two_splits.n_classes, n_runs=2).execution
    assert decided.ops.row_plans  # the path under test: on the TPU, each layer at its rows only
    aux = with_focus(data, model.layers, decided.ops.prepare).aux
    assert aux is not None and aux.train_rows.mats[-1] is not None
    res = fit_runs(data, two_splits.n_classes, entries_for([5], model_config=model, config=config, splits=2),
                   execution=execution)
    for k in range(2):
        one = data._replace(train_mask=data.train_mask[k], val_mask=data.val_mask[k], test_mask=data.test_mask[k])
        single = fit(one, two_splits.n_classes, model_config=model, config=config, execution=execution,
                     key=jax.random.key(5), log=None)
        e = single.epochs_run
        assert int(res.epochs_run[k]) == e
        for name in ("loss", "train_acc", "val_loss", "val_acc"):
            np.testing.assert_allclose(np.asarray(res.history[name])[k, :e], np.asarray(single.history[name]),
                                       rtol=1e-5, atol=1e-6, err_msg=f"split {k}: {name}")
        assert float(res.metrics["test_acc"][k]) == pytest.approx(single.metrics["test_acc"], abs=1e-6)
