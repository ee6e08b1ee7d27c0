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

    A split may also be given as a [n_nodes] boolean mask (PyG's habit); :func:`split_ids` turns it
    into node ids when the graph is prepared. PyG's views of the record, on the host: ``edge_index``
    ([2, n_input_edges]) and the boolean ``train_mask``, ``val_mask`` and ``test_mask``:

    >>> raw = RawGraph("toy", np.array([0, 1]), np.array([1, 2]), np.eye(3), np.array([0, 1, 0]),
    ...                {"train": np.array([0]), "test": np.array([False, True, True])})
    >>> raw.edge_index.tolist(), raw.labels[raw.test_mask].tolist(), raw.val_mask.any()
    ([[0, 1], [1, 2]], [1, 0], np.False_)
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

    @property
    def edge_index(self) -> np.ndarray:
        """[2, n_input_edges] int64: row 0 the senders, row 1 the receivers (PyG's layout), as read."""
        return np.stack([np.asarray(self.senders, np.int64), np.asarray(self.receivers, np.int64)])

    def mask(self, split: str) -> np.ndarray:
        """[n_nodes] bool: the nodes of ``split`` ("train", "val" or "test"; none if it is not given)."""
        n_nodes = int(np.shape(self.labels)[0])
        out = np.zeros(n_nodes, bool)
        out[split_ids(self.splits, n_nodes, self.name).get(split, np.zeros(0, np.int64))] = True
        return out

    @property
    def train_mask(self) -> np.ndarray:
        """[n_nodes] bool: the training nodes (:meth:`mask`)."""
        return self.mask("train")

    @property
    def val_mask(self) -> np.ndarray:
        """[n_nodes] bool: the validation nodes (:meth:`mask`)."""
        return self.mask("val")

    @property
    def test_mask(self) -> np.ndarray:
        """[n_nodes] bool: the test nodes (:meth:`mask`)."""
        return self.mask("test")


def split_ids(splits: dict[str, Any], n_nodes: int, name: str) -> dict[str, Any]:
    """``splits`` with every [n_nodes] boolean mask turned into its node ids (int64); node ids are
    kept as given (:func:`jaxgcn.datasets.prepare` checks them). A boolean mask of another length is
    refused, naming the split.

    >>> split_ids({"train": np.array([True, False, True]), "test": [1]}, 3, "toy")["train"].tolist()
    [0, 2]
    """
    out = dict(splits)
    for split, given in splits.items():
        values = np.asarray(given)
        if values.dtype != bool:
            continue
        if values.shape != (n_nodes,):
            raise ValueError(f"{name}: the {split} split is a boolean mask of shape {values.shape}; a mask needs one "
                             f"entry per node, shape ({n_nodes},) (or give node ids)")
        out[split] = np.flatnonzero(values).astype(np.int64)
    return out


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
