"""Train/validation/test splits."""

from __future__ import annotations

import numpy as np


def planetoid_split(labels: np.ndarray, per_class: int = 20, n_val: int = 500, n_test: int = 1000,
                    seed: int = 0) -> dict[str, np.ndarray]:
    """Planetoid-style random split: ``per_class`` train nodes per class, then val and test.

    Val and test are drawn from the remaining labelled nodes (fewer when the graph is small: val
    gets at most a third of them and test the rest, up to ``n_test``). Unlabelled nodes (-1) are
    never used.

    >>> s = planetoid_split(np.array([0, 1] * 50), per_class=5, n_val=20, n_test=30)
    >>> [len(s[k]) for k in ("train", "val", "test")]
    [10, 20, 30]
    """
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    classes = np.unique(labels[labels >= 0])
    train = []
    for c in classes:
        members = np.flatnonzero(labels == c)
        if members.size < per_class:
            raise ValueError(f"class {c} has {members.size} labelled nodes, fewer than the "
                             f"{per_class} train nodes per class asked for; lower --train-per-class")
        train.append(rng.choice(members, per_class, replace=False))
    train_idx = np.sort(np.concatenate(train)) if train else np.zeros(0, np.int64)
    rest = np.setdiff1d(np.flatnonzero(labels >= 0), train_idx)
    rest = rng.permutation(rest)
    n_val = min(n_val, rest.size // 3)
    n_test = min(n_test, rest.size - n_val)
    return {"train": train_idx, "val": np.sort(rest[:n_val]), "test": np.sort(rest[n_val:n_val + n_test])}
