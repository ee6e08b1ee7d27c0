"""``jaxgcn partition``: a dataset split into per-device row blocks on disk, for a ``--distributed``
job whose processes each read only their own (``--dataset partitioned:DIR``)."""

from __future__ import annotations

import argparse

from jaxgcn import distributed
from jaxgcn.io import outputs
from jaxgcn.cli.common import prelude
from jaxgcn.cli.data import load, one_split, split_csv
from jaxgcn.plan import exchange_for


def run(args: argparse.Namespace) -> int:
    prelude(args)
    # the blocks are CSR whatever the single-device backend would be
    loaded = load(args, print, on_device=False)
    data = one_split(loaded.prepared.data)
    stats = distributed.partition_stats(data.graph, args.parts)
    layout = exchange_for(args.exchange, stats)
    with outputs.Staged() as out, outputs.locked_dir("--out", args.out):  # a failure removes a folder it made
        outputs.remove_stale_temps(args.out)
        meta = distributed.save_partitions(args.out, data, args.parts, exchange=layout, info=loaded.prepared.info)
        if args.save_split is not None:
            out.add(args.save_split, split_csv(loaded), label=f"--save-split {args.save_split}")
    total = sum(f["bytes"] for f in meta["files"])
    print(f"wrote {args.parts} parts ({layout}; {100 * stats['cut_fraction']:.1f}% of edges cross a border) to "
          f"{args.out}: {total / 2**20:.1f} MiB, {total / args.parts / 2**20:.1f} MiB per part")
    return 0
