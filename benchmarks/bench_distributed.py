"""Sharded full-graph training (jaxgcn.distributed) on a 1M-node graph: 1, 2 and 4 devices, the
all-gather and the halo exchange.

    python benchmarks/bench_distributed.py                        # 1M nodes, both graph kinds
    python benchmarks/bench_distributed.py --nodes 100000 --kinds geometric --epochs 3

Devices are forced CPU devices here (``--xla_force_host_platform_device_count``), all sharing this
machine's cores and memory, so the per-epoch time shows the cost of the sharded program (the
exchange, the per-device kernels), not a speed-up: on P real accelerators each device would run its
1/P of the work in parallel. What carries over is the memory each device holds, which the script
reports per device:

- ``resident``: the bytes of the arrays living on one device (its row block of the adjacency, its
  features, labels and masks, the replicated params and Adam state), from ``jax.live_arrays()``;
- ``program``: the compiled epoch's arguments, outputs and temporaries per device (XLA's
  ``memory_analysis`` of the SPMD program): what a GPU would need on top of nothing else;
- ``estimate``: :func:`jaxgcn.host.memory.estimate_sharded` for the same layout;
- ``received``: node rows one device receives per propagation (P * L for the all-gather,
  L + P * H for the halo), and the fraction of edges that cross a block border.

Two graphs, generated once (1M nodes, average degree 10, 100 features, 47 classes, ids shuffled,
then renumbered by reverse Cuthill-McKee as ``jaxgcn train`` does from 100k nodes):

- ``sbm``: the stochastic block model of ``jaxgcn.datasets.synthetic``: edges between random nodes,
  no locality any numbering can find (the halo is as large as the all-gather);
- ``geometric``: nodes on a 2-D grid, edges to nearby points, classes by region (like meshes, road
  or citation graphs with locality): after RCM few edges cross a border and the halo is small.

Each configuration runs in its own process (so the peak RSS is its own). Model: 2 layers, hidden
128, dropout 0.5, Adam; an epoch is a training step plus an evaluation forward; median of
--epochs epochs after a warm-up epoch.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def generate(kind: str, n: int, path: Path, seed: int = 0) -> dict:
    import numpy as np

    from jaxgcn.datasets import synthetic
    from jaxgcn.datasets.splits import planetoid_split

    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    if kind == "sbm":
        raw = synthetic(n, n_classes=47, n_features=100, avg_degree=10.0, homophily=0.8, signal=0.5, seed=seed)
        src, dst, features, labels, splits = raw.senders, raw.receivers, raw.features, raw.labels, raw.splits
    else:
        side = int(np.ceil(np.sqrt(n)))
        i, j = np.divmod(np.arange(n), side)
        m = n * 5  # average degree 10 after symmetrizing
        src = rng.integers(0, n, m)
        di, dj = rng.integers(-3, 4, m), rng.integers(-3, 4, m)
        ti, tj = np.clip(i[src] + di, 0, (n - 1) // side), np.clip(j[src] + dj, 0, side - 1)
        dst = np.minimum(ti * side + tj, n - 1)
        centers = rng.random((47, 2)) * side
        pos = np.stack([i, j], axis=1).astype(np.float32)
        labels = np.empty(n, np.int32)
        for lo in range(0, n, 200_000):  # nearest centre = region class
            d = ((pos[lo:lo + 200_000, None, :] - centers[None]) ** 2).sum(-1)
            labels[lo:lo + 200_000] = d.argmin(1)
        means = rng.standard_normal((47, 100)).astype(np.float32)
        features = 0.5 * means[labels] + rng.standard_normal((n, 100), dtype=np.float32)
        splits = planetoid_split(labels, per_class=20, n_val=500, n_test=1000, seed=seed)
    perm = rng.permutation(n)  # shuffle the ids: the input carries no locality of its own
    new = np.empty(n, np.int64)
    new[perm] = np.arange(n)
    np.savez(path, senders=new[src], receivers=new[dst], features=features[perm], labels=labels[perm],
             **{k: new[np.asarray(v)] for k, v in splits.items()})
    return {"generate_s": time.perf_counter() - start, "input_edges": int(len(src))}


def worker(args: argparse.Namespace) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxgcn import distributed
    from jaxgcn.datasets import RawGraph, prepare
    from jaxgcn.host.memory import estimate_sharded
    from jaxgcn.core.models import Execution, GCNConfig
    from jaxgcn.train import TrainConfig, compile

    n_parts = args.devices
    assert len(jax.devices()) == n_parts
    with np.load(args.graph) as z:
        raw = RawGraph("bench", z["senders"], z["receivers"], z["features"], z["labels"],
                       {k: z[k] for k in ("train", "val", "test")})
    start = time.perf_counter()
    host = prepare(raw, feature_norm="none", reorder="rcm", on_device=False)
    del raw
    stats = distributed.partition_stats(host.data.graph, n_parts)
    mesh = distributed.node_mesh(n_parts)
    sharded = distributed.shard_data(host.data, mesh, exchange=args.exchange)
    jax.block_until_ready(sharded.data)
    prep_s = time.perf_counter() - start
    rows = stats["halo_rows"] if args.exchange == "halo" else stats["all_gather_rows"]
    model_config, execution = GCNConfig(hidden=128), Execution(aggregate_first=2 * 100 < 3 * 128)
    total = 1 + args.epochs
    config = TrainConfig(epochs=total, early_stopping=None)
    runner = distributed.make_sharded_runner(model_config, config, 100, host.n_classes, mesh, execution)
    key = jax.random.key(0)
    runs = jax.tree.map(np.asarray, runner.inputs())
    programs = compile(("bench", args.exchange), runner, (key, None, runs), sharded.data)  # init, run_until, evaluate
    compile_s = programs.compile_seconds
    state, compiled = programs.init(key, None, runs), programs.run_until
    mem = compiled.memory_analysis()
    program = (mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
               - mem.alias_size_in_bytes) if mem is not None else float("nan")
    state = compiled(state, sharded.data, runs, jnp.int32(1))  # warm-up epoch
    jax.block_until_ready(state.epoch)
    times = []
    for epoch in range(1, total):
        t = time.perf_counter()
        state = compiled(state, sharded.data, runs, jnp.int32(epoch + 1))
        jax.block_until_ready(state.epoch)
        times.append(time.perf_counter() - t)
    per_device = {d.id: 0 for d in mesh.devices.flat}
    for a in jax.live_arrays():
        for shard in a.addressable_shards:
            per_device[shard.device.id] = per_device.get(shard.device.id, 0) + shard.data.nbytes
    est = estimate_sharded(host.info["n_nodes"], host.data.graph.n_edges, 100, host.n_classes, parts=n_parts,
                           exchange_rows=rows, hidden=128)
    return {"devices": n_parts, "exchange": args.exchange, "prep_s": prep_s, "compile_s": compile_s,
            "epoch_s": statistics.median(times), "epochs": times, "resident_gb": max(per_device.values()) / 1e9,
            "program_gb": program / 1e9, "estimate_gb": (est.total - est.parts["runtime"]) / 1e9,
            "received_rows": rows, "cut_fraction": stats["cut_fraction"],
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
            "val_acc": float(np.asarray(state.history["val_acc"])[total - 1])}


def papers100m_table(hidden: int = 256) -> None:
    """The worked estimate in docs/distributed.md: ogbn-papers100M (111,059,956 nodes, 1,615,685,872 directed
    edges, 128 dense features, 172 classes), 2 layers, per device for P devices."""
    from jaxgcn.host.memory import GiB, estimate_sharded

    n, e_directed, f, c = 111_059_956, 1_615_685_872, 128, 172
    e = 2 * e_directed  # symmetrized (an upper bound: reciprocal citations merge)
    print(f"# ogbn-papers100M, {n:,} nodes, {e:,} adjacency entries after symmetrizing, hidden {hidden}")
    print(f"# host, whole graph: int64 edge list {2 * e_directed * 8 / 1e9:.1f} GB raw, {2 * e * 8 / 1e9:.1f} GB "
          f"symmetrized; features {n * f * 4 / 1e9:.1f} GB float32")
    print("| devices P | nodes per device | features | adjacency block | exchange (all-gather) | activations "
          "| total, all-gather | total, halo receiving 10% of the nodes |")
    print("|---|---|---|---|---|---|---|---|")
    for parts in (8, 16, 32, 64, 128):
        local = -(-n // parts)
        ag = estimate_sharded(n, e, f, c, parts=parts, hidden=hidden)
        halo = estimate_sharded(n, e, f, c, parts=parts, hidden=hidden, exchange_rows=local + n // 10)
        gb = lambda b: f"{b / GiB:.1f} GiB"  # noqa: E731
        print(f"| {parts} | {local:,} | {gb(ag.parts['features'])} | {gb(ag.parts['adjacency'])} | "
              f"{gb(ag.parts['exchange'])} | {gb(ag.parts['activations'])} | {gb(ag.total - ag.parts['runtime'])} | "
              f"{gb(halo.total - halo.parts['runtime'])} |")


def ordering_stats(path: Path, parts: list[int]) -> str:
    """What the RCM renumbering does to the partition: cut and halo rows with the input's (shuffled)
    ids and after RCM, for each device count."""
    import numpy as np

    from jaxgcn.datasets import RawGraph, prepare
    from jaxgcn.distributed import partition_stats

    with np.load(path) as z:
        raw = RawGraph("bench", z["senders"], z["receivers"], z["features"][:, :1], z["labels"],
                       {k: z[k] for k in ("train", "val", "test")})
    lines = []
    for reorder in ("none", "rcm"):
        graph = prepare(raw, feature_norm="none", reorder=reorder, on_device=False).data.graph
        for p in parts:
            st = partition_stats(graph, p)
            lines.append(f"<!-- ids {reorder:>4}, P={p}: {100 * st['cut_fraction']:.1f}% of edges cross a border; "
                         f"halo receives {st['halo_rows']:,} rows, all-gather {st['all_gather_rows']:,} -->")
    return "\n".join(lines)


def run(cmd: list[str], env: dict) -> dict:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        return {"error": tail[0] if proc.returncode not in (-9, 137) else "out of memory"}
    return json.loads(lines[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--kinds", default="sbm,geometric", help="graph kinds (sbm, geometric)")
    ap.add_argument("--devices", default="1,2,4", help="forced CPU device counts")
    ap.add_argument("--exchanges", default="all_gather,halo")
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs after one warm-up epoch")
    ap.add_argument("--papers100m", action="store_true", help="print the per-device estimate for "
                    "ogbn-papers100M (docs/distributed.md's table) and exit")
    ap.add_argument("--hidden", type=int, default=256, help="with --papers100m")
    ap.add_argument("--stats-only", action="store_true", help="only the partition statistics with and without "
                    "RCM (no training)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--graph", help=argparse.SUPPRESS)
    ap.add_argument("--exchange", help=argparse.SUPPRESS)
    args, _ = ap.parse_known_args()
    if args.papers100m:
        papers100m_table(args.hidden)
        return 0
    if args.worker:
        args.devices = int(args.devices)
        print(json.dumps(worker(args)))
        return 0
    print(f"# {args.nodes:,} nodes, devices {args.devices}, exchanges {args.exchanges}; "
          f"{os.cpu_count()} CPU cores shared by all forced devices")
    print("| graph | devices | exchange | cut % | rows received | prep s | compile s | s/epoch | "
          "resident GB/device | program GB/device | estimate GB/device | peak RSS GB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds.split(","):
            path = Path(tmp) / f"{kind}.npz"
            info = generate(kind, args.nodes, path)
            print(f"<!-- {kind}: generated {info['input_edges']:,} raw edges in {info['generate_s']:.1f} s -->",
                  flush=True)
            print(ordering_stats(path, [int(d) for d in args.devices.split(",") if int(d) > 1]), flush=True)
            if args.stats_only:
                continue
            for n_dev in (int(d) for d in args.devices.split(",")):
                for exchange in args.exchanges.split(","):
                    if n_dev == 1 and exchange == "halo":
                        continue  # one device exchanges nothing
                    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={n_dev}",
                           "JAX_PLATFORMS": "cpu"}
                    res = run([sys.executable, __file__, "--worker", "--graph", str(path), "--devices", str(n_dev),
                               "--exchange", exchange, "--epochs", str(args.epochs)], env)
                    if "error" in res:
                        print(f"| {kind} | {n_dev} | {exchange} | {res['error']} |", flush=True)
                        continue
                    print(f"| {kind} | {n_dev} | {exchange} | {100 * res['cut_fraction']:.1f} | "
                          f"{res['received_rows']:,} | {res['prep_s']:.1f} | {res['compile_s']:.1f} | "
                          f"{res['epoch_s']:.2f} | {res['resident_gb']:.3f} | {res['program_gb']:.3f} | "
                          f"{res['estimate_gb']:.3f} | {res['peak_rss_gb']:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
