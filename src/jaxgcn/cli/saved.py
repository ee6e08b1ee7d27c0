"""A saved model (``--checkpoint``) and the data prepared the way it was trained: what
``evaluate``, ``predict`` and ``plot embeddings`` start from. The work is :mod:`jaxgcn.app.inference`'s;
this module reads the flags, prints its notes and words its refusals in flags."""

from __future__ import annotations

import argparse
from typing import Any


from jaxgcn.store import checkpoint
from jaxgcn.app import inference
from jaxgcn.app.inference import Saved, checkpoint_model
from jaxgcn.store.checkpoint import Checkpoint
from jaxgcn.cli import data, records
from jaxgcn.datasets import RawGraph

__all__ = ["Saved", "checkpoint_model", "load_for_checkpoint", "logits"]


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


def _as_trained(args: argparse.Namespace, ck: Checkpoint, raw: RawGraph, need_split: bool) -> Saved:
    """:func:`jaxgcn.app.inference.as_trained` on the flags' data, its refusals worded in flags."""
    flags_split = _flags_split(args)
    drawn = need_split and flags_split and not data.split_given(args)  # --split random: drawn as train draws it
    try:
        return inference.as_trained(
            ck, raw, path=args.checkpoint, scoring=need_split, one_hot_now=args.edges is not None and args.features
            is None, split_given=flags_split, own_split=args.edges is None, on=getattr(args, "on", "test"),
            source=args.edges, features_fix=_features_fix(args, ck), labels_source=args.labels, say=print,
            draw_split=(lambda r: data.planetoid_splits(args, r)) if drawn else None)
    except inference.IdentityFeaturesNeeded:
        raise ValueError(f"checkpoint {args.checkpoint}: the model was trained on one-hot node ids (files without "
                         "--features); give your graph with --edges and without --features") from None
    except inference.NoSavedSplit:
        raise ValueError(f"--checkpoint {args.checkpoint}: holds no training split for these nodes; pass the split "
                         "it was trained on with --split-file FILE (`jaxgcn train --save-split FILE` writes it)") \
            from None
    except inference.InflatedScore as exc:
        raise ValueError(f"--on {exc.on}: {exc.seen} of the {exc.total} {exc.on} nodes of this split trained the "
                         f"model (its split: {exc.trained_split}), so its score would be inflated; drop the split "
                         "flags to evaluate on the model's own split, or pass the file `jaxgcn train --save-split` "
                         "wrote") from None


def load_for_checkpoint(args: argparse.Namespace, need_split: bool) -> Saved:
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
    return _as_trained(args, ck, raw, need_split)


def logits(loaded: Saved, embed: bool = False) -> Any:
    """The saved model's logits (or, with ``embed``, its last hidden layer) on the prepared graph."""
    return inference.logits(loaded.ck, loaded.prepared, embed=embed)
