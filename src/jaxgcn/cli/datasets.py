"""``jaxgcn datasets``: the datasets ``--dataset`` accepts, and ``jaxgcn download``: fetch them now.
``datasets`` prints the catalogue and the cache's state without importing JAX."""

from __future__ import annotations

import argparse

from jaxgcn.datasets.catalogue import CATALOGUE, PROTOCOLS, Dataset, available, lookup, refuse_unsupported
from jaxgcn.datasets.download import data_root, dataset_dir, is_cached


# what the table's edge count is, beside the count `train` and `info` print (docs/datasets.md says it too)
EDGE_ENTRIES = ("edge entries: the source's distinct directed edges without self-loops, as PyG and OGB publish them "
                "(an edge listed both ways counts twice); `jaxgcn info` prints the same count beside the entries as "
                "listed, and train and info the undirected edges of the cleaned graph: cora's 10,556 entries are "
                "5,278 undirected edges")


def _megabytes(n: int | None, approx: bool = False) -> str:
    """``12.8 MB``, ``1.5 GB``; a rounded published figure as ``~83 MB``, ``~60.3 GB``; unknown ``? MB``."""
    if n is None:
        return "? MB"
    if approx:
        return f"~{n / 1e9:.1f} GB" if n >= 10**9 else f"~{n / 1e6:.0f} MB"
    return f"{n / 1e9:.1f} GB" if n >= 10**9 else f"{n / 1e6:.1f} MB"


def download_size(entry: Dataset) -> str:
    """What ``entry`` downloads, as :func:`_megabytes` writes it."""
    return _megabytes(entry.download_bytes, entry.download_approx)


def status(entry: Dataset, root: object = None) -> str:
    """``bundled``, ``cached`` or ``download N MB`` (``~N GB`` when only a rounded size is published)."""
    if entry.bundled:
        return "bundled"
    return "cached" if is_cached(entry, root) else f"download {download_size(entry)}"


def run(args: argparse.Namespace) -> int:
    root = data_root(args.data_root)
    print(f"{'name':18s} {'nodes':>11s} {'edge entries':>13s} {'features':>8s} {'classes':>7s}  {'protocol':16s} "
          f"{'metric':8s} {'status':17s} licence")
    for d in CATALOGUE.values():
        print(f"{d.name:18s} {d.nodes:>11,} {d.edges:>13,} {d.features:>8,} {d.classes:>7}  {d.protocol:16s} "
              f"{d.metric:8s} {status(d, root):17s} {d.licence}" + ("" if d.task == "multi-class" else
                                                                     f" [{d.task}]"))
    print(f"\n{EDGE_ENTRIES}\ncache: {root} (--data-root or $JAXGCN_DATA to move it)\nprotocols:")
    for name, text in PROTOCOLS.items():
        print(f"  {name:16s} {text}")
    print("other forms:")
    for form, description in available():
        if lookup(form.split()[0]) is None:
            print(f"  {form:24s} {description}")
    return 0


def download(args: argparse.Namespace) -> int:
    entries = []
    for name in args.names:
        entry = lookup(name)
        if entry is None:
            raise ValueError(f"download {name}: not a catalogue dataset; choose from {', '.join(CATALOGUE)}")
        refuse_unsupported(entry)
        entries.append(entry)
    from jaxgcn.datasets import load_dataset  # with JAX: a wrong name is refused before it starts

    for entry in entries:
        if entry.bundled:
            print(f"{entry.name}: bundled with jaxgcn, nothing to download")
            continue
        was = is_cached(entry, args.data_root)
        if not was:
            print(f"{entry.name}: downloading {download_size(entry)} into "
                  f"{dataset_dir(entry, args.data_root)}", flush=True)
        # fetches what is missing and parses now: the job then starts from the stored arrays
        raw = load_dataset(entry.name, data_root=args.data_root, progress=not args.quiet)
        print(f"{entry.name}: {'already cached' if was else 'downloaded and verified'}, {raw.labels.size:,} nodes "
              f"ready in {dataset_dir(entry, args.data_root)}")
    return 0
