"""What the command line's error messages say beyond argparse's: the flag a library parameter is
set by (:func:`to_flags`), and why a command takes no flag it was given (:func:`unknown_flag`: a
flag of another command, a typo, an abbreviation). Imports no JAX: the parser uses it."""

from __future__ import annotations

import argparse
import difflib
import re

# Library parameter -> the flag that sets it (every field jaxgcn.cli.config maps, the engine's keyword
# arguments the CLI passes through, and the data and plot functions' parameters their errors name).
FLAGS = {
    "hidden": "--hidden", "layers": "--layers", "dropout": "--dropout", "bias": "--bias", "residual": "--residual",
    "layer_norm": "--layer-norm", "backend": "--backend", "dropout_rng": "--dropout-rng",
    "chunk_edges": "--chunk-edges", "aggregate_first": "--aggregate-first",
    "lr": "--lr", "weight_decay": "--weight-decay", "l2": "--l2", "epochs": "--epochs",
    "early_stopping": "--early-stopping", "window": "--window", "patience": "--patience",
    "clip_norm": "--clip-norm", "optimizer": "--optimizer", "task": "--task",
    "n_devices": "--devices", "memory_budget": "--memory-budget", "n_splits": "--splits",
    # load_raw's data_dir; load_ogb's split (the OGB split folder: the CLI's --split is public/random,
    # which no library parameter of that name takes); plots' project_2d method, sweep_heatmap axes and held values
    "data_dir": "--data-dir", "split": "--ogb-split", "method": "--method", "x": "--x", "y": "--y",
    "fix": "--fix",
}
_PARAM = re.compile(r"^([a-z_][a-z0-9_]*)[=:]")


def to_flags(message: str) -> str:
    """A library message that begins with a config parameter (``lr=-1.0 must be ...``) gets the flag
    that sets it in front; any other message is returned as it is. :func:`jaxgcn.cli.main` applies
    it to every error it prints.

    >>> to_flags("lr=-1.0 must be a positive number")
    '--lr: lr=-1.0 must be a positive number'
    >>> to_flags("--lr inf: not a finite number")
    '--lr inf: not a finite number'
    """
    match = _PARAM.match(message)
    if match is None or match.group(1) not in FLAGS:
        return message
    return f"{FLAGS[match.group(1)]}: {message}"


def flags_of(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string ``parser`` takes (``-h``, ``--help``, ``--out``, ...)."""
    return {flag for action in parser._actions for flag in action.option_strings}


# why `jaxgcn evaluate` and `predict` take no flag of the data's preparation and predict none of the
# split (:func:`drop_flags`): accepted, the flag would be silently ignored
PREPARED_AS_TRAINED = ("--feature-norm", "--norm", "--reorder")
SPLIT_FLAGS = ("--split", "--splits", "--train-per-class", "--val", "--test", "--train-frac", "--val-frac",
               "--test-frac", "--split-file", "--save-split")
NOT_APPLICABLE = {
    **{f: "the model is applied with the normalizations it was trained with (its checkpoint records them); "
          "drop the flag" for f in PREPARED_AS_TRAINED},
    **{f: "it labels every node and uses no split; drop the flag" for f in SPLIT_FLAGS},
    "--save-split": "it draws no split to save; `jaxgcn train --save-split FILE` writes the split a model is "
                    "trained on",
}
SCORES_A_CHECKPOINT = ("evaluate", "predict")


def unknown_flag(command: argparse.ArgumentParser, commands: dict[str, argparse.ArgumentParser], token: str) -> str:
    """The message for ``token``, a flag ``command`` does not take: why, where another command takes it;
    else the closest of its flags (a typo), or those it begins (a prefix, which is not accepted)."""
    name, prog = token.split("=", 1)[0], command.prog
    takers = [f"`jaxgcn {n}`" for n, other in commands.items() if name in flags_of(other)]
    if takers:
        reason = NOT_APPLICABLE.get(name) if prog.split()[-1] in SCORES_A_CHECKPOINT else None
        named = takers[0] if len(takers) == 1 else f"{', '.join(takers[:-1])} and {takers[-1]}"
        return f"`{prog}` takes no {name}" + (f": {reason}" if reason else
                                                f"; {named} {'takes' if len(takers) == 1 else 'take'} it")
    own = sorted(flags_of(command))
    begun = [f for f in own if f.startswith(name)] if len(name) > 2 else []
    if begun:
        return f"unrecognized argument {name}: flags are not abbreviated; did you mean {' or '.join(begun)}?"
    close = difflib.get_close_matches(name, own, n=3, cutoff=0.6)
    return f"unrecognized argument {name}" + (f"; did you mean {' or '.join(close)}?" if close else "")
