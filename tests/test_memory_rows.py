"""The peak-memory estimate of a run whose layers compute only the rows the logits read (the
``gather`` backend's row plans on an accelerator: :class:`jaxgcn.host.memory.RowPlans`), checked
against XLA's own compiled memory analysis of the training loop, and the one rule for the bytes one
more run of a batch adds (:func:`jaxgcn.host.memory.per_run_bytes`)."""

from __future__ import annotations

import pytest
from test_accelerator_capabilities import on_tpu  # noqa: F401  (the faked TPU plan)

import jaxgcn.app.data  # noqa: F401  (imported before cpu_compiled patches memory.estimate: it binds estimate by name)
from jaxgcn import plan
from jaxgcn.core.models import Execution, GCNConfig
from jaxgcn.datasets import load_dataset, prepare, synthetic


def test_the_bytes_of_one_more_run_are_what_they_were(monkeypatch):
    """The slice rule (plan._per_run_bytes: the hidden width standing in for the classes, dense
    features' dropped copy added) and the sweep's chunks (plan.batch_bytes) read one rule; these are
    the figures both gave before they did, on the CPU's plan (on an accelerator too: its plan lays
    sparse features out dense)."""
    monkeypatch.setattr(plan, "current_platform", lambda: "cpu")
    cora = prepare(load_dataset("cora"), backend="segment")  # BCOO features
    small = prepare(synthetic(500, n_features=12, avg_degree=4.0, seed=3), backend="gather")  # dense features
    for prepared, execution, want in ((cora, Execution(backend="segment"), (32789920, 3515392, 28055904, 38914336)),
                                      (small, Execution(backend="gather"), (6064288, 689152, 2143296, 3324032))):
        graph, data, classes = prepared.data.graph, prepared.data, prepared.n_classes
        got = (plan._per_run_bytes(16, graph, 1433), plan._per_run_bytes(32, graph, None),
               plan.batch_bytes(data, GCNConfig(), 3, classes, execution),
               plan.batch_bytes(data, GCNConfig(hidden=64, layers=3), 1, classes, execution))
        assert got == want


@pytest.fixture(scope="module")
def wide():
    """A graph where row plans matter: 200,000 nodes, average degree 10, 16 dense features, 140
    training nodes (4 classes x 35) and 500 validation nodes, laid out for ``gather``."""
    raw = synthetic(200_000, n_features=16, avg_degree=10.0, train_per_class=35, n_val=500, n_test=1000)
    return prepare(raw, backend="gather")


def compiled_peak(chosen: plan.Plan, prepared, n_runs: int, model: GCNConfig = GCNConfig()) -> int:
    """The device bytes of the training loop the plan ``chosen`` compiles (what ``fit`` / ``fit_runs``
    run, as XLA's buffer assignment sizes it): every array the loop is handed (the state, the focused
    data with its row plans and the full neighbour lists, the run inputs; XLA prunes those a
    row-planned step never reads from its argument bytes, but they are on the device all the same),
    plus its temporaries and outputs, as the CPU's compiler sizes them, on a TPU's machine too (a TPU's
    compiler pads narrow row-major buffers to its 128 lanes: docs/tpu.md)."""
    import jax

    with jax.default_device(jax.devices("cpu")[0]):
        return _compiled_peak(chosen, prepared, n_runs, model)


def _compiled_peak(chosen: plan.Plan, prepared, n_runs: int, model: GCNConfig) -> int:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxgcn.core.data import with_focus
    from jaxgcn.training.config import TrainConfig
    from jaxgcn.training.runs import _seeds, entries_for, init_params, run_inputs
    from jaxgcn.training.step import make_batch_runner

    data = with_focus(prepared.data, 2, chosen.ops.prepare)
    shape = (data.x.shape[1], prepared.n_classes)
    if n_runs == 1:
        runner = make_batch_runner(model, TrainConfig(), chosen.execution, one=shape)
        runs = jax.tree.map(np.asarray, runner.inputs())
        state = jax.eval_shape(runner.init, jax.random.key(0), data, runs)
    else:
        entries = entries_for(list(range(n_runs)))
        runner, runs = make_batch_runner(model, TrainConfig(), chosen.execution), run_inputs(entries)
        state = jax.eval_shape(runner.init, init_params(model, entries, *shape),
                               jnp.asarray(_seeds(entries), jnp.int32), runs)
    use = jax.jit(runner.run_until).lower(state, data, runs, jnp.int32(0)).compile().memory_analysis()
    held = sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves((state, data, runs)))
    return held + use.temp_size_in_bytes + use.output_size_in_bytes - use.alias_size_in_bytes


@pytest.fixture
def cpu_compiled(monkeypatch):
    """The plan's estimates as the CPU's compiler holds the program these tests compile: the TPU plan
    (row plans, faked by ``on_tpu``) with the host's buffer assignment, which keeps the dropped copies of
    dense features that a TPU's compiler fuses away (``memory.estimate(device=False)``)."""
    from jaxgcn.host import memory

    real = memory.estimate
    monkeypatch.setattr(memory, "estimate", lambda *args, **kwargs: real(*args, **{**kwargs, "device": False}))


def device_bytes(chosen: plan.Plan) -> int:
    """The estimate's bytes on the device: all but the host process's runtime."""
    return chosen.memory.total - chosen.memory.parts["runtime"]


@pytest.mark.parametrize("aggregate", ["off", "on"])
@pytest.mark.usefixtures("on_tpu", "cpu_compiled")
def test_with_row_plans_the_estimate_bounds_the_compiled_peak_within_a_quarter(wide, aggregate):
    """The TPU plan of one ``gather`` run trains its last layer at the 140 training rows and its first
    at the rows around them (an evaluation: 640 and ~7,000 rows); only ``X·W`` spans every node. The
    estimate counts each layer at those rows, and the plans themselves: at least XLA's compiled peak
    and at most 25% over it (``on``: the first layer propagates its input, as ``--aggregate-first``
    makes it, over its rows' lists: a training step's, and the evaluation's once per call)."""
    chosen = plan.resolve(Execution(backend="gather"), wide.data, GCNConfig(), wide.n_classes, aggregate=aggregate)
    rows = plan.layer_rows(wide.data, chosen.execution, 2)
    assert rows.rows[1] == 640 and 5_000 < rows.rows[0] < 8_000  # the evaluation's: 140 training + 500 validation nodes
    assert rows.slots[0] > 0 and rows.slots[1] > 0  # aggregate-first too: it propagates its input over its rows' lists
    peak = compiled_peak(chosen, wide, 1)  # on: 96 MiB, against 206 while the first layer propagated every node
    assert peak <= device_bytes(chosen) <= 1.25 * peak, (device_bytes(chosen) / 2**20, peak / 2**20)
    every_row = plan.resolve(Execution(backend="gather", dropout_rng="jax"), wide.data, GCNConfig(), wide.n_classes,
                             aggregate=aggregate)  # jax.random's masks: no row plans
    assert plan.layer_rows(wide.data, every_row.execution, 2) is None
    assert every_row.memory.parts["activations"] > 2.5 * chosen.memory.parts["activations"]


@pytest.mark.usefixtures("on_tpu", "cpu_compiled")
def test_an_aggregated_first_layer_propagates_its_input_at_the_inputs_width(wide):
    """With a hidden layer wider than the 16 features, the first layer propagates its dropped input over its
    rows' lists (``--aggregate-first``): that propagation's buffers are 16 wide, as a 16-wide model's are,
    not the hidden layer's 64 (counted 64 wide, the estimate was 43% over XLA's compiled peak; 16 wide, 29%;
    22% since the layer propagates over its rows' lists only)."""
    model = GCNConfig(hidden=64)
    chosen = plan.resolve(Execution(backend="gather"), wide.data, model, wide.n_classes, aggregate="on")
    narrow = plan.resolve(Execution(backend="gather"), wide.data, GCNConfig(), wide.n_classes, aggregate="on")
    assert chosen.execution.aggregate_first and plan.layer_rows(wide.data, chosen.execution, 2).aggregate_first
    assert chosen.memory.parts["messages"] == narrow.memory.parts["messages"]
    peak = compiled_peak(chosen, wide, 1, model)
    assert peak <= device_bytes(chosen) <= 1.3 * peak, (device_bytes(chosen) / 2**20, peak / 2**20)


@pytest.mark.parametrize("aggregate", ["off", "on"])
@pytest.mark.usefixtures("on_tpu")
def test_a_devices_estimate_counts_a_layers_product_at_its_input_rows_once(wide, aggregate, monkeypatch):
    """A row-planned layer's product at its input's rows (the first layer's: every node's) is read only by
    the gather into its rows, and dead before the backward pass makes its gradient: the device's estimate
    counts it once, and still bounds the program's compiled peak once the feature copies the CPU's
    compiler holds (and a TPU's fuses away) are added back."""
    from jaxgcn.host import memory

    chosen = plan.resolve(Execution(backend="gather"), wide.data, GCNConfig(), wide.n_classes, aggregate=aggregate)
    real = memory.estimate
    monkeypatch.setattr(memory, "estimate", lambda *args, **kwargs: real(*args, **{**kwargs, "device": False}))
    host = plan.resolve(Execution(backend="gather"), wide.data, GCNConfig(), wide.n_classes, aggregate=aggregate)
    rows = plan.layer_rows(wide.data, chosen.execution, 2).rows
    inputs = rows[0] if aggregate == "on" else 200_000  # an aggregate-first layer's product: at its rows of Â·X
    once = (inputs * 16 + rows[0] * wide.n_classes) * 4  # each layer's product at its input rows, counted once
    assert host.memory.parts["activations"] - chosen.memory.parts["activations"] == once
    copies = host.memory.parts["features"] - chosen.memory.parts["features"]
    assert compiled_peak(chosen, wide, 1) <= device_bytes(chosen) + copies


def test_a_propagation_over_every_node_is_at_its_layers_width():
    """A layer whose plan spans every row (no slots) propagates over every node's lists: an aggregate-first
    model's first layer its input (4 wide), a later layer its own output (64 wide, as without row plans)."""
    from jaxgcn.host import memory

    options = dict(hidden=64, backend="gather", list_slots=16_000)
    every = memory.estimate(1000, 8000, 4, 3, **options)
    later = memory.estimate(1000, 8000, 4, 3, row_plans=memory.RowPlans((1000, 1000), (0, 0), 0, True), **options)
    assert later.parts["messages"] == every.parts["messages"] == 2 * 16_000 * 64 * 4 + 1001 * 64 * 4
    first = memory.estimate(1000, 8000, 4, 3, row_plans=memory.RowPlans((1000, 20), (0, 30), 0, True), **options)
    assert first.parts["messages"] == 2 * 16_000 * 4 * 4 + 1001 * 4 * 4  # layer 1's 20 rows gather far less


def test_the_products_sized_graphs_device_estimate_is_its_rows_arithmetic():
    """The ogbn-products-sized graph (benchmarks/bench_accelerator.py --parts products: 2,449,029 nodes,
    126,121,298 nonzeros, 100 features, 47 classes, hidden 128) as the TPU plan lays it out: the first
    layer aggregates its input first, its rows and slots those its row plans built on the CPU. The
    device's estimate was 7.62 GiB, its messages a 128-wide propagation and its activations the
    every-node product twice; then 6.18 GiB, the product once; then 5.05 GiB: the aggregate-first layer
    takes its rows of Â·X before its product; now 4.10 GiB: it propagates its input over its 75,681 rows'
    8,021,600 list slots, not over every node's (its messages were 2 chunks and [n + 1, 100] bucket sums:
    1.04 GiB). (The chip's ``peak_bytes_in_use``, 4.14 GiB, leaves out the program's temporaries, 7.39
    GiB by its memory analysis before the first of those changes: docs/tpu.md.) The 1M-node synthetic
    graph's is 0.80 GiB, above its 0.703 GiB peak."""
    from jaxgcn.host import memory

    n, plans = 2_449_029, memory.RowPlans((75_681, 1_440), (8_021_600, 109_664), 220_298_968, True)
    est = memory.estimate(n, 126_121_298, 100, 47, hidden=128, backend="gather", list_slots=180_641_760,
                          row_plans=plans, device=True)
    assert est.parts["messages"] == (2**24 + (75_681 + 1) * 100) * 4  # one chunk (no gradient), its rows' sums
    rows, classes = (75_681, 1_440), 47 * 4
    # the aggregate-first layer's product at its 75,681 rows of Â·X, not at every node's (then taken)
    assert est.parts["activations"] == 3 * rows[0] * 128 * 4 + (rows[0] + 2 * rows[1]) * classes + \
        2 * rows[1] * classes
    assert round(est.total / memory.GiB, 2) == 4.10
    synthetic_1m = memory.estimate(1_000_000, 24_998_970, 32, 4, backend="gather", list_slots=33_692_696,
                                   row_plans=memory.RowPlans((14_985, 580), (541_824, 20_368), 17_354_184),
                                   device=True)
    assert 0.703 <= synthetic_1m.total / memory.GiB <= 1.25 * 0.703
    assert round(synthetic_1m.total / memory.GiB, 2) == 0.80


@pytest.mark.usefixtures("on_tpu", "cpu_compiled")
def test_a_batch_with_row_plans_stays_above_the_compiled_peak(wide, monkeypatch):
    """Four runs in one program: each drops its own copy of the features, which the product and its
    weight gradient read in two more layouts; counted in full, as if none overlapped (XLA overlaps
    some where the features are as wide as the hidden layer: 32% over here). The hidden layer's per-run
    product as the batched dot: the CPU's compiler materializes the broadcast product a TPU takes for a
    narrow input (ops.MXU_MIN_IN), which a TPU's fuses."""
    from jaxgcn.core import ops

    monkeypatch.setattr(ops, "MXU_MIN_IN", 0)
    chosen = plan.resolve(Execution(backend="gather"), wide.data, GCNConfig(), wide.n_classes, n_runs=4)
    assert chosen.runs == 4 and plan.layer_rows(wide.data, chosen.execution, 2) is not None
    peak = compiled_peak(chosen, wide, 4)
    assert peak <= device_bytes(chosen) <= 1.4 * peak, (device_bytes(chosen) / 2**20, peak / 2**20)


@pytest.mark.usefixtures("on_tpu")
@pytest.mark.usefixtures("cpu_compiled")
def test_without_row_plans_the_estimate_is_still_an_upper_bound(wide):
    """jax.random's dropout masks are drawn by row, so the plan takes no row plans: every layer at
    every row, as the estimate always counted (the host runtime it adds included)."""
    chosen = plan.resolve(Execution(backend="gather", dropout_rng="jax"), wide.data, GCNConfig(), wide.n_classes)
    assert not chosen.ops.row_plans
    assert compiled_peak(chosen, wide, 1) <= chosen.memory.total


def test_row_plans_of_another_depth_are_refused():
    from jaxgcn.host import memory

    plans = memory.RowPlans((10, 5), (40, 20), 1000)
    assert memory.estimate(1000, 8000, 16, 4, backend="gather", row_plans=plans).total > 0
    with pytest.raises(ValueError, match=r"row_plans: 2 layers of rows and 2 of slots, for a model of 3 layers"):
        memory.estimate(1000, 8000, 16, 4, backend="gather", layers=3, row_plans=plans)


@pytest.mark.usefixtures("on_tpu")
def test_info_estimates_a_run_as_train_plans_it(wide):
    """``jaxgcn info``'s estimate (app.data.memory_estimate) counts each layer at its rows where the
    plan's ops take row plans, as the train command's plan does (``--aggregate-first auto``), and the
    plans' own bytes: the lists, orders, ids and places the run's data holds."""
    import jax

    from jaxgcn.app.data import Loaded, memory_estimate
    from jaxgcn.core.data import with_focus
    from jaxgcn.host import memory

    chosen = plan.resolve(Execution(), wide.data, GCNConfig(), wide.n_classes, aggregate="auto")
    assert chosen.backend == "gather" and chosen.ops.row_plans
    assert memory_estimate(Loaded(wide, None), 16, None) == chosen.memory
    rows = plan.layer_rows(wide.data, chosen.execution, 2)
    aux = with_focus(wide.data, 2, chosen.ops.prepare).aux
    assert rows.held == sum(leaf.nbytes for leaf in jax.tree.leaves(aux)) > 0
    options = dict(hidden=16, backend="gather", **plan.layout_facts(wide.data.graph))
    every = memory.estimate(200_000, wide.data.graph.n_edges, 16, wide.n_classes, **options)
    some = memory.estimate(200_000, wide.data.graph.n_edges, 16, wide.n_classes, row_plans=rows, **options)
    assert some.parts["adjacency"] == every.parts["adjacency"] + rows.held


@pytest.fixture
def prepare_calls(monkeypatch):
    """Every call of the ``gather`` ops' ``prepare`` (the row plans' build: :func:`jaxgcn.core.gather.prepare`),
    as the hops it was asked for; patched before the plan chooses the ops, which take it by name."""
    from jaxgcn.core import gather

    calls, real = [], gather.prepare
    monkeypatch.setattr(gather, "prepare", lambda data, hops: calls.append(hops) or real(data, hops))
    return calls


@pytest.mark.usefixtures("on_tpu")
@pytest.mark.parametrize("seeds", [1, 2])
def test_a_gather_job_builds_its_row_plans_once(prepare_calls, seeds):
    """The plan builds the row plans to count their rows for its memory estimate; the run (``fit`` for one
    run, on the random split's [1, n] masks made one split; ``fit_runs`` for a batch) takes those instead
    of building them again: one host pass per job, not two."""
    from jaxgcn.app import DataRequest, Job, run
    from jaxgcn.training.config import TrainConfig

    request = DataRequest("synthetic", synthetic={"n_nodes": 3000, "n_classes": 3}, split="random", n_val=200,
                          n_test=300)
    job = Job(request, train=TrainConfig(epochs=3), execution=Execution(backend="gather"), seeds=seeds)
    outcome = run(job, lambda line: None)
    assert outcome.execution.ops.row_plans and len(outcome.runs) == seeds
    assert prepare_calls == [2]


@pytest.mark.usefixtures("on_tpu")
def test_a_plans_row_plans_serve_only_the_data_and_depth_it_read(prepare_calls):
    """``fit`` takes the plan's row plans for the very data object the plan read and the model depth it
    planned; other data (another split) or another depth gets its own, and trains as without the plan's."""
    import jax

    from jaxgcn.train import TrainConfig, fit

    prepared = prepare(synthetic(1500, n_classes=3, n_features=8, seed=2, n_val=200, n_test=300), backend="gather")
    chosen = plan.resolve(Execution(backend="gather"), prepared.data, GCNConfig(), prepared.n_classes)
    assert prepare_calls == [2]
    config = TrainConfig(epochs=4)

    def train(data, model=GCNConfig(), execution=chosen):
        return fit(data, prepared.n_classes, model_config=model, config=config, key=jax.random.key(0), log=None,
                   execution=execution).metrics

    train(prepared.data)
    assert prepare_calls == [2]  # the plan's
    train_mask = jax.numpy.roll(prepared.data.train_mask, 700)  # another split's training nodes
    other = prepared.data._replace(train_mask=train_mask)
    assert train(other) == train(other, execution=chosen.execution)  # its own plans, as a plan-less fit builds them
    assert prepare_calls == [2, 2, 2]
    train(prepared.data, GCNConfig(layers=3))
    assert prepare_calls == [2, 2, 2, 3]


@pytest.mark.usefixtures("on_tpu")
def test_a_gather_sweep_builds_its_row_plans_once(prepare_calls, capsys):
    """``jaxgcn sweep`` plans one run (its memory check) and runs each chunk of the grid's programs as
    that plan: the four runs (two learning rates x two seeds) take the plan's row plans, as a train job's do."""
    from cli_run import run_main

    args = ["sweep", "--dataset", "synthetic", "--nodes", "1500", "--classes", "3", "--features", "8", "--quiet",
            "--no-compile-cache", "--backend", "gather", "--epochs", "3", "--lr", "0.01,0.05", "--seeds", "2"]
    assert run_main(args) == 0
    assert prepare_calls == [2]
