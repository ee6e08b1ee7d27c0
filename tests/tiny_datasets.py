"""Small dataset files in the published formats, written by the tests themselves, so that the
download, format and protocol tests run in every clone (the published files, where a test needs
them, come from the shared folder: conftest.shared_file).

- :func:`write_gnnbench`: Shchur et al.'s gnn-benchmark npz, with the keys, dtypes and layout of
  the published cora.npz (``adj_*`` and ``attr_*`` CSR parts, int8 ``labels``, ``node_names``,
  ``class_names``), a few KB.
- :func:`write_planetoid`: the eight raw Planetoid files ``ind.<stem>.*`` (pickled SciPy CSR
  matrices, one-hot NumPy arrays, a ``defaultdict`` graph, a ``test.index`` text file).
"""

from __future__ import annotations

import collections
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

# gnn-benchmark: 3 classes of 60 nodes (more than the 20 + 30 per class that the loader keeps), each
# node linked to the next two around a ring and to one node three classes' worth away
GB_CLASSES, GB_PER_CLASS, GB_FEATURES = 3, 60, 12
GB_NODES = GB_CLASSES * GB_PER_CLASS


def write_gnnbench(path: Path, seed: int = 0) -> Path:
    """A gnn-benchmark npz at ``path`` (``seed`` changes its content, so two files differ)."""
    rng = np.random.default_rng(seed)
    n = GB_NODES
    senders = np.concatenate([np.arange(n)] * 3)
    receivers = np.concatenate([(np.arange(n) + 1) % n, (np.arange(n) + 2) % n, rng.permutation(n)])
    keep = senders != receivers
    adj = sp.csr_matrix((np.ones(int(keep.sum()), np.float32), (senders[keep], receivers[keep])), shape=(n, n))
    adj.sum_duplicates()
    adj.data[:] = 1.0
    attr = sp.csr_matrix((rng.random((n, GB_FEATURES)) < 0.25).astype(np.float32))
    labels = rng.permutation(np.repeat(np.arange(GB_CLASSES), GB_PER_CLASS)).astype(np.int8)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        np.savez(f, adj_data=adj.data, adj_indices=adj.indices.astype(np.int32),
                 adj_indptr=adj.indptr.astype(np.int32), adj_shape=np.array(adj.shape, np.int64),
                 attr_data=attr.data, attr_indices=attr.indices.astype(np.int32),
                 attr_indptr=attr.indptr.astype(np.int32), attr_shape=np.array(attr.shape, np.int64),
                 labels=labels, node_names=np.array([f"n{i}" for i in range(n)]),
                 class_names=np.array([f"class_{c}" for c in range(GB_CLASSES)]))
    return path


# Planetoid: 560 nodes: train 0..19, val 20..519 (Kipf's fixed 500), test 540..559
P_ALLX, P_TEST, P_F = 540, 20, 8


def planetoid_parts() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    n = P_ALLX + P_TEST
    labels = np.arange(n) % 3
    onehot = np.eye(3, dtype=np.int64)[labels]
    x = sp.csr_matrix((rng.random((n, P_F)) < 0.3).astype(np.float32))
    test = rng.permutation(np.arange(P_ALLX, n))
    graph = collections.defaultdict(list, {i: [int((i + 1) % n), int((i + 5) % n)] for i in range(n)})
    return {"x": x[:20], "y": onehot[:20], "allx": x[:P_ALLX], "ally": onehot[:P_ALLX], "tx": x[np.sort(test)],
            "ty": onehot[np.sort(test)], "graph": graph, "test.index": "\n".join(map(str, test)) + "\n"}


def write_planetoid(folder: Path, stem: str = "tiny", **override: Any) -> Path:
    """``folder/ind.<stem>.*``; ``override`` replaces a part (bytes and text are written as given)."""
    folder.mkdir(parents=True, exist_ok=True)
    for part, obj in {**planetoid_parts(), **override}.items():
        path = folder / f"ind.{stem}.{part}"
        if isinstance(obj, bytes):
            path.write_bytes(obj)
        elif isinstance(obj, str):
            path.write_text(obj)
        else:
            path.write_bytes(pickle.dumps(obj, protocol=4))
    return folder


def tiny_row(path: Path, name: str):
    """A gnn-benchmark catalogue row for the file :func:`write_gnnbench` wrote at ``path`` (served as
    ``<name>/<path.name>``), its size and SHA-256 published as a real row's are, on Shchur et al.'s
    protocol: add it with ``monkeypatch.setitem(CATALOGUE, name, row)``."""
    import hashlib

    from jaxgcn.datasets.catalogue import Dataset, Source

    source = Source(f"https://upstream.invalid/{path.name}", path.name, path.stat().st_size,
                    hashlib.sha256(path.read_bytes()).hexdigest())
    return Dataset(name, "gnnbench", (source,), GB_NODES, 0, GB_FEATURES, GB_CLASSES, "per-class-20-30", "test",
                   "test", stem=path.stem)


def write_multilabel_npz(root):
    """``npz:DIR`` of a 400-node synthetic graph whose labels.npy is [n, 4] int8 (1, 0; -1 = missing)."""
    from jaxgcn.datasets import synthetic

    root.mkdir()
    raw = synthetic(400, n_classes=3, n_features=8, seed=0)
    sp.save_npz(root / "adjacency.npz", sp.coo_matrix((np.ones(len(raw.senders)), (raw.receivers, raw.senders)),
                                                      shape=(400, 400)).tocsr())
    x = raw.features.toarray() if sp.issparse(raw.features) else np.asarray(raw.features)
    np.save(root / "features.npy", x.astype(np.float32))
    c = np.asarray(raw.labels)
    y = np.stack([c == 0, c == 1, c == 2, c <= 1], axis=1).astype(np.int8)
    y[::9, 2] = -1
    np.save(root / "labels.npy", y)
    order = np.random.default_rng(0).permutation(400)
    np.savez(root / "splits.npz", train=order[:80], val=order[80:200], test=order[200:])
    return root

