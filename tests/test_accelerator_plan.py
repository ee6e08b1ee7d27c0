"""The plan on an accelerator, decided on the CPU with the platform and the device's memory faked:
what ``auto`` picks, how features are laid out, how many runs share a program, what memory a job is
checked against, and that the train step the plan builds there has no scatter (XLA's scatter is the
accelerator's bottleneck: issue 45)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from jaxgcn import plan
from jaxgcn.core.models import GCNConfig
from jaxgcn.datasets import load_dataset, prepare
from jaxgcn.host import memory
from jaxgcn.host.memory import GiB, Budget

TPU = Budget(15 * GiB, "TPU v5 lite (tpu:0)")


@pytest.fixture
def on_tpu(monkeypatch):
    """This process planned as if JAX ran on a TPU v5e with 15 GiB free (the arrays stay on the CPU)."""
    monkeypatch.setattr(plan, "current_platform", lambda: "tpu")
    monkeypatch.setattr(memory, "device_budget", lambda device=None: TPU)


@pytest.mark.parametrize("platform", ["tpu", "gpu"])
def test_auto_never_picks_a_scatter_on_an_accelerator(platform):
    # Cora's 2708² float32 adjacency (29 MB) goes on the MXU; past ACCEL_DENSE_BYTES, the neighbour lists
    side = int((plan.ACCEL_DENSE_BYTES / 4) ** 0.5)
    assert plan.backend_for("auto", 2708, 10556, platform) == "dense"
    assert plan.backend_for("auto", side, 10 * side, platform) == "dense"
    assert plan.backend_for("auto", side + 1, 10 * side, platform) == "gather"
    assert plan.backend_for("auto", 1_000_000, 25_000_000, platform) == "gather"
    assert plan.backend_for("segment", 1_000_000, 25_000_000, platform) == "segment"  # asked for: kept


def test_the_cpu_keeps_its_choices():
    assert plan.backend_for("auto", 100, 2000, "cpu") == "dense"
    assert plan.backend_for("auto", 2708, 10556, "cpu") in ("csr", "segment")
    assert plan.features_layout("segment", 2708, 1433, "cpu") == "bcoo"
    assert plan.features_layout("csr", 2708, 1433, "tpu", 16 * GiB) == "csr"


def test_features_are_dense_on_an_accelerator_where_a_quarter_of_its_memory_holds_them():
    assert plan.features_layout("dense", 2708, 1433, "tpu", 16 * GiB) == "dense"
    four = 4 * 2708 * 1433  # bytes of Cora's dense features
    assert plan.features_layout("gather", 2708, 1433, "tpu", 4 * four) == "dense"
    assert plan.features_layout("gather", 2708, 1433, "gpu", 4 * four - 4) == "lists"  # never BCOO's scatter
    assert plan.features_layout("segment", 2708, 1433, "cpu", 4 * four - 4) == "bcoo"


def test_features_too_large_for_a_quarter_of_the_device_are_gathered_as_lists(on_tpu, monkeypatch):
    from jaxgcn.core.feature_lists import FeatureLists

    monkeypatch.setattr(memory, "device_budget", lambda device=None: Budget(4 * 4 * 2708 * 1433 - 4, "a small chip"))
    prepared = prepare(load_dataset("cora"))
    assert isinstance(prepared.data.x, FeatureLists) and prepared.data.x.nse == 49_216
    assert prepared.data.x.shape == (2708, 1433)


def as_lists(data):
    """``data`` with its (dense) features as :class:`~jaxgcn.core.feature_lists.FeatureLists`."""
    import jax
    import scipy.sparse as sp

    from jaxgcn.core.feature_lists import from_scipy

    return data._replace(x=jax.device_put(from_scipy(sp.csr_matrix(np.asarray(data.x)))))


def test_runs_per_program_on_an_accelerator_come_from_its_memory():
    assert plan.accelerator_runs(100, 10 * 2**20, 16 * GiB) == 100
    assert plan.accelerator_runs(1024, 1, 16 * GiB) == plan.ACCEL_MAX_RUNS == 128
    assert plan.accelerator_runs(1000, 1, 16 * GiB) == 125  # 8 programs of equal size, none padded
    assert plan.accelerator_runs(100, GiB, 16 * GiB) == 8  # half of the free memory: 8 runs of 1 GiB
    assert plan.accelerator_runs(100, 20 * GiB, 16 * GiB) == 1


def test_the_device_budget_is_free_memory_named_by_the_device():
    class Chip:
        platform, device_kind, id = "tpu", "TPU v5 lite", 3

        def __init__(self, stats):
            self.stats = stats

        def memory_stats(self):
            return self.stats

    room = memory.device_budget(Chip({"bytes_limit": 16 * GiB, "bytes_in_use": 6 * GiB}))
    assert room == Budget(10 * GiB, "TPU v5 lite (tpu:3)")
    assert memory.device_budget(Chip(None)) is None  # no statistics: the host's memory is the budget
    assert memory.device_budget(Chip({"bytes_in_use": 1})) is None
    cpu = type("Cpu", (), {"platform": "cpu"})()
    assert memory.device_budget(cpu) is None
    est = memory.MemoryEstimate({"messages": 0, "activations": 12 * GiB, "adjacency": 0, "params": 0},
                                12 * GiB)
    with pytest.raises(ValueError, match=r"more than the 10\.0 GiB available on TPU v5 lite \(tpu:3\); options"):
        memory.check_fits(est, room.free, where=room.where)


def test_cora_on_a_tpu_is_dense_and_100_seeds_are_one_program(on_tpu):
    prepared = prepare(load_dataset("cora"))
    assert prepared.backend == "dense"
    assert not hasattr(prepared.data.x, "nse") and prepared.data.x.shape == (2708, 1433)  # dense features
    chosen = plan.resolve(plan.Execution(), prepared.data, GCNConfig(), prepared.n_classes, n_runs=100)
    assert (chosen.platform, chosen.backend, chosen.runs) == ("tpu", "dense", 100)
    assert plan.resolve(plan.Execution(), prepared.data, GCNConfig(), prepared.n_classes, n_runs=300).runs == 100
    # CiteSeer-sized dense inputs (3,703 features): a run's dropped copy is 8 x n x features bytes
    per_run = plan._per_run_bytes(16, prepared.data.graph, 3703)
    assert per_run > 8 * 2708 * 3703
    assert plan.accelerator_runs(100, per_run, 6 * GiB) == 34  # 3 GiB hold 39 runs: 3 programs of 34


def test_the_train_command_checks_the_devices_memory(on_tpu, capsys):
    from jaxgcn.cli import main

    assert main(["train", "--dataset", "cora", "--epochs", "2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^memory estimate \d+\.\d\d GiB \(.*\) of 15\.0 GiB available on TPU v5 lite \(tpu:0\)$",
                     out, re.M), out


def _scatters(jaxpr, found=None) -> list[tuple[str, tuple[int, ...]]]:
    """Every scatter primitive of ``jaxpr`` and its sub-jaxprs (loops, conds, custom VJPs), with its
    operand's shape."""
    found = [] if found is None else found
    for eqn in jaxpr.eqns:
        if eqn.primitive.name.startswith("scatter"):
            found.append((eqn.primitive.name, tuple(eqn.invars[0].aval.shape)))
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    _scatters(inner, found)
    return found


def step_scatters(backend: str, lists: bool = False, prepared: Any = None,
                  aggregate: str = "off", model: GCNConfig = GCNConfig()) -> list[tuple[str, tuple[int, ...]]]:
    """The scatters of one run's compiled training loop on Cora prepared and planned for ``backend``
    (the program :func:`jaxgcn.training.loop.single_program` compiles), before XLA rewrites them: the
    CPU expands a scatter into a loop, so the compiled text would not show one. ``lists``: the features
    as lists (where dense ones would not fit)."""
    import jax
    import jax.numpy as jnp

    from jaxgcn.core.data import with_focus
    from jaxgcn.training.config import TrainConfig
    from jaxgcn.training.step import make_batch_runner

    prepared = prepare(load_dataset("cora"), backend=backend) if prepared is None else prepared
    if lists:
        prepared = prepared._replace(data=as_lists(prepared.data))
    execution = plan.resolve(plan.Execution(backend=backend), prepared.data, model, prepared.n_classes,
                             aggregate=aggregate).execution
    data = with_focus(prepared.data, model.layers, execution.ops.prepare)
    runner = make_batch_runner(model, TrainConfig(), execution, one=(data.x.shape[1], prepared.n_classes))
    runs = jax.tree.map(np.asarray, runner.inputs())
    state = jax.eval_shape(runner.init, jax.random.key(0), data, runs)
    return _scatters(jax.make_jaxpr(runner.run_until)(state, data, runs, jnp.int32(0)).jaxpr)


@pytest.mark.parametrize("backend, lists", [("auto", False), ("gather", False), ("auto", True)])
def test_the_accelerator_plans_train_step_has_no_scatter_over_nodes(on_tpu, backend, lists):
    """The whole training loop of Cora as planned for a TPU (``auto``: dense Â and dense features; the
    neighbour lists; features as lists): no scatter over the nodes' rows. What remains
    are one-element writes of the epoch's history (XLA makes them dynamic-update-slices) and the loss's
    [1, 2] sums."""
    found = step_scatters(backend, lists)
    small = [(name, shape) for name, shape in found if int(np.prod(shape)) < 2708]
    assert found == small
    assert small, "the history writes: if none is found, the jaxpr walk misses sub-jaxprs"


def test_an_aggregate_first_layer_takes_its_rows_before_its_product(on_tpu):
    """An aggregate-first first layer with row plans computes its rows of Â·drop(X) (over their lists,
    or taken from Â·X) before the product with W: Â·drop(X) has no gradient. Its rows taken after the
    product, the take's transpose was a scatter-add of the rows' gradient into an every-node [n, 16]
    buffer (on the products-sized graph, [2.45M, 128] per step)."""
    from jaxgcn.datasets import synthetic

    prepared = prepare(synthetic(2000, n_features=8, avg_degree=3.0, n_val=100, n_test=200), backend="gather")
    found = step_scatters("gather", prepared=prepared, aggregate="on")
    assert [(name, shape) for name, shape in found if int(np.prod(shape)) >= 2000] == []
    assert found, "the history writes: if none is found, the jaxpr walk misses sub-jaxprs"


def test_an_aggregate_first_layer_propagates_its_input_over_its_rows_lists(on_tpu, monkeypatch):
    """With row plans, an aggregate-first first layer's training step propagates drop(X) over the lists of
    its rows only (``gather.rows_product``), not over every node's (``gather.propagate``, then a take of
    its rows): on the products-sized graph, 8.0M gathered rows of 100 features a step instead of 126M.
    So does the evaluations' Â·X, once per call, over the lists of their rows; the run still equals
    one over every row (tests/test_focus.py)."""
    from jaxgcn.core import gather
    from jaxgcn.datasets import synthetic

    calls = {"propagate": 0, "rows_product": 0}
    for name in calls:
        real = getattr(gather, name)
        monkeypatch.setattr(gather, name, lambda *a, _real=real, _name=name, **k: calls.__setitem__(
            _name, calls[_name] + 1) or _real(*a, **k))
    prepared = prepare(synthetic(2000, n_features=8, avg_degree=3.0, n_val=100, n_test=200), backend="gather")
    step_scatters("gather", prepared=prepared, aggregate="on")
    # a training step's two layers, an evaluation's last one, and its first's Â·X (once per call)
    assert calls == {"propagate": 0, "rows_product": 4}


@pytest.mark.parametrize("layers", [2, 3])
def test_a_residual_projection_takes_its_rows_before_its_product(on_tpu, layers):
    """A residual first layer's projection ``drop(X)·W_res`` is added at the rows the layer computes: it
    takes those rows of drop(X) (no gradient) before the product, so no scatter-add over every node's
    rows remains (taken after, the take's gradient was one: [2708, 1, 16] on Cora). A later layer adds
    its input as it is: that take's gradient is a scatter into its input's rows (1,664), not every node's."""
    found = step_scatters("gather", model=GCNConfig(residual=True, layers=layers))
    assert [shape for name, shape in found if shape[0] == 2708] == []
    assert [shape for name, shape in found if name == "scatter-add" and len(shape) == 3] == [(1664, 1, 16)][:layers - 2]


def test_segment_asked_for_on_an_accelerator_scatters(on_tpu):
    """What `auto` keeps off on an accelerator: `segment`'s segment_sum is a scatter-add over [n, width]."""
    assert ("scatter-add", (2708, 16)) in step_scatters("segment")


@pytest.mark.parametrize("backend, lists", [("auto", False), ("gather", False), ("auto", True)])
def test_a_batch_equals_single_runs_on_the_accelerator_path(on_tpu, backend, lists):
    """The accelerator's plan (dense input features dropped per run, the per-run products as one
    batched dot: the ops ``xla-mxu``; ``auto``: dense Â; or the features as lists) trains each run of a
    batch as the run alone."""
    import jax
    import scipy.sparse as sp

    from test_batched import assert_run_equals_fit

    from jaxgcn.batched import entries_for, fit_runs
    from jaxgcn.datasets import synthetic
    from jaxgcn.train import Kipf, TrainConfig, fit

    raw = synthetic(300, n_classes=4, n_features=24, homophily=0.5, signal=0.3, seed=1)
    dense = np.asarray(raw.features)
    raw = raw._replace(features=sp.csr_matrix(np.where(np.abs(dense) > 1.0, dense, 0.0).astype(np.float32)))
    from jaxgcn.core.feature_lists import FeatureLists

    prepared = prepare(raw, backend=backend)
    assert isinstance(prepared.data.x, jax.Array)  # laid out dense for the accelerator
    if lists:
        prepared = prepared._replace(data=as_lists(prepared.data))
        assert isinstance(prepared.data.x, FeatureLists)
    config = TrainConfig(epochs=30, lr=0.1, early_stopping=Kipf(5))
    chosen = plan.resolve(plan.Execution(backend=backend), prepared.data, GCNConfig(), prepared.n_classes, n_runs=3)
    assert chosen.ops.name.startswith("xla-mxu") and chosen.runs == 3
    res = fit_runs(prepared.data, prepared.n_classes, entries_for([1, 0, 2], config=config), execution=chosen)
    for r, seed in enumerate([1, 0, 2]):
        one = fit(prepared.data, prepared.n_classes, config=config, key=jax.random.key(seed), log=None,
                  execution=plan.resolve(plan.Execution(backend=backend), prepared.data, GCNConfig(),
                                         prepared.n_classes))
        assert_run_equals_fit(res, r, one)


def test_the_accelerator_batches_runs_on_the_matrix_unit():
    """Per-run inputs [n, R, in] times [in, R, out]: one batched dot on an accelerator where ``in`` is at
    least ops.MXU_MIN_IN (the CPU's broadcast product materializes [n, R, in, out]); a narrower input (a
    hidden layer's) the broadcast product, which a TPU fuses on its vector unit; equal values."""
    import jax
    import jax.numpy as jnp

    from jaxgcn.core import ops

    for d_in, batched in ((ops.MXU_MIN_IN, True), (ops.MXU_MIN_IN - 1, False)):
        h = jax.random.normal(jax.random.key(0), (50, 3, d_in))
        w = jax.random.normal(jax.random.key(1), (d_in, 3, 5))
        np.testing.assert_allclose(ops.mxu_matmul_runs(h, None, w), ops.xla_matmul_runs(h, None, w), rtol=1e-4,
                                   atol=1e-4)
        text = jax.jit(ops.mxu_matmul_runs, static_argnums=1).lower(h, None, w).as_text()
        assert ("dot_general" in text) == batched
        assert bool(re.search(rf"tensor<50x3x{d_in}x5xf32>", text)) != batched
    assert jnp.shape(ops.mxu_matmul_runs(h[:, :1], None, w[:, :1])) == (50, 1, 5)


def test_on_a_tpu_the_neighbour_lists_sum_with_the_pallas_kernel(on_tpu, monkeypatch):
    """The TPU plan's ``gather`` ops take the Pallas row sum where its table is large enough (here: any,
    the threshold lowered; interpreted on the CPU): forward and gradient equal the dense formula, and
    the kernel really ran (a call count)."""
    import jax
    import jax.numpy as jnp

    from jaxgcn.core import pallas_gather
    from jaxgcn.core.graph import from_edges, gcn_norm, to_dense, with_lists

    calls = []
    kernel = pallas_gather.row_sum
    monkeypatch.setattr(pallas_gather, "row_sum", lambda *a, **k: calls.append(a[1].shape) or kernel(*a, **k))
    rng = np.random.default_rng(0)
    senders, receivers = rng.integers(0, 40, 120), rng.integers(0, 40, 120)
    senders[:20], receivers[:20] = 0, np.arange(20, 40)  # a hub
    graph = with_lists(gcn_norm(from_edges(senders, receivers, n_nodes=42)[0]))  # two isolated nodes
    ops = plan.planned(plan.Execution(backend="gather"), graph).ops
    assert ops.name == "xla-mxu-pallas"
    x = jax.random.normal(jax.random.key(0), (42, 16))
    dense = jnp.asarray(to_dense(graph))
    np.testing.assert_allclose(ops.propagate(graph, x), dense @ x, rtol=1e-5, atol=1e-5)
    assert not calls  # a 2.7 kB table: XLA's gather is faster there
    monkeypatch.setattr(pallas_gather, "MIN_TABLE_BYTES", 4 * 42 * 16)
    np.testing.assert_allclose(ops.propagate(graph, x), dense @ x, rtol=1e-5, atol=1e-5)
    assert calls, "the Pallas kernel did not run"
    grad = jax.grad(lambda x: jnp.sum(jnp.sin(ops.propagate(graph, x))))(x)
    want = jax.grad(lambda x: jnp.sum(jnp.sin(dense @ x)))(x)
    np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(plan, "current_platform", lambda: "gpu")
    assert plan.planned(plan.Execution(backend="gather"), graph).ops.name == "xla-mxu"  # no Pallas TPU kernel


def test_the_accelerators_gather_ops_compute_only_the_rows_the_logits_read(on_tpu, monkeypatch):
    """On the chip the ``gather`` backend's ops take row plans (as the CPU's kernel does): a training
    step's last layer at the training nodes, the first around them, each a gather over the rows'
    neighbour lists and its gradient too. The run equals the run over every row (the CPU's XLA ops on
    the same layout) to float rounding, and the plans are really there."""
    import jax

    from jaxgcn.core.data import with_focus
    from jaxgcn.datasets import synthetic
    from jaxgcn.train import TrainConfig, fit

    monkeypatch.setattr("jaxgcn.core.pallas_gather.MIN_TABLE_BYTES", 2**40)  # XLA's row sums: fast on the CPU
    prepared = prepare(synthetic(2000, n_features=24, avg_degree=3.0, n_val=100, n_test=200), backend="gather")
    chosen = plan.resolve(plan.Execution(backend="gather"), prepared.data, GCNConfig(), prepared.n_classes)
    aux = with_focus(prepared.data, 2, chosen.ops.prepare).aux
    assert aux.train_rows.mats[1].order.shape == (80,)  # 4 classes x 20 training nodes
    assert 80 < aux.train_rows.mats[0].order.shape[0] < 2000 // 2
    config = TrainConfig(epochs=20, early_stopping=None)
    mine = fit(prepared.data, prepared.n_classes, config=config, key=jax.random.key(3), log=None, execution=chosen)
    monkeypatch.setattr(plan, "current_platform", lambda: "cpu")
    every = fit(prepared.data, prepared.n_classes, config=config, key=jax.random.key(3), log=None,
                execution=plan.resolve(plan.Execution(backend="gather"), prepared.data, GCNConfig(),
                                       prepared.n_classes))
    for name in ("loss", "val_acc", "train_acc"):
        np.testing.assert_allclose(mine.history[name], every.history[name], rtol=1e-5, atol=1e-5, err_msg=name)


def test_the_accelerators_dense_ops_compute_only_the_rows_the_logits_read(on_tpu, monkeypatch):
    """One Cora run on the chip is dense Â, each layer at the rows the logits read as dense rows of Â
    (a training step's last layer at the 140 training nodes, its first at the 644 around them; an
    evaluation's at the 640 focus nodes and the 1,756 around them): 0.17 ms per epoch at highest
    against 0.45 over every row (benchmarks/bench_accelerator.py --parts cora). The run equals the CPU's
    dense run over every row, the same hash masks, to float rounding; the estimate holds the plans' rows."""
    import jax

    from jaxgcn.core.data import with_focus
    from jaxgcn.train import TrainConfig, fit

    prepared = prepare(load_dataset("cora"), backend="dense")
    chosen = plan.resolve(plan.Execution(), prepared.data, GCNConfig(), prepared.n_classes)
    assert chosen.execution.backend == "dense" and chosen.ops.row_plans
    aux = with_focus(prepared.data, 2, chosen.ops.prepare).aux
    assert [m.shape for m in aux.train_rows.mats] == [(644, 2708), (140, 644)]
    assert [m.shape for m in aux.eval_rows.mats] == [(1756, 2708), (640, 1756)]
    full = np.asarray(prepared.data.graph.dense)[np.asarray(aux.train_rows.ids[1])]
    np.testing.assert_array_equal(np.asarray(aux.train_rows.mats[0]), full)  # Â's very rows, every column
    held = sum(leaf.nbytes for leaf in jax.tree.leaves((aux.train_rows, aux.eval_rows)))
    assert chosen.memory.parts["adjacency"] == 2708 * 2708 * 4 + held
    graph = prepared.data.graph
    at_rows = memory.estimate(2708, graph.n_edges, 1433, 7, backend="dense", device=True,
                              row_plans=memory.RowPlans((1756, 640), (0, 0), held), **plan.layout_facts(graph))
    assert chosen.memory == at_rows  # each layer at the larger plan's rows, no lists' slots
    config = TrainConfig(epochs=30, early_stopping=None)
    mine = fit(prepared.data, prepared.n_classes, config=config, key=jax.random.key(3), log=None, execution=chosen)
    monkeypatch.setattr(plan, "current_platform", lambda: "cpu")
    on_cpu = plan.resolve(plan.Execution(backend="dense", dropout_rng="hash"), prepared.data, GCNConfig(),
                          prepared.n_classes)
    assert not on_cpu.ops.row_plans
    every = fit(prepared.data, prepared.n_classes, config=config, key=jax.random.key(3), log=None, execution=on_cpu)
    for name in ("loss", "val_loss", "val_acc", "train_acc"):
        np.testing.assert_allclose(mine.history[name], every.history[name], rtol=1e-5, atol=1e-5, err_msg=name)


def test_a_devices_estimate_holds_no_host_runtime_and_a_runs_dense_features_once(on_tpu):
    """On a TPU v5e the 1M-node synthetic graph's training peaked at 0.703 GiB, 0.672 of it the data: the
    estimate of a device has no runtime part (the host's) and counts a run's dense features once."""
    args = (100_000, 1_000_000, 32, 7)
    host, chip = memory.estimate(*args, backend="gather"), memory.estimate(*args, backend="gather", device=True)
    assert host.parts["runtime"] == memory.RUNTIME_BYTES and chip.parts["runtime"] == 0
    assert chip.parts["features"] == 4 * 100_000 * 32 == host.parts["features"] // 3
    batch = memory.estimate(*args, backend="gather", device=True, runs=4)
    assert batch.parts["features"] == memory.estimate(*args, backend="gather", runs=4).parts["features"]
    sparse = dict(backend="gather", feature_nnz=50_000)
    assert memory.estimate(*args, **sparse, device=True).parts["features"] == memory.estimate(*args, **sparse).parts[
        "features"]
    prepared = prepare(load_dataset("cora"))
    chosen = plan.resolve(plan.Execution(), prepared.data, GCNConfig(), prepared.n_classes)
    assert chosen.memory.parts["runtime"] == 0 and chosen.memory.parts["features"] == 4 * 2708 * 1433


def test_a_job_of_many_runs_on_a_tpu_trains_on_gather_with_feature_lists(on_tpu):
    """From LISTS_MIN_RUNS runs a TPU job takes ``gather`` and the feature lists wherever the lists' Pallas
    kernel holds them (on a TPU v5e, 100 Cora seeds: 0.89 s against 2.7 s dense); one run keeps dense Â
    and dense features (0.45 ms an epoch against 1.15); a GPU keeps them (no such kernel); ``app.data.load``
    lays out for the job's runs."""
    from jaxgcn import app
    from jaxgcn.core.feature_lists import FeatureLists
    from jaxgcn.datasets import load_dataset

    many = plan.LISTS_MIN_RUNS
    assert [plan.backend_for("auto", 2708, 10556, "tpu", runs=r) for r in (1, many - 1, many)] == \
        ["dense", "dense", "gather"]
    assert plan.backend_for("auto", 2708, 10556, "gpu", runs=100) == "dense"
    assert plan.backend_for("segment", 2708, 10556, "tpu", runs=100) == "segment"  # asked for: kept
    layouts = [plan.features_layout("gather", 2708, 1433, "tpu", TPU.free, nnz=49_216, runs=r) for r in (1, many)]
    assert layouts == ["dense", "lists"]
    assert plan.features_layout("gather", 2708, 1433, "gpu", TPU.free, nnz=49_216, runs=100) == "dense"
    # a million values (128 lanes each) do not fit VMEM beside CiteSeer's 3,703-row side, nor does PubMed's
    # 19,717-row side: dense features, which fit the device
    assert plan.features_layout("gather", 3327, 3703, "tpu", TPU.free, nnz=105_165, runs=100) == "lists"
    assert plan.features_layout("gather", 3327, 3703, "tpu", TPU.free, nnz=1_000_000, runs=100) == "dense"
    assert plan.features_layout("gather", 19_717, 500, "tpu", TPU.free, nnz=88_648, runs=100) == "dense"
    raw = load_dataset("cora")
    for runs, backend, layout in ((1, "dense", jnp_array_type()), (many, "gather", FeatureLists)):
        loaded = app.data.load(app.DataRequest("cora"), lambda line: None, raw=raw, runs=runs)
        assert loaded.prepared.backend == backend and isinstance(loaded.prepared.data.x, layout)


def jnp_array_type():
    import jax

    return jax.Array
