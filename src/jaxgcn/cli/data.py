"""The dataset the arguments name: read (``raw_graph``), prepared with its split (``load``), and the
split written back as ``node,split`` CSV (``--save-split``)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from jaxgcn.cli.common import Say, several_protocol_splits
from jaxgcn.datasets import Prepared, RawGraph, load_dataset, prepare, split_codes, with_random_splits, with_splits
from jaxgcn.datasets.download import data_root
from jaxgcn.datasets.files import load_files
from jaxgcn.datasets.named import protocol_info, protocol_name, protocol_of, protocol_splits
from jaxgcn.datasets.parsed import cache_file, cached
from jaxgcn.datasets.splits import fraction_split, planetoid_split, read_split_file, split_table
from jaxgcn.plan import fallback_note

REORDER_MIN_NODES = 100_000  # below this the features fit in cache and renumbering gains little


class Loaded(NamedTuple):
    """A prepared dataset and the input's node ids (None: the nodes are numbered 0..n-1)."""

    prepared: Prepared
    node_ids: np.ndarray | None


def split_given(args: argparse.Namespace) -> bool:
    """Whether the split is decided before preparation: own files, a split file or fractions."""
    return args.edges is not None or args.split_file is not None or args.train_frac is not None


def random_splits(args: argparse.Namespace) -> bool:
    """Whether Planetoid-style random splits are drawn after preparation (split k with seed data seed + k):
    --split random on a dataset, or --splits N on own files (whose one split raw_graph draws up front)."""
    if args.split_file is not None or args.train_frac is not None:
        return False
    return args.split == "random" if args.edges is None else args.splits > 1


def _frac(value: float | None, default: float) -> float:
    return default if value is None else value


def split_name(args: argparse.Namespace) -> str:
    """What the reports say about a split decided up front (a dataset's own split is "public")."""
    if args.split_file is not None:
        return f"file {args.split_file}"
    if args.train_frac is not None:
        return (f"fractions {args.train_frac:g}/{_frac(args.val_frac, 0.1):g}/{_frac(args.test_frac, 0.2):g} "
                f"(seed {args.data_seed})")
    return f"random (seed {args.data_seed})"


def _read(args: argparse.Namespace, require_labels: bool) -> RawGraph:
    """The graph as read: own files (--edges) or a named dataset."""
    if args.edges is not None:
        if require_labels and args.labels is None:
            raise ValueError("--labels FILE is needed with --edges: a CSV node,label")
        paths = [Path(p) for p in (args.edges, args.features, args.labels) if p is not None]
        return cached(cache_file(data_root(args.data_root), "files", paths), paths,
                      lambda: load_files(args.edges, args.features, args.labels))
    if args.labels is not None:
        raise ValueError("--labels FILE needs --edges FILE (your own graph)")
    if args.features is not None and not str(args.features).isdigit():
        raise ValueError(f"--features {args.features}: a features file needs --edges FILE; with "
                         "--dataset synthetic give a feature count")
    return load_dataset(args.dataset, data_dir=args.data_dir, ogb_split=args.ogb_split, data_root=args.data_root,
                        progress=not getattr(args, "quiet", False), n_nodes=args.nodes,
                        n_classes=args.classes, n_features=int(args.features or 64),
                        avg_degree=args.avg_degree, homophily=args.homophily,
                        train_per_class=args.train_per_class, seed=args.data_seed)


def planetoid_splits(args: argparse.Namespace, raw: RawGraph) -> dict[str, np.ndarray]:
    """One Planetoid-style random split of ``raw`` as the split flags ask (seed --data-seed)."""
    return planetoid_split(raw.labels, per_class=args.train_per_class, n_val=args.val, n_test=args.test,
                           seed=args.data_seed, class_names=raw.class_names)


def raw_graph(args: argparse.Namespace, require_labels: bool = True, split: bool = True) -> RawGraph:
    """The RawGraph the arguments name, with the split they ask for when it is decided up front
    (``split=False``: as read, for a split taken from elsewhere)."""
    raw = _read(args, require_labels)
    if not split or not split_given(args):
        return raw
    ids = raw.node_ids if raw.node_ids is not None else np.arange(raw.labels.size).astype(str)
    if args.split_file is not None:
        splits = read_split_file(args.split_file, ids)
    elif args.train_frac is not None:
        splits = fraction_split(raw.labels, args.train_frac, _frac(args.val_frac, 0.1), _frac(args.test_frac, 0.2),
                                seed=args.data_seed)
    else:
        splits = planetoid_splits(args, raw)
    return raw._replace(splits=splits)


def require_two_classes(args: argparse.Namespace, prepared: Prepared) -> None:
    """One class makes every prediction right by construction (accuracy 1.0): refuse it."""
    labels = np.asarray(prepared.data.labels)
    present = np.unique(labels[labels >= 0])
    if present.size >= 2:
        return
    where = f"--labels {args.labels}" if args.edges is not None else f"--dataset {args.dataset}"
    names = prepared.info.get("class_names")
    if present.size == 0:
        raise ValueError(f"{where}: no node has a label; training needs labelled nodes of at least 2 classes")
    name = names[present[0]] if names else str(present[0])
    raise ValueError(f"{where}: all {int(np.sum(labels >= 0))} labelled nodes are in one class ({name}); a classifier "
                     "needs at least 2 classes (with one, accuracy is 1.0 by construction): check the labels")


def _with_split(args: argparse.Namespace, prepared: Prepared,
                protocol: list[dict[str, np.ndarray]] | None = None) -> Prepared:
    """Random splits drawn after preparation (stacked when several), the dataset protocol's splits
    (``protocol``, in the input's numbering), and the split's name in ``info``."""
    if protocol is not None:
        return with_splits(prepared, protocol, protocol_name(protocol_of(args.dataset), args.splits, args.data_seed))
    if random_splits(args):
        prepared = with_random_splits(prepared, np.asarray(prepared.data.labels), args.splits,
                                      per_class=args.train_per_class, n_val=args.val, n_test=args.test,
                                      seed=args.data_seed)
        if args.splits > 1:
            return prepared
    elif not split_given(args):
        return prepared
    return prepared._replace(info={**prepared.info, "split": split_name(args)})


def _summary(prepared: Prepared, seconds: float) -> str:
    info = prepared.info
    return (f"{info['dataset']}: {info['n_nodes']} nodes, {info['n_edges']} edges, {info['n_features']} "
            f"features, {info['n_classes']} classes | backend {prepared.backend}"
            + (f" | {info['edges_symmetrized']} one-way edges symmetrized" if info["edges_symmetrized"] else "")
            + (f" | split {info['split']}" if "split" in info else "")
            + f" | read and prepared in {seconds:.2f}s")


def load(args: argparse.Namespace, say: Say, *, backend: str | None = None, on_device: bool = True,
         two_classes: bool = True, raw: RawGraph | None = None) -> Loaded:
    """Read (unless ``raw`` is given), clean and prepare the dataset the arguments name (random
    splits stacked when asked). ``backend``: instead of --backend. ``two_classes``: refuse data
    whose labelled nodes are all in one class (training needs two)."""
    if args.save_split is not None and args.splits > 1:
        raise ValueError(f"--save-split writes one split; --splits {args.splits} draws several")
    start = time.perf_counter()
    tty = sys.stdout.isatty() and not getattr(args, "quiet", False)
    if tty:
        print(f"reading {args.dataset if args.edges is None else args.edges}…", end="\r", flush=True)
    raw = raw if raw is not None else raw_graph(args)
    n_nodes = raw.features.shape[0]
    if tty:
        rcm = ", RCM" if n_nodes >= REORDER_MIN_NODES else ""
        print(f"preparing {n_nodes:,} nodes (cleaning, normalizing{rcm})…", end="\r", flush=True)
    reorder = "rcm" if args.reorder == "auto" and n_nodes >= REORDER_MIN_NODES else args.reorder
    prepared = prepare(raw, norm=args.norm, feature_norm=args.feature_norm, symmetrize=not args.no_symmetrize,
                       backend=backend or args.backend, reorder="none" if reorder == "auto" else reorder,
                       on_device=on_device)
    node_ids = raw.node_ids
    protocol = (protocol_splits(raw, protocol_of(args.dataset), args.splits, args.data_seed)
                if several_protocol_splits(args) else None)
    del raw  # the host copy of a large graph is not needed past this point
    if two_classes:
        require_two_classes(args, prepared)
    prepared = _with_split(args, prepared, protocol)
    if args.edges is None and args.data_dir is None and args.split == "public" and not split_given(args):
        prepared = prepared._replace(info={**prepared.info, **protocol_info(args.dataset)})
    if note := fallback_note(backend or args.backend, prepared.backend):
        say(note)  # why not the csr kernel, in one line (kernel_status is cached: no second build)
    say(_summary(prepared, time.perf_counter() - start) + (" " * 20 if tty else ""))
    return Loaded(prepared, node_ids)


def one_split(data: Any) -> Any:
    """--split random draws a stacked [1, n] mask; sharded training takes the [n] one."""
    if np.ndim(data.train_mask) == 2:
        return data._replace(**{k: getattr(data, k)[0] for k in ("train_mask", "val_mask", "test_mask")})
    return data


def split_csv(loaded: Loaded) -> str:
    """The split as ``node,split`` CSV text with the input's node ids (what --split-file reads)."""
    codes = split_codes(loaded.prepared)
    return split_table(codes, loaded.node_ids if loaded.node_ids is not None else np.arange(codes.size).astype(str))
