"""Train/validation/test splits."""

from __future__ import annotations

import numpy as np

from jaxgcn.core.data import SPLIT_CODES


def planetoid_split(labels: np.ndarray, per_class: int = 20, n_val: int = 500, n_test: int = 1000,
                    seed: int = 0, *, class_names: list[str] | None = None) -> dict[str, np.ndarray]:
    """Planetoid-style random split: ``per_class`` train nodes per class, then val and test.

    Val and test are drawn from the remaining labelled nodes (fewer when the graph is small: val
    gets at most a third of them and test the rest, up to ``n_test``). Unlabelled nodes (-1) are
    never used. ``class_names`` (index = class id) name the classes in error messages. Multi-label
    targets ([n, L]) have no classes to draw from: a ValueError names the flags that give their split.

    >>> s = planetoid_split(np.array([0, 1] * 50), per_class=5, n_val=20, n_test=30)
    >>> [len(s[k]) for k in ("train", "val", "test")]
    [10, 20, 30]
    """
    labels = np.asarray(labels)
    if labels.ndim == 2:
        raise ValueError(f"the labels are {labels.shape[1]} targets per node (a multi-label task): they have no "
                         "classes to draw a per-class split from (--train-per-class; own files' default split, "
                         "--split random); give the split with --train-frac F (a random fraction of the labelled "
                         "nodes) or --split-file FILE")
    rng = np.random.default_rng(seed)
    classes = np.unique(labels[labels >= 0])
    train = []
    for c in classes:
        members = np.flatnonzero(labels == c)
        if members.size < per_class:
            name = repr(str(class_names[c])) if class_names is not None and c < len(class_names) else str(c)
            raise ValueError(f"class {name} has {members.size} labelled nodes, fewer than the "
                             f"{per_class} train nodes per class asked for; lower --train-per-class")
        train.append(rng.choice(members, per_class, replace=False))
    train_idx = np.sort(np.concatenate(train)) if train else np.zeros(0, np.int64)
    rest = np.setdiff1d(np.flatnonzero(labels >= 0), train_idx)
    rest = rng.permutation(rest)
    n_val = min(n_val, rest.size // 3)
    n_test = min(n_test, rest.size - n_val)
    return {"train": train_idx, "val": np.sort(rest[:n_val]), "test": np.sort(rest[n_val:n_val + n_test])}


def per_class_split(labels: np.ndarray, train_per_class: int = 20, val_per_class: int = 30, seed: int = 0,
                    class_names: list[str] | None = None) -> dict[str, np.ndarray]:
    """The split of Shchur et al., "Pitfalls of Graph Neural Network Evaluation" (arXiv:1811.05868):
    per class ``train_per_class`` train and ``val_per_class`` val nodes, every other labelled node
    test. Unlabelled nodes (-1) are in no split.

    Each class, in class order, draws ``train_per_class + val_per_class`` of its nodes from
    ``np.random.default_rng(seed)`` (the first ones train), so a seed gives one split everywhere
    (not the nodes that gnn-benchmark's ``np.random.RandomState`` draws).

    A class with fewer than ``train_per_class + val_per_class`` labelled nodes is a ValueError
    naming it: gnn-benchmark's ``sample_per_class`` fails on such a class too (NumPy's "larger
    sample than population"); only for cora_full does its ``get_dataset`` first remove classes of
    50 or fewer nodes (``remove_underrepresented_classes``), which
    :func:`jaxgcn.datasets.gnnbench.load_gnnbench` does for every file. ``class_names``
    (index = class id) name classes in errors.

    Returns:
        ``{"train", "val", "test"}``: sorted int64 node ids.

    >>> s = per_class_split(np.array([0] * 60 + [1] * 55 + [-1] * 5))
    >>> [len(s[k]) for k in ("train", "val", "test")]
    [40, 60, 15]
    >>> per_class_split(np.array([0] * 60 + [1] * 7), class_names=["Theory", "Rare"])
    Traceback (most recent call last):
    ...
    ValueError: class 'Rare' (id 1) has 7 labelled nodes, fewer than the 20 train + 30 val per class ...
    """
    labels = np.asarray(labels)
    for what, n in (("train_per_class", train_per_class), ("val_per_class", val_per_class)):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"{what}={n!r}: must be an integer >= 0")
    rng = np.random.default_rng(seed)
    parts: dict[str, list[np.ndarray]] = {"train": [], "val": [], "test": []}
    need = train_per_class + val_per_class
    for c in np.unique(labels[labels >= 0]):
        members = np.flatnonzero(labels == c)
        if members.size < need:
            name = f"{str(class_names[c])!r} (id {c})" if class_names is not None and c < len(class_names) else str(c)
            raise ValueError(f"class {name} has {members.size} labelled nodes, fewer than the {train_per_class} train "
                             f"+ {val_per_class} val per class the split needs; lower train_per_class/val_per_class "
                             "or drop the class's nodes (gnn-benchmark removes classes of <= 50 nodes from cora_full)")
        drawn = rng.choice(members, need, replace=False)
        parts["train"].append(drawn[:train_per_class])
        parts["val"].append(drawn[train_per_class:])
        parts["test"].append(np.setdiff1d(members, drawn))
    return {k: np.sort(np.concatenate(v)).astype(np.int64) if v else np.zeros(0, np.int64) for k, v in parts.items()}


def fraction_split(labels: np.ndarray, train: float, val: float, test: float, seed: int = 0) -> dict[str, np.ndarray]:
    """Stratified random split by fractions of each class's labelled nodes (unlabelled: none).
    Multi-label targets ([n, L], NaN missing) have no classes: the fractions are of every labelled node
    (one with a target), drawn at random.

    >>> s = fraction_split(np.array([0] * 10 + [1] * 10), 0.6, 0.2, 0.2)
    >>> [len(s[k]) for k in ("train", "val", "test")]
    [12, 4, 4]
    >>> s = fraction_split(np.array([[1, 0]] * 15 + [[np.nan, np.nan]] * 5), 0.6, 0.2, 0.2)
    >>> [len(s[k]) for k in ("train", "val", "test")]
    [9, 3, 3]
    """
    fracs = {"train": train, "val": val, "test": test}
    for k, f in fracs.items():
        if not 0.0 < f < 1.0:
            raise ValueError(f"--{k}-frac {f}: a fraction must be in (0, 1)")
    if train + val + test > 1.0 + 1e-9:
        raise ValueError(f"--train-frac + --val-frac + --test-frac = {train + val + test:g} exceeds 1")
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    parts: dict[str, list[np.ndarray]] = {k: [] for k in fracs}
    groups = [np.flatnonzero(~np.all(np.isnan(labels), axis=1))] if labels.ndim == 2 else \
        [np.flatnonzero(labels == c) for c in np.unique(labels[labels >= 0])]
    for group in groups:
        members = rng.permutation(group)
        n_train = int(round(train * members.size))
        n_val = int(round(val * members.size))
        n_test = min(int(round(test * members.size)), members.size - n_train - n_val)
        parts["train"].append(members[:n_train])
        parts["val"].append(members[n_train:n_train + n_val])
        parts["test"].append(members[n_train + n_val:n_train + n_val + n_test])
    return {k: np.sort(np.concatenate(v)) if v else np.zeros(0, np.int64) for k, v in parts.items()}


SPLIT_NAMES = ("train", "val", "test")


def read_split_file(path: str, node_ids: np.ndarray) -> dict[str, np.ndarray]:
    """A CSV ``node,split`` (split: train, val or test) into node-index arrays; node ids as text."""
    from pathlib import Path

    from jaxgcn.datasets.readers import read_table

    table = read_table(Path(path), "split")
    if table.header is None or [c.lower() for c in table.header] != ["node", "split"]:
        raise ValueError(f"{table.name}: the first line must be the header node,split")
    ids, kinds = table.cells[:, 0], table.cells[:, 1]
    bad = np.flatnonzero(~np.isin(kinds, SPLIT_NAMES))
    if bad.size:
        raise ValueError(f"{table.name}: line {table.line(int(bad[0]))}: split {str(kinds[bad[0]])!r} is not one of "
                         "train, val, test")
    order = np.argsort(node_ids, kind="stable")
    pos = np.clip(np.searchsorted(node_ids[order], ids), 0, max(node_ids.size - 1, 0))
    missing = np.flatnonzero(node_ids[order][pos] != ids)
    if missing.size:
        raise ValueError(f"{table.name}: line {table.line(int(missing[0]))}: node {str(ids[missing[0]])!r} is not a "
                         "node of the graph")
    index = order[pos]
    uniq, counts = np.unique(index, return_counts=True)
    if np.any(counts > 1):
        raise ValueError(f"{table.name}: node {str(node_ids[uniq[np.argmax(counts > 1)]])!r} is listed twice")
    return {k: np.sort(index[kinds == k]) for k in SPLIT_NAMES}


def split_table(codes: np.ndarray, node_ids: np.ndarray) -> str:
    """``node,split`` CSV text (what ``--split-file`` reads) of per-node :data:`SPLIT_CODES`.

    >>> split_table(np.array([1, 0, 3], np.int8), np.array(["a", "b", "c"]))
    'node,split\\na,train\\nc,test\\n'
    """
    rows = [f"{node_ids[i]},{name}" for name, code in SPLIT_CODES.items() for i in np.flatnonzero(codes == code)]
    return "node,split\n" + "".join(row + "\n" for row in rows)
