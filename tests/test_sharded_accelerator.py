"""``--shard-graph`` on an accelerator: each device's row block of Â as neighbour lists (gathers forward
and backward; XLA's CSR product is a scatter there, ~20x slower than a gather on a TPU: issue 45),
planned on the CPU with the platform faked, on 4 forced CPU devices in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import numpy as np
import pytest
import scipy.sparse as sp
from test_distributed import _forced

from jaxgcn import datasets
from jaxgcn.core import gather
from jaxgcn.distributed import partition

SCRIPT = r"""
import json, sys
import jax, jax.numpy as jnp, numpy as np
sys.path.insert(0, "tests")
from test_accelerator_plan import _scatters
from jaxgcn import datasets, plan
plan.current_platform = lambda: "tpu"  # planned as on a TPU; the arrays stay on the 4 CPU devices
from jaxgcn.core.models import Execution, GCNConfig
from jaxgcn.distributed import fit_sharded, make_sharded_runner, node_mesh, shard_data
from jaxgcn.train import TrainConfig, fit

assert len(jax.devices()) == 4
raw = datasets.synthetic(403, n_classes=3, n_features=6, homophily=0.3, seed=0)
host, dev = datasets.prepare(raw, on_device=False), datasets.prepare(raw)
model_config, config = GCNConfig(hidden=8, dropout=0.0), TrainConfig(early_stopping=None, epochs=30, lr=0.05)
execution = plan.concrete(Execution())
out = {"ops": execution.ops.name, "scatters": {}}
for name, exchange, lists in (("all_gather", "all_gather", None), ("halo", "halo", None), ("csr", "halo", False)):
    sharded = shard_data(host.data, node_mesh(4), exchange=exchange, lists=lists)
    out.setdefault("has_lists", []).append(sharded.data.graph.lists is not None)
    runner = make_sharded_runner(model_config, config, sharded.n_features, host.n_classes, sharded.mesh, execution)
    runs = jax.tree.map(np.asarray, runner.inputs())
    state = jax.eval_shape(runner.init, jax.random.key(0), None, runs)
    jaxpr = jax.make_jaxpr(runner.run_until)(state, sharded.data, runs, jnp.int32(0)).jaxpr
    out["scatters"][name] = _scatters(jaxpr)
# the reference: the single-device run as the CPU plans it
with jax.default_device(jax.devices()[0]):
    single = fit(dev.data, dev.n_classes, model_config=model_config, config=config, key=jax.random.key(0), log=None)
for exchange in ("all_gather", "halo"):
    res = fit_sharded(shard_data(host.data, node_mesh(4), exchange=exchange), host.n_classes,
                      model_config=model_config, config=config, key=jax.random.key(0), log=None, execution=execution)
    out[exchange] = {"epochs": res.epochs_run, "test": res.metrics["test_acc"],
                     "single_test": single.metrics["test_acc"],
                     "loss": float(np.abs(res.history["loss"] - single.history["loss"]).max()),
                     "moved": float(single.history["loss"][0] - single.history["loss"][-1]),
                     "val_acc": float(np.abs(res.history["val_acc"] - single.history["val_acc"]).max()),
                     "params": max(float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(b))
                                   for a, b in zip(jax.tree.leaves(res.params), jax.tree.leaves(single.params)))}
# the CLI's --shard-graph lays the blocks out as its plan decides: neighbour lists on the TPU
from jaxgcn import distributed
from jaxgcn.cli import main
shard = distributed.shard_data
distributed.shard_data = lambda *a, **k: out.setdefault("cli_lists", []).append(k.get("lists")) or shard(*a, **k)
out["cli_status"] = main(["train", "--dataset", "cora", "--shard-graph", "--devices", "4", "--epochs", "2",
                          "--exchange", "halo"])
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def faked_tpu_run():
    env = {**_forced(4), "JAXGCN_NO_KERNELS": "1"}  # on a TPU the CPU kernel never runs
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_accelerator_plans_sharded_train_step_has_no_scatter_over_rows(faked_tpu_run):
    """The sharded training loop as planned for a TPU: the blocks are neighbour lists, and no scatter
    touches a block's rows (L = 101 rows x 8 hidden, forward or backward); what remains are the
    history's one-element writes and the loss's sums. The same loop over CSR blocks scatters (the walk sees
    them)."""
    out = faked_tpu_run
    assert out["ops"] == "xla-mxu" and out["has_lists"] == [True, True, False], out
    for exchange in ("all_gather", "halo"):
        planned = out["scatters"][exchange]
        assert planned and all(int(np.prod(shape)) < 101 for _, shape in planned), (exchange, planned)
    assert ["scatter-add", [101, 8]] in out["scatters"]["csr"], out["scatters"]["csr"]
    assert out["cli_status"] == 0 and out["cli_lists"] == [True], out  # the CLI's plan asked for the lists


def test_the_accelerator_plans_sharded_run_follows_the_single_device_run(faked_tpu_run):
    """Sharded on the lists == single, epoch by epoch, within test_distributed's tolerances."""
    for exchange in ("all_gather", "halo"):
        run = faked_tpu_run[exchange]
        assert run["epochs"] == 30 and run["moved"] > 0.1, run
        assert run["loss"] < 1e-4 and run["val_acc"] < 0.01 and run["params"] < 1e-2, run
        assert abs(run["test"] - run["single_test"]) < 4e-3, run


@pytest.mark.parametrize("exchange", ["all_gather", "halo"])
def test_each_blocks_lists_reproduce_its_product_and_its_transposes(exchange):
    """Each device's padded lists (buckets of other widths and row counts than its own) give its block's
    ``A_p @ s`` and, as the gradient, ``A_p^T @ g``: the CSR blocks' products on the host."""
    p = datasets.prepare(datasets.synthetic(403, n_classes=3, n_features=6, homophily=0.3, seed=0), on_device=False)
    csr, _ = partition(p.data.graph, 4, exchange=exchange)
    made, n_pad = partition(p.data.graph, 4, exchange=exchange, lists=True)
    assert made.adj is None and n_pad == 404
    rng = np.random.default_rng(0)
    n_cols = int(csr.adj.t_indptr.shape[1]) - 1
    sources, g = rng.normal(size=(n_cols, 3)).astype(np.float32), rng.normal(size=(101, 3)).astype(np.float32)
    shapes = set()
    for part in range(4):
        a = csr.adj
        block = sp.csr_matrix((a.data[part], a.cols[part], a.indptr[part]), shape=(101, n_cols))
        lists = jax.tree.map(lambda leaf, part=part: leaf[part], made.lists)
        shapes.add(tuple(c.shape for c in lists.cols))
        out, vjp = jax.vjp(lambda s, lists=lists: gather.rows_product(lists, s), sources)
        np.testing.assert_allclose(out, block @ sources, atol=1e-5)
        np.testing.assert_allclose(vjp(g)[0], block.T @ g, atol=1e-5)
    assert len(shapes) == 1 and len(made.lists.cols) > 1, shapes  # one stacked shape, several buckets
    if exchange == "halo":  # the rows each device sends: x[send] and, as the gradient, its transpose
        x, g = rng.normal(size=(101, 3)).astype(np.float32), rng.normal(size=(4 * made.send.shape[-1], 3))
        for part in range(4):
            send = np.asarray(made.send[part]).ravel()
            lists = jax.tree.map(lambda leaf, part=part: leaf[part], made.send_lists)
            out, vjp = jax.vjp(lambda v, lists=lists: gather.rows_product(lists, v), x)
            np.testing.assert_array_equal(out, x[send])
            expected = np.zeros_like(x)
            np.add.at(expected, send, g)  # each local row: the cotangents of every slot that sent it
            np.testing.assert_allclose(vjp(g.astype(np.float32))[0], expected, atol=1e-5)
    else:
        assert made.send_lists is None


def test_the_sharded_estimate_counts_an_accelerators_block_lists(monkeypatch):
    """On an accelerator a device's row block is neighbour lists, its own and its transpose's, padded
    to the largest block's buckets: the per-device estimate counts them (slots at most twice the
    block's entries, each way), with their gather buffers and no host runtime, not the CPU's CSR block.
    Checked against the lists :func:`partition` builds, and through ``--shard-graph``'s own estimate."""
    from jaxgcn import plan
    from jaxgcn.app import sharded
    from jaxgcn.host import memory

    p = datasets.prepare(datasets.synthetic(4000, n_classes=3, n_features=6, avg_degree=8.0, seed=0),
                         on_device=False)
    made, _ = partition(p.data.graph, 4, exchange="all_gather", lists=True)
    held = sum(leaf.nbytes for leaf in jax.tree.leaves(made.lists)) // 4  # one device's share of the stack
    n, edges = p.data.graph.n_nodes, p.data.graph.n_edges
    lists = memory.estimate_sharded(n, edges, 6, 3, parts=4, device=True)
    csr = memory.estimate_sharded(n, edges, 6, 3, parts=4)
    assert held <= lists.parts["adjacency"] <= 1.6 * held, (held, lists.parts["adjacency"])
    assert lists.parts["messages"] > 0 == csr.parts["messages"] and lists.parts["runtime"] == 0 < csr.parts["runtime"]
    seen = []
    real = memory.estimate_sharded
    monkeypatch.setattr(memory, "estimate_sharded", lambda *a, **k: seen.append(k["device"]) or real(*a, **k))
    layout = sharded.Layout(sharded.Loaded(p, None), None, p.data, None, {"halo_rows": 10, "all_gather_rows": 4000,
                            "rows_per_device": 1000, "cut_fraction": 0.5}, "all_gather", edges, None, n_parts=4)
    for platform in ("cpu", "tpu"):
        monkeypatch.setattr(plan, "current_platform", lambda platform=platform: platform)
        sharded._estimate(layout, plan.GCNConfig(), lambda line: None)
    assert seen == [False, True]
