"""Cora training speed with the paper's settings: compile time, steady-state epoch time, and the
wall time of a whole ``jaxgcn train`` process, against PyTorch Geometric measured in the same run.

    python benchmarks/bench_train.py                       # jaxgcn only
    python benchmarks/bench_train.py --pyg-python PATH   # + PyG reference
    python benchmarks/bench_train.py --record docs/figures.json   # + write the figures the docs quote

The PyG column runs benchmarks/pyg_gcn_cora.py with the given interpreter (a venv with torch and
torch_geometric; the project itself never depends on them). Figures are medians of --repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from figure_record import add_record_arguments, figure, record

HERE = Path(__file__).resolve().parent


def steady_state(dataset: str, repeats: int) -> dict[str, float]:
    """Compile seconds and median ms per epoch of the compiled run (200 epochs, no early stop)."""
    import jax
    import jax.numpy as jnp

    from jaxgcn.core.data import with_focus
    from jaxgcn.datasets import load_dataset, prepare
    from jaxgcn.core.models import Execution, GCNConfig
    from jaxgcn.plan import ops_for
    from jaxgcn.train import TrainConfig, compile_runner

    prepared = prepare(load_dataset(dataset))
    config, model_config = TrainConfig(early_stopping=None), GCNConfig()
    execution = Execution(backend=prepared.backend)
    # as fit trains it: each layer at the rows read (what the planned ops precompute)
    data = with_focus(prepared.data, model_config.layers, ops_for(execution, prepared.data.graph).prepare)
    compiled = compile_runner(model_config, config, data, prepared.n_classes, execution)
    per_epoch = []
    for rep in range(repeats + 1):
        state = compiled.init(jax.random.key(rep), data)
        jax.block_until_ready(state)
        start = time.perf_counter()
        state = compiled.run_until(state, data, jnp.int32(config.epochs))
        jax.block_until_ready(state)
        if rep:  # the first call warms caches
            per_epoch.append((time.perf_counter() - start) / config.epochs * 1e3)
    return {"compile_seconds": compiled.compile_seconds, "ms_per_epoch": statistics.median(per_epoch)}


def whole_process(cmd: list[str], repeats: int, env: dict[str, str] | None = None) -> float:
    """Median wall seconds of a command, process start to exit."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="cora")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--pyg-python", help="python of a venv with torch + torch_geometric")
    ap.add_argument("--pyg-repeats", type=int, default=1, help="PyG processes to time (~30 s each)")
    add_record_arguments(ap)
    args = ap.parse_args()

    ss = steady_state(args.dataset, args.repeats)
    print(f"jaxgcn {args.dataset}: compile {ss['compile_seconds']:.2f} s | steady state "
          f"{ss['ms_per_epoch']:.2f} ms/epoch (median of {args.repeats} x 200 epochs)")

    jaxgcn = [sys.executable, "-m", "jaxgcn.cli", "train", "--dataset", args.dataset, "--quiet"]
    with tempfile.TemporaryDirectory() as cache:
        cold = [whole_process(jaxgcn, 1, {**os.environ, "JAXGCN_CACHE_DIR": f"{cache}/{i}"})
                for i in range(args.repeats)]
        warm_env = {**os.environ, "JAXGCN_CACHE_DIR": f"{cache}/0"}
        warm = whole_process(jaxgcn, args.repeats, warm_env)
    cold_s = statistics.median(cold)
    key = f"train.{args.dataset}"
    figures = {f"{key}.epoch_ms": figure(ss["ms_per_epoch"], "ms", 2),
               f"{key}.process_cold_s": figure(cold_s, "s", 2), f"{key}.process_warm_s": figure(warm, "s", 2)}
    print(f"jaxgcn train process: {cold_s:.2f} s with empty caches (no compiled programs; the kernel that pip "
          f"install built is used, else it is compiled here, ~5 s), {warm:.2f} s with the caches filled (import + "
          "data + compile + 200 epochs max + eval; benchmarks/bench_first_run.py has the phases)")

    if args.pyg_python:
        name = {"cora": "Cora", "citeseer": "CiteSeer"}[args.dataset]
        pyg_cmd = [args.pyg_python, str(HERE / "pyg_gcn_cora.py"), "--dataset", name]
        walls, epochs = [], []
        for _ in range(args.pyg_repeats):
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                walls.append(whole_process([*pyg_cmd, "--json", out.name], 1))
                summary = json.loads(Path(out.name).read_text())
            epochs.append(summary["median_train_epoch_ms"] + summary["median_eval_ms"])
        pyg, pyg_epoch = statistics.median(walls), statistics.median(epochs)
        print(f"PyG examples/gcn.py recipe: process {pyg:.2f} s | {pyg_epoch:.2f} ms per epoch "
              "(train step + eval pass, as jaxgcn's epoch)")
        print(f"ratio PyG / jaxgcn: process {pyg / cold_s:.1f}x (cold cache), {pyg / warm:.1f}x (warm); "
              f"epoch {pyg_epoch / ss['ms_per_epoch']:.1f}x")
        figures[f"{key}.pyg_epoch_ms"] = figure(pyg_epoch, "ms", 2)
    record(args.record, figures, append=args.record_append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
