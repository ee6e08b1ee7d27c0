"""Parse once: a dataset's cleaned arrays stored as one pickle-free npz, loaded directly next time.

Reading a large CSV or OGB set means parsing text (a 1M-node OGB-layout set: tens of seconds);
the arrays it yields load from npz in a fraction of that. :func:`cached` stores them, keyed by the
source files (resolved path, size, modification time and a content fingerprint: the whole file's
SHA-256 up to :data:`FULL_HASH_BYTES`, sampled blocks above) and :data:`LOADER_VERSION`, and reuses
them while that key holds; change a source file (or upgrade a loader) and it is parsed again. The
stored arrays carry their own SHA-256, checked at every read: a cache file that is damaged,
truncated or edited is discarded and the sources parsed again, with a :class:`CacheNote` saying so.

Sources smaller than :data:`MIN_BYTES` in total are parsed every time: that takes milliseconds and
a cache file would cost more than it saves. The bundled Cora and CiteSeer use the same npz layout.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
import zipfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from jaxgcn.datasets.base import CacheNote, RawGraph  # noqa: F401 - CacheNote: where it was
from jaxgcn.io.outputs import open_temp
from jaxgcn.core.validate import check_npz_declared

LOADER_VERSION = 1  # bump when a reader's output changes: every cached parse is then redone
MIN_BYTES = 1 << 20
SPLITS = ("train", "val", "test")
FULL_HASH_BYTES = 64 << 20  # sources up to this size are hashed whole for the cache key
SAMPLES, SAMPLE_BYTES = 16, 1 << 20  # larger ones: 16 blocks of 1 MiB spread over the file


class DamagedCache(ValueError):
    """A cache file whose arrays do not match the SHA-256 recorded when it was written."""


def arrays_sha256(arrays: dict[str, np.ndarray]) -> str:
    """One SHA-256 over named arrays (their names, dtypes, shapes and bytes, in name order)."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
        h.update(a.view(np.uint8).reshape(-1) if a.size else b"")
    return h.hexdigest()


def save_raw(raw: RawGraph, path: Path, key: Any = None, *, compress: bool = False) -> None:
    """Write ``raw`` (sparse or dense features, optional weights, node ids, official splits) as one
    npz, atomically (a temporary file renamed into place: readers never see half a file).

    Uncompressed by default: a cache is read far more often than written, and zlib on float
    features costs more than it saves (1M x 100 floats: 13.6 s to write and 2.8 s to read
    compressed, 0.5 s and 0.75 s plain, for 18% less disk). ``compress`` for files that ship."""
    arrays: dict[str, np.ndarray] = {
        "senders": raw.senders.astype(np.int64 if raw.senders.size and raw.senders.max() >= 2**31 else np.int32),
        "receivers": raw.receivers.astype(np.int64 if raw.receivers.size and raw.receivers.max() >= 2**31
                                          else np.int32),
        "labels": raw.labels.astype(np.float32 if raw.labels.ndim == 2 else np.int32),  # multi-label: NaN kept
        **{f"split_{k}": v.astype(np.int64) for k, v in raw.splits.items()},
    }
    if sp.issparse(raw.features):
        feats = sp.csr_matrix(raw.features, dtype=np.float32)
        feats.sort_indices()
        arrays.update(feat_data=feats.data, feat_indices=feats.indices.astype(np.int32),
                      feat_indptr=feats.indptr.astype(np.int64), feat_shape=np.asarray(feats.shape, np.int64))
    else:
        arrays["features"] = np.asarray(raw.features, np.float32)
    if raw.weights is not None:
        arrays["weights"] = np.asarray(raw.weights, np.float32)
    if raw.node_ids is not None:
        arrays["node_ids"] = np.asarray(raw.node_ids).astype(str)
    for i, split in enumerate(raw.official_splits or ()):
        arrays.update({f"official_{i}_{k}": np.asarray(split[k], np.int64) for k in SPLITS})
    meta = {"name": raw.name, "class_names": raw.class_names, "official_splits": len(raw.official_splits or ()),
            "key": key, "sha256": arrays_sha256(arrays)}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp, f = open_temp(path)
    with f:
        (np.savez_compressed if compress else np.savez)(f, **arrays)
    os.replace(tmp, path)


def npz_meta(path: Path) -> dict[str, Any]:
    with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as f:  # our handle: closed on any error
        return json.loads(f["meta"].tobytes().decode())


def load_raw_npz(path: Path, *, verify: bool = False) -> RawGraph:
    """The :class:`RawGraph` that :func:`save_raw` wrote (no pickle). ``verify``: check the arrays
    against the SHA-256 recorded when they were written (:class:`DamagedCache` when they differ)."""
    with open(path, "rb") as fh:
        check_npz_declared(fh, str(path))  # a header never allocates more than the file holds
        fh.seek(0)
        with np.load(fh, allow_pickle=False) as z:
            f = {k: z[k] for k in z.files}
    meta = json.loads(f.pop("meta").tobytes().decode())
    if verify and meta.get("sha256") != arrays_sha256(f):
        raise DamagedCache("its arrays differ from the SHA-256 recorded when it was written (damaged or edited)")
    if "features" in f:
        feats = f["features"]
    else:
        feats = sp.csr_matrix((f["feat_data"], f["feat_indices"], f["feat_indptr"]),
                              shape=tuple(int(v) for v in f["feat_shape"]))
    official = tuple({k: f[f"official_{i}_{k}"] for k in SPLITS} for i in range(meta.get("official_splits", 0)))
    return RawGraph(
        name=meta["name"],
        senders=f["senders"].astype(np.int64),
        receivers=f["receivers"].astype(np.int64),
        features=feats,
        labels=f["labels"],
        splits={k: f[f"split_{k}"].astype(np.int64) for k in SPLITS if f"split_{k}" in f},
        weights=f["weights"] if "weights" in f else None,
        class_names=meta.get("class_names"),
        node_ids=f["node_ids"] if "node_ids" in f else None,
        official_splits=official or None,
    )


def content_fingerprint(path: Path, size: int) -> str:
    """SHA-256 of the whole file up to :data:`FULL_HASH_BYTES`, else of :data:`SAMPLES` blocks spread
    over it (first and last included): an edit that keeps the size and restores the mtime is seen."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= FULL_HASH_BYTES:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        else:
            for k in range(SAMPLES):
                f.seek((size - SAMPLE_BYTES) * k // (SAMPLES - 1))
                h.update(f.read(SAMPLE_BYTES))
    return h.hexdigest()


def source_key(paths: list[Path]) -> list[list[Any]]:
    """What identifies the sources' contents: path, size, mtime (ns) and a content fingerprint."""
    key = []
    for path in paths:
        st = path.stat()
        key.append([str(path.resolve()), st.st_size, st.st_mtime_ns, content_fingerprint(path, st.st_size)])
    return key


def cache_file(root: Path, kind: str, paths: list[Path]) -> Path:
    """``<root>/parsed/<kind>-<digest of the sources' resolved paths>.npz``: one file per source set."""
    digest = hashlib.sha256("\0".join([kind, *(str(p.resolve()) for p in paths)]).encode()).hexdigest()[:20]
    return root / "parsed" / f"{kind}-{digest}.npz"


def cached(path: Path, sources: list[Path], parse: Callable[[], RawGraph], *,
           min_bytes: int | None = None) -> RawGraph:
    """``parse()``, or the arrays a former ``parse()`` of the same ``sources`` stored at ``path``.

    The stored arrays are used while every source keeps its path, size, modification time and
    content fingerprint and :data:`LOADER_VERSION` is unchanged, and while they match the SHA-256
    recorded with them; a cache file that is unreadable or does not match is discarded (a
    :class:`CacheNote` warning says so) and the sources parsed again. A cache that cannot be written
    (read-only folder, full disk) is skipped silently: the parse result is returned either way.
    """
    sources = [p for p in sources if p.is_file()]
    if sum(p.stat().st_size for p in sources) < (MIN_BYTES if min_bytes is None else min_bytes):
        return parse()
    key = {"loader": LOADER_VERSION, "sources": source_key(sources)}
    if path.is_file():
        try:
            if npz_meta(path).get("key") == key:
                return load_raw_npz(path, verify=True)
        except DamagedCache as err:
            _discard(path, str(err))
        except (OSError, ValueError, KeyError, EOFError, MemoryError, zipfile.BadZipFile) as err:
            _discard(path, f"unreadable: {type(err).__name__}")
    raw = parse()
    try:
        save_raw(raw, path, key)
    except OSError:
        pass
    return raw


def _discard(path: Path, why: str) -> None:
    """Remove a cache file that cannot be trusted, and say so (one line)."""
    warnings.warn(f"{path}: discarded this parse cache ({why}); the sources are parsed again", CacheNote,
                  stacklevel=3)
    try:
        path.unlink()
    except OSError:
        pass
