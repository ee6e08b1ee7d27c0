"""Full-batch GCN training on large synthetic graphs: jaxgcn against PyTorch Geometric.

    python benchmarks/bench_scale.py                                    # 100k, 1M, 2.45M nodes
    python benchmarks/bench_scale.py --sizes 100000 --epochs 3
    python benchmarks/bench_scale.py --pyg-python PATH
    python benchmarks/bench_scale.py --sizes 1000000 --epochs 4 --pyg-python PATH --record docs/figures.json

For each size the same graph (synthetic SBM, average degree 25, 100 features, 47 classes; the
2,449,029-node one is an ogbn-products-sized stand-in) is generated once and saved as the RAW edge
list (duplicates, one-way edges) plus features and labels. Each implementation then runs in its own
process, so peak RSS is its own, and prints:

- host preprocessing seconds (cleaning, symmetrizing, normalizing, moving to the device),
- compile seconds (jaxgcn; PyG compiles nothing),
- median seconds per epoch over --epochs epochs after a warm-up epoch: a training step (forward,
  backward, Adam) plus an evaluation forward, as jaxgcn trains and as PyG's examples/gcn.py loop
  does (jaxgcn epochs are timed in calls of --chunk epochs, as fit runs them),
- peak RSS of the process, and for jaxgcn the memory estimate printed before training.

Model: 2 layers, hidden 128, dropout 0.5, Adam lr 0.01. PyG (when --pyg-python points at a Python
with torch_geometric, and only for sizes in --pyg-sizes) runs GCNConv twice: the default
edge_index path (gcn_norm + gather/scatter every forward) and its sparse-CSR path (normalized
adjacency precomputed once as torch.sparse_csr_tensor, GCNConv(normalize=False)). A PyG run that
exceeds --pyg-memory-limit is reported as out of memory instead of swapping the machine. Both use
--threads CPU threads (default: all cores).
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

from figure_record import add_record_arguments, count_name, figure, record

HERE = Path(__file__).resolve().parent
DEFAULT_SIZES = "100000,1000000,2449029"


def generate(n: int, path: Path, seed: int = 0) -> dict:
    import numpy as np

    from jaxgcn.datasets import synthetic

    start = time.perf_counter()
    raw = synthetic(n, n_classes=47, n_features=100, avg_degree=25.0, homophily=0.8, signal=0.5, seed=seed)
    seconds = time.perf_counter() - start
    np.savez(path, senders=raw.senders.astype(np.int64), receivers=raw.receivers.astype(np.int64),
             features=raw.features, labels=raw.labels, train=raw.splits["train"], val=raw.splits["val"],
             test=raw.splits["test"])
    return {"generate_s": seconds, "input_edges": int(raw.senders.size)}


def jax_worker(args: argparse.Namespace) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxgcn.core.data import with_focus
    from jaxgcn.datasets import RawGraph, prepare
    from jaxgcn.host.memory import estimate
    from jaxgcn.core.models import Execution, GCNConfig
    from jaxgcn.plan import ops_for
    from jaxgcn.train import TrainConfig, compile_runner

    with np.load(args.graph) as z:
        raw = RawGraph("synthetic", z["senders"], z["receivers"], z["features"], z["labels"],
                       {k: z[k] for k in ("train", "val", "test")})
    start = time.perf_counter()
    prepared = prepare(raw, feature_norm="none", backend=args.backend, reorder=args.reorder)
    jax.block_until_ready(prepared.data)
    host_s = time.perf_counter() - start
    del raw
    n_features, n_classes = 100, prepared.n_classes
    model_config = GCNConfig(hidden=128)
    execution = Execution(backend=prepared.backend, chunk_edges=args.chunk_edges,
                          aggregate_first=2 * n_features < 3 * 128)
    total = 1 + args.epochs
    config = TrainConfig(epochs=total, early_stopping=None)
    graph = prepared.data.graph
    est = estimate(prepared.info["n_nodes"], graph.n_edges, n_features, n_classes, hidden=128,
                   backend=prepared.backend, chunk_edges=args.chunk_edges,
                   symmetric=graph.csr is None or graph.csr.symmetric)
    # as fit trains it (the loss's nodes, their rows: what the planned ops precompute)
    data = with_focus(prepared.data, model_config.layers, ops_for(execution, graph).prepare)
    compiled = compile_runner(model_config, config, data, n_classes, execution)
    state = compiled.init(jax.random.key(0), data)
    state = compiled.run_until(state, data, jnp.int32(1))  # warm-up epoch, not timed
    jax.block_until_ready(state.epoch)
    times, epoch = [], 1
    while epoch < total:  # timed in chunks of --chunk epochs, as fit runs them between progress lines
        stop = min(epoch + args.chunk, total)
        t = time.perf_counter()
        state = compiled.run_until(state, data, jnp.int32(stop))
        jax.block_until_ready(state.epoch)
        times.append((time.perf_counter() - t) / (stop - epoch))
        epoch = stop
    return {"impl": f"jaxgcn {prepared.backend}", "host_s": host_s, "compile_s": compiled.compile_seconds,
            "epoch_s": statistics.median(times), "epochs": times, "peak_rss_gb": _peak_rss_gb(),
            "estimate_gb": est.total / 2**30, "val_acc": float(np.asarray(state.history["val_acc"])[total - 1]),
            "edges": graph.n_edges}


def _peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def run_worker(cmd: list[str], limit_gb: float | None = None, env: dict | None = None) -> dict:
    def limit() -> None:
        if limit_gb:
            resource.setrlimit(resource.RLIMIT_AS, (int(limit_gb * 2**30), int(limit_gb * 2**30)))

    proc = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=limit, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        oom = "memory" in tail[0].lower() or "alloc" in tail[0].lower() or proc.returncode in (-9, 137)
        return {"error": "out of memory" + (f" (limit {limit_gb:g} GiB)" if limit_gb else "") if oom else tail[0]}
    return json.loads(lines[-1])


def row(size: int, res: dict) -> str:
    if "error" in res:
        return f"| {size:>9,} | {res.get('impl', ''):<22} | {res['error']} |"
    compile_s = f"{res['compile_s']:.1f}" if "compile_s" in res else "-"
    est = f"{res['estimate_gb']:.2f}" if "estimate_gb" in res else "-"
    return (f"| {size:>9,} | {res['impl']:<22} | {res['host_s']:7.1f} | {compile_s:>7} | {res['epoch_s']:8.2f} | "
            f"{res['peak_rss_gb']:7.2f} | {est:>8} |")


def size_figures(size: int, ours: dict, pyg: dict[str, dict], limit_gb: float) -> tuple[dict, tuple[str, ...]]:
    """The figures of one size for ``--record`` (jaxgcn's epoch and peak RSS, PyG's epochs and the ratio
    to jaxgcn's, or the memory limit a PyG path ran out of) and the keys this run disproved."""
    key, figures, drop = f"scale.{count_name(size)}", {}, []
    if "error" not in ours:
        figures |= {f"{key}.epoch_s": figure(ours["epoch_s"], "s", 2), f"{key}.peak_rss_gb":
                    figure(ours["peak_rss_gb"], "GB", 2)}
    for path_kind, res in pyg.items():
        name = f"{key}.pyg_{path_kind}"
        if "error" not in res:
            figures[f"{name}_s"] = figure(res["epoch_s"], "s", 2)
            if "error" not in ours:
                figures[f"{name}_ratio"] = figure(res["epoch_s"] / ours["epoch_s"], "×", 1)
            drop.append(f"{name}_oom_gib")
        elif res["error"].startswith("out of memory"):
            figures[f"{name}_oom_gib"] = figure(limit_gb, "GiB", 0)
            drop += [f"{name}_s", f"{name}_ratio"]
    return figures, tuple(drop)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help=f"node counts (default {DEFAULT_SIZES})")
    ap.add_argument("--epochs", type=int, default=6, help="timed epochs, after one warm-up epoch")
    ap.add_argument("--chunk", type=int, default=2, help="jaxgcn epochs per timed call (median per epoch)")
    ap.add_argument("--reorder", default="rcm", help="jaxgcn node renumbering: rcm (as the CLI does from "
                    "100k nodes) or none")
    ap.add_argument("--backend", default="auto", help="jaxgcn backend (auto = csr where the kernel builds)")
    ap.add_argument("--chunk-edges", type=int, default=None, help="with --backend segment")
    ap.add_argument("--segment-sizes", default="100000",
                    help="sizes at which jaxgcn's pure-XLA segment backend runs too (its [edges, width] message "
                         "buffers do not fit this machine at 1M nodes and degree 25)")
    ap.add_argument("--pyg-python", default=None, help="a Python with torch_geometric (skipped when absent)")
    ap.add_argument("--pyg-sizes", default="100000,1000000")
    ap.add_argument("--pyg-memory-limit", type=float, default=20.0, help="GiB of address space per PyG run")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--worker", choices=("jax",), help=argparse.SUPPRESS)
    ap.add_argument("--graph", help=argparse.SUPPRESS)
    add_record_arguments(ap)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(jax_worker(args)))
        return 0

    sizes = [int(s) for s in args.sizes.split(",")]
    pyg_sizes = {int(s) for s in args.pyg_sizes.split(",")} if args.pyg_python else set()
    if args.pyg_python and not Path(args.pyg_python).exists():
        print(f"PyG columns skipped: {args.pyg_python} does not exist")
        pyg_sizes = set()
    print(f"{args.threads} threads, {args.epochs} epochs per run; seconds; peak RSS and estimate in GB")
    print("| nodes | implementation | host prep s | compile s | s / epoch | peak RSS | estimate |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    figures, drop = {}, ()
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = Path(tmp) / f"graph{n}.npz"
            info = generate(n, path)
            print(f"<!-- {n:,} nodes: {info['input_edges']:,} raw edge draws, generated in "
                  f"{info['generate_s']:.1f} s -->", flush=True)
            segment_sizes = {int(s) for s in args.segment_sizes.split(",") if s}
            backends = [args.backend] + (["segment"] if n in segment_sizes else [])
            ours, pyg = {}, {}
            for backend in backends:
                cmd = [sys.executable, __file__, "--worker", "jax", "--graph", str(path), "--epochs", str(args.epochs),
                       "--backend", backend, "--chunk", str(args.chunk), "--reorder", args.reorder]
                if args.chunk_edges and backend == "segment":
                    cmd += ["--chunk-edges", str(args.chunk_edges)]
                res = run_worker(cmd)
                res.setdefault("impl", f"jaxgcn {backend}")
                if "impl" in res and args.reorder != "none" and "error" not in res:
                    res["impl"] += f" +{args.reorder}"
                ours = ours or res  # the --backend row (the segment row is a comparison)
                print(row(n, res), flush=True)
            if n in pyg_sizes:
                for path_kind in ("edge_index", "csr"):
                    cmd = [args.pyg_python, str(HERE / "pyg_gcn_scale.py"), "--graph", str(path), "--epochs",
                           str(args.epochs), "--adjacency", path_kind, "--threads", str(args.threads)]
                    res = run_worker(cmd, args.pyg_memory_limit)
                    res.setdefault("impl", f"PyG GCNConv {path_kind}")
                    pyg[path_kind] = res
                    print(row(n, res), flush=True)
            size_figs, size_drop = size_figures(n, ours, pyg, args.pyg_memory_limit)
            figures, drop = figures | size_figs, drop + size_drop
    record(args.record, figures, append=args.record_append, drop=drop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
