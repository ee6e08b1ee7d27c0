"""A sweep on one process or a job's processes (:func:`run`: ``jaxgcn sweep`` below its flags) and
its saved progress (``--save DIR [--checkpoint-every K]``, ``--resume DIR``).

A sweep keeps its progress in the resumable state of a batch (:mod:`jaxgcn.store.batch_state`:
``DIR/batch-state/state.json`` and one file per slice), as ``train --seeds N`` does: a slice is
keyed by its first run in the order the sweep runs them (group by group), and each finished
group's results (``[val_acc, test_acc, epochs_run]`` per run) go into the manifest's ``done``,
replacing its slices. A resumed sweep takes a finished group's results as they were (no program
compiled, no epoch trained), continues a started slice from its last checkpoint and runs the rest,
in the chunks it started with: the table equals the uninterrupted sweep's bit for bit. The state
records ``command: sweep``, the settings (grid, seeds, splits, the base configs, the layout of
groups and slices), the data's SHA-256 and the command's options; a resume with other ones is
refused. The finished sweep writes ``DIR/sweep.json`` and ``DIR/sweep.csv`` and removes the state.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np

from jaxgcn.store import batch_state, checkpoint
from jaxgcn.app.data import Loaded
from jaxgcn.training.runs import Entry
from jaxgcn.core.models import Execution, GCNConfig, record
from jaxgcn.plan import Plan, program_key
from jaxgcn.sweep import Grid, Row, chunk_sizes, group_configs, layout as sweep_layout, lower, run_grid
from jaxgcn.training.config import TrainConfig

REPORT = "sweep.json"  # what a finished saved sweep holds: its --json report (with the record) ...
TABLE = "sweep.csv"  # ... and its --csv table
COMMAND = "sweep"  # the manifest's extra["command"]: a train batch's has none


def _bad(directory: Path, what: str) -> ValueError:
    return ValueError(f"--resume {batch_state.folder(directory) / batch_state.MANIFEST}: {what}; it was edited or "
                      "not written by this jaxgcn: sweep again without --resume")


def resumed(directory: Path, settings: dict[str, Any], fingerprint: dict[str, str], n_groups: int) \
        -> tuple[dict[str, Any], list[int]]:
    """The manifest of the sweep saved in ``directory``, checked against this sweep's ``settings``
    (all but the layout) and data, and the runs per chunk of each of its ``n_groups`` groups that
    it started with."""
    if not (batch_state.folder(directory) / batch_state.MANIFEST).is_file():
        raise ValueError(f"--resume {directory}: holds no sweep progress to resume (no {batch_state.FOLDER}/"
                         f"{batch_state.MANIFEST}: the sweep was stopped before its first group finished or its "
                         "first --checkpoint-every save); run the sweep again")
    manifest = batch_state.load(directory)  # another command's state: refused by the options' check (cli.records)
    checkpoint.check_resumable(manifest, settings, fingerprint, f"--resume {directory}")
    layout = manifest["extra"].get("layout")
    chunks = layout.get("chunks") if isinstance(layout, dict) else None
    if not (isinstance(chunks, list) and len(chunks) == n_groups
            and all(checkpoint.is_json(c, (int,)) and c > 0 for c in chunks)):
        raise _bad(directory, f"its layout's chunks are not {n_groups} positive run counts, one per group")
    return manifest, chunks


def check_progress(directory: Path, manifest: dict[str, Any], layout: dict[str, list[int]], n_runs: int,
                   epochs: int, groups: list[dict[str, Any]]) -> None:
    """Each saved slice is one of this sweep's slices at an epoch its runs can be at, and each
    finished group one of its groups (``groups``: their :func:`jaxgcn.sweep.group_configs`, which
    its recorded ``done_groups`` entry must be) with one result per run that a run can end with: an
    edited key would resume runs from another slice's state, or take another group's results."""
    for key, entry in manifest["slices"].items():
        if not (key == str(int(key)) and int(key) in layout["slices"]):
            raise _bad(directory, f"slice key {key[:20]!r} is not the first run of one of the sweep's slices")
        if not 0 <= entry["epoch"] <= epochs:
            raise _bad(directory, f"slice {key} is at epoch {entry['epoch']}, outside the runs' 0-{epochs}")
    ends = [*layout["groups"][1:], n_runs]
    for key, results in manifest.get("done", {}).items():
        if not (key == str(int(key)) and int(key) in layout["groups"]):
            raise _bad(directory, f"done key {key[:20]!r} is not the first run of one of the sweep's groups")
        at = layout["groups"].index(int(key))
        held = manifest.get("done_groups", {}).get(key)
        if held != groups[at]:  # results moved under another group's key (two groups of one size)
            raise _bad(directory, f"done group {key} holds the results of {_group_text(held)}, but the sweep's group "
                                  f"at run {key} is {_group_text(groups[at])}")
        size = ends[at] - int(key)
        if len(results) != size or not all(0 <= v <= 1 and 0 <= t <= 1 and isinstance(e, int) and 1 <= e <= epochs
                                           for v, t, e in results):
            raise _bad(directory, f"done group {key} does not hold {size} runs' [val_acc, test_acc, epochs] "
                                  f"(accuracies in 0-1, epochs in 1-{epochs})")


def _group_text(group: dict[str, Any] | None) -> str:
    return "no recorded group" if group is None else ", ".join(f"{k} {v}" for k, v in group.items())


class Store:
    """What :func:`jaxgcn.sweep.run_entries` keeps a sweep's progress with (its ``store``): the
    results of groups finished before an interruption, the checkpoint hooks of each chunk, and the
    record of each group as it finishes.

    Args:
        directory: ``--save DIR``; ``saver``: its :func:`jaxgcn.store.batch_state.saver`.
        layout: the first runs of the groups and slices (:func:`jaxgcn.sweep.layout`).
        groups: each group's program axes, by its first run (recorded with its results).
        checkpoint_every: save every started slice's state every K epochs (None: groups only).
        resume: the folder resumed and its checked manifest (None: a new sweep).
    """

    def __init__(self, directory: Path, saver: batch_state.Saver, layout: dict[str, list[int]],
                 checkpoint_every: int | None = None, resume: tuple[Path, dict[str, Any]] | None = None,
                 groups: dict[int, dict[str, Any]] | None = None) -> None:
        self.directory, self.saver, self.layout, self.groups = directory, saver, layout, groups or {}
        self.checkpoint_every, self.resume = checkpoint_every, resume

    def kept(self, first: int, n: int) -> np.ndarray | None:
        """[n, 3] results of the group starting at run ``first`` that finished before the
        interruption, or None."""
        done = {} if self.resume is None else self.resume[1].get("done", {})
        return None if str(first) not in done else np.asarray(done[str(first)], np.float64)

    def hooks(self, first: int) -> dict[str, Any]:
        """``fit_runs`` keyword arguments for the chunk whose first run is ``first``: ``fit_runs``
        counts its slices from 0, the state from the sweep's first run."""
        out: dict[str, Any] = {}
        if self.checkpoint_every is not None:
            save = self.saver
            out.update(checkpoint_every=self.checkpoint_every,
                       on_checkpoint=lambda f, state: save(first + f, state))
        if self.resume is not None:
            where, manifest = self.resume
            out["resume"] = lambda f, template: batch_state.slice_state(where, manifest, first + f, template)
        return out

    def finish(self, first: int, results: np.ndarray) -> None:
        """Record the group starting at run ``first`` as finished (its slices' state goes)."""
        firsts = [s for s in self.layout["slices"] if first <= s < first + len(results)]
        self.saver.finish(first, [[float(v), float(t), int(e)] for v, t, e in results], firsts,
                          self.groups.get(first, {}))


def open_store(directory: Path, *, settings: dict[str, Any], layout: dict[str, Any], fingerprint: dict[str, str],
               options: dict[str, Any] | None, checkpoint_every: int | None,
               resume: tuple[Path, dict[str, Any]] | None, say: Callable[[str], None],
               groups: list[dict[str, Any]] | None = None) -> Store:
    """The :class:`Store` of a sweep saving into ``directory`` (``resume``: the folder it continues
    and its manifest, checked with :func:`resumed` and :func:`check_progress`); ``settings`` and
    ``layout`` (what a resume must match), the data's ``fingerprint`` and the command's ``options``
    (what ``--resume DIR`` alone restores) are recorded."""
    extra = {"command": COMMAND, **settings, "layout": layout, **({"options": options} if options else {})}
    previous = None
    if resume is not None:
        where, manifest = resume
        checkpoint.check_resumable(manifest, {"layout": layout}, fingerprint, f"--resume {where}")
        done, slices = manifest.get("done", {}), manifest["slices"]
        epochs = sorted(v["epoch"] for v in slices.values())
        say(f"resuming {where}: {len(done)} of {len(layout['groups'])} group(s) finished"
            + (f", {len(epochs)} slice(s) of runs at epoch {'-'.join(map(str, sorted({epochs[0], epochs[-1]})))}"
               if epochs else ""))
        # the finished groups' results go on into another folder; the slice files stay where they are
        same = Path(where).resolve() == Path(directory).resolve()
        previous = manifest if same else {"slices": {}, "done": manifest.get("done", {}),
                                          "done_groups": manifest.get("done_groups", {})}
    saver = batch_state.saver(directory, extra=extra, fingerprint=fingerprint, previous=previous)
    return Store(directory, saver, layout, checkpoint_every, resume, dict(zip(layout["groups"], groups or [])))


class Saving(NamedTuple):
    """Where a sweep keeps its progress: ``save`` (None: nowhere), every ``checkpoint_every``
    epochs (None: at each group's end), ``resume``: the folder it continues, and the command's
    ``options`` recorded for ``--resume DIR`` alone."""

    save: Path | None = None
    checkpoint_every: int | None = None
    resume: Path | None = None
    options: dict[str, Any] | None = None


def run(loaded: Loaded, grid: Grid, seeds: list[int], configs: tuple[GCNConfig, TrainConfig, Plan], *,
        splits: int = 1, memory_budget: int | None = None, saving: Saving = Saving(),
        say: Callable[[str], None] = print, progress: Any = None, share: dict[str, Any] | None = None,
        log_every: int = 0) -> list[Row]:
    """The rows of ``grid`` x ``seeds`` x ``splits`` on the loaded data (:func:`jaxgcn.sweep.run_grid`),
    from the base ``configs`` (model, training, the plan every program runs by); ``share``: a
    ``--distributed`` job's ``process_index``, ``process_count`` and ``combine``; ``saving``:
    where the progress goes and what is resumed (:class:`Store`); ``log_every``: the groups' progress
    lines (:func:`jaxgcn.sweep.run_entries`)."""
    model_config, train_config, resolved = configs
    entries = lower(grid, seeds, splits, model_config=model_config, config=train_config)
    decided = (model_config, train_config, resolved.execution)
    kept = _store(saving.save, loaded, grid, seeds, splits, entries, decided, memory_budget, saving, say) \
        if saving.save is not None else {}
    prepared = loaded.prepared
    return run_grid(prepared.data, prepared.n_classes, grid, seeds, n_splits=splits, model_config=model_config,
                    config=train_config, execution=resolved, memory_budget=memory_budget, log=say,
                    progress=progress, log_every=log_every, **(share or {}), **kept)


def _store(save: Path, loaded: Loaded, grid: Grid, seeds: list[int], splits: int, entries: list[Entry],
           configs: tuple[GCNConfig, TrainConfig, Execution], memory_budget: int | None, saving: Saving,
           say: Callable[[str], None]) -> dict[str, Any]:
    """``run_grid``'s ``chunks`` and ``store`` of a saved sweep: a new one's chunks, or the chunks
    and progress of the one it resumes, checked."""
    model_config, train_config, execution = configs
    data, n_classes, info = loaded.prepared.data, loaded.prepared.n_classes, loaded.prepared.info
    fingerprint = checkpoint.data_fingerprint(data)
    settings = json.loads(json.dumps({
        "grid": dataclasses.asdict(grid), "seeds": seeds, "splits": splits,
        "model": dataclasses.asdict(model_config), "train": dataclasses.asdict(train_config),
        "execution": record(execution), "dataset": info["dataset"], "n_nodes": info["n_nodes"]}))
    resume = None
    if saving.resume is not None:
        manifest, chunks = resumed(saving.resume, settings, fingerprint, len({program_key(e) for e in entries}))
        resume = (saving.resume, manifest)
    else:
        chunks = chunk_sizes(data, n_classes, entries, execution=execution, memory_budget=memory_budget)
    layout = {"chunks": chunks, **sweep_layout(data, entries, chunks, execution=execution)}
    groups = group_configs(entries)
    if resume is not None:
        check_progress(resume[0], resume[1], layout, len(entries), train_config.epochs, groups)
    store = open_store(save, settings=settings, layout=layout, fingerprint=fingerprint,
                       options=saving.options, checkpoint_every=saving.checkpoint_every, resume=resume, say=say,
                       groups=groups)
    return {"chunks": chunks, "store": store}
