"""``jaxgcn train``: one run, several seeds/splits as one batched program, or (``--shard-graph``,
``--distributed``) one run with the graph's rows over devices (:mod:`jaxgcn.cli.train_sharded`)."""

from __future__ import annotations

import argparse
import contextlib
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxgcn import batch_state, checkpoint, outputs, reports
from jaxgcn.batched import entries_for, fit_runs, unstack_params
from jaxgcn.cli import checkpointing, records, train_sharded
from jaxgcn.cli.common import Say, plan, prelude, warn_tensorboard
from jaxgcn.cli.config import configs
from jaxgcn.cli.data import Loaded, load, one_split, split_csv
from jaxgcn.cli.runtime import is_writer
from jaxgcn.datasets import split_codes
from jaxgcn.debug import CheckFailed, check_first_step
from jaxgcn.models import Execution, GCNConfig
from jaxgcn.progress import Progress
from jaxgcn.reports import RunSummary, restored_line
from jaxgcn.diagnostics import divergence_hint
from jaxgcn.train import FitResult, TrainConfig, fit

OVERFIT_GAP = 0.3  # train minus validation accuracy above which the CLI prints a hint


class TrainOutcome(NamedTuple):
    """What the runs of one ``train`` produced."""

    runs: list[RunSummary]
    compile_seconds: float
    train_seconds: float
    losses: np.ndarray  # the loss history: [epochs] of one run, [runs, epochs] of a batch
    fitted: FitResult | None  # the one run's full result (what --save writes); None for a batch
    batch: Any = None  # a batch's BatchResult (what --save writes run by run); None for one run


def _refuse_bad_combinations(args: argparse.Namespace) -> None:
    if args.checkpoint_every is not None and args.save is None:
        raise ValueError("--checkpoint-every K needs --save DIR (where the checkpoints go)")


def run(args: argparse.Namespace) -> int:
    _refuse_bad_combinations(args)
    prelude(args)
    warn_tensorboard(args)
    say = (lambda msg: None) if args.quiet else print
    lock: Any = contextlib.nullcontext()
    if args.save is not None and (not args.distributed or is_writer()):
        # a failed run removes the folder it created, unless --checkpoint-every put resumable state in it
        lock = outputs.locked_dir("--save", args.save, remove_on_error=args.checkpoint_every is None)
    with lock:
        if args.shard_graph or args.distributed:
            return train_sharded.run(args, say)
        return _train_single(args, say)


def debug_checks(loaded: Loaded, model_config: GCNConfig, train_config: TrainConfig, execution: Execution,
                 say: Say) -> None:
    """--debug: one training step checked (:func:`jaxgcn.debug.check_first_step`) before the loop."""
    try:
        check_first_step(loaded.prepared.data, loaded.prepared.n_classes, model_config, train_config, execution)
    except CheckFailed as exc:
        raise ValueError(f"--debug: {exc}") from None
    say("debug: one training step ran with jax_debug_nans on and under checkify index/NaN/division checks: "
        "no out-of-range index, no NaN (the compiled loop then runs without them)")


def _fit_one(args: argparse.Namespace, loaded: Loaded, model_config: GCNConfig, train_config: TrainConfig,
             execution: Execution, saved_facts: dict[str, Any] | None, progress: Progress, say: Say) -> TrainOutcome:
    """One run through ``fit`` (with --checkpoint-every/--resume when given)."""
    hooks = checkpointing.fit_hooks(args, loaded, model_config, train_config, execution, saved_facts, say)
    res = fit(one_split(loaded.prepared.data), loaded.prepared.n_classes, model_config=model_config,
              execution=execution, config=train_config, key=jax.random.key(args.seed), log_every=args.log_every,
              log=None,
              progress=progress, **hooks)
    m = res.metrics
    runs = [RunSummary(args.seed, 0, m["test_acc"], m["val_acc"], res.epochs_run, res.stopped_early,
                       res.restored_epoch)]
    return TrainOutcome(runs, res.compile_seconds, res.train_seconds, res.history["loss"], res)


def _fit_batch(args: argparse.Namespace, loaded: Loaded, model_config: GCNConfig, train_config: TrainConfig,
               execution: Execution, seeds: list[int], saved_facts: dict[str, Any] | None, runs: int,
               progress: Progress, say: Say) -> TrainOutcome:
    """Every seed on every split as one batched program (``runs`` of them execute together),
    with --checkpoint-every/--resume when given."""
    hooks = checkpointing.batch_hooks(args, loaded, model_config, train_config, execution, saved_facts, say, runs)
    entries = entries_for(seeds, model_config=model_config, config=train_config, splits=args.splits)
    say(f"{len(entries)} runs ({len(seeds)} seeds x {args.splits} split(s)) in one compiled program")
    res = fit_runs(loaded.prepared.data, loaded.prepared.n_classes, entries, execution=execution,
                   log_every=args.log_every, log=None, n_devices=args.devices, progress=progress, **hooks)
    restored = res.restored_epoch
    runs = [RunSummary(e.seed, e.split, float(res.metrics["test_acc"][j]), float(res.metrics["val_acc"][j]),
                       int(res.epochs_run[j]), bool(res.stopped_early[j]),
                       None if restored is None else int(restored[j]))
            for j, e in enumerate(entries)]
    return TrainOutcome(runs, res.compile_seconds, res.train_seconds, res.history["loss"], None, res)


def train_runs(args: argparse.Namespace, loaded: Loaded, model_config: GCNConfig, train_config: TrainConfig,
               execution: Execution, saved_facts: dict[str, Any] | None, runs: int, say: Say) -> TrainOutcome:
    """One run through ``fit``; several seeds/splits as one batched program (``runs`` of them
    execute together). ``saved_facts``: :func:`jaxgcn.cli.checkpointing.facts`, with --save/--resume."""
    seeds = [args.seed + i for i in range(args.seeds)]
    progress = Progress(train_config.epochs, every=args.log_every, quiet=args.quiet, log_file=args.log,
                        tensorboard=args.tensorboard, seeds=[s for _ in range(args.splits) for s in seeds])
    try:
        if len(seeds) == 1 and args.splits == 1:
            return _fit_one(args, loaded, model_config, train_config, execution, saved_facts, progress, say)
        return _fit_batch(args, loaded, model_config, train_config, execution, seeds, saved_facts, runs, progress,
                          say)
    finally:
        progress.done()


def overfitting_hint(train_acc: float, val_acc: float) -> str | None:
    """A one-line hint when the final model fits the training nodes far better than the validation ones.

    >>> overfitting_hint(1.0, 0.8) is None, overfitting_hint(1.0, 0.5)[:26]
    (True, 'hint: train accuracy 1.000')
    """
    if train_acc - val_acc <= OVERFIT_GAP:
        return None
    return (f"hint: train accuracy {train_acc:.3f} but validation {val_acc:.3f}: the model overfits. Try more "
            "regularization (--dropout, --weight-decay), early stopping (--early-stopping patience), fewer "
            "--hidden units, or check that the split's classes are balanced (--train-per-class)")


def summary_line(outcome: TrainOutcome) -> str:
    """The line every train ends with: test/val accuracy over the runs, epochs, timings. One run
    has no spread: ``test accuracy 0.8130 over 1 run | ... | epochs 200 | ...``; several runs give
    the mean ± std and the range of their epochs."""
    test = np.array([r.test_acc for r in outcome.runs])
    val = np.array([r.val_acc for r in outcome.runs])
    epochs = [r.epochs_run for r in outcome.runs]
    train_s = outcome.train_seconds
    n = len(outcome.runs)
    accuracy = f"{test.mean():.4f} over 1 run" if n == 1 else f"{test.mean():.4f} ± {test.std():.4f} over {n} runs"
    span = f"{min(epochs)}" if min(epochs) == max(epochs) else f"{min(epochs)}-{max(epochs)}"
    return (f"test accuracy {accuracy} | val {val.mean():.4f} | epochs {span} | compile "
            f"{outcome.compile_seconds:.2f}s | train {train_s:.2f}s ({1e3 * train_s / max(epochs):.2f} ms/epoch)")


def _hint(outcome: TrainOutcome, loaded: Loaded, train_config: TrainConfig) -> str | None:
    diverged = divergence_hint(outcome.losses, loaded.prepared.data, train_config,
                               norm=loaded.prepared.info.get("norm"))
    fitted = outcome.fitted
    return diverged or (overfitting_hint(fitted.metrics["train_acc"], fitted.metrics["val_acc"]) if fitted else None)


def _write(args: argparse.Namespace, loaded: Loaded, model_config: GCNConfig, train_config: TrainConfig,
           execution: Execution, outcome: TrainOutcome, saved_facts: dict[str, Any] | None,
           record: dict[str, Any] | None, say: Say) -> None:
    """The outputs appear together at the end, the split file last; a failure leaves none of them."""
    prepared = loaded.prepared
    with outputs.Staged() as out:
        if args.json is not None:
            report = reports.train_report(
                reports.dataset_report(prepared.info, prepared.backend),
                reports.config_report(model_config, train_config, args.norm, args.feature_norm, execution),
                outcome.runs, args.splits, outcome.compile_seconds, outcome.train_seconds, record=record)
            out.add(args.json, reports.json_text(report), label=f"--json {args.json}")
        if args.save_split is not None:
            out.add(args.save_split, split_csv(loaded), label=f"--save-split {args.save_split}")
        if args.save is not None and outcome.batch is not None:
            _save_runs(args.save, loaded, model_config, train_config, execution, outcome, saved_facts)
            say(f"saved the {len(outcome.runs)} runs' models to {args.save} (evaluate and predict take the best "
                "validation run, or --run I)")
        elif args.save is not None:
            res = outcome.fitted
            checkpoint.save(args.save, res.params, model_config=model_config, train_config=train_config,
                            execution=execution, info=prepared.info, epoch=res.epochs_run, metrics=res.metrics,
                            extra=checkpointing.result_facts(res), **saved_facts)
            say(f"saved the model to {args.save}")


def _save_runs(directory: Any, loaded: Loaded, model_config: GCNConfig, train_config: TrainConfig,
               execution: Execution, outcome: TrainOutcome, saved_facts: dict[str, Any]) -> None:
    """Every run of a batch as an ordinary checkpoint (``run-000``, ...) with its own split, then
    the manifest that names them (:func:`jaxgcn.checkpoint.save_runs`), last."""
    res = outcome.batch
    for j, run in enumerate(outcome.runs):
        facts = {**saved_facts, "split": split_codes(loaded.prepared, run.split)}
        checkpoint.save(checkpoint.run_dir(directory, j), unstack_params(res.params, j), model_config=model_config,
                        train_config=train_config, execution=execution, info=loaded.prepared.info,
                        epoch=run.epochs_run, metrics={k: float(v[j]) for k, v in res.metrics.items()},
                        extra={**checkpointing.result_facts(run), "seed": run.seed, "split_index": run.split},
                        **facts)
    checkpoint.save_runs(directory, [r._asdict() for r in outcome.runs])
    batch_state.remove(directory)  # the saved runs are final: a finished batch holds no state to resume


def _train_single(args: argparse.Namespace, say: Say) -> int:
    """``train`` on one device: one run, or several seeds/splits as one batched program."""
    model_config, train_config, execution = configs(args, "segment" if args.chunk_edges else "csr")  # validates
    loaded = load(args, say)
    # one plan: the backend, the kernels, and the runs that execute together (fit_runs's slice),
    # which the memory estimate covers
    chosen = plan(args, loaded.prepared, model_config, execution, args.seeds * args.splits, say)
    execution, runs = chosen.execution, chosen.runs
    if args.debug:
        debug_checks(loaded, model_config, train_config, execution, say)
    # what a checkpoint records about the data (its SHA-256 fingerprint is computed once, here)
    saved_facts = checkpointing.facts(args, loaded) if args.save is not None or args.resume is not None else None
    outcome = train_runs(args, loaded, model_config, train_config, execution, saved_facts, runs, say)
    print(summary_line(outcome))
    restored = restored_line(outcome.runs)
    if restored:
        say(restored)
    hint = _hint(outcome, loaded, train_config)
    if hint:
        print(hint)
    record = records.for_run(args, loaded.prepared.data)  # what reproduces the run (--json's "record")
    _write(args, loaded, model_config, train_config, execution, outcome, saved_facts, record, say)
    return 0
