"""A job's checkpoints: what they record about the training data, the settings a resumed run must
share with the run it continues, the hooks that save and restore the run state (one run, a
batch's slices, a sharded run), and the final models."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from jaxgcn.io import outputs
from jaxgcn.store import batch_state, checkpoint
from jaxgcn.app.data import Loaded, Say
from jaxgcn.app.job import Job, Outcome
from jaxgcn.datasets import split_codes
from jaxgcn.core.models import Execution, GCNConfig, record
from jaxgcn.training.config import TrainConfig
from jaxgcn.training.runs import unstack_params


def facts(job: Job, loaded: Loaded, *, fingerprint: bool = True, split: bool = True) -> dict[str, Any]:
    """What a checkpoint records about its training data besides the params (``checkpoint.save``'s
    keyword arguments): node ids, the split per input node (the first of several splits: a
    several-run save replaces it per run), the data's SHA-256 fingerprint."""
    out = {"node_ids": loaded.node_ids, "split": split_codes(loaded.prepared) if split else None,
           "identity_features": job.identity_features}
    if fingerprint:
        out["fingerprint"] = checkpoint.data_fingerprint(loaded.prepared.data)
    return out


def result_facts(result: Any) -> dict[str, Any]:
    """What the final checkpoint's ``extra`` records about the run's outcome (a fit result or a
    batch run's :class:`~jaxgcn.io.reports.RunSummary`): ``restored_epoch``, the epoch whose params
    it holds under patience early stopping (``None`` otherwise; ``epoch`` is then the last epoch
    trained)."""
    return {"restored_epoch": result.restored_epoch}


def settings(job: Job, loaded: Loaded, model_config: GCNConfig, train_config: TrainConfig, execution: Execution,
             layout: dict[str, Any] | None = None) -> dict[str, Any]:
    """The settings a resumed run must share with the run it continues (as JSON values).
    ``layout``: how the run is spread (a sharded run's devices and exchange; None on one device)."""
    info = loaded.prepared.info
    # "layout" None: one device (checkpoints written before sharded runs resumed have no key: also None)
    return {"model": json.loads(json.dumps(dataclasses.asdict(model_config))),
            "train": json.loads(json.dumps(dataclasses.asdict(train_config))),
            "execution": json.loads(json.dumps(record(execution))), "seed": job.seed,
            "dataset": info["dataset"], "n_nodes": info["n_nodes"], "layout": layout}


def recorded(job: Job) -> dict[str, Any]:
    """What every checkpoint's ``extra`` records about the command besides the settings: its options
    (:attr:`Job.options`), which ``--resume`` and ``evaluate``/``predict``/``plot`` restore."""
    return {} if job.options is None else {"options": job.options}


def fit_hooks(job: Job, loaded: Loaded, model_config: GCNConfig, train_config: TrainConfig, execution: Execution,
              saved_facts: dict[str, Any], say: Say, layout: dict[str, Any] | None = None
              ) -> tuple[dict[str, Any], int]:
    """``fit`` (and ``fit_sharded``) keyword arguments for ``checkpoint_every`` and ``resume``
    (``saved_facts``: :func:`facts`; ``layout``: :func:`settings`), and the epoch the run resumes
    from (0 without ``resume``). The run's state is slice 0 of a :mod:`jaxgcn.store.batch_state` folder
    (the one resumable-state format); the model files beside it are an ordinary checkpoint."""
    out: dict[str, Any] = {}
    if job.checkpoint_every is None and job.resume is None:
        return out, 0
    extra = settings(job, loaded, model_config, train_config, execution, layout)
    resumed_at, previous = 0, None
    if job.resume is not None:
        out["resume"], resumed_at, previous = _resume_one(job, extra, saved_facts["fingerprint"],
                                                          train_config.epochs, say)
    if job.checkpoint_every is not None:
        state_saver = batch_state.saver(job.save, extra={**extra, **recorded(job)},
                                        fingerprint=saved_facts["fingerprint"], previous=previous, single=True)

        def save_state(state: Any) -> None:
            checkpoint.save(job.save, state.params, model_config=model_config, train_config=train_config,
                            execution=execution, info=loaded.prepared.info, epoch=int(state.epoch), metrics={},
                            state=state, write_state=lambda s: state_saver(0, s), extra={**extra, **recorded(job)},
                            **saved_facts)
        out.update(checkpoint_every=job.checkpoint_every, on_checkpoint=save_state)
    return out, resumed_at


def _resume_one(job: Job, extra: dict[str, Any], fingerprint: dict[str, str], epochs: int,
                say: Say) -> tuple[Any, int, dict[str, Any] | None]:
    """A single run's ``resume(template)``, its epoch, and the manifest to keep writing (None: an
    old save or another folder). Its slice 0 of ``batch-state/``, or an older jaxgcn's
    ``checkpoint.json`` ``state_file`` (still read, for a release)."""
    if not (batch_state.folder(job.resume) / batch_state.MANIFEST).is_file():
        ck = checkpoint.load(job.resume)
        arrays = checkpoint.load_state(job.resume, ck.meta)
        checkpoint.check_resumable(ck.meta, extra, fingerprint, f"--resume {job.resume}")
        say(f"resuming from epoch {ck.meta['epoch']} of {job.resume}")
        old = int(ck.meta["epoch"])
        return (lambda template: checkpoint.restore_state(template, arrays, str(job.resume))), old, None
    manifest = batch_state.load(job.resume)
    if manifest.get("single_run") is not True:
        raise ValueError(f"--resume {job.resume}: holds a batch's state (--seeds/--splits/sweep), not a single run's; "
                         "resume it with the command that wrote it")
    checkpoint.check_resumable(manifest, extra, fingerprint, f"--resume {job.resume}")
    batch_state.check_slices(job.resume, manifest, 1, 1, epochs)
    if "0" not in manifest["slices"]:
        raise ValueError(f"--resume {job.resume}: its {batch_state.FOLDER}/{batch_state.MANIFEST} names no run "
                         "state (slice 0); train again")
    epoch = int(manifest["slices"]["0"]["epoch"])
    say(f"resuming from epoch {epoch} of {job.resume}")
    same = job.save is not None and Path(job.save).resolve() == Path(job.resume).resolve()
    return (lambda template: batch_state.slice_state(job.resume, manifest, 0, template)), epoch, (
        manifest if same else None)


def batch_hooks(job: Job, loaded: Loaded, model_config: GCNConfig, train_config: TrainConfig, execution: Execution,
                saved_facts: dict[str, Any], say: Say, runs_per_program: int) -> tuple[dict[str, Any], int]:
    """``fit_runs`` keyword arguments for ``checkpoint_every`` and ``resume`` of a batch: each
    slice's state in ``save``'s :mod:`jaxgcn.store.batch_state` folder. The seeds, splits and runs per
    program are settings (a slice holds the runs that train together). Also the epoch the batch
    resumes from: the earliest slice's, 0 when one had not started or without ``resume``."""
    out: dict[str, Any] = {}
    resumed = 0
    if job.checkpoint_every is None and job.resume is None:
        return out, resumed
    extra = {**settings(job, loaded, model_config, train_config, execution, {"runs_per_program": runs_per_program}),
             "seeds": job.seeds, "splits": job.data.splits}
    previous = None
    if job.resume is not None:
        manifest = batch_state.load(job.resume)
        checkpoint.check_resumable(manifest, extra, saved_facts["fingerprint"], f"--resume {job.resume}")
        batch_state.check_slices(job.resume, manifest, job.n_runs, runs_per_program, train_config.epochs)
        epochs = sorted(v["epoch"] for v in manifest["slices"].values())
        say(f"resuming {len(epochs)} slice(s) of runs at epoch {'-'.join(map(str, sorted({epochs[0], epochs[-1]})))} "
            f"of {job.resume}" if epochs else f"resuming {job.resume}: no slice had started")
        out["resume"] = lambda first, template: batch_state.slice_state(job.resume, manifest, first, template)
        started_all = len(epochs) == -(-job.n_runs // runs_per_program)  # every slice has saved state
        resumed = int(epochs[0]) if epochs and started_all else 0
        if job.save is not None and Path(job.save).resolve() == Path(job.resume).resolve():
            previous = manifest
    if job.checkpoint_every is not None:
        out.update(checkpoint_every=job.checkpoint_every,
                   on_checkpoint=batch_state.saver(job.save, extra={**extra, **recorded(job)},
                                                   fingerprint=saved_facts["fingerprint"],
                                                   previous=previous))
    return out, resumed


def save_models(job: Job, outcome: Outcome, say: Say) -> None:
    """The final model of one run (a checkpoint in ``job.save``), or every run of a batch as an
    ordinary checkpoint (``run-000``, ...) with its own split, then the manifest that names them
    (:func:`jaxgcn.store.checkpoint.save_runs`), last. The other layout's files go (a one-run save's
    checkpoint, a larger save's runs, a batch's resumable state): the folder holds this save alone."""
    info = outcome.loaded.prepared.info
    configs: dict[str, Any] = dict(model_config=outcome.model, train_config=outcome.train,
                                   execution=outcome.execution, info=info)
    if outcome.batch is None:
        res = outcome.fitted
        checkpoint.save(job.save, res.params, **configs, epoch=res.epochs_run, metrics=res.metrics,
                        extra={**result_facts(res), **recorded(job)}, **outcome.facts)
        batch_state.remove(job.save)  # an interrupted batch's state: not this model's
        say(f"saved the model to {job.save}")
        return
    res = outcome.batch
    for j, run in enumerate(outcome.runs):
        per_run = {**outcome.facts, "split": split_codes(outcome.loaded.prepared, run.split)}
        where = outputs.owned_dir(checkpoint.run_dir(job.save, j))  # a link planted at run-NNN is refused
        checkpoint.save(where, unstack_params(res.params, j), **configs,
                        epoch=run.epochs_run, metrics={k: float(v[j]) for k, v in res.metrics.items()},
                        extra={**result_facts(run), "seed": run.seed, "split_index": run.split, **recorded(job)},
                        **per_run)
    checkpoint.save_runs(job.save, [r._asdict() for r in outcome.runs])
    batch_state.remove(job.save)  # the saved runs are final: a finished batch holds no state to resume
    say(f"saved the {len(outcome.runs)} runs' models to {job.save} (evaluate and predict take the best "
        "validation run, or --run I)")



def resumable_since(directory: str | Path, since: float) -> str | None:
    """What an interrupted run can resume from: ``"epoch N"`` (``"epochs A-B"`` for a batch's
    slices) of the resumable state in ``directory`` written at or after ``since`` (a
    :func:`time.time`, when the run started), or None when the run wrote none."""
    folder = Path(directory)
    for path in (folder / checkpoint.META, batch_state.folder(folder) / batch_state.MANIFEST):
        try:
            if path.stat().st_mtime < since:  # an earlier run's state: not this run's progress
                continue
            meta = json.loads(path.read_text(encoding="utf-8"))
            if path.name == checkpoint.META:
                epochs, done = [int(meta["epoch"])] if meta.get("state_file") else [], 0
            else:  # a sweep's finished groups count too
                epochs, done = [int(s["epoch"]) for s in meta["slices"].values()], len(meta.get("done", {}))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if epochs or done:
            low, high = min(epochs, default=0), max(epochs, default=0)
            at = f"epoch {low}" if low == high else f"epochs {low}-{high}"
            return at if not done else f"{done} finished group{'s' if done != 1 else ''}" + (f", {at}" if epochs
                                                                                               else "")
    return None
