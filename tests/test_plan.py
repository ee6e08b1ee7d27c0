"""The execution plan (jaxgcn.plan): every decision made once, and the engine reading it."""

from __future__ import annotations

import dataclasses

import pytest

from jaxgcn import datasets, plan
from jaxgcn.native.csr import kernel_status
from jaxgcn.core.models import Execution, GCNConfig

needs_kernel = pytest.mark.skipif(not kernel_status()[0], reason="the C++ kernel cannot be built here")


@pytest.fixture(scope="module")
def graphs():
    raw = datasets.synthetic(300, n_classes=3, n_features=8, seed=0)
    return {backend: datasets.prepare(raw, backend=backend) for backend in ("csr", "segment")}


@needs_kernel
def test_auto_is_the_backend_the_graph_was_prepared_for_and_the_kernel_only_on_csr(graphs):
    on_csr = plan.resolve(Execution(), graphs["csr"].data, GCNConfig(), 3)
    assert on_csr.execution.backend == "csr" and on_csr.execution.kernels is True and on_csr.note is None
    on_segment = plan.resolve(Execution(), graphs["segment"].data, GCNConfig(), 3)
    assert on_segment.execution.backend == "segment" and on_segment.execution.kernels is False
    named = plan.resolve(Execution(backend="segment"), graphs["segment"].data, GCNConfig(), 3)
    assert named.execution == on_segment.execution
    assert plan.planned(on_csr.execution) is on_csr.execution  # a planned execution is kept as it is


@needs_kernel
@pytest.mark.parametrize(("n_runs", "hidden", "runs"), [(1, 16, 1), (3, 16, 3), (20, 16, 16), (6, 64, 4)])
def test_the_memory_estimate_covers_the_runs_one_program_executes(graphs, n_runs, hidden, runs):
    chosen = plan.resolve(Execution(), graphs["csr"].data, GCNConfig(hidden=hidden), 3, n_runs=n_runs)
    assert chosen.runs == runs
    alone = plan.resolve(Execution(), graphs["csr"].data, GCNConfig(hidden=hidden), 3)
    assert (chosen.memory.total > alone.memory.total) == (runs > 1)
    assert chosen.memory.total == plan.memory.estimate(
        300, graphs["csr"].data.graph.n_edges, 8, 3, hidden=hidden, backend="csr", runs=runs,
        symmetric=graphs["csr"].data.graph.csr.symmetric).total


def test_aggregate_first_is_decided_for_the_input(graphs):
    data = graphs["segment"].data  # 8 dense features
    assert plan.resolve(Execution(), data, GCNConfig(hidden=16), 3, aggregate="auto").execution.aggregate_first
    assert not plan.resolve(Execution(), data, GCNConfig(hidden=4), 3, aggregate="auto").execution.aggregate_first
    assert not plan.resolve(Execution(), data, GCNConfig(hidden=16), 3).execution.aggregate_first  # "off"
    with pytest.raises(ValueError, match=r"aggregate_first='sometimes' must be one of \('auto', 'on', 'off'\)"):
        plan.resolve(Execution(), data, GCNConfig(), 3, aggregate="sometimes")


def test_csr_asked_for_where_the_kernel_cannot_run_is_refused_by_the_plan_with_the_oracles_reason(monkeypatch):
    monkeypatch.setattr(plan, "kernel_status", lambda: (False, "no C++ compiler found (g++)"))
    want = (r"^backend='csr' needs the fused CPU kernel, which is unavailable: no C\+\+ compiler found \(g\+\+\); "
            r"use backend='segment' \(or 'auto'\)$")
    with pytest.raises(ValueError, match=want):
        plan.backend_for("csr", 2708, 10556)
    with pytest.raises(ValueError, match=want):  # a sharded run's row blocks
        plan.require_sharded(Execution(backend="csr"))
    assert plan.backend_for("auto", 2708, 10556, "cpu") == "segment"
    plan.require_sharded(Execution())  # auto: XLA's block product where the kernel cannot run


def test_the_fallback_note_says_why_auto_kept_off_the_kernel(graphs, monkeypatch):
    monkeypatch.setattr(plan, "kernel_status", lambda: (False, "no C++ compiler found (g++)"))
    chosen = plan.resolve(Execution(), graphs["segment"].data, GCNConfig(), 3)
    assert chosen.note == "backend segment: no C++ compiler found (g++)"
    assert plan.fallback_note("segment", "segment") is None  # asked for: not a fallback
    assert plan.planned(Execution(backend="csr")).kernels is False  # csr without the kernel: XLA's product
    assert not plan.batch_mesh(4, dataclasses.replace(Execution(), backend="csr", kernels=True), None)


def test_an_execution_kernels_value_is_checked():
    with pytest.raises(ValueError, match=r"kernels='yes' must be True, False or None"):
        Execution(kernels="yes")


@needs_kernel
def test_every_entry_that_compiles_plans_its_execution():
    # compile_runner given an unplanned Execution(): the first layer's pair still runs on the kernel
    import jax
    import jax.numpy as jnp
    import numpy as np
    import scipy.sparse as sp

    from jaxgcn.native import csr
    from jaxgcn.train import TrainConfig, compile_runner

    raw = datasets.synthetic(120, n_classes=3, n_features=30, seed=2)
    p = datasets.prepare(raw._replace(features=sp.csr_matrix(np.where(raw.features > 1.0, raw.features, 0))))
    compiled = compile_runner(GCNConfig(), TrainConfig(epochs=3), p.data, p.n_classes, Execution())
    csr.reset_kernel_counters()
    state = compiled.run_until(compiled.init(jax.random.key(0), p.data), p.data, jnp.int32(3))
    assert int(state.epoch) == 3 and csr.kernel_counters()["pair_calls"] > 0


def test_a_deep_model_is_announced_before_it_compiles(graphs):
    # issue 25: `--layers 1000 --epochs 1` compiled for minutes with no output
    from jaxgcn.app.data import Loaded
    from jaxgcn.app.train import plan as app_plan

    notes = []
    loaded = Loaded(graphs["csr"], None)
    app_plan(loaded, GCNConfig(layers=40), Execution(), 1, notes.append)
    assert any(n.startswith("note: 40 layers: compiling takes about 6 s or more (0.15 s per layer") for n in notes)
    notes.clear()
    app_plan(loaded, GCNConfig(layers=3), Execution(), 1, notes.append)
    assert not any("layers: compiling" in n for n in notes)


def test_the_deep_model_note_starts_at_its_depth_and_scales_with_it():
    # plan.DEEP_LAYERS: "from this depth on" the note is printed; one layer less is the usual case
    assert plan.DEEP_LAYERS == 32
    assert plan.compile_note(GCNConfig(layers=31)) is None
    assert plan.compile_note(GCNConfig(layers=32)) == (
        "note: 32 layers: compiling takes about 5 s or more (0.15 s per layer on a 2-core CPU; each layer's ops are "
        "compiled), before the first epoch")
    assert plan.compile_note(GCNConfig(layers=100)).startswith("note: 100 layers: compiling takes about 15 s ")


@pytest.mark.parametrize(("halo", "all_gather", "chosen"), [(7, 8, "halo"), (8, 8, "all_gather"), (9, 8, "all_gather")])
def test_auto_exchange_takes_the_halo_only_when_it_receives_fewer_rows(halo, all_gather, chosen):
    # docs/distributed.md: "`auto`: `halo` when it receives fewer rows". On a tie all_gather is kept:
    # the same rows received, and no send lists to build or index
    stats = {"halo_rows": halo, "all_gather_rows": all_gather}
    assert plan.exchange_for("auto", stats) == chosen
    for given in ("halo", "all_gather"):  # a named exchange is taken as named, whatever the rows
        assert plan.exchange_for(given, stats) == given


def test_only_the_plan_decides_an_execution():
    # issue 44: planned() is called by the plan only; each public entry point (fit, fit_runs,
    # fit_sharded, compile_runner, inference) asks plan.concrete once and the engine receives decided
    # values (the kernel oracle's askers: tests/test_ops_seam.py)
    import ast
    import pathlib

    src = pathlib.Path(plan.__file__).parent
    callers = {path.relative_to(src).as_posix() for path in src.rglob("*.py")
               for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)
               and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) == "planned"}
    assert callers == {"plan.py"}


def test_the_engine_refuses_an_execution_the_plan_did_not_decide():
    from jaxgcn.train import TrainConfig, single_program

    p = datasets.prepare(datasets.synthetic(60, n_classes=2, n_features=4, seed=0), backend="segment")
    with pytest.raises(ValueError, match=r"^execution backend='auto' kernels=None reached the engine undecided; "
                                         r"decide it first with jaxgcn\.plan\.concrete\(execution, graph\)$"):
        single_program(GCNConfig(), TrainConfig(epochs=1), p.data, p.n_classes, Execution())
    decided = plan.concrete(Execution(), p.data.graph)
    assert (decided.backend, decided.kernels) == ("segment", False) and plan.require_decided(decided) is decided
    with pytest.raises(ValueError, match="backend='csr' kernels=None"):
        plan.require_decided(Execution(backend="csr"))


def test_the_plan_decides_the_backend_before_the_graph_is_laid_out():
    # issue 44: `auto` was decided inside datasets.prepare; now the plan decides (backend_for) and the
    # layout step takes the decided backend only, so an app path handing it `auto` fails loudly
    from jaxgcn import app
    from jaxgcn.datasets.loading import clean, lay_out

    raw = datasets.synthetic(60, n_classes=2, n_features=4, avg_degree=12.0, train_per_class=5, n_val=10, n_test=10,
                             seed=0)  # small and dense: auto is dense
    undecided = (r"^backend 'auto' reached lay_out undecided; decide it first with "
                 r"jaxgcn\.plan\.backend_for \(one of \('dense', 'segment', 'bcoo', 'csr', 'gather'\)\)$")
    with pytest.raises(ValueError, match=undecided):
        lay_out(clean(raw), "auto")
    loaded = app.data.load(app.DataRequest("synthetic"), lambda line: None, backend="auto", raw=raw)
    cleaned = clean(raw)
    assert plan.backend_for("auto", cleaned.graph.n_nodes, cleaned.graph.n_edges) == "dense"
    assert loaded.prepared.backend == "dense" and loaded.prepared.data.graph.dense is not None
    assert datasets.prepare(raw).backend == "dense"  # the library's convenience asks the same plan


def test_only_the_plan_reads_the_requested_kernels():
    # issue 44: Execution is a request; the plan alone turns its deprecated `kernels` into ops, and the
    # engine reads the Decided execution's ops (models.record writes the decision, it reads nothing)
    import ast
    import pathlib

    src = pathlib.Path(plan.__file__).parent
    readers = {path.relative_to(src).as_posix() for path in src.rglob("*.py")
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Attribute) and node.attr == "kernels" and isinstance(node.ctx, ast.Load)}
    assert readers == {"plan.py", "core/models.py"}
    models_reads = [node for node in ast.walk(ast.parse((src / "core" / "models.py").read_text()))
                    if isinstance(node, ast.Attribute) and node.attr == "kernels" and isinstance(node.ctx, ast.Load)]
    # models.py: Execution's own check of the field (3 reads), record() reading a Decided's decision, and
    # ops_of: the one rule for an undecided request handed to the model or a step (kernels=True: the kernel's)
    assert sorted(ast.unparse(node.value) for node in models_reads) == ["execution", "execution", "self", "self",
                                                                        "self"]


@needs_kernel
def test_a_decided_execution_is_keyed_by_its_ops_and_recorded_with_the_decision():
    from jaxgcn.core.models import Decided, record

    kernel, xla = plan.concrete(Execution(backend="csr")), plan.concrete(Execution(backend="csr", kernels=False))
    assert (kernel.ops.name, xla.ops.name) == ("native", "xla")  # the deprecated kernels=False: no kernel
    assert kernel == plan.concrete(Execution(backend="csr")) and hash(kernel) == hash(plan.concrete(Execution("csr")))
    assert kernel != xla  # a compile cache keyed by the execution never mixes the kernel's program and XLA's
    assert record(kernel) == {"backend": "csr", "dropout_rng": "hash", "chunk_edges": None,
                              "aggregate_first": False, "kernels": True,
                              "precision": kernel.precision}  # the decided one (never auto)
    assert record(xla)["kernels"] is False and record(Execution())["kernels"] is None
    with pytest.raises(ValueError, match=r"^a decided execution has a concrete backend, not 'auto'"):
        Decided("auto", kernel.ops)


def test_the_engine_runs_the_plan_the_application_resolved():
    # issue 44: the application resolves one Plan and hands it to the engine (fit, fit_runs,
    # fit_sharded, the sweep: execution=plan); the engine runs the plan's decided execution as it
    # is (aggregate-first included), not a decision of its own from the plan's backend
    from jaxgcn.train import COMPILED, TrainConfig, fit

    p = datasets.prepare(datasets.synthetic(60, n_classes=2, n_features=4, seed=0), backend="segment")
    resolved = plan.resolve(Execution(), p.data, GCNConfig(hidden=8), p.n_classes, aggregate="on")
    assert resolved.execution.aggregate_first is True  # dense features, "on": (A X) W
    assert plan.concrete(resolved) is resolved.execution and plan.planned(resolved) is resolved.execution
    assert plan.concrete(Execution(backend="segment")).aggregate_first is False  # the request's own default
    COMPILED.clear()
    config = TrainConfig(epochs=2)
    ran = fit(p.data, p.n_classes, model_config=GCNConfig(hidden=8), execution=resolved, config=config, log=None)
    assert [key[2] for key in COMPILED] == [resolved.execution]  # one program, keyed by the plan's execution
    again = fit(p.data, p.n_classes, model_config=GCNConfig(hidden=8), execution=resolved.execution, config=config,
                log=None)
    assert again.compile_seconds == 0.0 and len(COMPILED) == 1  # the same program: the plan's decision
    assert ran.history["loss"].tolist() == again.history["loss"].tolist()
