"""Sharded full-graph propagation (jaxgcn.distributed) against the single-device model, on 4 forced
CPU devices in a subprocess (the main test process keeps one device)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_run import run_main, unwrap
from conftest import closed_port

from jaxgcn import datasets
from jaxgcn.core.graph import with_csr
from jaxgcn.distributed import partition

SCRIPT = r"""
import json
import jax, jax.numpy as jnp, numpy as np
from jaxgcn import datasets
from jaxgcn.distributed import partition, shard_nodes, sharded_apply, sharded_loss
from jaxgcn.core.models import GCNConfig, gcn
from jaxgcn.train import masked_cross_entropy

assert len(jax.devices()) == 4
p = datasets.prepare(datasets.synthetic(403, n_classes=3, n_features=6, homophily=0.3, seed=0))
d = p.data
config = GCNConfig(hidden=8, layers=3)
model = gcn(config)
params = model.init(jax.random.key(0), 6, 3)
mesh = jax.sharding.Mesh(np.array(jax.devices()), ("nodes",))
# the single-device reference, jitted (eager, op by op, it took most of this script's time)
single_logits = jax.jit(model.apply)(params, d.graph, d.x)
single_loss, single_grads = jax.jit(jax.value_and_grad(
    lambda pr: masked_cross_entropy(model.apply(pr, d.graph, d.x), d.labels, d.train_mask)))(params)
out = {}
for exchange in ("all_gather", "halo"):
    blocks, n_pad = partition(d.graph, 4, exchange=exchange)
    shard = lambda a: shard_nodes(np.asarray(a), n_pad, 4)
    logits = jax.jit(sharded_apply(config, mesh))(params, blocks, shard(d.x)).reshape(n_pad, -1)[:403]
    loss, grads = jax.jit(jax.value_and_grad(sharded_loss(config, mesh)))(
        params, jax.random.key(0), blocks, shard(d.x), shard(d.labels), shard(d.train_mask))
    out[exchange] = {
        "logits": float(jnp.abs(logits - single_logits).max()),
        "loss": abs(float(loss) - float(single_loss)),
        "grads": max(float(jnp.abs(a - b).max())
                     for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(single_grads))),
        "grad_scale": max(float(jnp.abs(b).max()) for b in jax.tree.leaves(single_grads)),
    }
print(json.dumps(out))
"""


def test_edges_cross_every_partition_border():
    p = datasets.prepare(datasets.synthetic(403, n_classes=3, n_features=6, homophily=0.3, seed=0))
    blocks, n_pad = partition(p.data.graph, 4)
    local = n_pad // 4
    assert n_pad == 404
    for part in range(4):
        cols = np.asarray(blocks.adj.cols[part])[np.asarray(blocks.adj.data[part]) != 0]
        owners = set((cols // local).tolist())
        assert owners - {part}, f"block {part} has no edge from another block"
        assert len(owners) == 4  # edges come in from every block


def test_sharded_runs_differing_only_in_lr_weight_decay_and_dropout_share_one_program():
    """As single runs (tests/test_train.py): the sharded program takes the run's settings as
    arguments, so another lr, weight decay or dropout compiles to the same program text."""
    import dataclasses
    import re

    import jax

    from jaxgcn.distributed import make_sharded_runner, node_mesh, shard_data
    from jaxgcn.core.models import GCNConfig
    from jaxgcn.train import TrainConfig, compile

    p = datasets.prepare(datasets.synthetic(403, n_classes=3, n_features=6, homophily=0.3, seed=0), on_device=False)
    sharded = shard_data(p.data, node_mesh(1))
    config = TrainConfig(epochs=20)

    def program(model_config, train_config) -> str:
        runner = make_sharded_runner(model_config, train_config, sharded.n_features, p.n_classes, sharded.mesh)
        runs = jax.tree.map(np.asarray, runner.inputs())
        text = compile(("text of", model_config, train_config), runner, (jax.random.key(0), None, runs),
                       sharded.data).run_until.as_text()
        text = re.sub(r"\nFileNames\n.*?\n(?=%|ENTRY)", "\n", text, flags=re.S)
        return re.sub(r", metadata=\{[^}]*\}", "", text)

    assert program(GCNConfig(), config) == program(
        GCNConfig(dropout=0.3), dataclasses.replace(config, lr=0.05, weight_decay=1e-3))


def test_a_second_sharded_fit_with_the_same_settings_compiles_nothing():
    """fit_sharded compiles through the one cache (jaxgcn.training.loop.compile), as fit does
    (tests/test_train.py): the same settings on a mesh of the same devices again report no compile
    time and train the same run; another learning rate (an input of the program) trains another."""
    import dataclasses

    import jax

    from jaxgcn.distributed import fit_sharded, node_mesh, shard_data
    from jaxgcn.core.models import GCNConfig
    from jaxgcn.train import TrainConfig

    p = datasets.prepare(datasets.synthetic(403, n_classes=3, n_features=6, homophily=0.3, seed=0), on_device=False)
    config = TrainConfig(epochs=7, early_stopping=None)
    kw = dict(model_config=GCNConfig(hidden=8), key=jax.random.key(0), log=None)
    first = fit_sharded(shard_data(p.data, node_mesh(1)), p.n_classes, config=config, **kw)
    again = fit_sharded(shard_data(p.data, node_mesh(1)), p.n_classes, config=config, **kw)
    assert first.compile_seconds > 0.0 and again.compile_seconds == 0.0
    assert again.epochs_run == first.epochs_run == 7
    np.testing.assert_array_equal(again.history["loss"], first.history["loss"])
    jax.tree.map(np.testing.assert_array_equal, again.params, first.params)
    other = fit_sharded(shard_data(p.data, node_mesh(1)), p.n_classes, config=dataclasses.replace(config, lr=0.05),
                        **kw)
    assert other.history["loss"][1] != first.history["loss"][1]


@pytest.mark.parametrize("kernels", ["fused", "xla"])
def test_sharded_forward_loss_and_gradients_equal_the_single_device_model(kernels):
    # "xla": the pure-XLA block product that GPUs/TPUs use (the kernel is CPU-only)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    if kernels == "xla":
        env["JAXGCN_NO_KERNELS"] = "1"
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(results) == {"all_gather", "halo"}
    for out in results.values():
        assert out["logits"] < 1e-5 and out["loss"] < 1e-5, results
        assert out["grads"] < 1e-5 and out["grad_scale"] > 1e-3, results


TRAIN_SCRIPT = r"""
import json
import jax, numpy as np
from jaxgcn import datasets
from jaxgcn.distributed import fit_sharded, node_mesh, shard_data
from jaxgcn.core.models import GCNConfig
from jaxgcn.train import Patience, TrainConfig, fit

raw = datasets.load_dataset("cora")
host, dev = datasets.prepare(raw, on_device=False), datasets.prepare(raw)
# Without dropout a run is deterministic: the sharded run must follow the single-device one epoch by
# epoch (the same Adam steps from the same summed gradients), for both exchanges.
model_config, config = GCNConfig(dropout=0.0), TrainConfig(early_stopping=None)
single = fit(dev.data, dev.n_classes, model_config=model_config, config=config, key=jax.random.key(0), log=None)
out = {"single": {"epochs": single.epochs_run, "test": single.metrics["test_acc"]}}
for exchange in ("all_gather", "halo"):
    res = fit_sharded(shard_data(host.data, node_mesh(4), exchange=exchange), host.n_classes,
                      model_config=model_config, config=config, key=jax.random.key(0), log=None)
    out[exchange] = {"epochs": res.epochs_run, "test": res.metrics["test_acc"],
                     "loss": float(np.abs(res.history["loss"] - single.history["loss"]).max()),
                     "val_acc": float(np.abs(res.history["val_acc"] - single.history["val_acc"]).max()),
                     # relative norm: Adam's sign-like steps on ~0 gradients move single entries by ~lr
                     "params": max(float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(b))
                                   for a, b in zip(jax.tree.leaves(res.params), jax.tree.leaves(single.params)))}
# The optimizer comes from the same factory: momentum SGD, sharded, follows the single run.
mom = TrainConfig(early_stopping=None, epochs=30, optimizer="momentum", lr=0.05)
one = fit(dev.data, dev.n_classes, model_config=model_config, config=mom, key=jax.random.key(0), log=None)
res = fit_sharded(shard_data(host.data, node_mesh(4)), host.n_classes, model_config=model_config, config=mom,
                  key=jax.random.key(0), log=None)
out["momentum"] = {"loss": float(np.abs(res.history["loss"] - one.history["loss"]).max()),
                   "moved": float(np.abs(one.history["loss"][-1] - one.history["loss"][0]))}
# A diverging run (the same program: lr is an input) is named as the single run names it.
from jaxgcn.train import TrainingDiverged
errors = []
for run in (lambda c: fit(dev.data, dev.n_classes, model_config=model_config, config=c, key=jax.random.key(0),
                          log=None),
            lambda c: fit_sharded(shard_data(host.data, node_mesh(4)), host.n_classes, model_config=model_config,
                                  config=c, key=jax.random.key(0), log=None)):
    try:
        run(TrainConfig(early_stopping=None, epochs=30, optimizer="momentum", lr=1e20))
    except TrainingDiverged as exc:
        errors.append(str(exc))
out["diverged"] = errors
# Early stopping runs inside the sharded loop: with patience 20 the run must stop 20 epochs after its
# best validation epoch (by its own history) and return that epoch's params (dropout on: it stops at
# epoch 130, its best 110). The same run is the uninterrupted one of the resume below (one program).
from jaxgcn.store import checkpoint
sharded, drop = shard_data(host.data, node_mesh(4)), TrainConfig(epochs=1000, early_stopping=Patience(20))
saved, seen = {}, []
kw = dict(model_config=GCNConfig(), config=drop, key=jax.random.key(0), log=None, checkpoint_every=10)
full = fit_sharded(sharded, host.n_classes, **kw,
                   on_checkpoint=lambda s: saved.setdefault(int(s.epoch), checkpoint.state_arrays(s)))
h = full.history
best = max(range(full.epochs_run), key=lambda e: (h["val_acc"][e], -h["val_loss"][e], -e))
out["patience"] = {"stopped": full.stopped_early, "epochs": full.epochs_run, "best": best + 1,
                   "val_acc": full.metrics["val_acc"], "best_val_acc": float(h["val_acc"][best])}
# Resume (dropout on: the key matters): the run goes on from the saved state, to the same params.
again = fit_sharded(sharded, host.n_classes, **kw, on_checkpoint=lambda s: seen.append(int(s.epoch)),
                    resume=lambda t: checkpoint.restore_state(t, saved[30], "test"))
out["resume"] = {"saved": sorted(saved), "seen": seen, "restored": [full.restored_epoch, again.restored_epoch],
                 "same": all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(full.params),
                                                                   jax.tree.leaves(again.params)))}
print(json.dumps(out))
"""


def _forced(n: int) -> dict[str, str]:
    return {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={n}", "JAX_PLATFORMS": "cpu"}


def test_sharded_training_follows_the_single_device_run_epoch_by_epoch():
    proc = subprocess.run([sys.executable, "-c", TRAIN_SCRIPT], capture_output=True, text=True, env=_forced(4),
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    single = out["single"]
    for exchange in ("all_gather", "halo"):
        run = out[exchange]
        assert run["epochs"] == single["epochs"] == 200, out
        # float32 sums in another order: a near-tied validation node may flip (1 node = 0.002)
        assert run["loss"] < 1e-4 and run["val_acc"] < 0.01 and run["params"] < 1e-2, out
        assert abs(run["test"] - single["test"]) < 4e-3, out
    assert out["momentum"]["loss"] < 1e-4 < out["momentum"]["moved"], out
    single_error, sharded_error = out["diverged"]  # both raised TrainingDiverged, with one wording
    assert sharded_error == single_error and single_error.startswith("training diverged: the loss became NaN/inf at "
                                                                     "epoch "), out["diverged"]
    assert "the learning rate 1e+20 is large (try lr=0.01)" in sharded_error
    stop = out["patience"]
    assert stop["stopped"] and stop["epochs"] == stop["best"] + 20 < 1000, stop
    assert abs(stop["val_acc"] - stop["best_val_acc"]) < 1e-6, stop
    resumed = out["resume"]  # from epoch 30: its first checkpoint is epoch 40, its params the uninterrupted ones
    assert 30 in resumed["saved"] and resumed["seen"][0] == 40 and resumed["same"], resumed
    assert resumed["restored"][0] == resumed["restored"][1] is not None, resumed


def _cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jaxgcn.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


# The multi-process Cora jobs train 100 epochs (test accuracy ~0.81 already): the claim is that they
# equal the one-process run epoch by epoch, and each epoch waits on several collectives between the
# processes (the slowest part of these tests on 2 busy cores).
TWO_PROCESS_EPOCHS = ["--epochs", "100"]


@pytest.fixture(scope="module")
def cora_on_two_devices(tmp_path_factory):
    """``run(exchange)`` -> the JSON report of ``jaxgcn train --dataset cora --shard-graph --devices 2
    --exchange EXCHANGE`` in one process: the reference the multi-process jobs must equal, run once
    per exchange for the module."""
    reports: dict[str, dict] = {}

    def run(exchange: str) -> dict:
        if exchange not in reports:
            env = {**os.environ, "JAX_PLATFORMS": "cpu"}
            env.pop("XLA_FLAGS", None)
            d = tmp_path_factory.mktemp(f"one-{exchange}")
            one = _cli(["train", "--dataset", "cora", "--shard-graph", "--devices", "2", "--exchange", exchange,
                        *TWO_PROCESS_EPOCHS, "--json", "one.json"], env, d)
            assert one.returncode == 0, one.stderr[-3000:]
            reports[exchange] = json.loads((d / "one.json").read_text())
            assert reports[exchange]["distributed"]["exchange"] == exchange
        return reports[exchange]
    return run


def test_cli_shard_graph_on_cora_reaches_the_single_device_accuracy(tmp_path):
    # With dropout the masks differ (each device hashes its own rows), so the runs are not identical;
    # the accuracy must agree within the seed-to-seed spread (std ~0.5 points on Cora).
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)  # --devices 4 gives the console process 4 CPU devices itself
    sharded = _cli(["train", "--dataset", "cora", "--shard-graph", "--devices", "4", "--exchange", "halo",
                    "--json", "s.json", "--save", "model"], env, tmp_path)
    assert sharded.returncode == 0, sharded.stderr[-3000:]
    assert "4 device(s) in 1 process(es)" in sharded.stdout and "halo:" in sharded.stdout
    # the one-device run and the evaluation in this test's own process (one CPU device)
    assert run_main(["train", "--dataset", "cora", "--json", tmp_path / "one.json", "--quiet"]) == 0
    s, one = (json.loads((tmp_path / f).read_text()) for f in ("s.json", "one.json"))
    assert s["distributed"]["devices"] == 4 and s["distributed"]["exchange"] == "halo"
    assert s["test_acc_mean"] > 0.79 and abs(s["test_acc_mean"] - one["test_acc_mean"]) < 0.03, (s, one)
    # the saved model is an ordinary checkpoint: evaluate it on one device, same test accuracy
    assert run_main(["evaluate", "--checkpoint", tmp_path / "model", "--dataset", "cora", "--json",
                     tmp_path / "ev.json"]) == 0
    assert abs(json.loads((tmp_path / "ev.json").read_text())["accuracy"] - s["test_acc_mean"]) < 1e-6


PROCESS_SCRIPT = r"""
import json, sys
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(sys.argv[1], num_processes=2, process_id=int(sys.argv[2]))
import jax.numpy as jnp, numpy as np
from jaxgcn import datasets
from jaxgcn.distributed import partition, shard_nodes, sharded_loss, to_global
from jaxgcn.core.models import GCNConfig, gcn
from jaxgcn.train import masked_cross_entropy

p = datasets.prepare(datasets.synthetic(301, n_classes=3, n_features=6, homophily=0.3, seed=0))
d = p.data
config = GCNConfig(hidden=8)
model = gcn(config)
params = model.init(jax.random.key(0), 6, 3)
mesh = jax.sharding.Mesh(np.array(jax.devices()), ("nodes",))
blocks, n_pad = partition(d.graph, 2)
shard = lambda a: shard_nodes(np.asarray(a), n_pad, 2)
inputs = to_global((blocks, shard(d.x), shard(d.labels), shard(d.train_mask)), mesh)
loss, grads = jax.jit(jax.value_and_grad(sharded_loss(config, mesh)))(params, jax.random.key(0), *inputs)
single_loss, single_grads = jax.jit(jax.value_and_grad(
    lambda pr: masked_cross_entropy(model.apply(pr, d.graph, d.x), d.labels, d.train_mask)))(params)
grads = jax.tree.map(lambda g: np.asarray(g.addressable_data(0)), grads)
print(json.dumps({"process": jax.process_index(), "devices": jax.device_count(),
                  "loss": abs(float(loss.addressable_data(0)) - float(single_loss)),
                  "grads": max(float(np.abs(a - np.asarray(b)).max())
                               for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(single_grads)))}))
"""


def test_two_processes_train_together_and_match_one_process():
    port = closed_port()
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)  # one CPU device per process
    procs = [subprocess.Popen([sys.executable, "-c", PROCESS_SCRIPT, f"127.0.0.1:{port}", str(i)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for i in range(2)]
    outs = [proc.communicate(timeout=300) for proc in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err[-3000:]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert sorted(r["process"] for r in results) == [0, 1] and all(r["devices"] == 2 for r in results)
    for r in results:
        assert r["loss"] < 1e-5 and r["grads"] < 1e-5, r


def test_cli_two_processes_train_one_graph_and_only_process_0_writes(tmp_path, cora_on_two_devices):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)  # one CPU device per process
    port = closed_port()
    common = ["-m", "jaxgcn.cli", "train", "--dataset", "cora", "--distributed", "--coordinator",
              f"127.0.0.1:{port}", "--num-processes", "2", *TWO_PROCESS_EPOCHS, "--json", "out.json", "--save", "model"]
    procs = [subprocess.Popen([sys.executable, *common, "--process-id", str(i)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path) for i in range(2)]
    outs = [proc.communicate(timeout=600) for proc in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err[-3000:]
    assert "test accuracy" in outs[0][0] and "2 device(s) in 2 process(es)" in outs[0][0]
    # process 1 prints nothing (gloo's own "[Gloo] Rank 1 is connected..." line is kept off, without --verbose)
    assert outs[1][0] == "" and "[Gloo]" not in outs[0][0], outs
    two = json.loads((tmp_path / "out.json").read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "out.json"]
    assert two["distributed"]["processes"] == 2 and two["distributed"]["devices"] == 2
    # the same job in one process with 2 devices (with the exchange the default chose): the same
    # dropout masks (device p draws from fold_in(key, p)) and the same sums, so the same run
    single = cora_on_two_devices(two["distributed"]["exchange"])
    assert single["distributed"]["processes"] == 1 and single["epochs_run"] == two["epochs_run"]
    assert np.abs(np.array(single["history"]["loss"]) - np.array(two["history"]["loss"])).max() < 1e-4
    assert abs(single["test_acc_mean"] - two["test_acc_mean"]) < 2e-3 and two["test_acc_mean"] > 0.79


@pytest.mark.parametrize("process_id, missing", [
    (0, r"not all of the 2 processes joined \(the others are --process-id 1; start each with the same"),
    (1, r"process 0, the coordinator, does not answer at 127\.0\.0\.1:\d+: start it there"),
])
def test_a_process_whose_peers_never_come_stops_with_one_line_naming_them(tmp_path, process_id, missing):
    import re

    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    port = closed_port()
    proc = subprocess.run([sys.executable, "-m", "jaxgcn.cli", "train", "--dataset", "cora", "--distributed",
                           "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id",
                           str(process_id), "--join-timeout", "4"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=240)
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"jaxgcn: error: --distributed: process {process_id} waited 4 s "
                                                   f"at 127.0.0.1:{port} and the job did not form: "), proc.stderr
    assert re.search(missing, lines[0]) and lines[0].endswith("--join-timeout SECONDS waits longer"), lines[0]


def test_the_collectives_filter_drops_only_their_lines_and_keeps_the_order(tmp_path):
    script = ("import os, sys\n"
              "from jaxgcn.distributed.runtime import quiet_collectives\n"
              "print('before', flush=True)\n"
              "quiet_collectives()\n"
              "print('one')\n"
              "sys.stdout.flush()\n"
              "os.write(1, b'[Gloo] Rank 0 is connected to 1 peer ranks.\\nfrom C++\\n')\n"
              "print('two', end='')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "before\none\nfrom C++\ntwo", out.stdout


@pytest.mark.parametrize("args, message", [
    (["--coordinator", "127.0.0.1:1234"], "need --distributed"),
    (["--distributed", "--coordinator", "127.0.0.1:1234"], r"missing --num-processes, --process-id"),
    (["--distributed", "--coordinator", "h:1", "--num-processes", "2", "--process-id", "2"],
     r"--process-id 2 must be in \[0, 2\)"),
    (["--shard-graph", "--seeds", "3"], "sweep --distributed"),
    (["--shard-graph", "--backend", "segment"], "drop --backend segment"),
    (["--shard-graph", "--devices", "64"], "this job has 1 device"),
])
def test_cli_distributed_arguments_are_checked(capsys, args, message):
    import re

    from jaxgcn.cli import main

    assert main(["train", "--dataset", "cora", "--quiet", *args]) == 2
    assert re.search(message, unwrap(capsys.readouterr().err))


BAD_COORDINATORS = [
    ("nohost:notaport", "port 'notaport' is not an integer from 1 to 65535"),  # gRPC crashed on it (rc -11)
    ("nohost:0", "port '0' is not an integer from 1 to 65535"),
    ("nohost:65536", "port '65536' is not an integer from 1 to 65535"),
    ("nohost:+80", "port '+80' is not an integer from 1 to 65535"),  # int() would take it
    ("nohost:\uff18\uff10", "port '\uff18\uff10' is not an integer from 1 to 65535"),  # fullwidth: int() takes
    (":1234", "is not HOST:PORT"),
    ("nohost", "is not HOST:PORT"),
    ("no host:80", "is not HOST:PORT"),
]


@pytest.mark.parametrize("value, problem", BAD_COORDINATORS)
def test_coordinator_is_host_and_port(capsys, value, problem):
    # without --num-processes/--process-id: were the value let through, the job would be refused for
    # those, not joined (a test process that joins a job it cannot form exits)
    argv = ["train", "--dataset", "cora", "--distributed", "--coordinator", value]
    assert run_main(argv) == 2
    assert unwrap(capsys.readouterr().err) == (
        f"jaxgcn: error: argument --coordinator: {value!r}{'' if problem.startswith('is') else ':'} {problem}; give "
        "process 0's address as HOST:PORT, e.g. 10.0.0.1:1234 (see 'jaxgcn train --help')\n")


def test_a_bad_coordinator_is_refused_before_jax_is_imported_and_a_good_one_is_kept():
    from jaxgcn.cli import build_parser

    code = ("import sys\nfrom jaxgcn.cli import main\n"
            "code = main(['train', '--distributed', '--coordinator', 'nohost:notaport'])\n"
            "print(code, 'jax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout == "2 False\n", out.stderr
    for good in ("10.0.0.1:1234", "[::1]:8476", "node-7.cluster:65535", "h:1"):
        assert build_parser().parse_args(["train", "--coordinator", good]).coordinator == good


def test_halo_blocks_reproduce_the_adjacency_product_on_the_host():
    # The halo remap emulated with NumPy: every device's sources (own rows, then H rows from each
    # device as its send lists say) times its block equals the rows of Â x.
    p = datasets.prepare(datasets.synthetic(403, n_classes=3, n_features=6, homophily=0.3, seed=1),
                         on_device=False)
    g = p.data.graph
    if g.csr is None:  # an accelerator's auto backend (dense) keeps the edge list: the expected product reads CSR
        g = with_csr(g)
    x = np.random.default_rng(0).standard_normal((403, 5)).astype(np.float32)
    rows = np.repeat(np.arange(403), np.diff(g.csr.indptr))
    expected = np.asarray(g.self_weights)[:, None] * x
    np.add.at(expected, rows, np.asarray(g.csr.data)[:, None] * x[np.asarray(g.csr.cols)])
    blocks, n_pad = partition(g, 4, exchange="halo")
    local = n_pad // 4
    xs = np.concatenate([x, np.zeros((n_pad - 403, 5), np.float32)]).reshape(4, local, 5)
    send = np.asarray(blocks.send)  # [q, p, H]
    for part in range(4):
        sources = np.concatenate([xs[part]] + [xs[q][send[q, part]] for q in range(4)])
        indptr, cols, data = (np.asarray(getattr(blocks.adj, f)[part]) for f in ("indptr", "cols", "data"))
        block_rows = np.repeat(np.arange(local), np.diff(indptr))
        out = np.asarray(blocks.self_weights[part])[:, None] * xs[part]
        np.add.at(out, block_rows, data[:, None] * sources[cols])
        lo, hi = part * local, min((part + 1) * local, 403)
        np.testing.assert_allclose(out[: hi - lo], expected[lo:hi], atol=1e-5)


def test_rcm_numbering_shrinks_the_cut_and_the_halo():
    # A ring lattice (each node linked to its 4 nearest) with shuffled ids has no locality until RCM
    # renumbers it: then few edges cross the 4 borders and the halo is a sliver of the all-gather.
    from jaxgcn.distributed import partition_stats
    from jaxgcn.core.graph import from_edges, gcn_norm, reorder

    n = 4000
    perm = np.random.default_rng(0).permutation(n)
    src = np.concatenate([np.arange(n), np.arange(n)])
    dst = np.concatenate([(np.arange(n) + 1) % n, (np.arange(n) + 2) % n])
    raw = from_edges(perm[src], perm[dst], n_nodes=n)[0]
    before = partition_stats(gcn_norm(raw), 4)
    after = partition_stats(gcn_norm(reorder(raw, "rcm", symmetric=True)[0]), 4)
    assert before["cut_fraction"] > 0.7 and before["halo_rows"] > 0.9 * before["all_gather_rows"], before
    assert after["cut_fraction"] < 0.01 and after["halo_rows"] < 0.3 * after["all_gather_rows"], after


def test_cli_partition_files_train_with_each_process_reading_its_own_blocks(tmp_path, cora_on_two_devices, capsys):
    # `jaxgcn partition` writes per-device blocks; two processes then train from them, each reading only
    # its own part file (the log says how many it read), and match the run made from the dataset itself.
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    assert run_main(["partition", "--dataset", "cora", "--parts", "2", "--exchange", "halo", "--out",
                     tmp_path / "parts"]) == 0  # in this process: partitioning needs no devices
    assert "wrote 2 parts (halo" in capsys.readouterr().out
    meta = json.loads((tmp_path / "parts" / "partitions.json").read_text())
    assert meta["parts"] == 2 and meta["n_nodes"] == 2708 and len(meta["files"]) == 2
    # each process gets a folder holding only its own part: reading the other one would fail
    import shutil

    for i in range(2):
        shutil.copytree(tmp_path / "parts", tmp_path / f"only{i}")
        (tmp_path / f"only{i}" / f"part-{1 - i:05d}.npz").unlink()
    port = closed_port()
    common = ["-m", "jaxgcn.cli", "train", "--distributed", "--coordinator", f"127.0.0.1:{port}",
              "--num-processes", "2", *TWO_PROCESS_EPOCHS, "--json", "out.json"]
    procs = [subprocess.Popen([sys.executable, *common, "--process-id", str(i), "--dataset", f"partitioned:only{i}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
             for i in range(2)]
    outs = [proc.communicate(timeout=600) for proc in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err[-3000:]
    assert "this process read 1 of them" in outs[0][0]
    from_parts = json.loads((tmp_path / "out.json").read_text())
    # the same training from the dataset itself in one process with 2 devices: the same run
    direct = cora_on_two_devices("halo")
    assert from_parts["distributed"]["exchange"] == "halo" and from_parts["epochs_run"] == direct["epochs_run"]
    assert np.abs(np.array(from_parts["history"]["loss"]) - np.array(direct["history"]["loss"])).max() < 1e-4
    assert abs(from_parts["test_acc_mean"] - direct["test_acc_mean"]) < 2e-3


def test_partition_files_are_checked(tmp_path):
    import jax

    from jaxgcn.distributed import load_partitions, node_mesh, save_partitions

    host = datasets.prepare(datasets.synthetic(300, n_classes=3, n_features=6, seed=0), on_device=False)
    save_partitions(tmp_path / "p", host.data, 2, info=host.info)
    mesh = node_mesh(1)
    with pytest.raises(ValueError, match=r"holds 2 parts but this job has 1 device\(s\); partition it again "
                                         r"with --parts 1"):
        load_partitions(tmp_path / "p", mesh)
    save_partitions(tmp_path / "one", host.data, 1, info=host.info)
    sharded, meta = load_partitions(tmp_path / "one", mesh)
    assert sharded.n_nodes == 300 and meta["exchange"] == "all_gather"
    assert np.array_equal(np.asarray(sharded.data.labels)[0], np.asarray(host.data.labels))
    part = tmp_path / "one" / "part-00000.npz"
    blob = bytearray(part.read_bytes())
    blob[len(blob) // 2] ^= 0xFF  # same size, one byte changed: it would reach the kernel unchecked
    part.write_bytes(bytes(blob))
    with pytest.raises(ValueError, match=r"part-00000.npz: its SHA-256 differs from the one partitions.json "
                                         r"records .* write the partitions again"):
        load_partitions(tmp_path / "one", mesh)
    part.write_bytes(b"short")
    with pytest.raises(ValueError, match=r"part-00000.npz: missing or truncated .* write the partitions again"):
        load_partitions(tmp_path / "one", mesh)
    with pytest.raises(ValueError, match=r"no partitions.json; write the partitions with `jaxgcn partition"):
        load_partitions(tmp_path, mesh)
    assert len(jax.devices()) == 1


def test_cli_sweep_shares_the_runs_between_two_processes(tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    grid = ["--lr", "0.01,0.05", "--seeds", "2", "--epochs", "30"]
    port = closed_port()
    common = ["-m", "jaxgcn.cli", "sweep", "--dataset", "cora", *grid, "--distributed", "--coordinator",
              f"127.0.0.1:{port}", "--num-processes", "2", "--json", "two.json"]
    procs = [subprocess.Popen([sys.executable, *common, "--process-id", str(i)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path) for i in range(2)]
    outs = [proc.communicate(timeout=600) for proc in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err[-3000:]
    assert "process 0 of 2: 1 in 2 runs of each group" in outs[0][0] and "2 runs in one program" in outs[0][0]
    assert outs[1][0] == "" and "[Gloo]" not in outs[0][0], outs
    assert run_main(["sweep", "--dataset", "cora", *grid, "--json", tmp_path / "one.json", "--quiet"]) == 0
    two, single = (json.loads((tmp_path / f).read_text()) for f in ("two.json", "one.json"))
    assert len(two["configurations"]) == len(single["configurations"]) == 2
    for a, b in zip(two["configurations"], single["configurations"]):
        assert a["lr"] == b["lr"] and a["test_acc_mean"] == pytest.approx(b["test_acc_mean"], abs=1e-6), (a, b)


# --- partition files validated as any user file (issue 25): the hash proves a file is the one written,
# not that what was written is valid; a crafted part with a recomputed hash once aborted the process
# (SIGABRT) inside the kernel.

def _edit_meta(meta, edit):
    edit(meta)
    return meta


META_CASES = {
    "a list": (lambda m: [m], r"holds a JSON list, not an object"),
    "no parts": (lambda m: _edit_meta(m, lambda d: d.pop("parts")), r"'parts' is None, not a positive integer"),
    "files short": (lambda m: _edit_meta(m, lambda d: d.update(files=[])), r"'files' is not a list of 1 entries"),
    "files not a list": (lambda m: _edit_meta(m, lambda d: d.update(files="part-00000.npz")),
                         r"'files' is not a list of 1 entries"),
    "a path in files": (lambda m: _edit_meta(m, lambda d: d["files"][0].update(file="../part-00000.npz")),
                        r"'files'\[0\] is not \{\"file\": \"part-NNNNN.npz\""),
    "unknown exchange": (lambda m: _edit_meta(m, lambda d: d.update(exchange="bogus")),
                         r"'exchange' is 'bogus', not 'all_gather' or 'halo'"),
    "wrong n_features": (lambda m: _edit_meta(m, lambda d: d.update(n_features=99)),
                         r"'info' \(300 nodes, 6 features, 3 classes\) disagrees with the partitions \(300 nodes, "
                         r"99 features\)"),
    "no stats": (lambda m: _edit_meta(m, lambda d: d.pop("stats")), r"'stats' lacks one of parts"),
    "info without classes": (lambda m: _edit_meta(m, lambda d: d["info"].pop("n_classes")),
                             r"'info' lacks one of dataset"),
}


def _shift_first_col(a):
    a["graph/adj/cols"] = a["graph/adj/cols"].copy()
    a["graph/adj/cols"][0] = 10**6


def _swap_pointers(a):
    a["graph/adj/indptr"] = a["graph/adj/indptr"].copy()
    a["graph/adj/indptr"][5] = a["graph/adj/indptr"][-1] + 50


def _repeat_perm(a):
    a["graph/adj/t_perm"] = np.zeros_like(a["graph/adj/t_perm"])


def _label(value):
    def edit(a):
        a["labels"] = a["labels"].copy()
        a["labels"][0] = value
    return edit


ARRAY_CASES = {
    "column out of range": (_shift_first_col, r"graph/adj: column index 1000000 \(stored entry 0\) is outside "
                                              r"\[0, 300\)"),
    "row pointers past the end": (_swap_pointers, r"graph/adj: indptr decreases at row"),
    "transpose not a permutation": (_repeat_perm, r"graph/adj/t_perm: not a permutation of the \d+ entries"),
    "label out of range": (_label(7), r"labels: not 300 class ids in \[-1, 3\)"),
    # the first id past the last class (3 classes: 0, 1, 2), and the first below "unlabelled" (-1)
    "label at the class count": (_label(3), r"labels: not 300 class ids in \[-1, 3\)"),
    "label below unlabelled": (_label(-2), r"labels: not 300 class ids in \[-1, 3\)"),
}


@pytest.fixture
def one_part(tmp_path):
    from jaxgcn.distributed import save_partitions

    host = datasets.prepare(datasets.synthetic(300, n_classes=3, n_features=6, seed=0), on_device=False)
    save_partitions(tmp_path / "p", host.data, 1, info=host.info)
    return tmp_path / "p"


def _train_on(directory, capsys):
    code = run_main(["train", "--dataset", f"partitioned:{directory}", "--shard-graph", "--devices", "1",
                     "--epochs", "2", "--quiet"])
    err = unwrap(capsys.readouterr().err)  # one message (wrapped into short lines when long)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("case", sorted(META_CASES))
def test_a_partition_record_that_is_not_one_is_refused_in_one_line(one_part, capsys, case):
    edit, message = META_CASES[case]
    meta_path = one_part / "partitions.json"
    meta_path.write_text(json.dumps(edit(json.loads(meta_path.read_text()))))
    assert re.search(message + r".*write the partitions again", _train_on(one_part, capsys))


def test_a_deeply_nested_partition_record_is_refused_in_one_line(one_part, capsys):
    (one_part / "partitions.json").write_text("[" * 100_000 + "]" * 100_000)
    assert "partitions.json: unreadable (RecursionError" in _train_on(one_part, capsys)


@pytest.mark.parametrize("case", sorted(ARRAY_CASES))
def test_a_crafted_part_with_a_recomputed_hash_is_refused_before_the_kernel(one_part, capsys, case):
    import hashlib
    from io import BytesIO

    edit, message = ARRAY_CASES[case]
    part, meta_path = one_part / "part-00000.npz", one_part / "partitions.json"
    with np.load(part) as z:
        arrays = {k: z[k] for k in z.files}
    edit(arrays)
    buf = BytesIO()
    np.savez(buf, **arrays)
    part.write_bytes(buf.getvalue())
    meta = json.loads(meta_path.read_text())
    meta["files"][0].update(bytes=len(buf.getvalue()), sha256=hashlib.sha256(buf.getvalue()).hexdigest())
    meta_path.write_text(json.dumps(meta))
    assert re.search(r"part-00000.npz " + message, _train_on(one_part, capsys))
