"""``jaxgcn sweep``: a hyperparameter grid x seeds x splits in few compiled programs, run by
:func:`jaxgcn.app.sweep.run` (with ``--save``/``--resume``, its progress kept); with
``--distributed`` the runs are shared out over the processes. Then the table, and the outputs."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from typing import Any

import jax
import numpy as np

from jaxgcn.io import outputs, reports
from jaxgcn.store import batch_state
from jaxgcn.app import sweep as app_sweep
from jaxgcn.app.train import plan
from jaxgcn.cli import records
from jaxgcn.cli.common import Say, prelude
from jaxgcn.cli.config import sweep_base, sweep_grid
from jaxgcn.cli.data import Loaded, load, split_csv
from jaxgcn.cli.runtime import is_writer
from jaxgcn.core.models import GCNConfig
from jaxgcn.core.tasks import task_of
from jaxgcn.plan import Plan
from jaxgcn.io.progress import Progress
from jaxgcn.sweep import Grid, Row, csv_text, format_table, rows_to_json
from jaxgcn.training.config import TrainConfig


def _share(args: argparse.Namespace, say: Say) -> dict[str, Any]:
    """``run_grid`` keyword arguments that share the runs out over a --distributed job's processes."""
    if not args.distributed:
        return {}
    from jax.experimental import multihost_utils

    say(f"process {jax.process_index()} of {jax.process_count()}: 1 in {jax.process_count()} runs of each "
        f"group, on {len(jax.local_devices())} local device(s); the results are combined")
    return {"process_index": jax.process_index(), "process_count": jax.process_count(),
            "combine": lambda local: multihost_utils.process_allgather(local).sum(axis=0)}


def _run(args: argparse.Namespace, loaded: Loaded, grid: Grid, seeds: list[int],
         configs: tuple[GCNConfig, TrainConfig, Plan], say: Say) -> list[Row]:
    share = _share(args, say)
    # a bar per group on a terminal; off a terminal the one-line-per-group log is the progress
    bar = Progress(configs[1].epochs, every=args.log_every, quiet=args.quiet or not is_writer(),
                   desc="sweep") if sys.stdout.isatty() else None
    saving = app_sweep.Saving(args.save, args.checkpoint_every, args.resume, records.options(args))
    try:
        return app_sweep.run(loaded, grid, seeds, configs, splits=args.splits, memory_budget=args.memory_budget,
                             saving=saving, say=say, progress=bar, share=share, log_every=args.log_every)
    finally:
        if bar is not None:
            bar.done()


def _write(args: argparse.Namespace, loaded: Loaded, grid: Grid, train_config: TrainConfig, seeds: list[int],
           rows: list[Row], record: dict[str, Any] | None, precision: str) -> None:
    """Together at the end, the split file last; nothing on an error. A ``--save`` folder gets the
    report (with the record) and the table; then its progress goes (a finished sweep holds no state)."""
    dataset = reports.dataset_report(loaded.prepared.info, loaded.prepared.backend, precision)
    with outputs.Staged() as out:
        if args.csv is not None:
            out.add(args.csv, csv_text(rows), label=f"--csv {args.csv}")
        if args.json is not None:
            report = reports.sweep_report(dataset, grid, train_config, seeds, args.splits, rows_to_json(rows), record)
            out.add(args.json, reports.json_text(report), label=f"--json {args.json}")
        if args.save is not None:
            kept = record if record is not None else records.record(args, loaded.prepared.data)
            report = reports.sweep_report(dataset, grid, train_config, seeds, args.splits, rows_to_json(rows), kept)
            out.add(args.save / app_sweep.REPORT, reports.json_text(report), label=f"--save {args.save}",
                    follow=False)
            out.add(args.save / app_sweep.TABLE, csv_text(rows), label=f"--save {args.save}", follow=False)
        if args.save_split is not None:
            out.add(args.save_split, split_csv(loaded), label=f"--save-split {args.save_split}")
    if args.save is not None:
        batch_state.remove(args.save)


def run(args: argparse.Namespace) -> int:
    if args.resume is not None and args.save is None:
        args.save = args.resume  # a resumed sweep goes on saving where it was saved
    prelude(args)
    lock: Any = contextlib.nullcontext()
    if args.save is not None:  # a failed sweep keeps what it saved: its finished groups are worth resuming
        lock = outputs.locked_dir("--save", args.save, remove_on_error=False)
    with lock:
        return _sweep(args)


def _sweep(args: argparse.Namespace) -> int:
    say = (lambda msg: None) if args.quiet or not is_writer() else print
    grid = sweep_grid(args)  # every configuration validated before any work
    loaded = load(args, say, runs=len(grid.configs()) * args.seeds * args.splits)
    model_config, train_config, execution = sweep_base(args, loaded.prepared.backend)
    # run_grid chunks by memory: the plan of one run, which the sweep runs every program by
    resolved = plan(loaded, model_config, dataclasses.replace(execution, backend=args.backend), 1, say,
                    devices=args.devices, aggregate=args.aggregate_first)
    seeds = [args.seed + i for i in range(args.seeds)]
    n_configs = len(grid.configs())
    total = n_configs * len(seeds) * args.splits
    say(f"sweep: {n_configs} configuration{'s' if n_configs != 1 else ''} x {len(seeds)} "
        f"seed{'s' if len(seeds) != 1 else ''} x {args.splits} split(s) = {total} run{'s' if total != 1 else ''}")
    for note in records.resumed_notes(args):
        say(note)
    rows = _run(args, loaded, grid, seeds, (model_config, train_config, resolved), say)
    if not is_writer():
        return 0
    print(format_table(rows, task_of(train_config.task, np.asarray(loaded.prepared.data.labels)).metric))
    record = records.for_run(args, loaded.prepared.data)  # what reproduces the sweep (--json's "record")
    _write(args, loaded, grid, train_config, seeds, rows, record, resolved.precision)
    return 0
