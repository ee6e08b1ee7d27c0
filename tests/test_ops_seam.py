"""The ops seam (jaxgcn.core.ops.Ops): a propagation backend plugs in from outside the package with one
registration line; the model reads the ops it is given; the plan alone decides which ops a run gets
and alone asks whether the C++ kernel can run."""

from __future__ import annotations

import ast
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxgcn import datasets, plan
from jaxgcn.core import ops
from jaxgcn.native.csr import kernel_status
from jaxgcn.core.models import Execution, GCNConfig
from jaxgcn.train import TrainConfig, fit

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "jaxgcn"
needs_kernel = pytest.mark.skipif(not kernel_status()[0], reason="the C++ kernel cannot be built here")
CALLS: list[int] = []


def toy_ops(execution: Execution) -> ops.Ops:
    """A toy backend: ``Â`` built densely from the edge list at every call, then one matmul."""
    def dense_propagate(graph, x):
        CALLS.append(x.shape[1])
        n = x.shape[0]
        adj = jnp.zeros((n, n), x.dtype).at[graph.receivers, graph.senders].add(jnp.asarray(graph.weights, x.dtype))
        return (adj + jnp.diag(jnp.asarray(graph.self_weights, x.dtype))) @ x
    return ops.xla_ops(execution)._replace(name="toy", propagate=dense_propagate)


@pytest.fixture
def toy():
    ops.register("toy", toy_ops)  # the one registration line
    yield "toy"
    ops.unregister("toy")


@pytest.fixture(scope="module")
def small():
    return datasets.prepare(datasets.synthetic(n_nodes=150, n_classes=3, n_features=8, seed=3), backend="segment")


def _train(prepared, backend):
    return fit(prepared.data, prepared.n_classes, model_config=GCNConfig(hidden=8),
               execution=Execution(backend=backend), config=TrainConfig(epochs=6, early_stopping=None),
               key=jax.random.key(0), log=None)


def test_a_toy_backend_registered_from_a_test_trains_as_the_segment_backend(toy, small):
    CALLS.clear()
    assert plan.ops_for(Execution(backend="toy")).name == "toy"
    resolved = plan.resolve(Execution(backend="toy"), small.data, GCNConfig(hidden=8), small.n_classes)
    assert (resolved.backend, resolved.ops.name, resolved.note) == ("toy", "toy", None)
    got, want = _train(small, "toy"), _train(small, "segment")
    assert CALLS, "the toy backend's propagation was never called"
    assert len(got.history["loss"]) == 6
    np.testing.assert_allclose(got.history["loss"], want.history["loss"], rtol=1e-5)
    np.testing.assert_allclose(got.history["val_acc"], want.history["val_acc"], rtol=1e-5)
    for leaf_got, leaf_want in zip(jax.tree.leaves(got.params), jax.tree.leaves(want.params)):
        np.testing.assert_allclose(leaf_got, leaf_want, rtol=1e-4, atol=1e-6)


def test_the_model_runs_the_ops_it_is_given(small):
    # injected, not registered: the forward pass calls these ops' propagation, and equals segment's
    from jaxgcn.core.models import gcn

    CALLS.clear()
    execution = Execution(backend="segment")
    model, given = gcn(GCNConfig(hidden=8), execution), gcn(GCNConfig(hidden=8), execution, ops=toy_ops(execution))
    params = model.init(jax.random.key(1), small.data.x.shape[1], small.n_classes)
    want = model.apply(params, small.data.graph, small.data.x)
    assert not CALLS
    got = given.apply(params, small.data.graph, small.data.x)
    assert CALLS == [8, small.n_classes]  # one propagation per layer, of that layer's width
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@needs_kernel
def test_the_step_reads_its_kernel_shortcuts_from_the_ops_it_is_given():
    # a step planned for the kernel but handed XLA's ops takes no row plans and no fused Adam pass
    from jaxgcn.core.data import with_focus
    from jaxgcn.core.native_ops import prepare
    from jaxgcn.training.step import LOCAL, Step

    data = with_focus(datasets.prepare(datasets.synthetic(300, n_classes=3, n_features=8, seed=0)).data, 2, prepare)
    kernel = Execution(backend="csr", kernels=True)
    step = Step(GCNConfig(), TrainConfig(), kernel, None, LOCAL)
    assert step.products.name == "native" and step.rows(data, train=True) is data.aux.train_rows
    xla = step._replace(ops=ops.xla_ops(kernel))
    assert xla.products.name == "xla" and not xla.products.fused_adam and xla.rows(data, train=True) is None


def test_the_model_and_a_step_take_the_same_ops_for_an_undecided_request():
    # ONE rule (models.ops_of) for an execution nobody planned, handed to apply_runs or to a Step: XLA's
    # ops, and the kernel's where the deprecated kernels=True asks for it; a decided one keeps its own
    from jaxgcn.core.models import ops_of
    from jaxgcn.training.step import LOCAL, Step

    for request, name in ((Execution(backend="csr", kernels=True), "native"), (Execution(backend="csr"), "xla"),
                          (Execution(backend="csr", kernels=False), "xla"), (Execution(backend="segment"), "xla")):
        step = Step(GCNConfig(), TrainConfig(), request, None, LOCAL)
        assert (ops_of(request).name, step.products.name) == (name, name), request
    decided = plan.concrete(Execution(backend="csr", kernels=False))
    xla = "xla" if jax.default_backend() == "cpu" else "xla-mxu"  # the accelerator's XLA ops
    assert ops_of(decided).name == Step(GCNConfig(), TrainConfig(), decided, None, LOCAL).products.name == xla


def test_an_unregistered_backend_is_refused_and_registration_checks_the_name():
    with pytest.raises(ValueError,
                       match=r"backend='toy' must be one of \('auto', 'dense', 'segment', 'bcoo', 'csr', 'gather'\)"):
        Execution(backend="toy")
    with pytest.raises(ValueError, match=r"register: name='segment' must be a new backend name"):
        ops.register("segment", toy_ops)
    with pytest.raises(ValueError, match=r"register: name='auto' must be a new backend name"):
        ops.register("auto", toy_ops)


@needs_kernel
def test_the_plan_gives_the_kernel_ops_to_csr_and_xla_ops_to_other_backends(monkeypatch):
    native = plan.ops_for(Execution(backend="csr"))
    assert native.name == "native" and native.fused_adam and native.row_plans and native.drop_hidden is not None
    assert plan.ops_for(Execution(backend="csr", dropout_rng="jax")).row_plans is False
    for backend in ("segment", "bcoo", "dense"):
        chosen = plan.ops_for(Execution(backend=backend))
        assert chosen.name == "xla" and not chosen.fused_adam and chosen.drop_hidden is None, backend
    monkeypatch.setattr(plan, "kernel_status", lambda: (False, "no kernel here"))
    assert plan.ops_for(Execution(backend="csr")).name == "xla"


def test_the_plan_holds_the_ops_and_the_platform(small):
    resolved = plan.resolve(Execution(), small.data, GCNConfig(), small.n_classes)
    assert resolved.backend == "segment" and resolved.ops.name == ("xla" if resolved.platform == "cpu" else "xla-mxu")
    assert resolved.platform == jax.default_backend()


def _imports(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_the_model_imports_neither_the_kernel_nor_its_fused_ops():
    imported = _imports(SRC / "core" / "models.py")
    assert "jaxgcn.core.ops" in imported
    assert not [name for name in imported
                if name.startswith(("jaxgcn.native.csr", "jaxgcn.native.fused", "jaxgcn.core.native_ops"))]


def _askers(names: tuple[str, ...]) -> dict[str, set[str]]:
    """Which modules of the package call (``f()`` or ``m.f()``) or import each of ``names``."""
    found: dict[str, set[str]] = {name: set() for name in names}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                called = [getattr(node.func, "id", None) or getattr(node.func, "attr", None)]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxgcn"):
                called = [a.name for a in node.names]
            else:
                continue
            for name in set(called) & set(names):
                found[name].add(path.relative_to(SRC).as_posix())
    return found


def test_only_the_plan_asks_the_one_oracle_whether_the_kernel_runs():
    # csr.kernel_status is THE availability oracle, next to the kernel: the plan alone asks it (cli/train
    # reads it through the plan's kernel_available); the kernel's own guard (csr._status) serves the
    # oracle and the kernel's calls; laying out a csr graph asks nothing (the plan refused csr where the
    # kernel cannot run)
    askers = _askers(("kernel_status", "kernel_available", "_status", "require_kernel"))
    assert askers["kernel_status"] == {"plan.py"}
    # a kernel call's own guard; the plan refuses a job
    assert askers["require_kernel"] == {"native/csr.py", "native/fused.py"}
    assert askers["kernel_available"] == {"cli/train.py"}
    assert askers["_status"] - {"cli/data.py"} == {"native/csr.py"}  # cli/data's own _status(args)
