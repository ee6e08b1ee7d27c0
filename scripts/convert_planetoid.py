"""Convert raw Planetoid pickles to the compressed npz files bundled in jaxgcn (run once).

    python scripts/convert_planetoid.py ../shared/datasets/planetoid cora citeseer

The raw edge list is kept as the file lists it (duplicates, self-loops and one-way entries
included) so that the cleaning done at load time is the tested code path.
"""

from __future__ import annotations

import sys
from pathlib import Path

from jaxgcn.datasets.planetoid import load_raw
from jaxgcn.datasets.bundled import DATA_DIR
from jaxgcn.datasets.parsed import save_raw


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    raw_dir = Path(argv[0])
    for name in argv[1:]:
        raw = load_raw(raw_dir, name)
        out = DATA_DIR / f"{name}.npz"
        save_raw(raw, out, compress=True)
        print(f"{name}: {raw.features.shape[0]} nodes, {raw.senders.size} raw edge entries -> {out} "
              f"({out.stat().st_size / 1e3:.0f} kB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
