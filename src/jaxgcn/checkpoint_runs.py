"""Several runs in one checkpoint directory (``train --save`` with ``--seeds N`` / ``--splits K``):
each run an ordinary checkpoint in ``run-000``, ``run-001``, ... and ``runs.json`` naming them with
their seed, split and accuracies and the best-validation run, which a reader takes by default.
:mod:`jaxgcn.checkpoint` re-exports every name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jaxgcn.outputs import write_atomic
from jaxgcn.validate import is_json
from jaxgcn.version import __version__

RUNS = "runs.json"
RUNS_FORMAT = "jaxgcn-runs-1"


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
    return write_atomic(Path(directory) / RUNS, json.dumps(manifest, indent=2) + "\n")


def _runs_manifest(path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise ValueError(f"checkpoint {path}: unreadable JSON ({type(err).__name__}); the file is corrupted, "
                         "save the runs again") from None
    except OSError as err:
        raise ValueError(f"checkpoint {path}: cannot be read ({err.strerror}); check its permissions") from None
    runs = manifest.get("runs") if isinstance(manifest, dict) else None
    if (not isinstance(manifest, dict) or manifest.get("format") != RUNS_FORMAT or not isinstance(runs, list)
            or not runs or not is_json(manifest.get("best"), (int,)) or not 0 <= manifest["best"] < len(runs)
            or not all(isinstance(r, dict) and r.get("dir") == run_dir(path.parent, j).name
                       and is_json(r.get("seed"), (int,)) and is_json(r.get("split"), (int,))
                       and all(is_json(r.get(k), (int, float)) for k in ("val_acc", "test_acc"))
                       for j, r in enumerate(runs))):
        raise ValueError(f"checkpoint {path}: not a {RUNS_FORMAT} manifest (format, best, and per run its dir, "
                         "seed, split, val_acc and test_acc); it was edited or not written by this jaxgcn: save "
                         "the runs again")
    return manifest


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
    r = runs[chosen]
    why = "the best validation accuracy" if run is None else "--run"
    note = (f"checkpoint {directory}: run {chosen} of {len(runs)} (seed {r['seed']}, split {r['split']}, "
            f"validation accuracy {r['val_acc']:.4f}: {why})")
    if run is None:
        note += "; --run I picks another"
    return run_dir(directory, chosen), note
