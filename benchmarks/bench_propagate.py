"""Propagation backends head to head: median microseconds of a jitted ``Â @ x`` (and its gradient)
on graphs of growing size, with the ratio to the ``segment`` backend measured in the same run.
It is what ``jaxgcn.plan.backend_for``'s ``auto`` thresholds rest on.

    python benchmarks/bench_propagate.py [--width 16] [--repeats 200]
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp

from jaxgcn.datasets import load_dataset, synthetic
from jaxgcn.core.graph import from_edges, gcn_norm, with_dense
from jaxgcn.core.propagate import BACKENDS, propagate
from timing import median_seconds


def graphs():
    for n in (128, 512, 1024, 2048, 4096):
        raw = synthetic(n, n_classes=4, n_features=1, avg_degree=4.0, seed=0)
        yield f"sbm n={n} deg=4", raw
    yield "cora", load_dataset("cora")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    print(f"{'graph':18s} {'nodes':>6s} {'edges':>7s} "
          + " ".join(f"{b + ' fwd':>12s} {b + ' grad':>12s}" for b in BACKENDS)
          + "   (us, median; x = vs segment)")
    for name, raw in graphs():
        n = raw.features.shape[0]
        g = gcn_norm(from_edges(raw.senders, raw.receivers, n_nodes=n)[0])
        x = jax.random.normal(jax.random.key(0), (n, args.width))
        cells, base = [], {}
        for backend in ("segment", "bcoo", "dense"):
            graph = jax.device_put(with_dense(g) if backend == "dense" else g)
            fwd = jax.jit(lambda gr, h, b=backend: propagate(gr, h, backend=b))
            grad = jax.jit(jax.grad(lambda h, gr, b=backend: jnp.sum(propagate(gr, h, backend=b) ** 2)))
            t_fwd = median_seconds(fwd, graph, x, repeats=args.repeats) * 1e6
            t_grad = median_seconds(grad, x, graph, repeats=args.repeats) * 1e6
            base.setdefault("fwd", t_fwd)
            base.setdefault("grad", t_grad)
            cells.append((backend, t_fwd, t_grad))
        order = {b: i for i, b in enumerate(BACKENDS)}
        cells.sort(key=lambda c: order[c[0]])
        row = " ".join(f"{f:7.0f} {f / base['fwd']:3.1f}x {gr:7.0f} {gr / base['grad']:3.1f}x" for _, f, gr in cells)
        print(f"{name:18s} {n:6d} {g.n_edges:7d} {row}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
