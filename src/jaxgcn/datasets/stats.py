"""A prepared dataset's statistics: size, what cleaning did, degrees, classes, features (``jaxgcn info``).

Host-side NumPy on a :class:`jaxgcn.datasets.Prepared` (prepared with ``on_device=False`` or not):
nothing here trains or touches a device.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from jaxgcn.datasets import Prepared


def feature_nonzeros(features: Any) -> int:
    """The non-zero entries of a [n_nodes, n_features] SciPy sparse or dense feature matrix.

    >>> feature_nonzeros(np.array([[0.0, 1.0], [2.0, 0.0]])), feature_nonzeros(sp.eye(3, format="csr"))
    (2, 3)
    """
    return int(features.nnz) if sp.issparse(features) else int(np.count_nonzero(features))


def degrees(prepared: Prepared) -> np.ndarray:
    """[n_nodes] entries per row of the normalized adjacency (self-loops included)."""
    graph = prepared.data.graph
    if graph.csr is not None:
        return np.diff(np.asarray(graph.csr.indptr))
    return np.bincount(np.asarray(graph.receivers), minlength=prepared.info["n_nodes"])


def class_counts(prepared: Prepared) -> np.ndarray:
    """[n_classes] labelled nodes per class (unlabelled nodes, label -1, are not counted); a
    multi-label graph's (labels [n_nodes, n_labels]) is :func:`label_counts`."""
    labels = np.asarray(prepared.data.labels)
    if labels.ndim != 1:
        raise ValueError(f"class_counts: labels of shape {labels.shape} are several labels per node; count them "
                         "with label_counts")
    return np.bincount(labels[labels >= 0], minlength=prepared.n_classes)


def label_counts(labels: np.ndarray, names: list[str]) -> dict[str, dict[str, int]]:
    """A multi-label graph's targets per label: ``{name: {"positive": n1, "negative": n0}}`` over
    the rows of ``labels`` ([n_nodes, n_labels]: 1, 0, NaN = missing, counted in neither).

    >>> label_counts(np.array([[1.0, 0.0], [0.0, np.nan], [1.0, 1.0]]), ["x", "y"])
    {'x': {'positive': 2, 'negative': 1}, 'y': {'positive': 1, 'negative': 1}}
    """
    return {str(name): {"positive": int(np.sum(labels[:, k] == 1)), "negative": int(np.sum(labels[:, k] == 0))}
            for k, name in enumerate(names)}


def split_label_counts(prepared: Prepared, names: list[str]) -> dict[str, dict[str, dict[str, int]]]:
    """:func:`label_counts` of each split's nodes (``train``, ``val``, ``test``; a split with no
    nodes is left out)."""
    d = prepared.data
    labels = np.asarray(d.labels)
    n = labels.shape[0]
    masks = {"train": d.train_mask, "val": d.val_mask, "test": d.test_mask}
    rows = {k: np.asarray(m).reshape(-1, n)[0] > 0 for k, m in masks.items() if m is not None}
    return {k: label_counts(labels[chosen], names) for k, chosen in rows.items() if chosen.any()}


def _label_stats(prepared: Prepared, names: list[str]) -> dict[str, Any]:
    """What ``info`` reports about the labels: a class count per class, or (labels [n_nodes,
    n_labels]) per label its positive and negative targets, over every node and per split."""
    labels = np.asarray(prepared.data.labels)
    if labels.ndim == 1:
        counts = class_counts(prepared)
        return {"task": "multiclass", "classes": {str(names[c]): int(counts[c]) for c in range(prepared.n_classes)},
                "unlabelled_nodes": int(np.sum(labels < 0))}
    return {"task": "multilabel", "labels": label_counts(labels, names),
            "split_labels": split_label_counts(prepared, names),
            "unlabelled_nodes": int(np.sum(np.all(np.isnan(labels), axis=1)))}


def dataset_stats(prepared: Prepared, feature_nnz: int) -> dict[str, Any]:
    """The statistics ``jaxgcn info`` prints and writes, as a JSON-able dict.

    Args:
        prepared: the dataset as :func:`jaxgcn.datasets.prepare` made it.
        feature_nnz: the non-zeros of the features as read, before normalization
            (:func:`feature_nonzeros`).
    """
    info = prepared.info
    n, n_features = info["n_nodes"], info["n_features"]
    degree = degrees(prepared)
    names = info.get("class_names") or [str(c) for c in range(prepared.n_classes)]
    return {
        "dataset": info["dataset"], "nodes": n, "edges": info["n_edges"], "input_edges": info["input_edges"],
        "duplicates_merged": info["duplicates_merged"], "self_loops_found": info["self_loops_found"],
        "one_way_edges_symmetrized": info["edges_symmetrized"], "isolated_nodes": info["isolated_nodes"],
        "directed": not info.get("symmetrized", True),
        "degree": {"min": int(degree.min()), "median": float(np.median(degree)), "mean": float(degree.mean()),
                   "p99": float(np.percentile(degree, 99)), "max": int(degree.max())},
        "features": n_features, "feature_nonzeros": feature_nnz,
        "feature_density": feature_nnz / max(1, n * n_features),
        **_label_stats(prepared, names), "split_sizes": info["split_sizes"],
        "backend": prepared.backend,
    }


def edge_count(n: int, directed: bool = False) -> str:
    """A cleaned graph's edge count with what it counts: undirected edges (each once), or directed
    ones for a graph kept one-way (``--no-symmetrize``); the one wording of ``train`` and ``info``.

    >>> edge_count(5278), edge_count(7, directed=True)
    ('5,278 undirected edges', '7 directed edges')
    """
    return f"{n:,} {'directed' if directed else 'undirected'} edge{'s' if n != 1 else ''}"


def listed_entries(stats: dict[str, Any]) -> int:
    """The input's distinct directed edge entries without self-loops (an edge listed both ways counts
    twice, one listed twice once): PyG's edge count, and what ``jaxgcn datasets`` lists from the
    catalogue. The cleaned graph's undirected edges count twice less the one-way edges it symmetrized.

    >>> listed_entries({"edges": 5278, "one_way_edges_symmetrized": 0, "directed": False})
    10556
    """
    if stats["directed"]:
        return int(stats["edges"])
    return 2 * int(stats["edges"]) - int(stats["one_way_edges_symmetrized"])


def self_loops_line(found: int) -> str:
    """What preparing did with the input's self-loops: ``from_edges`` keeps their weights on the
    diagonal of ``Â`` and adds weight-1 self-loops only where one is missing.

    >>> self_loops_line(0), self_loops_line(2)
    ('no self-loops in the input', '2 self-loops in the input: their weights kept on the diagonal')
    """
    if found == 0:
        return "no self-loops in the input"
    return f"{found:,} self-loop{'s' if found != 1 else ''} in the input: their weights kept on the diagonal"


def _classes_lines(stats: dict[str, Any]) -> list[str]:
    """The lines on the labels: the classes and their counts, or a multi-label graph's positive/negative
    targets per label, over every node and then per split."""
    unlabelled = stats["unlabelled_nodes"]
    if stats.get("task") == "multilabel":
        def counts(per_label: dict[str, dict[str, int]]) -> str:
            return ", ".join(f"{name} {c['positive']:,}/{c['negative']:,}" for name, c in per_label.items())

        return [f"  labels: {len(stats['labels'])} per node (multi-label; positive/negative targets): "
                + counts(stats["labels"]) + (f"; {unlabelled:,} nodes without a target" if unlabelled else "")] + [
            f"    {split} split: {counts(per_label)}" for split, per_label in stats["split_labels"].items()]
    classes = stats["classes"]
    sizes = list(classes.values())
    largest, smallest = max(sizes), max(min(sizes), 1)
    return [f"  classes: {len(classes)} (largest/smallest {largest / smallest:.1f}x); "
            + ", ".join(f"{name} {count:,}" for name, count in classes.items())
            + (f"; {unlabelled:,} unlabelled" if unlabelled else "")]


def describe(stats: dict[str, Any]) -> list[str]:
    """The lines ``jaxgcn info`` prints for :func:`dataset_stats`' result."""
    d = stats["degree"]
    return [
        f"{stats['dataset']}: {stats['nodes']:,} nodes, {edge_count(stats['edges'], stats['directed'])} (without "
        "self-loops)",
        f"  input: {stats['input_edges']:,} edge entries as listed, {listed_entries(stats):,} distinct without "
        f"self-loops (the count `jaxgcn datasets` lists); {stats['duplicates_merged']:,} duplicates merged, "
        f"{stats['one_way_edges_symmetrized']:,} one-way edges symmetrized; "
        + self_loops_line(stats["self_loops_found"]),
        f"  isolated nodes: {stats['isolated_nodes']:,}",
        f"  degree: min {d['min']}, median {d['median']:g}, mean {d['mean']:.2f}, 99th percentile "
        f"{d['p99']:g}, max {d['max']}",
        f"  features: {stats['features']:,} per node, {stats['feature_nonzeros']:,} non-zeros "
        f"({100 * stats['feature_density']:.2f}% dense)",
        *_classes_lines(stats),
        "  split: " + ", ".join(f"{k} {v:,}" for k, v in stats["split_sizes"].items()),
    ]
