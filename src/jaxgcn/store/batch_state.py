"""The one resumable-state format: a batch of runs' (``train --seeds N --splits K --checkpoint-every E``),
a sweep's, and a single run's, which is one slice (slice 0, its unbatched run state as it is, the
manifest's ``single_run`` true). A single run's save of an older jaxgcn (``checkpoint.json``
naming a ``state-<n>.npz``) is still read, by :func:`jaxgcn.store.checkpoint.load_state`.

A batch trains in slices (:func:`jaxgcn.training.runs.fit_runs`); each slice's whole state (every run's
params, optimizer moments, key, early-stopping records and history, stacked on the run axis, and
the shared epoch counter) is one ``slice-<first>-<n>.npz`` in ``DIR/batch-state/``, where
``first`` is the slice's first run. ``state.json``, written after the slice file, names each
slice's current file with its size, SHA-256 and epoch, the settings the batch was started with
and the SHA-256 fingerprint of its data. Writes are atomic and the previous file of a slice goes
only after the new ``state.json`` is in place: a process killed at any moment leaves a manifest
whose every file exists and matches. The final ``--save`` removes the folder (a finished batch
holds no state, as a finished run's checkpoint).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from jaxgcn.store import checkpoint
from jaxgcn.store.manifest import BATCH_STATE, read_manifest
from jaxgcn.io.outputs import owned_dir, remove_stale_temps, write_atomic
from jaxgcn.version import __version__

FORMAT = BATCH_STATE.format
FOLDER = "batch-state"
MANIFEST = "state.json"


def folder(directory: str | Path) -> Path:
    return Path(directory) / FOLDER


def saver(directory: str | Path, *, extra: dict[str, Any], fingerprint: dict[str, str],
          previous: dict[str, Any] | None = None, single: bool = False) -> "Saver":
    """``save(first, state)``: write the state of the slice whose first run is ``first``.
    ``previous``: the manifest of the same folder being resumed (its other slices, and a sweep's
    finished groups, stay recorded). ``single``: the state is ONE run's own (no run axis), its
    slice 0, and the manifest says so (``single_run``)."""
    return Saver(directory, extra=extra, fingerprint=fingerprint, previous=previous, single=single)


class Saver:
    """Writes a batch's ``state.json`` and slice files (:func:`saver`); a sweep also records each
    finished group's results in the manifest's ``done`` (:meth:`finish`)."""

    def __init__(self, directory: str | Path, *, extra: dict[str, Any], fingerprint: dict[str, str],
                 previous: dict[str, Any] | None = None, single: bool = False) -> None:
        self.where = folder(directory)
        self.manifest = {"format": FORMAT, "version": __version__, "extra": extra, "data_sha256": fingerprint,
                         "slices": dict(previous["slices"]) if previous is not None else {}}
        if single:  # a single run is one slice: its unbatched RunState as it is
            self.manifest["single_run"] = True
        if previous is not None and "done" in previous:
            self.manifest["done"] = dict(previous["done"])
            self.manifest["done_groups"] = dict(previous.get("done_groups", {}))

    def __call__(self, first: int, state: Any) -> None:
        where, manifest = self.where, self.manifest
        owned_dir(where)  # a real folder: a link planted at batch-state is refused, never written through
        remove_stale_temps(where)
        blob = checkpoint.npz_bytes(checkpoint.state_arrays(state))
        old = manifest["slices"].get(str(first))
        number = 1 if old is None else old["number"] + 1
        name = f"slice-{first:05d}-{number}.npz"
        single = self.manifest.get("single_run", False)  # a RunState (epoch, reason) or a BatchState (step, runs)
        reason = np.asarray(state.reason if single else state.runs.reason)
        entry = {"file": name, "number": number, "bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest(),
                 "epoch": int(state.epoch if single else state.step), "running": int(np.sum(reason == 0))}
        recorded = False
        try:
            write_atomic(where / name, blob, follow=False)
            self._write({**manifest, "slices": {**manifest["slices"], str(first): entry}})
            manifest["slices"][str(first)], recorded = entry, True
        finally:  # Ctrl-C/SIGTERM between the two writes: the new slice file, which no manifest names, goes
            unused = name if not recorded else old["file"] if old is not None else None
            if unused is not None:
                (where / unused).unlink(missing_ok=True)

    def finish(self, key: int, results: list[list[float]], firsts: list[int], group: dict[str, Any]) -> None:
        """Record a finished sweep group's results (one list per run) under ``key`` (its first run),
        and in ``done_groups`` under the same key which group they are (``group``: its program axes,
        checked on resuming against the group that starts at ``key``); its slices (``firsts``) leave
        the manifest, then their files go: the results replace them."""
        owned_dir(self.where)
        remove_stale_temps(self.where)
        slices = self.manifest["slices"]
        gone = [slices[str(f)]["file"] for f in firsts if str(f) in slices]
        kept = {k: v for k, v in slices.items() if int(k) not in firsts}
        done = {**self.manifest.get("done", {}), str(key): results}
        groups = {**self.manifest.get("done_groups", {}), str(key): group}
        self._write({**self.manifest, "slices": kept, "done": done, "done_groups": groups})
        self.manifest.update(slices=kept, done=done, done_groups=groups)
        for name in gone:
            (self.where / name).unlink(missing_ok=True)

    def _write(self, manifest: dict[str, Any]) -> None:
        write_atomic(self.where / MANIFEST, json.dumps(manifest, indent=2) + "\n", follow=False)


def _bad(path: Path, what: str) -> ValueError:
    return ValueError(f"--resume {path}: {what}; it was edited or not written by this jaxgcn: train again")


def load(directory: str | Path) -> dict[str, Any]:
    """The manifest of a batch's saved state, checked (a clear error when there is none)."""
    path = folder(directory) / MANIFEST
    if not path.is_file():
        raise ValueError(f"--resume {directory}: holds no batch state to resume (no {FOLDER}/{MANIFEST}: the batch "
                         "finished, or it was not trained with --checkpoint-every); train again or --resume an "
                         "interrupted --seeds/--splits run")
    manifest = read_manifest(path, BATCH_STATE, _holds_its_slices)
    done = manifest.get("done", {})
    if not (isinstance(done, dict) and all(k.isdigit() and isinstance(v, list) and v and all(
            isinstance(r, list) and len(r) == 3 and all(checkpoint.is_json(x, (int, float)) for x in r) for r in v)
            for k, v in done.items())):
        raise _bad(path, "its done (a sweep's finished groups) is not a list of [val_acc, test_acc, epochs] per "
                         "run of each group")
    groups = manifest.get("done_groups", {})
    if not (isinstance(groups, dict) and all(isinstance(v, dict) and all(
            isinstance(x, (str, int)) and not isinstance(x, bool) for x in v.values()) for v in groups.values())):
        raise _bad(path, "its done_groups (which group each finished group's results are) is not a table of "
                         "hidden, layers and optimizer per group")
    return manifest


def _holds_its_slices(manifest: dict[str, Any]) -> bool:
    slices = manifest.get("slices")
    return (isinstance(slices, dict) and isinstance(manifest.get("extra"), dict)
            and isinstance(manifest.get("data_sha256"), dict)
            and all(k.isdigit() and isinstance(v, dict) and isinstance(v.get("file"), str)
                    and Path(v["file"]).name == v["file"] and isinstance(v.get("sha256"), str)
                    and checkpoint.is_json(v.get("bytes"), (int,)) and checkpoint.is_json(v.get("number"), (int,))
                    and checkpoint.is_json(v.get("epoch"), (int,)) for k, v in slices.items()))


def check_slices(directory: str | Path, manifest: dict[str, Any], n_runs: int, per_program: int, epochs: int) -> None:
    """Each slice key is the first run of one of this batch's slices (``0``, ``per_program``, ...
    below ``n_runs``, written as jaxgcn writes it) and each slice's epoch is one the run can be at
    (0 to ``epochs``): an edited key would be ignored or resume runs from another slice's state."""
    path = folder(directory) / MANIFEST
    for key, entry in manifest["slices"].items():
        if not (re.fullmatch(r"[0-9]{1,9}", key) and str(int(key)) == key and int(key) < n_runs
                and int(key) % per_program == 0):
            raise _bad(path, f"slice key {key[:20]!r} is not the first run of a slice (a multiple of {per_program} "
                             f"below {n_runs})")
        if not 0 <= entry["epoch"] <= epochs:
            raise _bad(path, f"slice {key} is at epoch {entry['epoch']}, outside the run's 0-{epochs}")


def slice_state(directory: str | Path, manifest: dict[str, Any], first: int, template: Any) -> Any:
    """The saved state of the slice whose first run is ``first``, shaped like ``template``; None
    when the batch was stopped before the slice started."""
    entry = manifest["slices"].get(str(first))
    if entry is None:
        return None
    path = folder(directory) / entry["file"]
    try:
        blob = path.read_bytes()
    except OSError as err:
        raise ValueError(f"--resume {directory}: slice file {path.name} cannot be read ({err.strerror}); "
                         "train again") from None
    if len(blob) != entry["bytes"] or hashlib.sha256(blob).hexdigest() != entry["sha256"]:
        raise ValueError(f"--resume {path}: {len(blob)} bytes that do not match the recorded size/SHA-256; the file "
                         "is truncated or corrupted: train again")
    return checkpoint.restore_state(template, checkpoint.read_arrays(path, "batch state"), f"--resume {path}")


def remove(directory: str | Path) -> None:
    """Remove a finished batch's state (the final save holds none); a link at its name is removed
    itself, never followed."""
    where = folder(directory)
    if where.is_symlink():
        where.unlink()
    shutil.rmtree(where, ignore_errors=True)
