"""Self-describing, atomic checkpoints: params as npz (``allow_pickle=False``) plus JSON metadata.

A checkpoint directory holds ``params-<n>.npz`` and ``checkpoint.json``. The JSON names the
params file, its SHA-256 and size, the model and training configs, class names, feature
preprocessing, epoch, best metric and package version; node ids (when the graph came from files
naming its nodes) are in ``node_ids.npy``. Each file is written to a temporary name, flushed with
fsync and renamed into place, and ``checkpoint.json`` is written last: a process killed at any
moment leaves either the previous checkpoint or the new one, never a mix. Older params files are
removed only after the new JSON is in place.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

FORMAT = "jaxgcn-checkpoint-1"
META = "checkpoint.json"


class Checkpoint(NamedTuple):
    """A loaded checkpoint: ``params`` (nested dict of NumPy arrays) and its metadata."""

    params: dict[str, Any]
    meta: dict[str, Any]
    node_ids: np.ndarray | None


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _flatten(params: dict[str, Any], prefix: str = "") -> dict[str, np.ndarray]:
    flat = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "/"))
        else:
            flat[name] = np.asarray(value)
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
    if len(arrays) != len(leaves):
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


def save(directory: str | Path, params: dict[str, Any], *, model_config: Any, train_config: Any,
         info: dict[str, Any], epoch: int, metrics: dict[str, float], node_ids: np.ndarray | None = None,
         state: Any = None, extra: dict[str, Any] | None = None) -> Path:
    """Write a checkpoint into ``directory`` (created if needed), atomically; returns the JSON path.
    ``state`` (a run state, for ``--resume``) and ``extra`` (JSON-able settings) are stored too."""
    from io import BytesIO

    import jaxgcn

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    buf = BytesIO()
    np.savez(buf, **_flatten(params))
    blob = buf.getvalue()
    previous = sorted(directory.glob("params-*.npz"))
    number = 1 + max((int(p.stem.split("-")[1]) for p in previous), default=0)
    params_path = directory / f"params-{number}.npz"
    _write_atomic(params_path, blob)
    state_name = None
    if state is not None:
        sbuf = BytesIO()
        np.savez(sbuf, **state_arrays(state))
        state_name = f"state-{number}.npz"
        _write_atomic(directory / state_name, sbuf.getvalue())
    if node_ids is not None:
        ids = BytesIO()
        np.save(ids, np.asarray(node_ids).astype(str), allow_pickle=False)
        _write_atomic(directory / f"node_ids-{number}.npy", ids.getvalue())
    meta = {
        "format": FORMAT, "version": jaxgcn.__version__,
        "params_file": params_path.name, "params_sha256": hashlib.sha256(blob).hexdigest(),
        "params_bytes": len(blob), "node_ids_file": f"node_ids-{number}.npy" if node_ids is not None else None,
        "model": dataclasses.asdict(model_config), "train": dataclasses.asdict(train_config),
        "n_features": int(info["n_features"]), "n_classes": int(info["n_classes"]),
        "class_names": info.get("class_names"), "feature_norm": info.get("feature_norm"),
        "feature_stats": info.get("feature_stats"),
        "norm": info.get("norm"), "dataset": info.get("dataset"), "epoch": int(epoch),
        "metrics": {k: float(v) for k, v in metrics.items()},
        "state_file": state_name, "extra": extra or {},
    }
    _write_atomic(directory / META, (json.dumps(meta, indent=2) + "\n").encode())
    for old in previous + sorted(directory.glob("node_ids-*.npy")) + sorted(directory.glob("state-*.npz")):
        if old.name not in (params_path.name, meta["node_ids_file"], state_name):
            old.unlink(missing_ok=True)
    return directory / META


def load(directory: str | Path) -> Checkpoint:
    """Read and verify a checkpoint; every problem is a ValueError naming the file and the fix."""
    directory = Path(directory)
    meta_path = directory / META
    if not directory.is_dir() or not meta_path.is_file():
        raise ValueError(f"checkpoint {directory}: not a checkpoint directory (no {META}); pass the folder "
                         "that --save wrote")
    try:
        meta = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"checkpoint {meta_path}: unreadable JSON ({err}); the file is corrupted") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"checkpoint {meta_path}: format {meta.get('format') if isinstance(meta, dict) else None!r}, "
                         f"expected {FORMAT!r}; it was not written by this jaxgcn")
    params_path = directory / str(meta.get("params_file"))
    if not params_path.is_file():
        raise ValueError(f"checkpoint {directory}: params file {params_path.name} is missing")
    blob = params_path.read_bytes()
    if len(blob) != meta.get("params_bytes") or hashlib.sha256(blob).hexdigest() != meta.get("params_sha256"):
        raise ValueError(f"checkpoint {params_path}: {len(blob)} bytes that do not match the recorded size/SHA-256; "
                         "the file is truncated or corrupted, save the model again")
    with np.load(params_path, allow_pickle=False) as z:
        params = _unflatten({k: z[k] for k in z.files})
    node_ids = None
    if meta.get("node_ids_file"):
        ids_path = directory / meta["node_ids_file"]
        if not ids_path.is_file():
            raise ValueError(f"checkpoint {directory}: node id file {ids_path.name} is missing")
        node_ids = np.load(ids_path, allow_pickle=False)
    return Checkpoint(params, meta, node_ids)


def load_state(directory: str | Path, meta: dict[str, Any]) -> dict[str, np.ndarray]:
    """The saved run state's arrays, or a clear error when the checkpoint has none."""
    directory = Path(directory)
    if not meta.get("state_file"):
        raise ValueError(f"checkpoint {directory}: holds no run state to resume (it was saved at the end of a "
                         "finished run); train again or --resume an interrupted --checkpoint-every run")
    path = directory / meta["state_file"]
    if not path.is_file():
        raise ValueError(f"checkpoint {directory}: run state file {path.name} is missing")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (ValueError, OSError, EOFError) as err:
        raise ValueError(f"checkpoint {path}: unreadable ({err}); the file is corrupted") from None
