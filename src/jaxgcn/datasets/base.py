"""Host-side dataset records shared by the loaders."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np


class RawGraph(NamedTuple):
    """A node-classification dataset as read from files, before cleaning (host NumPy/SciPy).

    Attributes:
        name: dataset name.
        senders: [n_input_edges] int64 source ids, as listed in the files (may repeat, loop, be one-way).
        receivers: [n_input_edges] int64 target ids.
        features: [n_nodes, n_features] ``scipy.sparse.csr_matrix`` or dense ``np.ndarray``.
        labels: [n_nodes] int32 class ids; -1 marks an unlabelled node.
        splits: ``{"train"|"val"|"test": int array of node ids}``.
        weights: optional [n_input_edges] edge weights.
        class_names: optional list of class names, index = class id.
        node_ids: optional [n_nodes] original node ids (as text) of files that name nodes.
        official_splits: optional tuple of the dataset's several official splits, each a dict like
            ``splits`` (e.g. WikiCS's 20 train/val sets sharing one test set); ``splits`` is the
            first of them. None when the dataset ships one split or none.
    """

    name: str
    senders: np.ndarray
    receivers: np.ndarray
    features: Any
    labels: np.ndarray
    splits: dict[str, np.ndarray]
    weights: np.ndarray | None = None
    class_names: list[str] | None = None
    node_ids: np.ndarray | None = None
    official_splits: tuple[dict[str, np.ndarray], ...] | None = None


class CacheNote(UserWarning):
    """A parse cache file was discarded (damaged, truncated, edited) and the sources parsed again
    (:mod:`jaxgcn.datasets.parsed`), or a cache folder cannot be used. Defined here, beside the
    records, so the command line can show it as a note without importing SciPy."""


def check_own_files(edges: Any, labels: Any, features: Any) -> None:
    """Files that only go with your own graph (``--edges``), refused without it: ``--labels``, and
    ``--features`` naming a file (a number is ``--dataset synthetic``'s feature count). Reads no
    file: ``jaxgcn`` checks the flags before it imports JAX, :mod:`jaxgcn.app.data` again."""
    if edges is not None:
        return
    if labels is not None:
        raise ValueError(f"--labels {labels}: needs --edges FILE (your own graph); give --edges, or drop --labels "
                         "to use --dataset")
    if features is not None and not str(features).isdigit():
        raise ValueError(f"--features {features}: a features file needs --edges FILE; with "
                         "--dataset synthetic give a feature count")
