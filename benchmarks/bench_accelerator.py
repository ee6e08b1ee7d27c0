"""jaxgcn on whatever device JAX sees (a TPU, a GPU, or the CPU for the side-by-side figures): the
targets of issue 45, each part in its own process (one process holds a TPU at a time, and each
part's peak device memory is then its own).

    python benchmarks/bench_accelerator.py                       # every part
    python benchmarks/bench_accelerator.py --parts cora,seeds    # some
    JAX_PLATFORMS=cpu python benchmarks/bench_accelerator.py --parts cora,seeds,synthetic   # the CPU side
    python benchmarks/bench_accelerator.py --record docs/figures.json   # + the figures the docs quote

Parts:

- ``cora``: one run's steady epoch (200 epochs, no early stopping, timed after a warm-up call) on the
  backend ``auto`` picks on this device;
- ``seeds``: ``jaxgcn train --dataset D --seeds 100`` (in this process, ``--json``): the training
  seconds, the runs per program and the mean test accuracy, for each ``--precisions`` value, on Cora and
  CiteSeer;
- ``synthetic``: the 1M-node, 25M-nonzero synthetic graph (``--dataset synthetic --nodes 1000000
  --avg-degree 25``, hidden 16), seconds per epoch;
- ``products``: an ogbn-products-sized graph (2,449,029 nodes, about 124M nonzeros, 100 features, 47
  classes) whose degrees are skewed (edge sources drawn with density ~ 1/sqrt(rank), ids shuffled),
  hidden 128: seconds per epoch, the plan's memory estimate and the device's peak (``memory_stats``);
- ``crossover``: one propagation forward and backward, dense Â against the neighbour lists, 16
  columns, on graphs of growing size: where ``auto``'s dense limit should be;
- ``features``: Cora's first layer for a batch of R runs, its sparse features laid out dense (each run
  drops its own dense copy) against the feature lists (:mod:`jaxgcn.core.feature_lists`: gathers of
  per-run dropped values), milliseconds per epoch of R seeds: where ``plan.LISTS_MIN_RUNS`` should be;
- ``listsum``: Cora's first layer on the feature lists for 100 runs (hidden 16), forward and weight
  gradient of per-run dropped values: XLA's gathers against the Pallas kernel of a TPU
  (:func:`jaxgcn.core.pallas_gather.runs_sum`; off a TPU only XLA's), milliseconds, and their difference;
- ``bf16``: what bfloat16 storage costs in accuracy: ``jaxgcn train --dataset D --seeds 100 --backend
  gather`` on Cora and CiteSeer with float32 storage and with bfloat16 storage of the input features and
  of every table a propagation gathers (forward and gradient), the sums in float32. The stored values
  are rounded to bfloat16 and the arithmetic stays float32, which is what bfloat16 storage with float32
  accumulation computes, on any device (its time on the chip: ``rowsum`` and
  ``benchmarks/bench_pallas_gather.py --bf16``);
- ``rowsum``: the neighbour-list row sum of 1M nodes / 25M nonzeros / 16 columns: XLA's gather
  against the Pallas kernel (:mod:`jaxgcn.core.pallas_gather`).

Every figure names the device (``jax.devices()[0].device_kind``) and the JAX version.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from figure_record import add_record_arguments, figure, record
from timing import median_seconds

PARTS = ("cora", "seeds", "synthetic", "products", "crossover", "features", "listsum", "bf16", "rowsum")


def device() -> dict:
    import jax

    d = jax.devices()[0]
    return {"device": d.device_kind, "platform": d.platform, "jax": jax.__version__}


def peak_bytes() -> int | None:
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def skewed(n: int, avg_degree: float, seed: int = 0):
    """A raw graph of ``n`` nodes, about ``n * avg_degree / 2`` input edges whose sources are skewed
    (rank r drawn with density ~ 1/sqrt(r): the busiest node has tens of thousands of neighbours, as
    ogbn-products' do), 100 features and 47 classes carrying a class signal (the synthetic SBM's)."""
    import numpy as np

    from jaxgcn.datasets import synthetic

    base = synthetic(n, n_classes=47, n_features=100, avg_degree=1.0, seed=seed)
    rng = np.random.default_rng(seed + 1)
    m = int(n * avg_degree / 2)
    perm = rng.permutation(n)
    src = perm[np.minimum((n * rng.random(m) ** 2).astype(np.int64), n - 1)]
    dst = rng.integers(0, n, m)
    return base._replace(senders=src, receivers=dst)


def epoch_worker(graph: str, hidden: int, epochs: int) -> dict:
    """Seconds per epoch of one run on ``graph`` (``cora``, ``synthetic:N:DEG``, ``skewed:N:DEG``), the
    plan's memory estimate and the device's peak bytes, with what that peak is made of: the device's
    bytes in use once the data is prepared (``data_gib``) and the training loop's compiled memory analysis
    (``program_*_gib``: its temporaries, arguments, outputs and aliased bytes, as XLA sized them)."""
    import jax
    import jax.numpy as jnp

    from jaxgcn import plan
    from jaxgcn.core.data import with_focus
    from jaxgcn.core.models import Execution, GCNConfig
    from jaxgcn.datasets import load_dataset, prepare, synthetic
    from jaxgcn.train import TrainConfig, compile_runner

    kind, *size = graph.split(":")
    if kind == "cora":
        raw = load_dataset("cora")
    elif kind == "synthetic":
        raw = synthetic(int(size[0]), avg_degree=float(size[1]))
    else:
        raw = skewed(int(size[0]), float(size[1]))
    start = time.perf_counter()
    prepared = prepare(raw, feature_norm="none" if kind == "skewed" else "row")
    jax.block_until_ready(prepared.data)
    host_s = time.perf_counter() - start
    data_bytes = (jax.devices()[0].memory_stats() or {}).get("bytes_in_use", 0)
    del raw
    model_config, config = GCNConfig(hidden=hidden), TrainConfig(epochs=1 + epochs, early_stopping=None)
    chosen = plan.resolve(Execution(), prepared.data, model_config, prepared.n_classes, aggregate="auto")
    data = with_focus(prepared.data, model_config.layers, chosen.ops.prepare)
    compiled = compile_runner(model_config, config, data, prepared.n_classes, chosen)
    analysis = compiled.run_until.program.memory_analysis()
    program = {f"program_{k}_gib": getattr(analysis, f"{k}_size_in_bytes", 0) / 2**30
               for k in ("temp", "argument", "output", "alias")} if analysis is not None else {}
    state = compiled.run_until(compiled.init(jax.random.key(0), data), data, jnp.int32(1))  # warm-up
    jax.block_until_ready(state.epoch)
    start = time.perf_counter()
    state = compiled.run_until(state, data, jnp.int32(1 + epochs))
    jax.block_until_ready(state.epoch)
    return {**device(), "graph": graph, "backend": chosen.backend, "host_s": host_s,
            "compile_s": compiled.compile_seconds, "epoch_ms": (time.perf_counter() - start) / epochs * 1e3,
            "estimate_gib": chosen.memory.total / 2**30, "peak_gib": (peak_bytes() or 0) / 2**30,
            "edges": prepared.data.graph.n_edges, "precision": getattr(chosen.execution, "precision", None),
            "data_gib": data_bytes / 2**30, **program}


def store_bfloat16() -> None:
    """From here on in this process, the input features and every table a ``gather`` propagation reads
    (its input, and its gradient's) are stored as bfloat16 values, the arithmetic float32."""
    import jax.numpy as jnp
    import numpy as np

    from jaxgcn.core import gather
    from jaxgcn.datasets import loading

    def rounded(x):  # stored as bfloat16; the gradient's table is rounded by the conversion's transpose
        return x.astype(jnp.bfloat16).astype(x.dtype)

    propagate, rows_product, normalize = gather.propagate, gather.rows_product, loading.normalize_features
    gather.propagate = lambda lists, x, **kw: propagate(lists, rounded(x), **kw)
    gather.rows_product = lambda lists, x, **kw: rows_product(lists, rounded(x), **kw)

    def normalized(*args, **kw):
        feats = normalize(*args, **kw)
        if hasattr(feats, "tocsr"):
            feats = feats.tocsr(copy=True)
            feats.data = np.asarray(rounded(jnp.asarray(feats.data)))
            return feats
        return np.asarray(rounded(jnp.asarray(feats)))

    loading.normalize_features = normalized


def seeds_worker(dataset: str, precision: str | None, seeds: int, storage: str | None = None) -> dict:
    """``jaxgcn train --dataset D --seeds N [--precision P] --json F`` in this process; ``storage``
    float32 or bfloat16 (:func:`store_bfloat16`): ``--backend gather`` too."""
    from jaxgcn.cli import main

    if storage == "bfloat16":
        store_bfloat16()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        argv = ["train", "--dataset", dataset, "--seeds", str(seeds), "--json", str(out)]
        if precision:
            argv += ["--precision", precision]
        if storage:
            argv += ["--backend", "gather"]
        if main(argv) != 0:
            raise SystemExit(f"{argv} failed")
        result = json.loads(out.read_text())
    return {**device(), "dataset": dataset, "precision": result.get("precision", precision),
            "backend": result["backend"], "train_s": result["train_seconds"], "compile_s": result["compile_seconds"],
            "test_mean": result["test_acc_mean"], "test_std": result["test_acc_std"], "storage": storage}


def crossover_worker(sizes: list[int], degree: float) -> dict:
    """Milliseconds of one propagation forward + backward (16 columns): dense Â on the MXU against the
    neighbour lists, for synthetic graphs of each size."""
    import jax
    import jax.numpy as jnp

    from jaxgcn.core.graph import from_edges, gcn_norm, with_dense, with_lists
    from jaxgcn.core.propagate import propagate
    from jaxgcn.datasets import synthetic

    out = {**device(), "degree": degree}
    for n in sizes:
        raw = synthetic(n, avg_degree=degree)
        graph = gcn_norm(from_edges(raw.senders, raw.receivers, n_nodes=n)[0])
        x = jax.random.normal(jax.random.key(0), (n, 16))
        for backend, laid in (("dense", with_dense), ("gather", with_lists)):
            g = jax.device_put(laid(graph))
            step = jax.jit(jax.grad(lambda x, g, b=backend: jnp.sum(propagate(g, x, backend=b) ** 2)))
            out[f"{backend}_{n}_ms"] = median_seconds(step, x, g) * 1e3
    return out


def features_worker(runs: list[int], epochs: int) -> dict:
    """Milliseconds per epoch of R Cora seeds (no early stopping) with the features dense and as lists."""
    from jaxgcn import plan
    from jaxgcn.batched import entries_for, fit_runs
    from jaxgcn.core.models import Execution, GCNConfig
    from jaxgcn.datasets import load_dataset, prepare
    from jaxgcn.train import TrainConfig

    raw = load_dataset("cora")
    out = {**device(), "epochs": epochs}
    for layout, prepared in (("dense", prepare(raw, runs=1)), ("lists", prepare(raw, runs=plan.LISTS_MIN_RUNS))):
        out[f"{layout}_type"] = type(prepared.data.x).__name__
        for r in runs:
            config = TrainConfig(epochs=epochs, early_stopping=None)
            chosen = plan.resolve(Execution(), prepared.data, GCNConfig(), prepared.n_classes, n_runs=r)
            res = fit_runs(prepared.data, prepared.n_classes, entries_for(list(range(r)), config=config),
                           execution=chosen)
            out[f"{layout}_{r}_ms"] = res.train_seconds / epochs * 1e3
            out[f"{layout}_{r}_compile_s"] = res.compile_seconds
    return out


def listsum_worker(runs: int, hidden: int) -> dict:
    """Milliseconds of the feature lists' product and weight gradient of ``runs`` Cora runs: XLA's gathers
    (:func:`jaxgcn.core.feature_lists.matmul_runs`) and, on a TPU, the Pallas kernel's sums
    (:func:`jaxgcn.core.ops.tpu_matmul_runs`), with the largest difference of the two."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxgcn.core import feature_lists, ops
    from jaxgcn.datasets import load_dataset
    from jaxgcn.datasets.loading import normalize_features

    raw = load_dataset("cora")
    x = jax.device_put(feature_lists.from_scipy(normalize_features(raw.features, "row", None)))
    w = jax.random.normal(jax.random.key(0), (x.shape[1], runs, hidden))
    values = jax.random.normal(jax.random.key(1), (x.nse, runs))
    g = jax.random.normal(jax.random.key(2), (x.shape[0], runs, hidden))

    def step(product):
        return jax.jit(jax.value_and_grad(lambda w: jnp.sum(product(x, values, w) * g)))

    out = {**device(), "runs": runs, "hidden": hidden}
    out["xla_ms"] = 1e3 * median_seconds(step(feature_lists.matmul_runs), w)
    if jax.default_backend() == "tpu":
        out["pallas_ms"] = 1e3 * median_seconds(step(ops.tpu_matmul_runs), w)
        (_, want), (_, got) = step(feature_lists.matmul_runs)(w), step(ops.tpu_matmul_runs)(w)
        out["pallas_max_rel_err"] = float(np.abs(np.asarray(got - want)).max() / np.abs(np.asarray(want)).max())
    return out


def rowsum_worker(n: int, degree: int, width: int) -> dict:
    """Seconds of the neighbour-list row sum of ``n`` rows of ``degree`` neighbours each (one bucket,
    ``width`` columns): XLA's gather against the Pallas kernel."""
    import jax
    import numpy as np

    from jaxgcn.core import gather, pallas_gather

    rng = np.random.default_rng(0)
    cols = jax.device_put(rng.integers(0, n, (n, degree)).astype(np.int32))
    weights = jax.device_put(rng.random((n, degree), np.float32))
    x = jax.random.normal(jax.random.key(0), (n, width))
    out = {**device(), "rows": n, "degree": degree, "width": width}
    out["xla_s"] = median_seconds(jax.jit(gather.row_sum), x, cols, weights)
    try:
        out["pallas_s"] = median_seconds(jax.jit(pallas_gather.row_sum), x, cols, weights)
        ref, got = jax.jit(gather.row_sum)(x, cols, weights), jax.jit(pallas_gather.row_sum)(x, cols, weights)
        out["pallas_max_err"] = float(abs(np.asarray(ref) - np.asarray(got)).max())
    except Exception as exc:  # a kernel that does not lower here is a figure too
        out["pallas_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return out


def worker(args: argparse.Namespace) -> dict:
    spec = json.loads(args.worker)
    name = spec.pop("part")
    return {"cora": epoch_worker, "epoch": epoch_worker, "seeds": seeds_worker, "crossover": crossover_worker,
            "features": features_worker, "listsum": listsum_worker, "rowsum": rowsum_worker}[name](**spec)


def run(spec: dict) -> dict:
    """One part in its own process; its last JSON line (or the error's last line)."""
    proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        return {"error": tail[0][:300], **spec}
    return json.loads(lines[-1])


def specs(args: argparse.Namespace) -> list[dict]:
    parts = args.parts.split(",")
    out = []
    if "cora" in parts:
        out.append({"part": "epoch", "graph": "cora", "hidden": 16, "epochs": 200})
    if "seeds" in parts:
        for dataset in ("cora", "citeseer"):
            for precision in (args.precisions.split(",") if args.precisions else [None]):
                out.append({"part": "seeds", "dataset": dataset, "precision": precision, "seeds": args.seeds})
    if "synthetic" in parts:
        out.append({"part": "epoch", "graph": "synthetic:1000000:25", "hidden": 16, "epochs": args.epochs})
    if "products" in parts:
        out.append({"part": "epoch", "graph": "skewed:2449029:51.5", "hidden": 128, "epochs": args.epochs})
    if "crossover" in parts:
        out.append({"part": "crossover", "sizes": [2708, 10000, 20000, 40000], "degree": 4.0})
    if "features" in parts:
        out.append({"part": "features", "runs": [1, 8, 32], "epochs": 100})
    if "listsum" in parts:
        out.append({"part": "listsum", "runs": 100, "hidden": 16})
    if "bf16" in parts:
        for dataset in ("cora", "citeseer"):
            for storage in ("float32", "bfloat16"):
                out.append({"part": "seeds", "dataset": dataset, "precision": None, "seeds": args.seeds,
                            "storage": storage})
    if "rowsum" in parts:
        out.append({"part": "rowsum", "n": 1_000_000, "degree": 25, "width": 16})
    return out


def figures_of(results: list[dict]) -> dict[str, dict]:
    """The record's keys: ``accel.<platform>.<what>``."""
    figs = {}
    for r in results:
        if "error" in r:
            continue
        p = f"accel.{r['platform']}"
        graph = r.get("graph")
        if graph == "cora":
            figs[f"{p}.cora_epoch_ms"] = figure(r["epoch_ms"], "ms", 2)
        elif graph and graph.startswith("synthetic"):
            figs[f"{p}.synthetic_1m_epoch_s"] = figure(r["epoch_ms"] / 1e3, "s", 3)
        elif graph:
            figs[f"{p}.products_epoch_s"] = figure(r["epoch_ms"] / 1e3, "s", 2)
            figs[f"{p}.products_estimate_gib"] = figure(r["estimate_gib"], "GiB", 2)
            figs[f"{p}.products_peak_gib"] = figure(r["peak_gib"], "GiB", 2)
        if graph and graph != "cora" and "program_temp_gib" in r:  # what the run holds: its data and the
            name = "synthetic_1m" if graph.startswith("synthetic") else "products"  # program's temporaries
            figs[f"{p}.{name}_held_gib"] = figure(r["data_gib"] + r["program_temp_gib"], "GiB", 2)
        elif "dataset" in r:
            tag = f"{r['dataset']}_100_{r['storage'] + '_storage' if r.get('storage') else r['precision'] or 'auto'}"
            figs[f"{p}.{tag}_train_s"] = figure(r["train_s"], "s", 2)
            figs[f"{p}.{tag}_test"] = figure(100 * r["test_mean"], "%", 2, std=100 * r["test_std"])
    return figs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    ap.add_argument("--seeds", type=int, default=100, help="runs of the seeds part (default: 100)")
    ap.add_argument("--precisions", default="", help="seeds part: comma-separated --precision values (default: "
                    "only the plan's)")
    ap.add_argument("--epochs", type=int, default=5, help="timed epochs of the large graphs (default: 5)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    add_record_arguments(ap)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args)), flush=True)
        return 0
    results = []
    for spec in specs(args):
        result = run(spec)
        results.append(result)
        print(json.dumps(result), flush=True)
    where = next((r for r in results if "device" in r), None)
    if where is not None:
        record(args.record, figures_of(results), append=args.record_append,
               machine=f"{where['device']} (JAX {where['jax']})")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
