"""jaxgcn's XLA options (jaxgcn.host.compiler) against XLA's defaults, interleaved in one process.

    python benchmarks/bench_compiler.py [--dataset cora] [--repeats 4]

jaxgcn compiles with the YNNPACK library fusions off, because they returned run 0's loss for every
run of a batch past 32,768 node-run pairs (docs/design.md, Reliability). This prints the training seconds
of one run and of 8 runs in one program (200 epochs, no early stopping) both ways, medians over
--repeats with the two settings alternating, and whether the 8 runs' results agree.
"""

from __future__ import annotations

import argparse
import statistics

import jax
import numpy as np

from jaxgcn import train
from jaxgcn.host import compiler
from jaxgcn.batched import entries_for, fit_batch
from jaxgcn.datasets import load_dataset, prepare
from jaxgcn.core.models import Execution, GCNConfig
from jaxgcn.train import TrainConfig, fit

SETTINGS = {"jaxgcn (YNNPACK fusions off)": dict(compiler._OPTIONS), "XLA defaults": {}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="cora")
    ap.add_argument("--repeats", type=int, default=4)
    args = ap.parse_args()
    prepared = prepare(load_dataset(args.dataset))
    model_config, config = GCNConfig(), TrainConfig(early_stopping=None)
    execution = Execution(backend=prepared.backend)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in SETTINGS}
    accuracy: dict[str, np.ndarray] = {}
    for rep in range(args.repeats + 1):
        for name, options in SETTINGS.items():
            compiler._OPTIONS = options
            compiler.compiler_options.cache_clear()
            train.COMPILED.clear()  # the programs of single runs and of batches
            one = fit(prepared.data, prepared.n_classes, model_config=model_config, execution=execution,
                      config=config, key=jax.random.key(rep), log=None)
            eight = fit_batch(prepared.data, prepared.n_classes,
                              entries_for(list(range(8)), model_config=model_config, config=config),
                              execution=execution)
            accuracy[name] = eight.metrics["test_acc"]
            if rep:  # the first round warms caches
                times[name].append((one.train_seconds, eight.train_seconds))
    for name, pairs in times.items():
        single, batch = (statistics.median(p[i] for p in pairs) for i in (0, 1))
        print(f"{name:30s} 1 run {single:.3f} s | 8 runs in one program {batch:.3f} s "
              f"(median of {args.repeats}, {args.dataset}, 200 epochs)")
    a, b = accuracy.values()
    print(f"8-run test accuracies agree between the settings: {bool(np.allclose(a, b, atol=1e-6))}")


if __name__ == "__main__":
    main()
