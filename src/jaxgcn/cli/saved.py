"""A saved model (``--checkpoint``) and the data prepared the way it was trained: what
``evaluate``, ``predict`` and ``plot embeddings`` start from."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, NamedTuple

import jax
import numpy as np
import scipy.sparse as sp

from jaxgcn import checkpoint
from jaxgcn.checkpoint import SPLIT_CODES, Checkpoint
from jaxgcn.cli import data
from jaxgcn.datasets import Prepared, RawGraph, prepare
from jaxgcn.models import GCNConfig, gcn


class ForCheckpoint(NamedTuple):
    """The checkpoint, the data prepared with its normalizations, and the input's node ids."""

    ck: Checkpoint
    prepared: Prepared
    node_ids: np.ndarray | None


def _flags_split(args: argparse.Namespace) -> bool:
    return args.split_file is not None or args.train_frac is not None or args.split == "random"


def load_for_checkpoint(args: argparse.Namespace, need_split: bool) -> ForCheckpoint:
    """The checkpoint, and the data prepared the way it was trained (normalizations from the checkpoint).

    With ``need_split`` (evaluate) and no split flags, the split is the one the model was trained on
    (saved in the checkpoint); a split given by flags must not evaluate the model's training nodes."""
    ck = checkpoint.load(args.checkpoint)
    meta = ck.meta
    flags_split = _flags_split(args)
    raw = data.raw_graph(args, require_labels=need_split, split=need_split and (flags_split or ck.split is None))
    if not need_split:
        raw = raw._replace(splits={} if args.edges is not None else raw.splits)
    raw = _identity_features(args, ck, raw)
    n_features = int(raw.features.shape[1])
    if n_features != meta["n_features"]:
        raise ValueError(f"checkpoint {args.checkpoint} was trained on {meta['n_features']} features; this data has "
                         f"{n_features}; give features in the same feature space")
    if need_split and flags_split and not data.split_given(args):  # --split random: drawn as train draws it
        raw = raw._replace(splits=data.planetoid_splits(args, raw))
    if need_split:
        raw = _evaluation_split(args, ck, raw, flags_split)
    prepared = prepare(raw, norm=meta["norm"] or "sym", feature_norm=meta["feature_norm"] or "row",
                       require_split=need_split, feature_statistics=meta.get("feature_stats"))
    if need_split and raw.class_names and meta["class_names"] and raw.class_names != meta["class_names"]:
        raise ValueError(f"{args.labels}: classes {raw.class_names} differ from the checkpoint's {meta['class_names']}")
    return ForCheckpoint(ck, prepared, raw.node_ids)


def positions(saved_ids: np.ndarray, ids: Any) -> np.ndarray:
    """For each of ``ids``, its index in ``saved_ids`` (-1 where absent).

    >>> positions(np.array(["b", "a", "c"]), ["a", "z", "c"]).tolist()
    [1, -1, 2]
    """
    ids = np.asarray(ids)
    if saved_ids.size == 0:
        return np.full(ids.size, -1, np.int64)
    order = np.argsort(saved_ids, kind="stable")
    pos = np.clip(np.searchsorted(saved_ids[order], ids), 0, saved_ids.size - 1)
    return np.where(saved_ids[order][pos] == ids, order[pos], -1)


def _identity_features(args: argparse.Namespace, ck: Checkpoint, raw: RawGraph) -> RawGraph:
    """A model trained on one-hot node ids (files without --features) reads column j as node
    ``node_ids[j]`` of its training graph: rebuild the one-hot features on those columns, by id, so
    renamed, added or removed nodes do not shift every other node's column. A node the model never saw
    gets an all-zero row (its prediction comes from its neighbours alone)."""
    one_hot_now = args.edges is not None and args.features is None
    trained = ck.meta.get("identity_features") or (
        ck.node_ids is not None and one_hot_now and ck.node_ids.size == ck.meta["n_features"])
    if trained and not one_hot_now:
        raise ValueError(f"checkpoint {args.checkpoint}: the model was trained on one-hot node ids (files without "
                         "--features); give your graph with --edges and without --features")
    if not (trained and one_hot_now):
        return raw
    if ck.node_ids is None:
        raise ValueError(f"checkpoint {args.checkpoint}: the model was trained on one-hot node ids but the node id "
                         "file is missing; save the model again")
    pos = positions(ck.node_ids, raw.node_ids)
    rows = np.flatnonzero(pos >= 0)
    x = sp.csr_matrix((np.ones(rows.size, np.float32), (rows, pos[rows])), shape=(pos.size, ck.node_ids.size))
    unseen = pos.size - rows.size
    if unseen:
        print(f"{unseen} node(s) of {args.edges} were not in the training graph: without identity features their "
              "predictions come from their neighbours alone")
    return raw._replace(features=x)


def _saved_codes(ck: Checkpoint, raw: RawGraph) -> np.ndarray | None:
    """The checkpoint's training split on this data's nodes ([n] codes), or None when the nodes cannot be
    matched (other node ids, another dataset)."""
    if ck.split is None:
        return None
    if ck.node_ids is not None and raw.node_ids is not None:
        pos = positions(ck.node_ids, raw.node_ids)
    elif ck.node_ids is None and raw.node_ids is None and raw.name == ck.meta.get("dataset") \
            and raw.labels.size == ck.split.size:
        pos = np.arange(raw.labels.size)
    else:
        return None
    return np.where(pos >= 0, ck.split[np.maximum(pos, 0)], 0).astype(np.int8)


def _evaluation_split(args: argparse.Namespace, ck: Checkpoint, raw: RawGraph, flags_split: bool) -> RawGraph:
    """The split evaluate scores: the training split saved in the checkpoint unless flags give one; a
    split from flags (or the data's own) whose scored nodes include training nodes is refused."""
    codes = _saved_codes(ck, raw)
    where = f"its split: {ck.meta.get('split') or 'public'}"
    if not flags_split and codes is not None:
        print(f"split: the model's training split, saved in {args.checkpoint} ({ck.meta.get('split') or 'public'})")
        return raw._replace(splits={k: np.flatnonzero(codes == c) for k, c in SPLIT_CODES.items()})
    if not flags_split and args.edges is not None:  # own files have no split of their own
        raise ValueError(f"--checkpoint {args.checkpoint}: holds no training split for these nodes; pass the split "
                         "it was trained on with --split-file FILE (`jaxgcn train --save-split FILE` writes it)")
    if codes is None or args.on in ("train", "labelled"):
        return raw
    scored = np.asarray(raw.splits.get(args.on, []), np.int64)
    seen = int(np.sum(codes[scored] == SPLIT_CODES["train"]))
    if seen:
        raise ValueError(f"--on {args.on}: {seen} of the {scored.size} {args.on} nodes of this split trained the model "
                         f"({where}), so its score would be inflated; drop the split flags to evaluate on the "
                         "model's own split, or pass the file `jaxgcn train --save-split` wrote")
    return raw


def checkpoint_model(ck: Checkpoint) -> tuple[GCNConfig, Any]:
    """The saved model's config (checked when the checkpoint was loaded) and params (device arrays)."""
    # the backend follows the graph as prepared here; chunking is a memory knob, not the model
    config = dataclasses.replace(checkpoint.model_config(ck.meta), backend="auto", chunk_edges=None)
    return config, jax.tree.map(jax.numpy.asarray, ck.params)


def logits(loaded: ForCheckpoint, embed: bool = False) -> Any:
    """The saved model's logits (or, with ``embed``, its last hidden layer) on the prepared graph."""
    config, params = checkpoint_model(loaded.ck)
    graph, x = loaded.prepared.data.graph, loaded.prepared.data.x
    return jax.jit(lambda p, g, x: gcn(config).apply(p, g, x, embed=embed))(params, graph, x)
