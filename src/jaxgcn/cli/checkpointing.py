"""``train --save``, ``--checkpoint-every`` and ``--resume``: what a checkpoint records about its
training data, and the ``fit`` hooks that save and restore the run state."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any, Callable

from jaxgcn import checkpoint
from jaxgcn.cli.common import Say
from jaxgcn.cli.data import Loaded, split_codes
from jaxgcn.models import Execution, GCNConfig
from jaxgcn.train import TrainConfig


def facts(args: argparse.Namespace, loaded: Loaded, *, fingerprint: bool = True,
          split: bool = True) -> dict[str, Any]:
    """What a checkpoint records about its training data besides the params (``checkpoint.save``'s
    keyword arguments): node ids, the split per input node (the first of ``--splits K``: a
    several-run save replaces it per run), the data's SHA-256 fingerprint."""
    out = {"node_ids": loaded.node_ids, "split": split_codes(loaded.prepared) if split else None,
           "identity_features": args.edges is not None and args.features is None}
    if fingerprint:
        out["fingerprint"] = checkpoint.data_fingerprint(loaded.prepared.data)
    return out


def result_facts(result: Any) -> dict[str, Any]:
    """What the final checkpoint's ``extra`` records about the run's outcome (a fit result or a
    batch run's :class:`~jaxgcn.reports.RunSummary`): ``restored_epoch``,
    the epoch whose params it holds under patience early stopping (``None`` otherwise; ``epoch``
    is then the last epoch trained)."""
    return {"restored_epoch": result.restored_epoch}


def settings(args: argparse.Namespace, loaded: Loaded, model_config: GCNConfig, train_config: TrainConfig,
             execution: Execution) -> dict[str, Any]:
    """The settings a resumed run must share with the run it continues (as JSON values)."""
    info = loaded.prepared.info
    return {"model": json.loads(json.dumps(dataclasses.asdict(model_config))),
            "train": json.loads(json.dumps(dataclasses.asdict(train_config))),
            "execution": json.loads(json.dumps(dataclasses.asdict(execution))), "seed": args.seed,
            "dataset": info["dataset"], "n_nodes": info["n_nodes"]}


def _saver(args: argparse.Namespace, loaded: Loaded, model_config: GCNConfig, train_config: TrainConfig,
           execution: Execution, saved_facts: dict[str, Any], extra: dict[str, Any]) -> Callable[[Any], None]:
    def save_state(state: Any) -> None:
        checkpoint.save(args.save, state.params, model_config=model_config, train_config=train_config,
                        execution=execution, info=loaded.prepared.info, epoch=int(state.epoch), metrics={},
                        state=state, extra=extra,
                        **saved_facts)
    return save_state


def _resumer(args: argparse.Namespace, saved_facts: dict[str, Any], extra: dict[str, Any],
             say: Say) -> Callable[[Any], Any]:
    """Check that --resume's checkpoint was started with these settings and this data; return the
    hook that restores its state."""
    ck = checkpoint.load(args.resume)
    arrays = checkpoint.load_state(args.resume, ck.meta)
    checkpoint.check_resumable(ck.meta, extra, saved_facts["fingerprint"], f"--resume {args.resume}")
    say(f"resuming from epoch {ck.meta['epoch']} of {args.resume}")
    return lambda template: checkpoint.restore_state(template, arrays, str(args.resume))


def fit_hooks(args: argparse.Namespace, loaded: Loaded, model_config: GCNConfig, train_config: TrainConfig,
              execution: Execution, saved_facts: dict[str, Any] | None, say: Say) -> dict[str, Any]:
    """``fit`` keyword arguments for --checkpoint-every and --resume (``saved_facts``: :func:`facts`,
    computed here when not given)."""
    out: dict[str, Any] = {}
    if args.checkpoint_every is None and args.resume is None:
        return out
    saved_facts = saved_facts if saved_facts is not None else facts(args, loaded)
    extra = settings(args, loaded, model_config, train_config, execution)
    if args.checkpoint_every is not None:
        out.update(checkpoint_every=args.checkpoint_every,
                   on_checkpoint=_saver(args, loaded, model_config, train_config, execution, saved_facts, extra))
    if args.resume is not None:
        out["resume"] = _resumer(args, saved_facts, extra, say)
    return out
