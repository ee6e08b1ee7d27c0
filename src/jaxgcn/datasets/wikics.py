"""WikiCS (Mernyei & Cangea 2020, arXiv:2007.02901; github.com/pmernyei/wiki-cs-dataset): 11,701
Wikipedia computer-science articles, 300-dim GloVe features, 10 classes and 20 official splits,
read from the authors' ``dataset/data.json`` with the standard library's JSON parser.
"""

from __future__ import annotations

import json
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from jaxgcn.datasets.base import RawGraph
from jaxgcn.datasets.readers import read_text

WIKICS_KEYS = ("features", "labels", "links", "train_masks", "val_masks", "stopping_masks", "test_mask")


def _matrix(value: Any, key: str, where: str, dtype: Any, rows: int | None = None) -> np.ndarray:
    """A JSON list of equal-length lists of numbers as a 2-D array, or a ValueError naming the row."""
    if not isinstance(value, list) or not all(isinstance(row, list) for row in value):
        raise ValueError(f"{where}: {key!r} must be a list of lists (one per {'split' if rows is None else 'node'})")
    lengths = {len(row) for row in value}
    if len(lengths) > 1:
        first = len(value[0])
        bad = next(i for i, row in enumerate(value) if len(row) != first)
        raise ValueError(f"{where}: {key}[{bad}] has {len(value[bad])} entries but {key}[0] has {first}; every row "
                         "needs the same length")
    try:
        arr = np.array(value, dtype=dtype, ndmin=2)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {key!r} holds a value that is not a number; the file is damaged: download it "
                         "again") from None
    if rows is not None and arr.shape[0] != rows:
        raise ValueError(f"{where}: {key!r} has {arr.shape[0]} rows for {rows} nodes (the length of 'labels')")
    return arr


def _masks(value: Any, key: str, where: str, n: int) -> np.ndarray:
    """[splits, n] bool from a list of 0/1 (or true/false) lists; a flat list is one split."""
    if isinstance(value, list) and value and not isinstance(value[0], list):
        value = [value]
    masks = _matrix(value, key, where, np.float64)
    if masks.shape[1] != n:
        raise ValueError(f"{where}: {key!r} masks have {masks.shape[1]} entries for {n} nodes; one 0/1 per node")
    if not np.all((masks == 0) | (masks == 1)):
        raise ValueError(f"{where}: {key!r} holds {masks[(masks != 0) & (masks != 1)][0]:g}; a mask entry is 0 or 1")
    return masks.astype(bool)


def _edges(links: Any, where: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``links[i]`` lists the nodes that node i links to: edges i -> j."""
    if not isinstance(links, list) or len(links) != n or not all(isinstance(js, list) for js in links):
        got = f"{len(links)} lists" if isinstance(links, list) else type(links).__name__
        raise ValueError(f"{where}: 'links' must be one adjacency list per node ({n}); got {got}")
    counts = np.fromiter((len(js) for js in links), np.int64, count=n)
    try:
        receivers = np.fromiter(chain.from_iterable(links), np.int64, count=int(counts.sum()))
        ok = all(isinstance(j, int) and not isinstance(j, bool) for j in chain.from_iterable(links))
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(f"{where}: 'links' holds a value that is not an integer node id; the file is damaged")
    senders = np.repeat(np.arange(n, dtype=np.int64), counts)
    bad = np.flatnonzero((receivers < 0) | (receivers >= n))
    if bad.size:
        raise ValueError(f"{where}: links[{int(senders[bad[0]])}] names node {int(receivers[bad[0]])}, outside "
                         f"[0, {n}); ids index the 'labels' list")
    return senders, receivers


def load_wikics(path: str | Path) -> RawGraph:
    """Read WikiCS's ``data.json`` (``path``: the file or the folder holding it).

    Keys: ``features`` ([nodes][300] floats), ``labels`` ([nodes] class ids), ``links``
    (adjacency lists: ``links[i]`` holds j for each edge i -> j; ``prepare`` symmetrizes),
    ``train_masks``, ``val_masks``, ``stopping_masks`` (20 lists of 0/1 each) and ``test_mask``
    (one list). ``official_splits`` holds the 20 splits, ``splits`` the first; the authors report
    the mean over all 20.

    Each split maps ``val`` to ``stopping_masks[i]``: in the authors' training loop
    (``experiments/node_classification/train.py``) the stopping set drives early stopping, the
    role jaxgcn's validation set plays, while ``val_masks[i]`` selects hyperparameters; it is kept
    as the extra key ``val_select``. (PyG's ``WikiCS`` exposes both as ``stopping_mask`` and
    ``val_mask``.) ``test`` is the one shared ``test_mask``.
    """
    path = Path(path)
    file = path / "data.json" if path.is_dir() else path
    where = f"WikiCS file {file}"
    try:
        data = json.loads(read_text(file, "WikiCS"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}); download "
                         "dataset/data.json again from github.com/pmernyei/wiki-cs-dataset") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where}: the top level is a {type(data).__name__}; expected an object with the keys "
                         f"{', '.join(WIKICS_KEYS)}")
    missing = [k for k in WIKICS_KEYS if k not in data]
    if missing:
        raise ValueError(f"{where}: lacks the keys {', '.join(missing)}; WikiCS's data.json has "
                         f"{', '.join(WIKICS_KEYS)}")
    raw_labels = data["labels"]
    if (not isinstance(raw_labels, list) or not raw_labels
            or not all(isinstance(c, int) and not isinstance(c, bool) for c in raw_labels)):
        raise ValueError(f"{where}: 'labels' must be a non-empty list of integer class ids, one per node")
    labels = np.array(raw_labels, dtype=object).astype(np.float64)
    if labels.min() < 0 or labels.max() >= 2**31 - 1:
        raise ValueError(f"{where}: label {int(labels[(labels < 0) | (labels >= 2**31 - 1)][0])} is not a class id")
    n = labels.size
    features = _matrix(data["features"], "features", where, np.float32, rows=n)
    senders, receivers = _edges(data["links"], where, n)
    train, val = _masks(data["train_masks"], "train_masks", where, n), _masks(data["val_masks"], "val_masks", where, n)
    stop, test = (_masks(data["stopping_masks"], "stopping_masks", where, n),
                  _masks(data["test_mask"], "test_mask", where, n))
    if not train.shape[0] == val.shape[0] == stop.shape[0] or test.shape[0] != 1:
        raise ValueError(f"{where}: {train.shape[0]} train_masks, {val.shape[0]} val_masks, {stop.shape[0]} "
                         f"stopping_masks and {test.shape[0]} test_mask lists; expected as many train, val and "
                         "stopping masks (20) and one test mask")
    test_idx = np.flatnonzero(test[0]).astype(np.int64)
    official = tuple({"train": np.flatnonzero(train[i]).astype(np.int64),
                      "val": np.flatnonzero(stop[i]).astype(np.int64), "test": test_idx,
                      "val_select": np.flatnonzero(val[i]).astype(np.int64)} for i in range(train.shape[0]))
    return RawGraph("wikics", senders, receivers, features, labels.astype(np.int32), official[0],
                    official_splits=official)
