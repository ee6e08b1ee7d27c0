"""A saved model (``--checkpoint``) and the data prepared the way it was trained: what
``evaluate``, ``predict`` and ``plot embeddings`` start from. The work is :mod:`jaxgcn.app.inference`'s;
this module reads the flags, prints its notes and words its refusals in flags."""

from __future__ import annotations

import argparse
from typing import Any, NamedTuple

import numpy as np

from jaxgcn import checkpoint
from jaxgcn.app import inference
from jaxgcn.app.inference import checkpoint_model
from jaxgcn.checkpoint import Checkpoint
from jaxgcn.cli import data, records
from jaxgcn.datasets import Prepared, RawGraph

__all__ = ["ForCheckpoint", "checkpoint_model", "load_for_checkpoint", "logits"]


class ForCheckpoint(NamedTuple):
    """The checkpoint, the data prepared with its normalizations, and the input's node ids."""

    ck: Checkpoint
    prepared: Prepared
    node_ids: np.ndarray | None


# what each command does with the data, for the line that says the checkpoint chose it
DOING = {"evaluate": "evaluating on", "predict": "predicting on", "plot": "plotting the embeddings of"}
SYNTHETIC_FLAGS = ("nodes", "classes", "features", "avg_degree", "homophily", "data_seed")


def data_flags(options: dict[str, Any]) -> str:
    """The flags that name the data of a command's ``options`` (:func:`jaxgcn.cli.records.options`).

    >>> data_flags({"dataset": "citeseer", "data_dir": None, "edges": None})
    '--dataset citeseer'
    """
    if options.get("edges") is not None:
        return records.own_files(options)
    named = ("dataset", "data_dir", "ogb_split", *(SYNTHETIC_FLAGS if options.get("dataset") == "synthetic" else ()))
    return " ".join(f"--{k.replace('_', '-')} {options[k]}" for k in named if options.get(k) is not None)


def _features_fix(args: argparse.Namespace, ck: Checkpoint) -> str:
    """How to give the data a checkpoint was trained on, naming its flags where it records them and
    they differ from the command's."""
    options = records.recorded_options(ck.meta)
    recorded = data_flags(options) if options is not None else f"--dataset {ck.meta.get('dataset')}"
    if recorded == data_flags(records.options(args)):
        return "give features in the same feature space"
    what = "your own files" if options is not None and options.get("edges") is not None else ck.meta.get("dataset")
    return f"it was trained on {what}: pass {recorded}"


def _flags_split(args: argparse.Namespace) -> bool:
    return args.split_file is not None or args.train_frac is not None or args.split == "random"


def _say(note: str | None) -> None:
    if note is not None:
        print(note)


def _identity_features(args: argparse.Namespace, ck: Checkpoint, raw: RawGraph) -> RawGraph:
    try:
        adapted = inference.identity_features(ck, raw, one_hot_now=args.edges is not None and args.features is None,
                                              path=args.checkpoint, source=args.edges)
    except inference.IdentityFeaturesNeeded:
        raise ValueError(f"checkpoint {args.checkpoint}: the model was trained on one-hot node ids (files without "
                         "--features); give your graph with --edges and without --features") from None
    _say(adapted.note)
    return adapted.raw


def _evaluation_split(args: argparse.Namespace, ck: Checkpoint, raw: RawGraph, flags_split: bool) -> RawGraph:
    try:
        adapted = inference.evaluation_split(ck, raw, split_given=flags_split, own_split=args.edges is None,
                                             on=args.on, path=args.checkpoint)
    except inference.NoSavedSplit:
        raise ValueError(f"--checkpoint {args.checkpoint}: holds no training split for these nodes; pass the split "
                         "it was trained on with --split-file FILE (`jaxgcn train --save-split FILE` writes it)") \
            from None
    except inference.InflatedScore as exc:
        raise ValueError(f"--on {exc.on}: {exc.seen} of the {exc.total} {exc.on} nodes of this split trained the "
                         f"model (its split: {exc.trained_split}), so its score would be inflated; drop the split "
                         "flags to evaluate on the model's own split, or pass the file `jaxgcn train --save-split` "
                         "wrote") from None
    _say(adapted.note)
    return adapted.raw


def load_for_checkpoint(args: argparse.Namespace, need_split: bool) -> ForCheckpoint:
    """The checkpoint, and the data prepared the way it was trained (normalizations from the checkpoint).

    With ``need_split`` (evaluate) and no split flags, the split is the one the model was trained on
    (saved in the checkpoint); a split given by flags must not evaluate the model's training nodes."""
    directory, note = checkpoint.resolve_run(args.checkpoint, args.run)
    _say(note)
    ck = checkpoint.load(directory)
    if getattr(args, "dataset_origin", None) == f"--checkpoint {args.checkpoint}":
        print(f"{DOING[args.command]} {args.dataset}, the dataset the checkpoint records (--dataset to change)")
    if args.dataset is None and args.edges is None:  # unreadable when the flags were parsed: no dataset chosen
        raise ValueError(f"--checkpoint {args.checkpoint}: name the data to use with --dataset NAME or --edges FILE")
    flags_split = _flags_split(args)
    raw = data.raw_graph(args, require_labels=need_split, split=need_split and (flags_split or ck.split is None))
    if not need_split:
        raw = raw._replace(splits={} if args.edges is not None else raw.splits)
    raw = _identity_features(args, ck, raw)
    inference.check_features(ck, raw, path=args.checkpoint, fix=_features_fix(args, ck))
    if need_split and flags_split and not data.split_given(args):  # --split random: drawn as train draws it
        raw = raw._replace(splits=data.planetoid_splits(args, raw))
    if need_split:
        raw = _evaluation_split(args, ck, raw, flags_split)
    prepared = inference.prepare_as_trained(ck, raw, require_split=need_split, labels_source=args.labels)
    return ForCheckpoint(ck, prepared, raw.node_ids)


def logits(loaded: ForCheckpoint, embed: bool = False) -> Any:
    """The saved model's logits (or, with ``embed``, its last hidden layer) on the prepared graph."""
    return inference.logits(loaded.ck, loaded.prepared, embed=embed)
