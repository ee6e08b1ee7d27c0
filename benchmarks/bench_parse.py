"""Parse once: the first load of a large text dataset (parse + store the arrays) against every later
load (the stored npz), through :mod:`jaxgcn.datasets.parsed`.

    python benchmarks/bench_parse.py                       # 1,000,000 nodes in OGB's CSV layout
    python benchmarks/bench_parse.py --nodes 200000        # smaller and quicker
    python benchmarks/bench_parse.py --dir /scratch/big --reuse   # keep the files, time again
    python benchmarks/bench_parse.py --own-csv 100000      # + own CSV files through jaxgcn.cli
    python benchmarks/bench_parse.py --record docs/figures.json   # + write the figures the docs quote

Writes a synthetic graph (--nodes nodes, --edges-per-node edge lines per node, --features dense
features, --classes classes) in OGB's CSV layout: raw/edge.csv.gz, raw/node-feat.csv.gz,
raw/node-label.csv.gz, raw/num-node-list.csv.gz and split/random/{train,valid,test}.csv.gz, into
--dir (default: a temporary folder, removed at the end). Then times ``load_dataset("ogb:DIR",
data_root=R)`` twice with a fresh data root R: the first call parses the text and stores the
arrays (R/parsed/*.npz), the second loads them; it prints both, their ratio, the sizes of the
sources and the cache file, and checks the two loads return the same arrays.

``--own-csv N`` does the same for your-own-files CSVs of N nodes (edges.csv src,dst;
features.csv node,f0,...; labels.csv node,label) read the way ``jaxgcn train --edges ...
--features ... --labels ...`` reads them (``jaxgcn.cli.data.raw_graph``, which wraps
``load_files`` in ``parsed.cached``). Those files are read as text cells (string node ids), far
slower per byte than OGB's numeric CSV: keep N modest.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, BinaryIO, Callable

import numpy as np
from figure_record import add_record_arguments, count_name, figure, record

from jaxgcn.datasets import RawGraph, load_dataset

CHUNK_ROWS = 20_000  # rows formatted at a time: bounds the formatting buffers (~100 MB at 100 features)
DECIMALS = 4


def _int_cells(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative ints as right-aligned ASCII digit cells [n, width] and the mask of the digits to
    keep (no leading zeros): ``cells[mask]`` concatenates them without padding."""
    values = np.asarray(values, np.int64)
    width = max(1, len(str(int(values.max())))) if values.size else 1
    powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    cells = (values[:, None] // powers % 10 + ord("0")).astype(np.uint8)
    n_digits = np.maximum(1, np.floor(np.log10(np.maximum(values, 1))).astype(np.int64) + 1)
    keep = np.arange(width)[None, :] >= width - n_digits[:, None]
    return cells, keep


def _float_cells(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Floats in (-10, 10) as ``[-]d.dddd`` cells [n, 7] and the mask that drops the '+' sign slot."""
    scaled = np.rint(np.clip(np.abs(values), 0, 9.9999) * 10**DECIMALS).astype(np.int64)
    digits, _ = _int_cells(np.concatenate([scaled, [10**DECIMALS]]))  # width 1 + DECIMALS for every value
    digits = digits[:-1, -(DECIMALS + 1):]
    n = values.shape[0]
    cells = np.concatenate([np.full((n, 1), ord("-"), np.uint8), digits[:, :1],
                            np.full((n, 1), ord("."), np.uint8), digits[:, 1:]], axis=1)
    keep = np.ones_like(cells, dtype=bool)
    keep[:, 0] = (values < 0) & (scaled > 0)
    return cells, keep


def _rows_text(columns: list[tuple[np.ndarray, np.ndarray]]) -> bytes:
    """CSV text of the given cell columns (each ``(cells [n, w], keep [n, w])``): ',' between, '\\n' after."""
    n = columns[0][0].shape[0]
    parts, masks = [], []
    for i, (cells, keep) in enumerate(columns):
        sep = ord("\n") if i == len(columns) - 1 else ord(",")
        parts += [cells, np.full((n, 1), sep, np.uint8)]
        masks += [keep, np.ones((n, 1), bool)]
    return np.concatenate(parts, axis=1)[np.concatenate(masks, axis=1)].tobytes()


def _write_rows(f: BinaryIO, n_rows: int, row_block: Callable[[int, int], list[tuple[np.ndarray, np.ndarray]]],
                header: bytes = b"") -> None:
    f.write(header)
    for start in range(0, n_rows, CHUNK_ROWS):
        f.write(_rows_text(row_block(start, min(n_rows, start + CHUNK_ROWS))))


def synthetic_arrays(n: int, edges_per_node: int, n_features: int, n_classes: int, seed: int) -> dict[str, Any]:
    """Edges, labels, a feature generator (class signal + noise, row by row) and a random split."""
    rng = np.random.default_rng(seed)
    m = n * edges_per_node
    labels = rng.integers(0, n_classes, n)
    centres = rng.normal(0, 1, (n_classes, n_features)).astype(np.float32)
    perm = rng.permutation(n)
    n_train, n_val = n // 10, n // 10
    return {
        "src": rng.integers(0, n, m), "dst": rng.integers(0, n, m), "labels": labels,
        "features": lambda a, b: centres[labels[a:b]] + np.random.default_rng([seed, a]).normal(
            0, 1, (b - a, n_features)).astype(np.float32),
        "splits": {"train": np.sort(perm[:n_train]), "valid": np.sort(perm[n_train:n_train + n_val]),
                   "test": np.sort(perm[n_train + n_val:])},
    }


def write_ogb(folder: Path, arrays: dict[str, Any], n: int, n_features: int) -> None:
    """OGB's CSV layout (header-less gzip CSVs), gzip level 1 to keep writing quick."""
    raw = folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    src, dst, labels, features = arrays["src"], arrays["dst"], arrays["labels"], arrays["features"]

    def gz(path: Path) -> BinaryIO:
        return gzip.open(path, "wb", compresslevel=1)  # type: ignore[return-value]

    with gz(raw / "edge.csv.gz") as f:
        _write_rows(f, src.size, lambda a, b: [_int_cells(src[a:b]), _int_cells(dst[a:b])])
    with gz(raw / "node-feat.csv.gz") as f:
        _write_rows(f, n, lambda a, b: [_float_cells(col) for col in features(a, b).T])
    with gz(raw / "node-label.csv.gz") as f:
        _write_rows(f, n, lambda a, b: [_int_cells(labels[a:b])])
    with gz(raw / "num-node-list.csv.gz") as f:
        f.write(f"{n}\n".encode())
    split = folder / "split" / "random"
    split.mkdir(parents=True, exist_ok=True)
    for name, ids in arrays["splits"].items():
        with gz(split / f"{name}.csv.gz") as f:
            _write_rows(f, ids.size, lambda a, b, ids=ids: [_int_cells(ids[a:b])])


def write_own_csv(folder: Path, arrays: dict[str, Any], n: int, n_features: int) -> list[Path]:
    """Own-files CSVs: edges.csv (src,dst), features.csv (node,f0,...), labels.csv (node,label)."""
    folder.mkdir(parents=True, exist_ok=True)
    src, dst, labels, features = arrays["src"], arrays["dst"], arrays["labels"], arrays["features"]
    ids = np.arange(n)
    paths = [folder / "edges.csv", folder / "features.csv", folder / "labels.csv"]
    with open(paths[0], "wb") as f:
        _write_rows(f, src.size, lambda a, b: [_int_cells(src[a:b]), _int_cells(dst[a:b])], b"src,dst\n")
    header = ("node," + ",".join(f"f{j}" for j in range(n_features)) + "\n").encode()
    with open(paths[1], "wb") as f:
        _write_rows(f, n, lambda a, b: [_int_cells(ids[a:b]), *(_float_cells(c) for c in features(a, b).T)], header)
    with open(paths[2], "wb") as f:
        _write_rows(f, n, lambda a, b: [_int_cells(ids[a:b]), _int_cells(labels[a:b])], b"node,label\n")
    return paths


def same(a: RawGraph, b: RawGraph) -> bool:
    """Whether two loads hold the same arrays (what the cache must guarantee)."""
    dense = [np.asarray(x.toarray() if hasattr(x, "toarray") else x) for x in (a.features, b.features)]
    return (np.array_equal(a.senders, b.senders) and np.array_equal(a.receivers, b.receivers)
            and np.array_equal(a.labels, b.labels) and np.array_equal(*dense)
            and all(np.array_equal(a.splits[k], b.splits[k]) for k in a.splits))


def _size(paths: list[Path]) -> float:
    return sum(p.stat().st_size for p in paths) / 1e6


def time_twice(label: str, load: Callable[[], RawGraph], root: Path, sources: list[Path]) -> tuple[float, float]:
    """First (parse + store) and second (cached) load, their ratio, and the file sizes; returns the two
    times."""
    start = time.perf_counter()
    first = load()
    t_first = time.perf_counter() - start
    start = time.perf_counter()
    second = load()
    t_second = time.perf_counter() - start
    stored = sorted((root / "parsed").glob("*.npz"))
    cache = f"{_size(stored):,.1f} MB ({stored[0].name})" if stored else "none written"
    print(f"{label}: first load (parse + store) {t_first:.2f} s | second load (cached) {t_second:.2f} s | "
          f"ratio {t_first / t_second:.1f}x")
    print(f"{label}: sources {_size(sources):,.1f} MB | cache file {cache} | same arrays both times: "
          f"{same(first, second)}")
    return t_first, t_second


def bench_ogb(args: argparse.Namespace, folder: Path, arrays: dict[str, Any]) -> dict[str, dict]:
    """Time the OGB layout's two loads; returns their figures for ``--record``."""
    if not (args.reuse and (folder / "raw" / "edge.csv.gz").is_file()):
        start = time.perf_counter()
        write_ogb(folder, arrays, args.nodes, args.features)
        print(f"wrote the OGB CSV layout in {time.perf_counter() - start:.1f} s to {folder}")
    sources = sorted(p for p in folder.rglob("*.csv.gz"))
    with tempfile.TemporaryDirectory(dir=args.cache_parent) as root:
        first, cached = time_twice("ogb", lambda: load_dataset(f"ogb:{folder}", data_root=root), Path(root), sources)
    key = f"parse.ogb_{count_name(args.nodes)}"
    return {f"{key}.first_s": figure(first, "s", 0), f"{key}.cached_s": figure(cached, "s", 2)}


def bench_own_csv(args: argparse.Namespace, folder: Path) -> None:
    from jaxgcn.cli.data import raw_graph
    from jaxgcn.cli.parser import build_parser

    arrays = synthetic_arrays(args.own_csv, args.edges_per_node, args.features, args.classes, args.seed)
    start = time.perf_counter()
    paths = write_own_csv(folder / "own", arrays, args.own_csv, args.features)
    print(f"\nwrote own CSVs of {args.own_csv:,} nodes in {time.perf_counter() - start:.1f} s")
    with tempfile.TemporaryDirectory(dir=args.cache_parent) as root:
        cli = build_parser().parse_args(["train", "--edges", str(paths[0]), "--features", str(paths[1]),
                                         "--labels", str(paths[2]), "--data-root", root])
        time_twice("own CSV (jaxgcn.cli)", lambda: raw_graph(cli, split=False), Path(root), paths)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--edges-per-node", type=int, default=10, help="edge lines per node (one direction each)")
    ap.add_argument("--features", type=int, default=100, help="dense feature columns")
    ap.add_argument("--classes", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", help="where to write the files (default: a temporary folder, removed after)")
    ap.add_argument("--reuse", action="store_true", help="with --dir: time the files already there")
    ap.add_argument("--cache-parent", help="folder for the temporary data roots (default: the system temp)")
    ap.add_argument("--own-csv", type=int, default=0, metavar="N",
                    help="also time own CSV files of N nodes through jaxgcn.cli (0: skip)")
    add_record_arguments(ap)
    args = ap.parse_args()

    print(f"synthetic graph: {args.nodes:,} nodes, {args.nodes * args.edges_per_node:,} edge lines, "
          f"{args.features} dense features, {args.classes} classes")
    folder = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench_parse_"))
    try:
        arrays = synthetic_arrays(args.nodes, args.edges_per_node, args.features, args.classes, args.seed)
        figures = bench_ogb(args, folder, arrays)
        del arrays
        if args.own_csv:
            bench_own_csv(args, folder)
    finally:
        if not args.dir:
            shutil.rmtree(folder, ignore_errors=True)
    record(args.record, figures, append=args.record_append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
