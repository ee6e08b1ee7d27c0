"""``jaxgcn train``: the flags -> a :class:`~jaxgcn.app.job.Job`, run by :mod:`jaxgcn.app.train`
(one run, or several seeds/splits as one batched program) or :mod:`jaxgcn.app.sharded`
(``--shard-graph``, ``--distributed``), then the summary printed and the outputs written."""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

import jax
import numpy as np

from jaxgcn.io import outputs, reports
from jaxgcn.app import saving, sharded
from jaxgcn.app import train as app_train
from jaxgcn.app.job import Job, Outcome
from jaxgcn.cli import records
from jaxgcn.cli.common import Say, prelude, warn_tensorboard
from jaxgcn.cli.config import configs
from jaxgcn.cli.data import request, split_csv
from jaxgcn.cli.runtime import is_writer
from jaxgcn.core import tasks
from jaxgcn.io.progress import Progress
from jaxgcn.io.reports import restored_line

overfitting_hint = app_train.overfitting_hint  # where the tests and docs have always found it


def job(args: argparse.Namespace) -> Job:
    """The job the flags describe (every config validated)."""
    model_config, train_config, execution = configs(args, args.backend)
    data = request(args)
    if data.source == "partitions" and args.save_split is not None:
        raise ValueError(f"--dataset {args.dataset}: the graph, features and split are fixed when the partitions "
                         "are written; drop --save-split (give it to `jaxgcn partition`)")
    return Job(data, model_config, train_config, execution, aggregate=args.aggregate_first, seed=args.seed,
               seeds=args.seeds, devices=args.devices, save=args.save, checkpoint_every=args.checkpoint_every,
               resume=args.resume, debug=args.debug, shard_graph=args.shard_graph, distributed=args.distributed,
               exchange=args.exchange, options=records.options(args))


# Options a --log's config_id leaves out besides the outputs: how the run is shown and computed (the
# same settings on another backend or device count train the same model), and how long a process
# waits for its peers.
NOT_LOGGED = (*records.NOT_RESUMED, "data_root", "backend", "precision",
              "chunk_edges", "aggregate_first", "devices", "shard_graph", "exchange", "distributed", "reorder")


def log_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings every ``--log`` line identifies by their ``config_id`` (the first line of a run
    holds them), so that ``jaxgcn plot curves`` tells the runs of different settings in one file apart."""
    return {k: v for k, v in records.options(args).items() if k not in (*records.NOT_REPLAYED, *NOT_LOGGED)}


def ms_per_epoch(train_seconds: float, epochs_run: int, resumed_epoch: int = 0) -> float:
    """Milliseconds per epoch that this process trained: a run resumed from epoch ``resumed_epoch``
    trained the epochs after it, not all ``epochs_run``.

    >>> ms_per_epoch(0.5, 200), ms_per_epoch(0.5, 200, resumed_epoch=150)
    (2.5, 10.0)
    """
    return 1e3 * train_seconds / max(1, epochs_run - resumed_epoch)


def summary_line(outcome: Outcome) -> str:
    """The line every train ends with: test/val accuracy over the runs, epochs, timings. One run
    has no spread: ``test accuracy 0.8130 over 1 run | ... | epochs 200 | ...``; several runs give
    the mean ± the population std (``... over 20 runs (population std) | ...``) and the range of
    their epochs; a sharded run names its devices and exchange."""
    test = np.array([r.test_acc for r in outcome.runs])
    val = np.array([r.val_acc for r in outcome.runs])
    epochs = [r.epochs_run for r in outcome.runs]
    train_s = outcome.train_seconds
    n = len(outcome.runs)
    accuracy = (f"{test.mean():.4f} over 1 run" if n == 1 else
                f"{test.mean():.4f} ± {test.std(ddof=reports.STD_DDOF):.4f} over {n} runs ({reports.STD_NAME})")
    span = f"{min(epochs)}" if min(epochs) == max(epochs) else f"{min(epochs)}-{max(epochs)}"
    layout = "" if outcome.sharded is None else f" | {outcome.sharded.n_parts} devices, {outcome.sharded.exchange}"
    per_epoch = ms_per_epoch(train_s, max(epochs), outcome.resumed_epoch)  # a resumed run: its new epochs
    metric = tasks.TITLES.get(outcome.metric, outcome.metric)
    return (f"test {metric} {accuracy} | val {val.mean():.4f} | epochs {span}{layout} | "
            f"compile {outcome.compile_seconds:.2f}s | train {train_s:.2f}s ({per_epoch:.2f} ms/epoch)")


def _report(args: argparse.Namespace, outcome: Outcome, record: dict[str, Any] | None) -> dict[str, Any]:
    prepared = outcome.loaded.prepared
    extra: dict[str, Any] = {}
    layout = outcome.sharded
    if layout is not None:
        res = outcome.fitted
        extra = dict(details={"metrics": res.metrics, "history": {k: v.tolist() for k, v in res.history.items()}},
                     distributed={"processes": jax.process_count(), "devices": layout.n_parts,
                                  "exchange": layout.exchange, "partition": layout.stats,
                                  "memory_estimate_per_device": layout.estimate.parts})
    report = reports.train_report(
        reports.dataset_report(prepared.info, prepared.backend, outcome.execution.precision),
        reports.config_report(outcome.model, outcome.train, args.norm, args.feature_norm, outcome.execution),
        outcome.runs, args.splits, outcome.compile_seconds, outcome.train_seconds, record=record, **extra)
    return {**report, "task_metric": outcome.metric}  # what test_acc / val_acc hold (accuracy, rocauc, ...)


def _write(args: argparse.Namespace, the_job: Job, outcome: Outcome, say: Say) -> None:
    """The outputs appear together at the end, the split file last; a failure leaves none of them."""
    own = outcome.sharded is None or outcome.sharded.data is not None  # partitions hold no host copy
    data = outcome.loaded.prepared.data if own else None  # no host copy, no fingerprint
    record = records.for_run(args, outcome.sharded.data if outcome.sharded is not None else data)
    with outputs.Staged() as out:
        if args.json is not None:
            out.add(args.json, reports.json_text(_report(args, outcome, record)), label=f"--json {args.json}")
        if args.save_split is not None and own:
            out.add(args.save_split, split_csv(outcome.loaded), label=f"--save-split {args.save_split}")
        if args.save is not None:
            saving.save_models(the_job, outcome, say)


def _train(args: argparse.Namespace, the_job: Job, say: Say) -> int:
    writer = not the_job.distributed or is_writer()
    say = say if writer else (lambda msg: None)
    seeds = [s for _ in range(args.splits) for s in the_job.seed_list]
    if args.resume is not None and args.log is not None:
        say(f"--log {args.log}: the resumed run adds its new epochs to it")
    for note in records.resumed_notes(args):
        say(note)
    progress = Progress(the_job.train.epochs, every=args.log_every, quiet=args.quiet or not writer,
                        log_file=args.log if writer else None, tensorboard=args.tensorboard if writer else None,
                        seeds=seeds, config=log_settings(args))
    try:
        if the_job.sharded:
            outcome = sharded.run(the_job, say, writer=writer, progress=progress, log_every=args.log_every)
        else:
            outcome = app_train.run(the_job, say, progress=progress, log_every=args.log_every)
    except BaseException:
        progress.done(finished=False)  # an interrupted run stopped no run early: its resume goes on logging
        raise
    progress.done(metric=outcome.metric)
    if not writer:
        return 0
    print(summary_line(outcome))
    restored = restored_line(outcome.runs, tasks.TITLES.get(outcome.metric, outcome.metric))
    if restored:
        (print if the_job.sharded else say)(restored)
    if outcome.hint:
        print(outcome.hint)
    _write(args, the_job, outcome, say)
    if args.verbose:
        print(phases_line(outcome))
    return 0


def phases_line(outcome: Outcome) -> str:
    """``train --verbose``: where the process's time went, e.g. ``phases: start-up 0.15s | imports
    1.53s | jax set-up 0.00s | data, kernel, plan, evaluate, report 0.21s | compile 1.58s | train
    0.61s | total 4.08s (kernel: built at install time, in ...)``: a kernel compiled on first use
    counts in the fourth phase."""
    from jaxgcn.cli import phases, since_process_start
    from jaxgcn.plan import kernel_available

    total = since_process_start()
    parts = phases()
    parts["data, kernel, plan, evaluate, report"] = max(0.0, total - sum(parts.values()) - outcome.compile_seconds
                                                  - outcome.train_seconds)
    parts.update({"compile": outcome.compile_seconds, "train": outcome.train_seconds})
    ok, reason = kernel_available()
    return ("phases: " + " | ".join(f"{name} {seconds:.2f}s" for name, seconds in parts.items())
            + f" | total {total:.2f}s (kernel: {reason if ok else 'not used: ' + reason})")


def run(args: argparse.Namespace) -> int:
    if args.checkpoint_every is not None and args.save is None:
        raise ValueError("--checkpoint-every K needs --save DIR (where the checkpoints go)")
    prelude(args)
    warn_tensorboard(args)
    the_job = job(args)  # every config validated before any work
    if the_job.sharded:
        sharded.refuse(the_job)
    say = (lambda msg: None) if args.quiet else print
    lock: Any = contextlib.nullcontext()
    if args.save is not None and (not args.distributed or is_writer()):
        # a failed run removes the folder it created, unless --checkpoint-every put resumable state in it
        lock = outputs.locked_dir("--save", args.save, remove_on_error=args.checkpoint_every is None)
    with lock:
        return _train(args, the_job, say)
