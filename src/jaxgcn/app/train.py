"""A training job on one device (one run, or several seeds/splits as one batched program): the
data, THE plan with its memory check, the runs with their checkpoints and resume, and the hint.

Nothing here reads arguments or prints: notes go to ``say`` as they happen, and what ``jaxgcn
train`` prints at the end comes back in the :class:`~jaxgcn.app.job.Outcome`. A library caller
runs the same job as the command line::

    from jaxgcn.app import DataRequest, Job, run
    outcome = run(Job(DataRequest("amazon-photo", splits=10), seeds=2), say=print)
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxgcn.host import memory
from jaxgcn import plan as planner
from jaxgcn.app import saving
from jaxgcn.app.data import Loaded, Say, load, one_split
from jaxgcn.app.job import Job, Outcome
from jaxgcn.debug import CheckFailed, check_first_step
from jaxgcn.core.diagnostics import divergence_hint
from jaxgcn.core.models import PRECISION_MEANING, Execution, GCNConfig
from jaxgcn.io.reports import RunSummary
from jaxgcn.training.config import Kipf, Patience, TrainConfig
from jaxgcn.training.loop import fit
from jaxgcn.training.runs import entries_for, fit_runs

OVERFIT_GAP = 0.3  # train minus validation accuracy above which a hint is given
OVERFIT_MIN_EPOCHS = 20  # before that (two of Kipf's stopping windows) a gap says little about overfitting


def plan(loaded: Loaded, model_config: GCNConfig, execution: Execution, n_runs: int, say: Say, *,
         devices: int | None = None, aggregate: str = "auto", data: Any = None) -> planner.Plan:
    """THE plan of ``n_runs`` runs on the prepared data (:func:`jaxgcn.plan.resolve`: the backend
    as ``execution`` asks and the data was prepared, the kernels, aggregate-first, the runs that
    execute together); the note why ``auto`` fell back and the peak memory estimate go to ``say``,
    and a job that cannot fit is refused. ``data``: the very object the runs train on, when it is not
    the loaded data (the row plans the plan builds are handed to a run on that object only)."""
    prepared = loaded.prepared
    chosen = planner.resolve(execution, prepared.data if data is None else data, model_config, prepared.n_classes,
                             n_runs=n_runs, devices=devices, aggregate=aggregate, n_nodes=prepared.info["n_nodes"])
    if chosen.note:
        say(chosen.note)  # why not the csr kernel, in one line
    if chosen.precision != "default":  # the CPU's own (default) is said by `jaxgcn info`, not by every run
        say(f"precision {chosen.precision}: float32 matmuls in {PRECISION_MEANING[chosen.precision]} (--precision)")
    if deep := planner.compile_note(model_config):
        say(deep)
    room = memory.budget()  # the accelerator's free memory, else the host's (tests replace available_bytes)
    say(f"memory estimate {chosen.memory.describe()} of {room.describe()}")
    memory.check_fits(chosen.memory, room.free, where=room.where)
    return chosen


def debug_checks(loaded: Loaded, model_config: GCNConfig, train_config: TrainConfig, execution: Execution,
                 say: Say) -> None:
    """One training step checked (:func:`jaxgcn.debug.check_first_step`) before the loop."""
    try:
        check_first_step(loaded.prepared.data, loaded.prepared.n_classes, model_config, train_config, execution)
    except CheckFailed as exc:
        raise ValueError(f"--debug: {exc}") from None
    say("debug: one training step ran with jax_debug_nans on and under checkify index/NaN/division checks: "
        "no out-of-range index, no NaN (the compiled loop then runs without them)")


def stopping_window(config: TrainConfig) -> int:
    """How many epochs the run's early-stopping rule looks back: Kipf's window, the patience, or
    (no early stopping) Kipf's default window of 10."""
    rule = config.early_stopping
    return rule.window if isinstance(rule, Kipf) else rule.patience if isinstance(rule, Patience) else Kipf().window


def overfitting_hint(train_acc: float, val_acc: float, epochs: int | None = None, *, window: int = 0,
                     val_loss: Any = None) -> str | None:
    """A one-line hint when the final model fits the training nodes far better than the validation
    ones, after at least :data:`OVERFIT_MIN_EPOCHS` epochs (``epochs``: how many the run trained),
    once the validation loss (``val_loss``, per epoch; None: not known) has gone the run's
    early-stopping ``window`` of epochs without a new low. A run shorter than its window, or whose
    validation loss still fell within its last window, is short, not overfit: no hint.

    >>> overfitting_hint(1.0, 0.8) is None, overfitting_hint(1.0, 0.5)[:26], overfitting_hint(1.0, 0.5, 5)
    (True, 'hint: train accuracy 1.000', None)
    >>> overfitting_hint(1.0, 0.5, 30, window=50), overfitting_hint(1.0, 0.5, 30, window=10, val_loss=range(30, 0, -1))
    (None, None)
    """
    if train_acc - val_acc <= OVERFIT_GAP or (epochs is not None and epochs < OVERFIT_MIN_EPOCHS):
        return None
    losses = np.asarray([] if val_loss is None else val_loss, np.float64)
    best = int(np.nanargmin(losses)) + 1 if np.isfinite(losses).any() else 0  # the epoch of its lowest
    if epochs is not None and epochs - best < window:
        return None  # validation still improving within the last window: the run is short, not overfit
    return (f"hint: train accuracy {train_acc:.3f} but validation {val_acc:.3f}: the model overfits. Try more "
            "regularization (--dropout, --weight-decay), early stopping (--early-stopping patience), fewer "
            "--hidden units, or check that the split's classes are balanced (--train-per-class)")


def hint(outcome: Outcome) -> str | None:
    """Why a run diverged or that it overfits (one line), or None."""
    prepared = outcome.loaded.prepared
    diverged = divergence_hint(outcome.losses, prepared.data, outcome.train, norm=prepared.info.get("norm"))
    fitted = outcome.fitted
    if diverged or not fitted:
        return diverged
    return overfitting_hint(fitted.metrics["train_acc"], fitted.metrics["val_acc"], fitted.epochs_run,
                            window=stopping_window(outcome.train), val_loss=fitted.history.get("val_loss"))


def _one(job: Job, loaded: Loaded, chosen: tuple[GCNConfig, TrainConfig, Execution], facts: dict[str, Any] | None,
         progress: Any, log_every: int, say: Say, resolved: planner.Plan, data: Any) -> Outcome:
    """One run through ``fit`` on ``data``, as ``resolved`` plans it."""
    model_config, train_config, _ = chosen  # the execution: resolved's
    hooks, resumed = ({}, 0) if facts is None else saving.fit_hooks(job, loaded, *chosen, facts, say)
    res = fit(data, loaded.prepared.n_classes, model_config=model_config,
              execution=resolved, config=train_config, key=jax.random.key(job.seed), log_every=log_every, log=None,
              progress=progress, **hooks)
    m = res.metrics
    runs = [RunSummary(job.seed, 0, m["test_acc"], m["val_acc"], res.epochs_run, res.stopped_early,
                       res.restored_epoch)]
    return Outcome(runs, res.compile_seconds, res.train_seconds, res.history["loss"], res, None, loaded, *chosen, facts,
                   resumed_epoch=resumed)


def _batch(job: Job, loaded: Loaded, chosen: tuple[GCNConfig, TrainConfig, Execution], facts: dict[str, Any] | None,
           progress: Any, log_every: int, say: Say, resolved: planner.Plan, data: Any) -> Outcome:
    """Every seed on every split of ``data`` as one batched program, as ``resolved`` plans it
    (``resolved.runs`` of them execute together)."""
    model_config, train_config, _ = chosen  # the execution: resolved's
    hooks, resumed = ({}, 0) if facts is None else saving.batch_hooks(job, loaded, *chosen, facts, say,
                                                                       resolved.runs)
    entries = entries_for(job.seed_list, model_config=model_config, config=train_config, splits=job.data.splits)
    say(f"{len(entries)} runs ({job.seeds} seed{'s' if job.seeds != 1 else ''} x {job.data.splits} split(s)) in one "
        "compiled program")
    res = fit_runs(data, loaded.prepared.n_classes, entries, execution=resolved,
                   log_every=log_every, log=None, n_devices=job.devices, progress=progress, **hooks)
    restored = res.restored_epoch
    runs = [RunSummary(e.seed, e.split, float(res.metrics["test_acc"][j]), float(res.metrics["val_acc"][j]),
                       int(res.epochs_run[j]), bool(res.stopped_early[j]),
                       None if restored is None else int(restored[j]))
            for j, e in enumerate(entries)]
    return Outcome(runs, res.compile_seconds, res.train_seconds, res.history["loss"], None, res, loaded, *chosen,
                   facts, resumed_epoch=resumed)


def run(job: Job, say: Say, *, progress: Any = None, log_every: int = 0, loaded: Loaded | None = None) -> Outcome:
    """Train the job on this process's devices (one run, or a batch); ``progress``: a
    :class:`jaxgcn.io.progress.Progress` (or None), which the caller closes; ``loaded``: the data,
    when already loaded (else :func:`jaxgcn.app.data.load` of ``job.data``)."""
    loaded = loaded if loaded is not None else load(job.data, say, backend=job.execution.backend, runs=job.n_runs)
    data = one_split(loaded.prepared.data) if job.n_runs == 1 else loaded.prepared.data  # what the runs train on
    chosen = plan(loaded, job.model, job.execution, job.n_runs, say, devices=job.devices, aggregate=job.aggregate,
                  data=data)  # the same object: the row plans the plan builds are the run's (built once)
    configs = (job.model, job.train, chosen.execution)
    if job.debug:
        debug_checks(loaded, *configs, say)
    # what a checkpoint records about the data (its SHA-256 fingerprint is computed once, here)
    facts = saving.facts(job, loaded) if job.save is not None or job.resume is not None else None
    if job.n_runs == 1:
        outcome = _one(job, loaded, configs, facts, progress, log_every, say, chosen, data)
    else:
        outcome = _batch(job, loaded, configs, facts, progress, log_every, say, chosen, data)
    return outcome._replace(hint=hint(outcome))
