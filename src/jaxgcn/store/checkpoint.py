"""Self-describing, atomic, verified checkpoints: params as npz (``allow_pickle=False``) plus JSON.

A checkpoint directory holds ``params-<n>.npz`` and ``checkpoint.json``. The JSON names the
params file, its SHA-256 and size, the model and training configs, the task the model learned
(``task``: its name and metric as the run resolved them, never ``auto``), class names, feature
preprocessing, epoch, best metric and package version, and a SHA-256 fingerprint of the prepared
data the model was trained on (features, labels, graph, split: :func:`data_fingerprint`); node ids
(when the graph came from files naming its nodes) are in ``node_ids-<n>.npy`` and the training
split (per input node: 0 none, 1 train, 2 val, 3 test) in ``split-<n>.npy``.

Writes: each file goes to a temporary name, is fsynced and renamed into place
(:mod:`jaxgcn.io.outputs`), and ``checkpoint.json`` is written last: a process killed at any moment
leaves either the previous checkpoint or the new one, never a mix, and the next save removes the
temporary files a killed save left. Older files are removed only after the new JSON is in place,
and with them a several-run save's ``runs.json`` and ``run-NNN`` folders (the other layout, which a
reader would otherwise still take). A name inside the directory is never followed: a link planted
at ``checkpoint.json`` or a params file is replaced, and the file it points to is left untouched.

Reads (:func:`load`) trust nothing: the JSON is checked against a schema (every key's type, the
model config valid, class names and feature statistics consistent with the counts, file names
plain names inside the directory), the params file against its recorded size and SHA-256, every
param's name, shape and dtype against what the config builds, and every value for NaN/inf. The
side files (node ids, split, run state) are checked against the sizes and SHA-256s ``files``
records. Object arrays are refused (they would need unpickling). Every problem is one ValueError
that names the file and the fix. A reader that meets files gone because a running job saved a
newer checkpoint meanwhile (``--checkpoint-every``) reads that one instead.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import zipfile
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from jaxgcn.store.checkpoint_runs import (RUNS, RUNS_FORMAT, remove_runs, resolve_run, run_dir,  # noqa: F401 - its face
                                    save_runs)
from jaxgcn.core.data import SPLIT_CODES  # noqa: F401 - re-exported for split-<n>.npy readers
from jaxgcn.store.manifest import CHECKPOINT, manifest_text, parse_manifest
from jaxgcn.core.validate import check_npy_declared, check_npz_declared, is_json
from jaxgcn.version import __version__
from jaxgcn.io.outputs import remove_stale_temps, write_atomic

FORMAT = CHECKPOINT.format
META = "checkpoint.json"
FINGERPRINT_PARTS = ("features", "labels", "graph", "split")


class Checkpoint(NamedTuple):
    """A loaded checkpoint: ``params`` (nested dict of NumPy arrays), its metadata, the node ids
    ([n] str, files that name nodes) and the training split ([n] int8 codes, :data:`SPLIT_CODES`)."""

    params: dict[str, Any]
    meta: dict[str, Any]
    node_ids: np.ndarray | None
    split: np.ndarray | None = None


def _flatten(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "/"))
        else:
            flat[name] = value if hasattr(value, "shape") else np.asarray(value)
    return flat


def _unflatten(flat: dict[str, np.ndarray]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in flat.items():
        node = out
        *parents, leaf = name.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def _sha256(arrays: list[Any]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a))
        h.update(f"{a.dtype.str}{a.shape};".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def data_fingerprint(data: Any) -> dict[str, str]:
    """SHA-256 of each part of a prepared :class:`~jaxgcn.core.data.TrainData` (features, labels,
    graph, split masks), as stored in a checkpoint and compared on ``--resume``.

    >>> from jaxgcn.datasets import prepare, synthetic
    >>> a = data_fingerprint(prepare(synthetic(60, n_classes=2, n_features=4, seed=0)).data)
    >>> b = data_fingerprint(prepare(synthetic(60, n_classes=2, n_features=4, seed=1)).data)
    >>> sorted(a), a["features"] == b["features"], len(a["graph"])
    (['features', 'graph', 'labels', 'split'], False, 64)
    """
    import jax

    return {"features": _sha256(jax.tree.leaves(data.x)), "labels": _sha256([data.labels]),
            "graph": _sha256(jax.tree.leaves(data.graph)),
            "split": _sha256([data.train_mask, data.val_mask, data.test_mask])}


def fingerprint_changes(saved: dict[str, str] | None, now: dict[str, str]) -> list[str]:
    """The parts (features, labels, graph, split) whose fingerprint differs; all when none was saved."""
    return [k for k in FINGERPRINT_PARTS if not saved or saved.get(k) != now.get(k)]


def setting_changes(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Each setting that differs, as ``name: saved -> now`` (``model.hidden: 16 -> 32`` inside a
    config).

    >>> setting_changes({"seed": 0, "model": {"hidden": 16, "layers": 2}}, {"seed": 1, "model": {"hidden": 32,
    ...                 "layers": 2}})
    ['seed: 0 -> 1', 'model.hidden: 16 -> 32']
    """
    out = []
    for key in now:
        was, new = saved.get(key), now[key]
        if isinstance(was, dict) and isinstance(new, dict):
            out += [f"{key}.{k}: {was.get(k)!r} -> {new.get(k)!r}" for k in new if was.get(k) != new.get(k)]
        elif was != new:
            out.append(f"{key}: {was!r} -> {new!r}")
    return out


def precision(meta: dict[str, Any]) -> str:
    """The float32 matmul precision a checkpoint's model was trained in (its recorded execution's),
    what ``evaluate`` and ``predict`` compute in unless told; ``auto`` (the platform's choice:
    :func:`jaxgcn.plan.precision_for`) for a checkpoint written before the field."""
    execution = meta.get("execution")
    return execution.get("precision", "auto") if isinstance(execution, dict) else "auto"


def _with_precision(saved: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's settings (``extra``) with the execution's precision that a checkpoint written before
    the field ran in: ``default`` (JAX's, which no earlier jaxgcn changed), and the training's task
    (``auto``: the labels chose it, as they did), so such a run resumes where this one decides the same."""
    train = saved.get("train")
    if isinstance(train, dict) and "task" not in train:  # written before TrainConfig.task: the labels chose
        saved = {**saved, "train": {**train, "task": "auto"}}
    execution = saved.get("execution")
    if not isinstance(execution, dict) or "precision" in execution:
        return saved
    return {**saved, "execution": {**execution, "precision": "default"}}


def check_resumable(meta: dict[str, Any], settings: dict[str, Any], fingerprint: dict[str, str],
                    source: str) -> None:
    """Refuse to resume a checkpoint (``meta``) that was started with other ``settings`` (model and
    training configs, seed, dataset, node count: what was saved as ``extra``) or on other data (its
    :func:`data_fingerprint` differs from ``fingerprint``). ``source`` names it in the message."""
    saved = _with_precision(meta.get("extra", {}))
    changed = [k for k in settings if saved.get(k) != settings[k]]
    if changed:
        raise ValueError(f"{source}: the run was started with different {', '.join(changed)} "
                         f"({'; '.join(setting_changes(saved, settings))}); resume with the same data, seed and "
                         "settings")
    if meta.get("data_sha256") is None:
        raise ValueError(f"{source}: the checkpoint records no fingerprint of its data (written "
                         "by an older jaxgcn), so resuming cannot be checked; train again")
    differ = fingerprint_changes(meta["data_sha256"], fingerprint)
    if differ:
        raise ValueError(f"{source}: the prepared {', '.join(differ)} differ from the data the run "
                         "was started on (SHA-256 recorded in the checkpoint); resume with the same files, split "
                         "and preprocessing flags")


def state_arrays(state: Any) -> dict[str, np.ndarray]:
    """A training run state (a pytree holding a PRNG key) as named NumPy arrays."""
    import jax

    leaves = jax.tree.leaves(state)
    return {f"leaf_{i}": np.asarray(jax.random.key_data(leaf) if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)
                                    else leaf) for i, leaf in enumerate(leaves)}


def restore_state(template: Any, arrays: dict[str, np.ndarray], source: str) -> Any:
    """Rebuild a run state shaped like ``template`` from :func:`state_arrays` output."""
    import jax
    import jax.numpy as jnp

    leaves, treedef = jax.tree.flatten(template)
    if sorted(arrays) != sorted(f"leaf_{i}" for i in range(len(leaves))):
        raise ValueError(f"{source}: the saved run state has {len(arrays)} arrays, this run {len(leaves)}; resume "
                         "with the settings the run was started with")
    out = []
    for i, leaf in enumerate(leaves):
        saved = arrays[f"leaf_{i}"]
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            out.append(jax.random.wrap_key_data(jnp.asarray(saved)))
            continue
        if saved.shape != leaf.shape or saved.dtype != leaf.dtype:
            raise ValueError(f"{source}: saved array {i} is {saved.dtype}{list(saved.shape)}, this run needs "
                             f"{leaf.dtype}{list(leaf.shape)}; resume with the same data and settings")
        out.append(jnp.asarray(saved))
    return jax.tree.unflatten(treedef, out)


def npz_bytes(arrays: dict[str, Any]) -> bytes:
    from io import BytesIO

    buf = BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _npy_bytes(array: np.ndarray) -> bytes:
    from io import BytesIO

    buf = BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def save(directory: str | Path, params: dict[str, Any], *, model_config: Any, train_config: Any,
         execution: Any = None, info: dict[str, Any], epoch: int, metrics: dict[str, float],
         node_ids: np.ndarray | None = None,
         state: Any = None, extra: dict[str, Any] | None = None, split: np.ndarray | None = None,
         fingerprint: dict[str, str] | None = None, identity_features: bool = False,
         write_state: Any = None) -> Path:
    """Write a checkpoint into ``directory`` (created if needed), atomically; returns the JSON path.

    ``model_config`` (the architecture) is what :func:`model_config` rebuilds the model from;
    ``execution`` (how it ran: backend, dropout stream) is recorded beside it.
    ``state`` (a run state, for ``--resume``) and ``extra`` (JSON-able settings) are stored too;
    ``split`` ([n_nodes] codes of :data:`SPLIT_CODES`, input node order), ``fingerprint``
    (:func:`data_fingerprint`) and ``identity_features`` (the features were one-hot node ids, so
    column ``j`` belongs to ``node_ids[j]``) describe the training data. ``write_state(state)``
    writes the state in the one resumable-state format (:mod:`jaxgcn.store.batch_state`'s slice 0), after
    ``checkpoint.json``; a ``state`` without it is refused before anything is written. The
    ``state-<n>.npz`` layout of earlier versions is only read (:func:`load_state`, for a release).
    """
    from jaxgcn.core.models import record  # the models import JAX: only where a checkpoint is written
    from jaxgcn.core.tasks import resolve
    if state is not None and write_state is None:
        raise ValueError("checkpoint.save: state= needs write_state= (e.g. a jaxgcn.store.batch_state.saver(directory, "
                         "..., single=True) writing slice 0), the one resumable-state format; the state-<n>.npz "
                         "layout of earlier versions is read, no longer written")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(directory)  # names change between saves: clear a killed save's temporaries
    flat = {k: np.asarray(v) for k, v in _flatten(params).items()}
    blob = npz_bytes(flat)
    previous = sorted(directory.glob("params-*.npz"))
    number = 1 + max((int(m[1]) for p in previous if (m := re.fullmatch(r"params-(\d+)\.npz", p.name))), default=0)
    params_path = directory / f"params-{number}.npz"
    write_atomic(params_path, blob, follow=False)  # a link planted at a name inside is replaced, never followed
    learned = resolve(getattr(train_config, "task", "auto"), 2 if info.get("task") == "multilabel" else 1)
    task = {"name": learned.name, "metric": learned.metric}  # resolved: never "auto"
    names: dict[str, str | None] = {"node_ids_file": None, "split_file": None}
    sides: dict[str, dict[str, Any]] = {}  # each side file's size and SHA-256, as the params'

    def side(key: str, name: str, data: bytes) -> None:
        names[key] = name
        write_atomic(directory / name, data, follow=False)
        sides[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    if node_ids is not None:
        side("node_ids_file", f"node_ids-{number}.npy", _npy_bytes(np.asarray(node_ids).astype(str)))
    if split is not None:
        side("split_file", f"split-{number}.npy", _npy_bytes(np.asarray(split, np.int8)))
    meta = {
        "format": FORMAT, "version": __version__,
        "params_file": params_path.name, "params_sha256": hashlib.sha256(blob).hexdigest(),
        "params_bytes": len(blob), "node_ids_file": names["node_ids_file"],
        "model": dataclasses.asdict(model_config), "train": {**dataclasses.asdict(train_config), "task": task["name"]},
        "task": task,  # what evaluate and predict apply, whatever labels they are given
        "execution": record(execution) if execution is not None else None,
        "n_features": int(info["n_features"]), "n_classes": int(info["n_classes"]),
        "class_names": info.get("class_names"), "feature_norm": info.get("feature_norm"),
        "feature_stats": info.get("feature_stats"),
        "norm": info.get("norm"), "dataset": info.get("dataset"), "epoch": int(epoch),
        "metrics": {k: float(v) for k, v in metrics.items()},
        "state_file": None, "extra": extra or {},  # a state is in batch-state/; the key stays for readers
        "split_file": names["split_file"], "split": info.get("split"),
        "data_sha256": fingerprint, "identity_features": bool(identity_features), "files": sides,
    }
    write_atomic(directory / META, json.dumps(meta, indent=2) + "\n", follow=False)
    keep = {params_path.name, *filter(None, names.values())}
    for pattern in ("params-*.npz", "node_ids-*.npy", "state-*.npz", "split-*.npy"):
        for old in directory.glob(pattern):
            if old.name not in keep:
                old.unlink(missing_ok=True)  # a link is removed itself: the directory is a real one
    remove_runs(directory)  # a several-run save that was here: its manifest would still be read first
    if state is not None and write_state is not None:
        write_state(state)  # after the model: a kill between the two resumes from the state before
    return directory / META


# --- reading and verifying -------------------------------------------------------------------------

_FILE_PATTERNS = {"params_file": r"params-\d+\.npz", "node_ids_file": r"node_ids-\d+\.npy",
                  "state_file": r"state-\d+\.npz", "split_file": r"split-\d+\.npy"}
# key -> (allowed JSON types, required); int excludes bool (JSON true is not a count)
_SCHEMA: dict[str, tuple[tuple[type, ...], bool]] = {
    "format": ((str,), True), "version": ((str,), True), "params_file": ((str,), True),
    "params_sha256": ((str,), True), "params_bytes": ((int,), True), "model": ((dict,), True),
    "train": ((dict,), True), "n_features": ((int,), True), "n_classes": ((int,), True),
    "epoch": ((int,), True), "metrics": ((dict,), True),
    "node_ids_file": ((str, type(None)), False), "state_file": ((str, type(None)), False),
    "split_file": ((str, type(None)), False), "class_names": ((list, type(None)), False),
    "feature_norm": ((str, type(None)), False), "feature_stats": ((dict, type(None)), False),
    "norm": ((str, type(None)), False), "dataset": ((str, type(None)), False),
    "extra": ((dict,), False), "split": ((str, type(None)), False),
    "data_sha256": ((dict, type(None)), False), "identity_features": ((bool,), False),
    "execution": ((dict, type(None)), False), "files": ((dict,), False), "task": ((dict,), False),
}
# the model fields that decide the params' names and shapes must be recorded; the rest default
_MODEL_REQUIRED = ("hidden", "layers", "bias", "residual", "layer_norm")
# how a model ran, which earlier checkpoints recorded inside "model": not needed to rebuild it
_EXECUTION_KEYS = ("backend", "dropout_rng", "chunk_edges", "aggregate_first")
_TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string", dict: "an object",
               list: "a list", type(None): "null"}


def _expected(types: tuple[type, ...]) -> str:
    return " or ".join(_TYPE_WORDS.get(t, t.__name__) for t in types)


def _bad(path: Path, what: str) -> ValueError:
    return ValueError(f"checkpoint {path}: {what}; the file was edited or corrupted: save the model again "
                      "(jaxgcn train --save)")


def _check_schema(meta: dict[str, Any], path: Path) -> None:
    for key, (types, required) in _SCHEMA.items():
        if key not in meta:
            if required:
                raise _bad(path, f"key {key!r} is missing")
            continue
        if not is_json(meta[key], types):
            raise _bad(path, f"{key} is {meta[key]!r}, expected {_expected(types)}")
    for key, pattern in _FILE_PATTERNS.items():
        name = meta.get(key)
        if name is not None and not re.fullmatch(pattern, name):
            raise _bad(path, f"{key} {name!r} is not a file name jaxgcn writes ({pattern})")
    if re.fullmatch(r"[0-9a-f]{64}", meta["params_sha256"]) is None:
        raise _bad(path, f"params_sha256 {meta['params_sha256']!r} is not a SHA-256")
    for key, low in (("n_features", 1), ("n_classes", 1), ("epoch", 0), ("params_bytes", 1)):
        if meta[key] < low:
            raise _bad(path, f"{key} is {meta[key]}, expected an integer >= {low}")
    _check_classes(meta, path)
    _check_feature_stats(meta, path)
    for key, choices in (("norm", ("sym", "row", "none")), ("feature_norm", ("row", "standardize", "none"))):
        if meta.get(key) is not None and meta[key] not in choices:
            raise _bad(path, f"{key} is {meta[key]!r}, expected one of {', '.join(choices)}")
    fp = meta.get("data_sha256")
    if fp is not None and any(not isinstance(fp.get(k), str) for k in FINGERPRINT_PARTS):
        raise _bad(path, f"data_sha256 must name {', '.join(FINGERPRINT_PARTS)}")
    for name, entry in meta.get("files", {}).items():
        if not (isinstance(entry, dict) and isinstance(entry.get("bytes"), int)
                and re.fullmatch(r"[0-9a-f]{64}", str(entry.get("sha256")))):
            raise _bad(path, f"files[{name!r}] is {entry!r}, expected {{\"bytes\": N, \"sha256\": HEX}}")
    task, name = meta.get("task"), meta["train"].get("task", "auto")  # whether jaxgcn has it: the reader's to say
    if task is not None and not (set(task) == {"name", "metric"} and all(isinstance(v, str) for v in task.values())):
        raise _bad(path, f"task is {task!r}, expected {{\"name\": NAME, \"metric\": METRIC}}")
    if not isinstance(name, str):
        raise _bad(path, f"train.task is {name!r}, expected a task's name")
    _check_precision(meta, path)
    model_config(meta, path)


def _check_precision(meta: dict[str, Any], path: Path) -> None:
    recorded = precision(meta)
    if recorded != "auto":
        from jaxgcn.core.models import PRECISIONS  # the models import JAX: only where one is recorded

        if recorded not in PRECISIONS:
            raise _bad(path, f"execution.precision is {recorded!r}, expected one of {', '.join(PRECISIONS)}")


def _check_classes(meta: dict[str, Any], path: Path) -> None:
    names = meta.get("class_names")
    if names is None:
        return
    if len(names) != meta["n_classes"]:
        raise _bad(path, f"class_names lists {len(names)} classes but n_classes is {meta['n_classes']}")
    if not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
        raise _bad(path, "class_names must be distinct strings")


def _check_feature_stats(meta: dict[str, Any], path: Path) -> None:
    stats = meta.get("feature_stats")
    if meta.get("feature_norm") != "standardize":
        return
    if stats is None or any(not isinstance(stats.get(k), list) or len(stats[k]) != meta["n_features"]
                            or not all(is_json(v, (float,)) and np.isfinite(v) for v in stats[k])
                            for k in ("mean", "std")):
        raise _bad(path, f"feature_norm 'standardize' needs feature_stats mean and std: {meta['n_features']} finite "
                         "numbers each")


def model_config(meta: dict[str, Any], path: str | Path = META) -> Any:
    """The :class:`~jaxgcn.core.models.GCNConfig` (architecture) a checkpoint's metadata records, checked
    field by field. Execution settings that older checkpoints kept in ``model`` are skipped."""
    import typing

    from jaxgcn.core.models import GCNConfig

    path = Path(path)
    saved = {k: v for k, v in meta["model"].items() if k not in _EXECUTION_KEYS}
    hints = typing.get_type_hints(GCNConfig)
    for key in _MODEL_REQUIRED:
        if key not in saved:
            raise _bad(path, f"model.{key} is missing")
    for key, value in saved.items():
        if key not in hints:
            raise _bad(path, f"model.{key} is not a setting of this jaxgcn's model (written by jaxgcn "
                             f"{meta.get('version')}?)")
        types = typing.get_args(hints[key]) or (hints[key],)
        if not is_json(value, types):
            raise _bad(path, f"model.{key} is {value!r}, expected {_expected(types)}")
    try:
        return GCNConfig(**saved)
    except ValueError as err:
        raise _bad(path, f"model config invalid: {err}") from None


def read_arrays(path: Path, what: str, blob: bytes | None = None) -> dict[str, np.ndarray]:
    """Every array of an npz (or the one of an npy, as ``{"": a}``), never unpickling; ``blob``:
    the file's bytes, already read (and verified)."""
    from io import BytesIO

    try:
        blob = path.read_bytes() if blob is None else blob
        if path.suffix == ".npy":
            check_npy_declared(BytesIO(blob), len(blob), f"checkpoint {path}")
        else:
            check_npz_declared(BytesIO(blob), f"checkpoint {path}")
    except (OSError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(f"checkpoint {path}: the {what} file is unreadable ({err}); save the model again") from None
    try:
        if path.suffix == ".npy":
            return {"": np.load(BytesIO(blob), allow_pickle=False)}
        with np.load(BytesIO(blob), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except MemoryError:  # a header declaring an array far larger than the file
        raise ValueError(f"checkpoint {path}: the {what} file declares an array larger than memory; the file was "
                         "not written by jaxgcn or is corrupted: save the model again") from None
    except ValueError as err:
        if "allow_pickle" in str(err) or "Object arrays" in str(err):
            raise ValueError(f"checkpoint {path}: the {what} file holds object arrays (pickled Python objects), "
                             "which jaxgcn never writes and never loads (loading them could run code); the file "
                             "was not written by jaxgcn: save the model again") from None
        raise ValueError(f"checkpoint {path}: the {what} file is unreadable ({err}); save the model again") from None
    except (OSError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(f"checkpoint {path}: the {what} file is unreadable ({err}); save the model again") from None


def check_params(params: dict[str, Any], meta: dict[str, Any], path: str | Path) -> None:
    """Every param's name, shape and dtype is what the recorded config builds for ``n_features``
    inputs and ``n_classes`` outputs, and every value is finite."""
    import jax

    from jaxgcn.core.models import gcn

    path = Path(path)
    config = model_config(meta, path)
    shapes = jax.eval_shape(lambda: gcn(config).init(jax.random.key(0), meta["n_features"], meta["n_classes"]))
    want = _flatten(shapes)
    have = _flatten(params)
    where = (f"model layers={config.layers}, hidden={config.hidden}, {meta['n_features']} features, "
             f"{meta['n_classes']} classes")
    for name in sorted(set(want) ^ set(have)):  # names first: a layer count shows as a missing layer
        if name not in have:
            raise _bad(path, f"param {name} is missing ({where} needs it)")
        raise _bad(path, f"param {name} is not part of the model ({where})")
    for name in sorted(want):
        a, w = have[name], want[name]
        if a.shape != w.shape or a.dtype != w.dtype:
            raise _bad(path, f"param {name} is {a.dtype}{list(a.shape)}, {where} needs {w.dtype}{list(w.shape)}")
    for name, a in have.items():
        bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
        if bad:
            raise ValueError(f"checkpoint {path}: param {name} holds {bad} NaN or infinite values; predictions "
                             "from it would be meaningless (the run diverged, or the file was edited): train again")


class _Moved(ValueError):
    """A file ``checkpoint.json`` names is missing or differs: also what a reader sees when a run
    saves a newer checkpoint (``--checkpoint-every``) while it reads (the old files go)."""


LOAD_ATTEMPTS = 3  # reads of a checkpoint that a running job keeps replacing


def load(directory: str | Path) -> Checkpoint:
    """Read and verify a checkpoint; every problem is a ValueError naming the file and the fix. A
    checkpoint replaced while it is read (a run writing ``--checkpoint-every``) is read again."""
    directory = Path(directory)
    for attempt in range(LOAD_ATTEMPTS):
        text = _meta_text(directory)
        try:
            return _load(directory, text)
        except _Moved as err:
            if _meta_text(directory) == text or attempt == LOAD_ATTEMPTS - 1:
                raise ValueError(str(err)) from None  # not a newer save: the checkpoint itself is damaged
    raise AssertionError("unreachable")


def _meta_text(directory: Path) -> str:
    meta_path = directory / META
    if not directory.is_dir() or not meta_path.is_file():
        raise ValueError(f"checkpoint {directory}: not a checkpoint directory (no {META}); pass the folder "
                         "that --save wrote")
    return manifest_text(meta_path, CHECKPOINT)


def _load(directory: Path, text: str) -> Checkpoint:
    meta_path = directory / META
    meta = parse_manifest(text, meta_path, CHECKPOINT)
    _check_schema(meta, meta_path)
    params_path, blob = _verified(directory, meta, "params_file", "params")
    params = _unflatten(read_arrays(params_path, "params", blob))
    check_params(params, meta, params_path)
    node_ids = _read_node_ids(directory, meta)
    split = _read_split(directory, meta, node_ids)
    return Checkpoint(params, meta, node_ids, split)


def _verified(directory: Path, meta: dict[str, Any], key: str, what: str) -> tuple[Path, bytes]:
    """A file's bytes, checked against the size and SHA-256 ``checkpoint.json`` records for it: the
    params', or a side file's in ``files`` (checkpoints written before side files were hashed have
    no ``files``: read as they are; one that has it must list every side file it names)."""
    path = directory / meta[key]
    if not path.is_file():
        raise _Moved(f"checkpoint {directory}: {what} file {path.name} is missing")
    try:
        blob = path.read_bytes()
    except OSError as err:
        raise ValueError(f"checkpoint {path}: cannot be read ({err.strerror}); check its permissions") from None
    recorded = ({"bytes": meta["params_bytes"], "sha256": meta["params_sha256"]} if key == "params_file"
                else meta.get("files", {}).get(path.name))
    if recorded is None and "files" in meta:  # an entry removed would let any content through unchecked
        raise _bad(directory / META, f"files records no size and SHA-256 for the {what} file {path.name}")
    if recorded is not None and (len(blob) != recorded["bytes"]
                                 or hashlib.sha256(blob).hexdigest() != recorded["sha256"]):
        raise _Moved(f"checkpoint {path}: {len(blob)} bytes that do not match the recorded size/SHA-256; the "
                     f"{what} file is truncated or corrupted, save the model again")
    return path, blob


def _side_file(directory: Path, meta: dict[str, Any], key: str, what: str) -> np.ndarray | None:
    if not meta.get(key):
        return None
    path, blob = _verified(directory, meta, key, what)
    return read_arrays(path, what, blob)[""]


def _read_node_ids(directory: Path, meta: dict[str, Any]) -> np.ndarray | None:
    ids = _side_file(directory, meta, "node_ids_file", "node id")
    if ids is None:
        return None
    path = directory / meta["node_ids_file"]
    if ids.ndim != 1 or ids.dtype.kind != "U" or np.unique(ids).size != ids.size:
        raise _bad(path, f"node ids must be distinct strings in one column, found {ids.dtype}{list(ids.shape)}")
    if meta.get("identity_features") and ids.size != meta["n_features"]:
        raise _bad(path, f"{ids.size} node ids for a model whose {meta['n_features']} features are one-hot node ids")
    return ids


def _read_split(directory: Path, meta: dict[str, Any], node_ids: np.ndarray | None) -> np.ndarray | None:
    split = _side_file(directory, meta, "split_file", "split")
    if split is None:
        return None
    path = directory / meta["split_file"]
    if split.ndim != 1 or split.dtype != np.int8 or np.any((split < 0) | (split > 3)):
        raise _bad(path, f"the split must be int8 codes 0..3 in one column, found {split.dtype}{list(split.shape)}")
    if node_ids is not None and split.size != node_ids.size:
        raise _bad(path, f"the split has {split.size} entries for {node_ids.size} node ids")
    return split


def load_state(directory: str | Path, meta: dict[str, Any]) -> dict[str, np.ndarray]:
    """The saved run state's arrays, or a clear error when the checkpoint has none."""
    directory = Path(directory)
    if not meta.get("state_file"):
        raise ValueError(f"checkpoint {directory}: holds no run state to resume (it was saved at the end of a "
                         "finished run); train again or --resume an interrupted --checkpoint-every run")
    path, blob = _verified(directory, meta, "state_file", "run state")
    return read_arrays(path, "run state", blob)
