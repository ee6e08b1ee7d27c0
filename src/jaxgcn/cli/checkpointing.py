"""``train --save``, ``--checkpoint-every`` and ``--resume``: what a checkpoint records about its
training data, and the ``fit`` hooks that save and restore the run state."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any, Callable

from jaxgcn import batch_state, checkpoint
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
             execution: Execution, layout: dict[str, Any] | None = None) -> dict[str, Any]:
    """The settings a resumed run must share with the run it continues (as JSON values).
    ``layout``: how the run is spread (a sharded run's devices and exchange; None on one device)."""
    info = loaded.prepared.info
    # "layout" None: one device (checkpoints written before sharded runs resumed have no key: also None)
    return {"model": json.loads(json.dumps(dataclasses.asdict(model_config))),
            "train": json.loads(json.dumps(dataclasses.asdict(train_config))),
            "execution": json.loads(json.dumps(dataclasses.asdict(execution))), "seed": args.seed,
            "dataset": info["dataset"], "n_nodes": info["n_nodes"], "layout": layout}


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
              execution: Execution, saved_facts: dict[str, Any] | None, say: Say,
              layout: dict[str, Any] | None = None) -> dict[str, Any]:
    """``fit`` (and ``fit_sharded``) keyword arguments for --checkpoint-every and --resume
    (``saved_facts``: :func:`facts`, computed here when not given; ``layout``: :func:`settings`)."""
    out: dict[str, Any] = {}
    if args.checkpoint_every is None and args.resume is None:
        return out
    saved_facts = saved_facts if saved_facts is not None else facts(args, loaded)
    extra = settings(args, loaded, model_config, train_config, execution, layout)
    if args.checkpoint_every is not None:
        out.update(checkpoint_every=args.checkpoint_every,
                   on_checkpoint=_saver(args, loaded, model_config, train_config, execution, saved_facts, extra))
    if args.resume is not None:
        out["resume"] = _resumer(args, saved_facts, extra, say)
    return out


def batch_hooks(args: argparse.Namespace, loaded: Loaded, model_config: GCNConfig, train_config: TrainConfig,
                execution: Execution, saved_facts: dict[str, Any] | None, say: Say,
                runs_per_program: int) -> dict[str, Any]:
    """``fit_runs`` keyword arguments for --checkpoint-every and --resume of a batch (--seeds N,
    --splits K): each slice's state in ``--save DIR``'s :mod:`jaxgcn.batch_state` folder. The
    seeds, splits and runs per program are settings (a slice holds the runs that train together)."""
    out: dict[str, Any] = {}
    if args.checkpoint_every is None and args.resume is None:
        return out
    saved_facts = saved_facts if saved_facts is not None else facts(args, loaded)
    extra = {**settings(args, loaded, model_config, train_config, execution, {"runs_per_program": runs_per_program}),
             "seeds": args.seeds, "splits": args.splits}
    previous = None
    if args.resume is not None:
        manifest = batch_state.load(args.resume)
        checkpoint.check_resumable(manifest, extra, saved_facts["fingerprint"], f"--resume {args.resume}")
        epochs = sorted(v["epoch"] for v in manifest["slices"].values())
        say(f"resuming {len(epochs)} slice(s) of runs at epoch {'-'.join(map(str, sorted({epochs[0], epochs[-1]})))} "
            f"of {args.resume}" if epochs else f"resuming {args.resume}: no slice had started")
        out["resume"] = lambda first, template: batch_state.slice_state(args.resume, manifest, first, template)
        if args.save is not None and Path(args.save).resolve() == Path(args.resume).resolve():
            previous = manifest
    if args.checkpoint_every is not None:
        out.update(checkpoint_every=args.checkpoint_every,
                   on_checkpoint=batch_state.saver(args.save, extra=extra, fingerprint=saved_facts["fingerprint"],
                                                   previous=previous))
    return out
