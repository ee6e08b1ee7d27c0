"""Partition files on disk: one ``part-NNNNN.npz`` per row block plus ``partitions.json``
(:func:`save_partitions`), so that each process of a job reads only its own devices' blocks
(:func:`load_partitions`)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import zipfile
from io import BytesIO
from typing import Any

import jax
import numpy as np

from jaxgcn.native.csr import CSR
from jaxgcn.core.data import TrainData
from jaxgcn.distributed.blocks import GraphBlock, partition, partition_stats, shard_nodes
from jaxgcn.distributed.runtime import from_local, own_parts
from jaxgcn.distributed.sharded import ShardedData
from jaxgcn.core.layers import is_sparse
from jaxgcn.io.outputs import write_atomic
from jaxgcn.core.validate import check_compressed, check_npz_declared

PARTITION_FORMAT = "jaxgcn-partitions"
PARTITION_META = "partitions.json"
MAX_META_BYTES = 64 * 2**20  # a partition record is kilobytes; a larger file is refused unread


def _template(halo: bool, sparse_features: bool) -> Any:
    """The pytree structure of stacked sharded data (leaves are placeholders)."""
    csr = lambda: CSR(*([0] * 6))  # noqa: E731
    block = GraphBlock(csr(), 0, 0 if halo else None)
    return TrainData(block, csr() if sparse_features else 0, 0, 0, 0, 0)


def _leaf_names(tree: Any) -> list[str]:
    paths, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [jax.tree_util.keystr(path).strip(".").replace(".", "/") for path, _ in paths]


def save_partitions(directory: str | os.PathLike, data: TrainData, n_parts: int, *, exchange: str = "all_gather",
                    info: dict[str, Any] | None = None) -> dict[str, Any]:
    """Partition a host :class:`jaxgcn.core.data.TrainData` into ``n_parts`` row blocks and write one
    file per block (``part-00000.npz``...) plus ``partitions.json``, so that each process of a
    ``--distributed`` job later reads only the blocks of its own devices (:func:`load_partitions`).
    Files are written to a temporary name and renamed; the JSON is written last. Returns the JSON."""
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    blocks, n_pad = partition(data.graph, n_parts, exchange=exchange)
    shard = lambda a: shard_nodes(a, n_pad, n_parts)  # noqa: E731
    stacked = data._replace(graph=blocks, x=shard(data.x), labels=shard(np.asarray(data.labels, np.int32)),
                            train_mask=shard(data.train_mask), val_mask=shard(data.val_mask),
                            test_mask=shard(data.test_mask))
    names, leaves = _leaf_names(stacked), jax.tree.leaves(stacked)
    files = []
    for p in range(n_parts):
        buf = BytesIO()
        np.savez(buf, **{name: np.asarray(leaf)[p] for name, leaf in zip(names, leaves)})
        blob = buf.getvalue()
        name = f"part-{p:05d}.npz"
        write_atomic(os.path.join(directory, name), blob, follow=False)  # a planted link is replaced, not followed
        files.append({"file": name, "bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()})
    info = {k: v for k, v in (info or {}).items() if k != "node_order"}
    meta = {"format": PARTITION_FORMAT, "parts": n_parts, "n_nodes": int(data.graph.n_nodes), "n_pad": int(n_pad),
            "n_edges": int(data.graph.n_edges), "n_features": int(data.x.shape[1]), "exchange": exchange,
            "sparse_features": bool(is_sparse(data.x)), "stats": partition_stats(data.graph, n_parts),
            "files": files, "info": json.loads(json.dumps(info, default=lambda o: np.asarray(o).tolist()))}
    write_atomic(os.path.join(directory, PARTITION_META), json.dumps(meta, indent=2), follow=False)  # last
    return meta


# What partitions.json must hold (the fields load_partitions and the training reports read), by type.
_META_INTS = ("parts", "n_nodes", "n_pad", "n_edges", "n_features")
_STATS_NUMBERS = ("parts", "rows_per_device", "cut_fraction", "halo_width", "halo_rows", "all_gather_rows")
_INFO_KEYS = ("dataset", "n_nodes", "n_edges", "n_features", "n_classes", "split_sizes", "input_edges",
              "duplicates_merged", "self_loops_found", "edges_symmetrized", "isolated_nodes")
_PART_NAME = re.compile(r"^part-\d{5}\.npz$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _is_int(value: Any, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _check_meta(meta: Any, path: str) -> None:
    """The structure of ``partitions.json``: every field it must have, of its type and in range; the
    files one plain ``part-NNNNN.npz`` name per part with a size and a SHA-256."""
    def bad(what: str) -> ValueError:
        return ValueError(f"{path}: {what}; it was not written by `jaxgcn partition` or was edited: write the "
                          "partitions again")
    if not isinstance(meta, dict):
        raise bad(f"holds a JSON {type(meta).__name__}, not an object")
    if meta.get("format") != PARTITION_FORMAT:
        raise ValueError(f"{path}: not a jaxgcn partition file (format {meta.get('format')!r})")
    for key in _META_INTS:
        if not _is_int(meta.get(key), 0 if key == "n_edges" else 1):
            raise bad(f"{key!r} is {meta.get(key)!r}, not a positive integer")
    if meta["n_pad"] < meta["n_nodes"] or meta["n_pad"] % meta["parts"]:
        raise bad(f"'n_pad' {meta['n_pad']} is not a multiple of the {meta['parts']} parts covering "
                  f"the {meta['n_nodes']} nodes")
    if meta.get("exchange") not in ("all_gather", "halo"):
        raise bad(f"'exchange' is {meta.get('exchange')!r}, not 'all_gather' or 'halo'")
    if not isinstance(meta.get("sparse_features"), bool):
        raise bad(f"'sparse_features' is {meta.get('sparse_features')!r}, not true or false")
    stats, info, files = meta.get("stats"), meta.get("info"), meta.get("files")
    if not isinstance(stats, dict) or not all(isinstance(stats.get(k), (int, float)) for k in _STATS_NUMBERS):
        raise bad(f"'stats' lacks one of {', '.join(_STATS_NUMBERS)}")
    if not isinstance(info, dict) or any(k not in info for k in _INFO_KEYS):
        raise bad(f"'info' lacks one of {', '.join(_INFO_KEYS)}")
    if info["n_nodes"] != meta["n_nodes"] or info["n_features"] != meta["n_features"] or not _is_int(
            info["n_classes"], 2):
        raise bad(f"'info' ({info['n_nodes']!r} nodes, {info['n_features']!r} features, {info['n_classes']!r} "
                  f"classes) disagrees with the partitions ({meta['n_nodes']} nodes, {meta['n_features']} features)")
    if not isinstance(files, list) or len(files) != meta["parts"]:
        raise bad(f"'files' is not a list of {meta['parts']} entries (one per part)")
    for k, entry in enumerate(files):
        if not (isinstance(entry, dict) and isinstance(entry.get("file"), str) and _PART_NAME.match(entry["file"])
                and _is_int(entry.get("bytes")) and isinstance(entry.get("sha256"), str)
                and _SHA256.match(entry["sha256"])):
            raise bad(f"'files'[{k}] is not {{\"file\": \"part-NNNNN.npz\", \"bytes\": N, \"sha256\": HEX}}")


def read_partition_meta(directory: str | os.PathLike) -> dict[str, Any]:
    """``partitions.json`` of a directory written by :func:`save_partitions` (its structure checked)."""
    path = os.path.join(os.fspath(directory), PARTITION_META)
    if not os.path.isfile(path):
        raise ValueError(f"{directory}: no {PARTITION_META}; write the partitions with `jaxgcn partition "
                         "--dataset ... --parts P --out DIR`")
    try:
        with open(path, "rb") as f:
            meta = json.loads(f.read(MAX_META_BYTES + 1)) if os.path.getsize(path) <= MAX_META_BYTES else None
    except (OSError, ValueError, RecursionError) as err:  # ValueError: JSON and UTF-8 errors
        raise ValueError(f"{path}: unreadable ({type(err).__name__}: {str(err)[:200]}); write the partitions "
                         "again") from None
    if meta is None:
        raise ValueError(f"{path}: larger than {MAX_META_BYTES // 2**20} MiB, far more than a partition record "
                         "holds; write the partitions again")
    _check_meta(meta, path)
    return meta


def _check_csr(z: Any, prefix: str, n_rows: int, n_cols: int, source: str) -> None:
    """One CSR of a block (``prefix/indptr``, ...): in range, pointers that never decrease, and its
    transposed pattern really the transpose (the kernel indexes with all of them, unchecked)."""
    indptr, cols, data = (z[f"{prefix}/{k}"] for k in ("indptr", "cols", "data"))
    check_compressed(indptr, cols, data, (n_rows, n_cols), f"{source} {prefix}")
    t_indptr, t_rows, t_perm = (z[f"{prefix}/{k}"] for k in ("t_indptr", "t_rows", "t_perm"))
    if t_indptr.ndim == 0:  # symmetric: no transposed pattern stored
        return
    nnz = cols.shape[0]
    check_compressed(t_indptr, t_rows, np.zeros(t_rows.shape[0], np.float32), (n_cols, n_rows),
                     f"{source} {prefix}/t_", kind="csr")
    if t_perm.ndim != 1 or t_perm.shape[0] != nnz or t_perm.dtype.kind not in "iu" or not np.array_equal(
            np.sort(t_perm), np.arange(nnz)):
        raise ValueError(f"{source} {prefix}/t_perm: not a permutation of the {nnz} entries; write the partitions "
                         "again")
    rows = np.repeat(np.arange(n_rows), np.diff(indptr))
    if not (np.array_equal(rows[t_perm], t_rows)
            and np.array_equal(cols[t_perm], np.repeat(np.arange(n_cols), np.diff(t_indptr)))):
        raise ValueError(f"{source} {prefix}: its transposed pattern is not the transpose; write the partitions "
                         "again")


def _check_block(z: Any, meta: dict[str, Any], source: str) -> None:
    """One part's arrays, validated as any user file (after its hash: the hash proves the file is the
    one written, not that what was written is valid): shapes, index ranges, labels, masks."""
    rows = meta["n_pad"] // meta["parts"]
    halo = meta["exchange"] == "halo"
    send = z["graph/send"] if halo else None
    if halo and (send.ndim != 2 or send.shape[0] != meta["parts"] or send.dtype.kind not in "iu"
                 or (send.size and (send.min() < 0 or send.max() >= rows))):
        raise ValueError(f"{source} graph/send: not [{meta['parts']}, H] local row indices below {rows}; write the "
                         "partitions again")
    n_cols = rows + meta["parts"] * send.shape[1] if halo else rows * meta["parts"]
    _check_csr(z, "graph/adj", rows, n_cols, source)
    if meta["sparse_features"]:
        _check_csr(z, "x", rows, meta["n_features"], source)
    elif z["x"].shape != (rows, meta["n_features"]) or z["x"].dtype.kind != "f":
        raise ValueError(f"{source} x: shape {z['x'].shape} {z['x'].dtype}, not [{rows}, {meta['n_features']}] floats; "
                         "write the partitions again")
    labels, n_classes = z["labels"], meta["info"]["n_classes"]
    if labels.shape != (rows,) or labels.dtype.kind not in "iu" or (labels.size and (
            labels.min() < -1 or labels.max() >= n_classes)):
        raise ValueError(f"{source} labels: not {rows} class ids in [-1, {n_classes}); write the partitions again")
    for name in ("graph/self_weights", "train_mask", "val_mask", "test_mask"):
        if z[name].shape != (rows,):
            raise ValueError(f"{source} {name}: shape {z[name].shape}, not [{rows}]; write the partitions again")


def load_partitions(directory: str | os.PathLike, mesh: jax.sharding.Mesh) -> tuple[ShardedData, dict[str, Any]]:
    """Read only this process's blocks of a partitioned dataset and assemble the global arrays.
    The mesh must have as many devices as the dataset has parts."""
    meta = read_partition_meta(directory)
    n_parts = mesh.devices.size
    if meta["parts"] != n_parts:
        raise ValueError(f"{directory} holds {meta['parts']} parts but this job has {n_parts} device(s); "
                         f"partition it again with --parts {n_parts}, or run on {meta['parts']} devices")
    template = _template(meta["exchange"] == "halo", meta["sparse_features"])
    names = _leaf_names(template)
    parts = []
    for k in own_parts(mesh):
        entry = meta["files"][k]
        path = os.path.join(os.fspath(directory), entry["file"])
        if not os.path.isfile(path) or os.path.getsize(path) != entry["bytes"]:
            raise ValueError(f"{path}: missing or truncated (expected {entry['bytes']} bytes); write the "
                             "partitions again")
        with open(path, "rb") as f:
            blob = f.read()
        if hashlib.sha256(blob).hexdigest() != entry["sha256"]:  # its arrays go to the kernel unchecked
            raise ValueError(f"{path}: its SHA-256 differs from the one {PARTITION_META} records (the file "
                             "changed after it was written); write the partitions again")
        try:
            check_npz_declared(BytesIO(blob), path)
            with np.load(BytesIO(blob), allow_pickle=False) as z:
                missing = [n for n in names if n not in z.files]
                if missing:
                    raise ValueError(f"{path}: lacks {missing[0]!r}; write the partitions again")
                arrays = {n: z[n] for n in names}
        except (OSError, EOFError, MemoryError, zipfile.BadZipFile) as err:  # e.g. a header declaring a huge array
            raise ValueError(f"{path}: not a readable partition file ({type(err).__name__}); write the partitions "
                             "again") from None
        _check_block(arrays, meta, path)
        parts.append([arrays[n] for n in names])
    local = jax.tree.unflatten(jax.tree.structure(template), [np.stack(col) for col in zip(*parts)])
    data = from_local(local, mesh)
    return ShardedData(data, mesh, meta["n_nodes"], meta["n_pad"], meta["n_features"], meta["exchange"]), meta
