"""Many Cora seeds as ONE compiled program against a Python loop of single runs, same run.

    python benchmarks/bench_sweep.py                      # 100 seeds, both ways
    python benchmarks/bench_sweep.py --seeds 20 --loop 20
    XLA_FLAGS=--xla_force_host_platform_device_count=2 python benchmarks/bench_sweep.py
    python benchmarks/bench_sweep.py --record docs/figures.json   # + write the figures the docs quote

Prints compile and steady-state (run) seconds of each way, the per-run cost, the ratio, and the
accuracy both ways reach (they must agree: the batched runs equal the single runs). With the
XLA flag above the run axis of the batched program is sharded over 2 CPU devices (one per core).
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import numpy as np
from figure_record import add_record_arguments, figure, record

from jaxgcn.batched import entries_for, fit_runs
from jaxgcn.datasets import load_dataset, prepare
from jaxgcn.core.models import Execution, GCNConfig
from jaxgcn.train import TrainConfig, fit


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="cora")
    ap.add_argument("--seeds", type=int, default=100, help="runs in the one program")
    ap.add_argument("--loop", type=int, default=100, help="single runs in the Python loop")
    ap.add_argument("--backend", default="auto", help="propagation backend (auto, segment, csr, ...)")
    add_record_arguments(ap)
    args = ap.parse_args()

    prepared = prepare(load_dataset(args.dataset), backend=args.backend)
    model_config, config = GCNConfig(), TrainConfig()
    execution = Execution(backend=prepared.backend)
    print(f"{args.dataset}, paper settings, backend {prepared.backend}, {len(jax.devices())} device(s)")

    entries = entries_for(list(range(args.seeds)), model_config=model_config, config=config)
    start = time.perf_counter()
    batch = fit_runs(prepared.data, prepared.n_classes, entries, execution=execution)
    total = time.perf_counter() - start
    acc = batch.metrics["test_acc"]
    print(f"one program, {args.seeds} runs: compile {batch.compile_seconds:.1f} s | run {batch.train_seconds:.1f} s "
          f"({batch.train_seconds / args.seeds:.3f} s per run) | total {total:.1f} s | test "
          f"{acc.mean():.4f} ± {acc.std():.4f}")
    key = f"sweep.{args.dataset}.{args.seeds}"
    figures = {f"{key}.one_program_s": figure(batch.train_seconds, "s", 1)}

    if args.loop == 0:
        record(args.record, figures, append=args.record_append)
        return 0
    loop_acc, run_s, compile_s = [], 0.0, 0.0
    start = time.perf_counter()
    for seed in range(args.loop):
        res = fit(prepared.data, prepared.n_classes, model_config=model_config, execution=execution, config=config,
                  key=jax.random.key(seed), log=None)
        loop_acc.append(res.metrics["test_acc"])
        run_s += res.train_seconds
        compile_s += res.compile_seconds
    loop_total = time.perf_counter() - start
    per_run = run_s / args.loop
    print(f"Python loop, {args.loop} single runs: compile {compile_s:.1f} s | run {run_s:.1f} s "
          f"({per_run:.3f} s per run) | total {loop_total:.1f} s | test {np.mean(loop_acc):.4f}")
    same = min(args.seeds, args.loop)
    diff = np.abs(np.asarray(loop_acc[:same]) - acc[:same])
    ratio = per_run / (batch.train_seconds / args.seeds)
    print(f"ratio loop / one program, per run (steady state): {ratio:.2f}x")
    figures[f"{key}.loop_ratio"] = figure(ratio, "×", 2)
    print(f"per seed: {int(np.sum(diff < 1e-6))}/{same} identical test accuracies, largest difference "
          f"{diff.max():.3g} (float summation order differs between the batched and single programs; "
          f"over 200 epochs that can move an early-stopping epoch)")
    record(args.record, figures, append=args.record_append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
