"""Loading a dataset by name and the host-side preparation that turns a :class:`RawGraph` into
device arrays (:func:`load_dataset`, :func:`prepare`, the split helpers). :mod:`jaxgcn.datasets`
is its face: every name below is importable from there."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from jaxgcn.datasets.base import RawGraph, split_ids
from jaxgcn.datasets.bundled import BUNDLED, load_bundled
from jaxgcn.datasets.catalogue import CATALOGUE, available, check_name, lookup  # noqa: F401 - its face
from jaxgcn.datasets.download import data_root as download_root
from jaxgcn.datasets.named import load_named, protocol_info, protocol_name, protocol_of, protocol_splits
from jaxgcn.datasets.parsed import cache_file, cached
from jaxgcn.datasets.ogb import load_arrays, load_ogb
from jaxgcn.datasets.planetoid import load_raw
from jaxgcn.datasets.splits import planetoid_split
from jaxgcn.datasets.synthetic import synthetic
from jaxgcn.core.graph import from_edges, gcn_norm, with_csr, with_dense, with_lists
from jaxgcn.core.graph import reorder as reorder_graph
from jaxgcn.core import feature_lists
from jaxgcn.core.layers import sparse_features
from jaxgcn.host.memory import GiB, available_bytes
from jaxgcn.plan import backend_for, features_layout
from jaxgcn.core.propagate import BACKENDS
from jaxgcn.core.data import SPLIT_CODES, TrainData
from jaxgcn.core.tasks import label_dtype, task_of
from jaxgcn.core.validate import INT32_MAX, check_allocation, check_graph_size, check_sparse

FEATURE_NORMS = ("row", "standardize", "none")

__all__ = [
    "BUNDLED", "FEATURE_NORMS", "Prepared", "RawGraph", "available", "load_bundled", "load_dataset",
    "load_protocol", "load_raw", "normalize_features", "planetoid_split", "prepare", "synthetic",
    "with_random_splits", "with_splits",
]


def _files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []


def load_dataset(name: str, *, data_dir: str | Path | None = None, ogb_split: str | None = None,
                 data_root: str | Path | None = None, download: bool = True, progress: bool = True,
                 **synthetic_args: Any) -> RawGraph:
    """Load a dataset by name: a catalogue name (``cora``, ``pubmed``, ``amazon-photo``,
    ``ogbn-arxiv``, ...: bundled, or downloaded once into ``data_root`` and parsed once, see
    :mod:`jaxgcn.datasets.catalogue`), ``synthetic``, raw Planetoid files (``data_dir``), ``ogb:DIR``
    (OGB raw layout, see :func:`~jaxgcn.datasets.ogb.load_ogb`) or ``npz:DIR`` (arrays, see
    :func:`~jaxgcn.datasets.ogb.load_arrays`); a ``~`` in ``DIR`` and ``data_dir`` is the home folder.
    ``download=False`` refuses a catalogue dataset that is not cached instead of fetching it. Large
    ``ogb:``/``npz:`` sources are parsed once too.

    >>> load_dataset("cora").features.shape
    (2708, 1433)
    """
    key = name.lower()
    if key.startswith("ogb:") or key.startswith("npz:"):
        folder = Path(name[4:]).expanduser()  # `npz:~/data`: no shell expands a ~ inside an argument
        sources = _files_under(folder / "raw") + _files_under(folder / "split") if key.startswith("ogb:") \
            else _files_under(folder)
        # npz:DIR without splits.npz: the random split drawn, sized as asked, is part of what is cached
        drawn = {k: synthetic_args[k] for k in ("seed", "train_per_class", "n_val", "n_test") if k in synthetic_args}
        kind = f"{key[:3]}-{ogb_split}" if key.startswith("ogb:") else "-".join(map(str, ("npz", *drawn.values())))
        parse = (lambda: load_ogb(folder, split=ogb_split)) if key.startswith("ogb:") \
            else (lambda: load_arrays(folder, **drawn))
        return cached(cache_file(download_root(data_root), kind, sources or [folder]), sources, parse)
    if data_dir is not None:
        return load_raw(Path(data_dir).expanduser(), None if key in ("", "planetoid") else key)
    if key == "synthetic":
        return synthetic(**synthetic_args)
    entry = lookup(key)
    if entry is not None:
        return load_named(entry, root=data_root, download=download, progress=progress)
    check_name(name)  # raises: every other form (partitioned:DIR too, which only sharded training reads) is above
    raise AssertionError(f"dataset {name!r}: a --dataset form without a loader")  # pragma: no cover


def normalize_features(features: Any, how: str = "row", stats: dict[str, Any] | None = None) -> Any:
    """Feature preprocessing on the host.

    ``"row"``: each row divided by the sum of its absolute values (Kipf's row normalization; rows
    of zeros stay zero). ``"standardize"``: zero mean, unit variance per column (dense output).
    ``"none"``: unchanged. Sparse input stays sparse for ``row`` and ``none``. ``stats`` (from
    :func:`feature_stats`) applies saved statistics instead of this data's own.
    """
    if how not in FEATURE_NORMS:
        raise ValueError(f"feature normalization {how!r} is not one of {FEATURE_NORMS}")
    if how == "none":
        return features
    if how == "row":
        if sp.issparse(features):
            sums = np.asarray(abs(features).sum(axis=1)).ravel()
            inv = np.divide(1.0, sums, out=np.zeros_like(sums, dtype=np.float64), where=sums > 0)
            return sp.csr_matrix(sp.diags(inv) @ features, dtype=np.float32)
        sums = np.abs(features).sum(axis=1, keepdims=True)
        return (features / np.where(sums > 0, sums, 1.0)).astype(np.float32)
    dense = features.toarray() if sp.issparse(features) else np.asarray(features, np.float64)
    mean, std = (dense.mean(axis=0), dense.std(axis=0)) if stats is None else \
        (np.asarray(stats["mean"], np.float64), np.asarray(stats["std"], np.float64))
    return ((dense - mean) / np.where(std > 0, std, 1.0)).astype(np.float32)


def feature_stats(features: Any, how: str) -> dict[str, list[float]] | None:
    """The statistics a normalization learns from the training data (``standardize``: per-column
    mean and std), kept in checkpoints so prediction applies the same transform; None otherwise."""
    if how != "standardize":
        return None
    dense = features.toarray() if sp.issparse(features) else np.asarray(features, np.float64)
    return {"mean": dense.mean(axis=0).tolist(), "std": dense.std(axis=0).tolist()}


class Prepared(NamedTuple):
    """A dataset ready to train: device data plus host-side facts for reports."""

    data: TrainData
    n_classes: int
    backend: str
    info: dict[str, Any]


def _check_features_labels(raw: RawGraph) -> int:
    """Validate the features and labels of a RawGraph (whoever built it) before any SciPy routine,
    XLA gather or kernel reads them; returns the node count."""
    x = raw.features
    if sp.issparse(x):
        check_sparse(x, f"{raw.name}: features")
        values = x.data
    else:
        x = np.asarray(x)
        if x.ndim != 2 or x.dtype.kind not in "biuf":
            raise ValueError(f"{raw.name}: features of shape {x.shape} and dtype {x.dtype}; expected a 2-D array of "
                             "real numbers [nodes, features]")
        values = x
    n_nodes, n_features = x.shape
    if n_nodes == 0 or n_features == 0:
        raise ValueError(f"{raw.name}: features of shape {x.shape} have no {'rows' if n_nodes == 0 else 'columns'}; "
                         "give one row per node and at least one feature column")
    check_graph_size(n_nodes, n_features, raw.name)
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{raw.name}: features contain NaN or inf; clean or impute them first")
    labels = np.asarray(raw.labels)
    if labels.ndim == 2 and labels.shape[0] == n_nodes:  # several labels per node: the multi-label task's check
        n_labels = task_of("multilabel", labels).check_labels(labels, f"{raw.name}: labels")
        check_allocation(16 * n_nodes * n_labels, raw.name, f"{n_labels:,} labels", "give fewer label columns")
        return n_nodes
    if labels.shape != (n_nodes,):
        raise ValueError(f"{raw.name}: labels have shape {labels.shape}, expected ({n_nodes},) class ids or "
                         f"({n_nodes}, n_labels) 0/1 targets")
    if labels.size and labels.dtype.kind not in "iu":
        raise ValueError(f"{raw.name}: labels of dtype {labels.dtype}; expected integer class ids (-1 = unlabelled)")
    if labels.size and (labels.min() < -1 or labels.max() > INT32_MAX - 1):
        bad = int(labels[(labels < -1) | (labels > INT32_MAX - 1)][0])
        raise ValueError(f"{raw.name}: label {bad} is not a class id (0, 1, ...) or -1 (unlabelled)")
    n_classes = int(labels.max()) + 1 if labels.size else 0
    # a class id k means k + 1 output columns: [nodes, classes] logits, probabilities and gradients
    check_allocation(16 * n_nodes * n_classes, raw.name, f"{n_classes:,} classes (the largest label + 1)",
                     "class ids must count from 0 (map the labels to 0..k-1)")
    return n_nodes


def unlabelled_nodes(labels: np.ndarray) -> np.ndarray:
    """Which nodes have no target: class id -1, or every one of a node's labels missing (NaN)."""
    return np.all(np.isnan(labels), axis=1) if labels.ndim == 2 else labels < 0


def n_outputs(labels: np.ndarray) -> int:
    """The model's output width for these labels: the classes (the largest id + 1), or the label columns."""
    if labels.ndim == 2:
        return int(labels.shape[1])
    return int(labels.max()) + 1 if labels.size else 0


def _masks(raw: RawGraph, n_nodes: int) -> list[jax.Array]:
    masks = []
    for split in ("train", "val", "test"):
        idx = np.asarray(raw.splits.get(split, []))
        if idx.size and idx.dtype.kind not in "iu":
            raise ValueError(f"{raw.name}: the {split} split holds {idx.dtype} values; it must hold integer node ids")
        idx = idx.astype(np.int64)
        if idx.size == 0:
            raise ValueError(f"{raw.name}: the {split} split is empty; give it at least one node")
        bad = idx[(idx < 0) | (idx >= n_nodes)]
        if bad.size:
            raise ValueError(f"{raw.name}: {split} split holds node id {int(bad[0])} outside [0, {n_nodes}); "
                             "split ids must be node ids of the graph")
        unlabelled = idx[unlabelled_nodes(raw.labels[idx])]
        if unlabelled.size:
            node = raw.node_ids[unlabelled[0]] if raw.node_ids is not None else unlabelled[0]
            raise ValueError(f"{raw.name}: the {split} split contains unlabelled nodes ({unlabelled.size}, e.g. node "
                             f"{str(node)!r}); give them labels or drop them from the split")
        mask = np.zeros(n_nodes, np.float32)
        mask[idx] = 1.0
        masks.append(mask)
    return masks


def prepare(
    raw: RawGraph,
    *,
    norm: str = "sym",
    feature_norm: str = "row",
    symmetrize: bool = True,
    add_self_loops: bool = True,
    backend: str = "auto",
    reorder: str = "none",
    require_split: bool = True,
    feature_statistics: dict[str, Any] | None = None,
    on_device: bool = True,
    runs: int = 1,
) -> Prepared:
    """Clean, normalize and move a :class:`RawGraph` to the device (once, on the host).

    ``reorder="rcm"`` renumbers the nodes by reverse Cuthill-McKee for memory locality (see
    :func:`jaxgcn.core.graph.reorder`); ``info["node_order"]`` then maps new ids to the input's
    (``node_order[i]`` is the input id of node ``i``). Metrics do not depend on the numbering.

    ``on_device=False`` keeps every array on the host (NumPy; sparse features as a host CSR), for
    :mod:`jaxgcn.distributed`, which moves each device only its own row block. ``runs``: how many runs
    the data is prepared for (an accelerator lays out a job of many runs otherwise: :func:`lay_out`).

    >>> p = prepare(load_dataset("cora"))
    >>> p.info["n_nodes"], p.info["undirected_edges"], p.n_classes, p.backend
    (2708, 5278, 7, 'csr')
    """
    cleaned = clean(raw, norm=norm, symmetrize=symmetrize, add_self_loops=add_self_loops, reorder=reorder,
                    require_split=require_split)
    backend = backend_for(backend, cleaned.graph.n_nodes, cleaned.graph.n_edges, runs=runs)  # THE plan decides
    return lay_out(cleaned, backend, feature_norm=feature_norm, feature_statistics=feature_statistics,
                   on_device=on_device, runs=runs)


class Cleaned(NamedTuple):
    """A :class:`RawGraph` cleaned and normalized (:func:`clean`), before the plan picks its backend."""

    raw: RawGraph
    graph: Any
    order: np.ndarray | None
    masks: list[np.ndarray]
    report: dict[str, Any]
    norm: str
    symmetrize: bool
    reorder: str


def clean(raw: RawGraph, *, norm: str = "sym", symmetrize: bool = True, add_self_loops: bool = True,
          reorder: str = "none", require_split: bool = True) -> Cleaned:
    """The host half of :func:`prepare` that decides nothing: the features and labels checked, the
    edges cleaned (and reordered), the split masks built and the adjacency normalized. What the
    plan sizes the backend on (:func:`jaxgcn.plan.backend_for`: ``graph.n_nodes``, ``graph.n_edges``)."""
    n_nodes = _check_features_labels(raw)
    raw = raw._replace(splits=split_ids(raw.splits, n_nodes, raw.name))  # boolean masks as node ids
    graph, report = from_edges(raw.senders, raw.receivers, raw.weights, n_nodes=n_nodes,
                               symmetrize=symmetrize, add_self_loops=add_self_loops, source=raw.name)
    if graph.n_edges == 0:
        raise ValueError(f"{raw.name}: no edges between two different nodes ({report['input_edges']} input edge(s), "
                         f"{report['self_loops_found']} of them self-loops); a GCN propagates over edges: give at "
                         "least one edge u-v with u != v")
    order = None
    if reorder != "none":
        graph, order = reorder_graph(graph, reorder, symmetric=symmetrize)
        new_id = np.empty(n_nodes, np.int64)
        new_id[order] = np.arange(n_nodes)
        raw = raw._replace(features=raw.features[order], labels=raw.labels[order],
                           splits={k: new_id[np.asarray(v, np.int64)] for k, v in raw.splits.items()})
    if require_split or raw.splits:
        masks = _masks(raw, n_nodes)
    else:  # prediction: no split needed
        masks = [np.zeros(n_nodes, np.float32)] * 3
    return Cleaned(raw, gcn_norm(graph, norm), order, masks, report, norm, symmetrize, reorder)


def _dense(features: Any) -> np.ndarray:
    """Features as a dense float32 array (a scipy matrix expanded: an accelerator's plan asked for it)."""
    return features.toarray().astype(np.float32) if sp.issparse(features) else np.asarray(features, np.float32)


def lay_out(cleaned: Cleaned, backend: str, *, feature_norm: str = "row",
            feature_statistics: dict[str, Any] | None = None, on_device: bool = True, runs: int = 1) -> Prepared:
    """The device half of :func:`prepare`: ``cleaned`` laid out for the concrete ``backend`` the plan
    decided (:func:`jaxgcn.plan.backend_for`; ``auto`` is refused: the decision is not made here) and
    its features normalized (and moved to the device unless ``on_device`` is False), in the layout the
    plan gives sparse features for a job of ``runs`` runs (:func:`jaxgcn.plan.features_layout`)."""
    raw, graph, order, masks, report = cleaned.raw, cleaned.graph, cleaned.order, cleaned.masks, cleaned.report
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} reached lay_out undecided; decide it first with "
                         f"jaxgcn.plan.backend_for (one of {BACKENDS})")
    n_nodes, norm, symmetrize = graph.n_nodes, cleaned.norm, cleaned.symmetrize
    if backend == "dense":
        dense_bytes = 4 * n_nodes * n_nodes
        if dense_bytes > available_bytes() // 2:
            raise ValueError(f"backend='dense': {raw.name} needs a {n_nodes:,} x {n_nodes:,} adjacency, "
                             f"{dense_bytes / GiB:,.1f} GiB, more than half the {available_bytes() / GiB:.1f} GiB "
                             "available; use backend='auto' (sparse) instead")
        graph = with_dense(graph)
    if backend == "csr":  # the plan refused it where the kernel cannot run (jaxgcn.plan.backend_for)
        # sym-normalized undirected graphs are symmetric by construction: no transposed copy, no check;
        # the edge list is dropped so the device holds the adjacency once.
        graph = with_csr(graph, symmetric=True if symmetrize and norm in ("sym", "none") else None,
                         keep_edges=False)
    if backend == "gather":  # the same symmetry rule; the edge list stays (Graph.n_edges reads it)
        graph = with_lists(graph, symmetric=True if symmetrize and norm in ("sym", "none") else None)
    stats = feature_statistics if feature_statistics is not None else feature_stats(raw.features, feature_norm)
    feats = normalize_features(raw.features, feature_norm, stats)
    layout = features_layout(backend, n_nodes, int(raw.features.shape[1]),  # no scatter on an accelerator
                             nnz=int(feats.nnz) if sp.issparse(feats) else None, runs=runs)
    if not on_device:
        from jaxgcn.native.csr import csr_from_scipy

        x = csr_from_scipy(feats) if sp.issparse(feats) else np.asarray(feats, np.float32)
    else:
        sparse = sp.issparse(feats) and layout != "dense"
        if sparse and layout == "lists":
            x = jax.device_put(feature_lists.from_scipy(feats))
        else:
            x = sparse_features(feats, layout=layout) if sparse else jnp.asarray(_dense(feats), jnp.float32)
    n_classes = n_outputs(raw.labels)
    info = {"dataset": raw.name, "n_nodes": n_nodes, "n_edges": report["undirected_edges"],
            "n_features": int(raw.features.shape[1]), "n_classes": n_classes, **report,
            **({"task": "multilabel"} if raw.labels.ndim == 2 else {}),
            "split_sizes": {k: int(len(v)) for k, v in raw.splits.items()}, "reorder": cleaned.reorder,
            "class_names": raw.class_names, "norm": norm, "feature_norm": feature_norm, "feature_stats": stats,
            "symmetrized": symmetrize}
    if order is not None:
        info["node_order"] = order
    if not on_device:
        data = TrainData(graph, x, np.asarray(raw.labels, label_dtype(raw.labels)), *masks)
        return Prepared(data, n_classes, backend, info)
    data = TrainData(jax.device_put(graph), x, jnp.asarray(raw.labels, label_dtype(raw.labels)),
                     *map(jnp.asarray, masks))
    return Prepared(data, n_classes, backend, info)


def with_random_splits(prepared: Prepared, labels: np.ndarray, n_splits: int, *, per_class: int = 20,
                       n_val: int = 500, n_test: int = 1000, seed: int = 0) -> Prepared:
    """Replace the split masks with ``n_splits`` random Planetoid-style splits stacked as
    [n_splits, n_nodes] masks (split ``k`` drawn with seed ``seed + k``), for batched runs.
    ``labels`` are the prepared graph's (in its node order).

    >>> p = prepare(load_dataset("cora"))
    >>> q = with_random_splits(p, load_dataset("cora").labels, 3)
    >>> q.data.train_mask.shape, float(q.data.train_mask[0].sum())
    ((3, 2708), 140.0)
    """
    if n_splits < 1:
        raise ValueError(f"n_splits={n_splits}: give at least one split")
    splits = [planetoid_split(labels, per_class=per_class, n_val=n_val, n_test=n_test, seed=seed + k,
                              class_names=prepared.info.get("class_names")) for k in range(n_splits)]
    return with_splits(prepared, splits, f"{n_splits} random (seed {seed}..{seed + n_splits - 1})", input_order=False)


def with_splits(prepared: Prepared, splits: list[dict[str, np.ndarray]], name: str, *,
                input_order: bool = True) -> Prepared:
    """Replace the split masks with ``splits`` (``{"train"|"val"|"test": node ids}`` each) stacked
    as [len(splits), n_nodes] masks, for batched runs. ``input_order``: the ids number the nodes as
    the input files did (mapped through a renumbering, ``info["node_order"]``); else as prepared."""
    n = prepared.info["n_nodes"]
    order = prepared.info.get("node_order")
    position = None
    if input_order and order is not None:
        position = np.empty(n, np.int64)
        position[np.asarray(order)] = np.arange(n)  # input node order[i] is prepared node i
    stacks: dict[str, list[np.ndarray]] = {"train": [], "val": [], "test": []}
    for split in splits:
        for key in stacks:
            idx = np.asarray(split[key], np.int64)
            mask = np.zeros(n, np.float32)
            mask[idx if position is None else position[idx]] = 1.0
            stacks[key].append(mask)
    masks = {k: jnp.asarray(np.stack(v)) for k, v in stacks.items()}
    data = prepared.data._replace(train_mask=masks["train"], val_mask=masks["val"], test_mask=masks["test"])
    info = {**prepared.info, "split": name, "split_sizes": {k: int(v[0].sum()) for k, v in stacks.items()}}
    return prepared._replace(data=data, info=info)


def load_protocol(name: str, *, splits: int = 1, seed: int = 0, data_root: str | Path | None = None,
                  download: bool = True, **prepare_args: Any) -> Prepared:
    """A catalogue dataset prepared for its own evaluation protocol, as ``jaxgcn train --dataset
    NAME --splits K`` prepares it: Shchur et al.'s 20/30-per-class splits drawn with seeds
    ``seed``..``seed + K - 1`` or WikiCS's first K official splits, stacked for a batch (each run
    names its split: ``Entry.split``, as :func:`jaxgcn.batched.entries_for` numbers them); the one
    split Planetoid and OGB datasets ship.
    ``prepare_args`` go to :func:`prepare`; ``info`` names the split, protocol and metric.

    Four lines reproduce ``jaxgcn train --dataset amazon-photo --splits 10 --seeds 2``::

        from jaxgcn import datasets, entries_for, fit_runs
        p = datasets.load_protocol("amazon-photo", splits=10)
        res = fit_runs(p.data, p.n_classes, entries_for([0, 1], splits=10))
        print(res.metrics["test_acc"].mean(), res.metrics["test_acc"].std())
    """
    protocol = protocol_of(name)
    if protocol is None:
        raise ValueError(f"dataset {name!r}: not a catalogue dataset, so it has no protocol; see `jaxgcn datasets`")
    raw = load_dataset(name, data_root=data_root, download=download)
    prepared = prepare(raw, **prepare_args)
    if protocol in ("per-class-20-30", "wikics"):
        prepared = with_splits(prepared, protocol_splits(raw, protocol, splits, seed), protocol_name(protocol, splits,
                                                                                                       seed))
    elif splits != 1:
        raise ValueError(f"splits={splits}: dataset {name} ships one split ({protocol} protocol); draw several with "
                         "with_random_splits")
    return prepared._replace(info={**prepared.info, **protocol_info(name)})


def split_codes(prepared: Prepared, index: int = 0) -> np.ndarray:
    """Split ``index`` (of the stacked ``--splits K``; the first by default) of prepared data per
    INPUT node (the order of the files, before any renumbering): [n] int8 codes of
    :data:`jaxgcn.datasets.splits.SPLIT_CODES` (0: in no split)."""
    n = prepared.info["n_nodes"]
    codes = np.zeros(n, np.int8)
    for name, code in SPLIT_CODES.items():
        mask = np.asarray(getattr(prepared.data, f"{name}_mask")).reshape(-1, n)[index]
        codes[mask > 0] = code
    order = prepared.info.get("node_order")
    if order is None:
        return codes
    out = np.zeros(n, np.int8)
    out[np.asarray(order)] = codes  # node i of the prepared graph is input node order[i]
    return out


# Importing the submodule jaxgcn.datasets.synthetic bound the package's name ``synthetic`` to that
# module; the face's ``synthetic`` is the function, as it always was.
sys.modules["jaxgcn.datasets"].synthetic = synthetic  # type: ignore[attr-defined]
