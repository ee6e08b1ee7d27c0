"""The neighbour-list row sum, XLA's gather-sum against the Pallas TPU kernel
(jaxgcn.core.pallas_gather), per degree bucket and for the whole ``Â · x``: median milliseconds of
jitted calls after a warm-up, on a random symmetric graph (sym-normalized, power-of-two buckets).

    python benchmarks/bench_pallas_gather.py [--nodes 100000] [--avg-degree 25] [--width 16]
        [--skew 0] [--bf16] [--unroll 2 [4 ...]] [--repeats 5] [--check]

On the TPU the kernel is compiled by Mosaic; anywhere else it is interpreted (slow: use e.g.
``--nodes 300 --avg-degree 4`` on a CPU). ``--check`` compares the two outputs and exits 1 when
they differ by more than 1e-4 relative to the largest value (bfloat16: 1e-2). It writes no figures.
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

from jaxgcn.core import gather, pallas_gather as pg
from jaxgcn.core.graph import from_edges, gcn_norm
from timing import median_seconds


def random_graph(n: int, avg_degree: float, skew: float, seed: int = 0):
    """A symmetric random graph with about ``avg_degree`` neighbours a node, sym-normalized.
    ``skew`` > 0 draws one end of each edge with probability ~ rank^-skew (hubs); 0 is uniform."""
    rng = np.random.default_rng(seed)
    m = int(n * avg_degree / 2)
    if skew > 0:
        p = np.arange(1, n + 1, dtype=np.float64) ** -skew
        senders = rng.choice(n, m, p=p / p.sum())
    else:
        senders = rng.integers(0, n, m)
    receivers = rng.integers(0, n, m)
    graph, _ = from_edges(senders, receivers, n_nodes=n)
    return gcn_norm(graph)


def whole(row_sum, lists, self_weights):
    """``Â · x`` as the ``gather`` backend computes it (each bucket's row sums, the rows put in place by
    one gather), with ``row_sum`` for the buckets."""
    def product(x):
        return self_weights[:, None] * x + gather.propagate(lists, x, rows_sum=row_sum)
    return jax.jit(product)


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--avg-degree", type=float, default=25.0)
    ap.add_argument("--width", type=int, default=16, help="feature columns F")
    ap.add_argument("--skew", type=float, default=0.0, help="hub exponent (0: uniform degrees)")
    ap.add_argument("--bf16", action="store_true", help="also time the kernel with bfloat16 storage")
    ap.add_argument("--unroll", type=int, nargs="+", default=[pg.UNROLL],
                    help="the kernel's neighbour slots per loop step: one column each")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--check", action="store_true", help="compare the outputs (exit 1 when they differ)")
    args = ap.parse_args()
    if args.nodes < 2 or args.avg_degree <= 0 or args.width < 1 or args.repeats < 1 or min(args.unroll) < 1:
        ap.error(f"--nodes {args.nodes}, --avg-degree {args.avg_degree}, --width {args.width}, --repeats "
                 f"{args.repeats}, --unroll {args.unroll}: need nodes >= 2 and a positive degree, width, "
                 "repeats and unroll")
    if not pg.fits(args.nodes, args.width):
        ap.error(f"--nodes {args.nodes} --width {args.width}: the table ({pg.table_bytes(args.nodes, args.width)} "
                 f"bytes in VMEM) does not fit {pg.VMEM_BYTES}; lower --nodes or --width")
    return args


def kernels(args):
    """The row sums to time, by column name."""
    out = {"xla": gather.row_sum}
    for u in args.unroll:
        tag = "" if len(args.unroll) == 1 else f" u{u}"
        out["pallas" + tag] = lambda x, c, w, u=u: pg.row_sum(x, c, w, unroll=u)
        if args.bf16:
            out["pallas bf16" + tag] = lambda x, c, w, u=u: pg.row_sum(x, c, w, dtype=jnp.bfloat16, unroll=u)
    return out


def main() -> int:
    args = parse()
    graph = random_graph(args.nodes, args.avg_degree, args.skew)
    lists = jax.tree.map(jnp.asarray, gather.build(graph.senders, graph.receivers, graph.weights, args.nodes,
                                                   symmetric=True))
    x = jax.random.normal(jax.random.key(0), (args.nodes, args.width))
    fns = kernels(args)
    print(f"# {jax.devices()[0].device_kind} ({jax.default_backend()}), jax {jax.__version__}, "
          f"interpret={pg.resolve_interpret(None)}; n={args.nodes}, nnz={graph.senders.shape[0]}, F={args.width}")
    print(f"{'bucket':>10s} {'rows':>9s} {'slots':>11s} " + " ".join(f"{name + ' ms':>15s}" for name in fns))
    for cols, weights in zip(lists.cols, lists.weights):
        times = [median_seconds(jax.jit(fn), x, cols, weights, repeats=args.repeats) * 1e3 for fn in fns.values()]
        print(f"{'K=' + str(cols.shape[1]):>10s} {cols.shape[0]:9d} {cols.size:11d} "
              + " ".join(f"{t:15.3f}" for t in times))
    products = {name: whole(fn, lists, jnp.asarray(graph.self_weights)) for name, fn in fns.items()}
    totals = [median_seconds(p, x, repeats=args.repeats) * 1e3 for p in products.values()]
    print(f"{'A @ x':>10s} {args.nodes:9d} {lists.slots:11d} "
          + " ".join(f"{t:15.3f}" for t in totals))
    return check(products, x) if args.check else 0


def check(products, x) -> int:
    """Each product against XLA's: the largest difference relative to the largest value."""
    expected = np.asarray(products["xla"](x))
    scale = max(float(np.abs(expected).max()), 1e-30)
    bad = 0
    for name, product in products.items():
        if name == "xla":
            continue
        err = float(np.abs(np.asarray(product(x)) - expected).max()) / scale
        ok = err <= (1e-2 if "bf16" in name else 1e-4)
        print(f"check {name}: max |difference| / max |xla| = {err:.2e} ({'ok' if ok else 'DIFFERS'})")
        bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
