"""What the ops precompute of a run's data on the host, once (jaxgcn.core.ops.Ops.prepare, stored as
TrainData.aux by jaxgcn.core.data.with_focus): the C++ kernel's row plans and cut features
(jaxgcn.core.native_ops.prepare), nothing for XLA's ops or a registered backend that declares nothing."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

from jaxgcn import datasets, plan
from jaxgcn.core import ops
from jaxgcn.batched import entries_for, fit_runs
from jaxgcn.core.data import with_focus
from jaxgcn.core.models import Execution, GCNConfig
from jaxgcn.train import TrainConfig, fit

needs_kernel = pytest.mark.skipif(not plan.kernel_available()[0], reason="the C++ kernel cannot be built here")


@pytest.fixture(scope="module")
def data():
    """CSR features on a sparse graph (5 training nodes per class): the row plans and the cut cover
    well under the nodes (as tests/test_focus.py's fixture)."""
    raw = datasets.synthetic(600, n_classes=4, n_features=16, avg_degree=2.0, homophily=0.6, signal=0.4,
                             train_per_class=5, seed=1)
    dense = np.asarray(raw.features)
    raw = raw._replace(features=sp.csr_matrix(np.where(np.abs(dense) > 0.8, dense, 0.0).astype(np.float32)))
    return datasets.prepare(raw, backend="csr").data


def test_xla_ops_precompute_nothing(data):
    for backend in ("segment", "bcoo", "dense", "csr"):
        xla = ops.xla_ops(Execution(backend=backend))
        assert xla.prepare is None, backend
    assert plan.ops_for(Execution(backend="segment")).prepare is None
    focused = with_focus(data, 2, ops.xla_ops(Execution(backend="csr")).prepare)
    assert focused.aux is None and focused.focus is not None


@needs_kernel
def test_the_kernel_builds_row_plans_only_where_its_step_takes_them(data):
    # --dropout-rng jax: the step takes no row plans (jax.random draws a layer's masks by row), so
    # none are built; the cut features serve the first layer's pair, which both runs take
    focused = with_focus(data, 2)
    hashed = plan.ops_for(Execution(backend="csr")).prepare(focused, 2)
    drawn = plan.ops_for(Execution(backend="csr", dropout_rng="jax")).prepare(focused, 2)
    assert hashed.train_rows.nodes.size == 20 and hashed.eval_rows.nodes.size == int(focused.focus.size)
    assert drawn.train_rows is None and drawn.eval_rows is None
    assert drawn.x_reached.t_rows.shape[0] < data.x.nse
    for a, b in zip(jax.tree.leaves(drawn.x_reached), jax.tree.leaves(hashed.x_reached)):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def test_the_entry_points_hand_the_plans_ops_the_focused_data_once():
    # a registered backend declares its own precomputation: fit and fit_runs call it once, on the
    # host, with the focused data and the model's layers (and train with what it returns in the data)
    small = datasets.prepare(datasets.synthetic(n_nodes=150, n_classes=3, n_features=8, seed=3), backend="segment")
    seen: list[tuple[int, int]] = []

    def record(focused, hops):
        seen.append((hops, int(focused.focus.size)))
        return {"hops": jnp.int32(hops)}

    def toy(execution):
        return ops.xla_ops(Execution(backend="segment"))._replace(name="prep-toy", prepare=record)

    ops.register("prep-toy", toy)  # the one registration line
    try:
        model, config = GCNConfig(hidden=8, layers=3), TrainConfig(epochs=2, early_stopping=None)
        execution = Execution(backend="prep-toy")
        fit(small.data, small.n_classes, model_config=model, config=config, execution=execution,
            key=jax.random.key(0), log=None)
        fit_runs(small.data, small.n_classes, entries_for([0, 1], model_config=model, config=config),
                 execution=execution)
    finally:
        ops.unregister("prep-toy")
    focus = int(with_focus(small.data).focus.size)
    assert 0 < focus < 150 and seen == [(3, focus), (3, focus)]


@needs_kernel
def test_the_training_step_takes_its_first_layers_gradient_from_the_cut_features(data, monkeypatch):
    # the first layer's pair hands the training step's product to ``given`` with the features the
    # step reads from the aux: the cut pattern (fewer transposed entries), where it ignored the aux x's own
    import jaxgcn.core.native_ops as native_ops

    seen: list[int] = []
    real = native_ops.spmm_given
    monkeypatch.setattr(native_ops, "spmm_given", lambda x, *a: seen.append(int(x.t_rows.shape[0])) or real(x, *a))
    focused = with_focus(data, 2, native_ops.prepare)
    cut = int(focused.aux.x_reached.t_rows.shape[0])
    assert cut < data.x.nse
    # a configuration of its own (7 epochs, width 24): traced here, not found in the compile cache
    fit(data, 4, model_config=GCNConfig(hidden=24), config=TrainConfig(epochs=7, early_stopping=None),
        execution=Execution(backend="csr"), key=jax.random.key(0), log=None)
    assert cut in seen, seen  # with the aux ignored, every call would take x's own pattern (x.nse entries)
