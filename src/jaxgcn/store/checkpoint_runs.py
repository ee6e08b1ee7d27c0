"""Several runs in one checkpoint directory (``train --save`` with ``--seeds N`` / ``--splits K``):
each run an ordinary checkpoint in ``run-000``, ``run-001``, ... and ``runs.json`` naming them with
their seed, split and accuracies and the best-validation run, which a reader takes by default.
:mod:`jaxgcn.store.checkpoint` re-exports every name."""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any

from jaxgcn.store.manifest import RUNS as RUNS_KIND, peek_manifest, read_manifest
from jaxgcn.io.outputs import TEMP, write_atomic
from jaxgcn.core.validate import is_json
from jaxgcn.version import __version__

RUNS = "runs.json"
RUNS_FORMAT = RUNS_KIND.format
RUN_DIR = re.compile(r"run-(\d{3,})")
# what checkpoint.save writes into a checkpoint directory: the only names a clean-up removes
CHECKPOINT_FILE = re.compile(r"checkpoint\.json|params-\d+\.npz|node_ids-\d+\.npy|state-\d+\.npz|split-\d+\.npy")


def run_dir(directory: str | Path, run: int) -> Path:
    """Where run ``run`` of a several-run save lives: an ordinary checkpoint directory."""
    return Path(directory) / f"run-{run:03d}"


def save_runs(directory: str | Path, runs: list[dict[str, Any]]) -> Path:
    """Write the manifest of a several-run save (each run already saved with :func:`save` into
    :func:`run_dir`): per run its ``seed``, ``split``, ``val_acc`` and ``test_acc``, and which run
    has the best validation accuracy (ties: the first), the one a reader takes by default."""
    best = max(range(len(runs)), key=lambda j: (runs[j]["val_acc"], -j))
    manifest = {"format": RUNS_FORMAT, "version": __version__, "best": best,
                "runs": [{"dir": run_dir(directory, j).name, **{k: r[k] for k in ("seed", "split", "val_acc",
                                                                                   "test_acc")}}
                         for j, r in enumerate(runs)]}
    path = write_atomic(Path(directory) / RUNS, json.dumps(manifest, indent=2) + "\n", follow=False)
    remove_runs(directory, keep=len(runs))  # a larger save's extra runs
    _remove_owned_files(Path(directory), temps=False)  # a one-run save's checkpoint (runs.json is read first)
    return path


def _remove_owned_files(folder: Path, temps: bool = True) -> bool:
    """Remove what :func:`jaxgcn.store.checkpoint.save` writes in ``folder`` (links themselves, never
    their targets) and, with ``temps``, its temporary files (the save folder's own are a live
    writer's); True when nothing else is left in it."""
    left = False
    for entry in os.scandir(folder):
        if CHECKPOINT_FILE.fullmatch(entry.name) or (temps and TEMP.match(entry.name)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
        else:
            left = True
    return not left


def remove_runs(directory: str | Path, keep: int = 0) -> None:
    """Remove a several-run save's runs from ``directory`` (its ``runs.json`` too when ``keep`` is 0):
    ``run-NNN`` folders numbered ``keep`` or more, only the files jaxgcn wrote in them (a folder that
    holds others keeps them), and a link at such a name is removed itself, never followed."""
    directory = Path(directory)
    if keep == 0:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / RUNS)
    for entry in os.scandir(directory):
        m = RUN_DIR.fullmatch(entry.name)
        if m is None or int(m[1]) < keep:
            continue
        if entry.is_symlink():
            os.unlink(entry.path)
        elif entry.is_dir(follow_symlinks=False) and _remove_owned_files(Path(entry.path)):
            with contextlib.suppress(OSError):
                os.rmdir(entry.path)


def _runs_manifest(path: Path) -> dict[str, Any]:
    def holds_its_runs(manifest: dict[str, Any]) -> bool:
        runs = manifest.get("runs")
        return (isinstance(runs, list) and bool(runs) and is_json(manifest.get("best"), (int,))
                and 0 <= manifest["best"] < len(runs)
                and all(isinstance(r, dict) and r.get("dir") == run_dir(path.parent, j).name
                        and is_json(r.get("seed"), (int,)) and is_json(r.get("split"), (int,))
                        and all(is_json(r.get(k), (int, float)) for k in ("val_acc", "test_acc"))
                        for j, r in enumerate(runs)))

    return read_manifest(path, RUNS_KIND, holds_its_runs)


def resolve_run(directory: str | Path, run: int | None) -> tuple[Path, str | None]:
    """The checkpoint directory to read for ``--checkpoint directory [--run run]``, and a note that
    says which run a several-run save gave (``None`` for an ordinary checkpoint). Without ``run``
    a several-run save gives its best-validation run."""
    directory = Path(directory)
    manifest_path = directory / RUNS
    if not manifest_path.is_file():
        if run is not None:
            raise ValueError(f"--run {run}: checkpoint {directory} holds one run (no {RUNS}); drop --run, or "
                             "pass a directory that train --save wrote with --seeds N or --splits K")
        return directory, None
    manifest = _runs_manifest(manifest_path)
    runs = manifest["runs"]
    if run is not None and not 0 <= run < len(runs):
        raise ValueError(f"--run {run}: checkpoint {directory} holds runs 0-{len(runs) - 1}; pick one of them")
    chosen = manifest["best"] if run is None else run
    _check_recorded(directory, runs, chosen)
    r = runs[chosen]
    why = "the best validation accuracy" if run is None else "--run"
    note = (f"checkpoint {directory}: run {chosen} of {len(runs)} (seed {r['seed']}, split {r['split']}, "
            f"validation accuracy {r['val_acc']:.4f}: {why})")
    if run is None:
        note += "; --run I picks another"
    return run_dir(directory, chosen), note


def _recorded_run(directory: Path, j: int) -> tuple[Any, Any] | None:
    """The seed and split that ``run-NNN``'s own checkpoint records (None where it records none or
    cannot be read: the checkpoint's full load then says what is wrong with it)."""
    try:
        extra = peek_manifest(run_dir(directory, j) / "checkpoint.json")["extra"]  # type: ignore[index]
        return extra["seed"], extra["split_index"]
    except (KeyError, TypeError):  # no checkpoint.json, or none that records them
        return None


def _check_recorded(directory: Path, runs: list[dict[str, Any]], chosen: int) -> None:
    """The run folder a reader takes holds the run ``runs.json`` lists for it: a folder swapped,
    renamed or copied in from another save would be scored as another seed's or split's model."""
    have, want = _recorded_run(directory, chosen), (runs[chosen]["seed"], runs[chosen]["split"])
    if have is None or have == want:
        return
    holder = next((run_dir(directory, j).name for j in range(len(runs)) if _recorded_run(directory, j) == want), None)
    raise ValueError(f"checkpoint {directory}: {run_dir(directory, chosen).name} holds the model of seed {have[0]}, "
                     f"split {have[1]}, but {RUNS} lists run {chosen} as seed {want[0]}, split {want[1]}"
                     f"{f' (the model {holder} holds)' if holder else ''}; the run folders were swapped, renamed or "
                     "copied from another save: save the runs again (jaxgcn train --save)")
