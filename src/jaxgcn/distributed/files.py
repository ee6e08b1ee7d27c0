"""Partition files on disk: one ``part-NNNNN.npz`` per row block plus ``partitions.json``
(:func:`save_partitions`), so that each process of a job reads only its own devices' blocks
(:func:`load_partitions`)."""

from __future__ import annotations

import hashlib
import json
import os
from io import BytesIO
from typing import Any

import jax
import numpy as np

from jaxgcn.csr import CSR
from jaxgcn.data import TrainData
from jaxgcn.distributed.blocks import GraphBlock, partition, partition_stats, shard_nodes
from jaxgcn.distributed.runtime import from_local, own_parts
from jaxgcn.distributed.sharded import ShardedData
from jaxgcn.layers import is_sparse
from jaxgcn.outputs import write_atomic

PARTITION_FORMAT = "jaxgcn-partitions"
PARTITION_META = "partitions.json"


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
    """Partition a host :class:`jaxgcn.train.TrainData` into ``n_parts`` row blocks and write one
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
        write_atomic(os.path.join(directory, name), blob)
        files.append({"file": name, "bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()})
    info = {k: v for k, v in (info or {}).items() if k != "node_order"}
    meta = {"format": PARTITION_FORMAT, "parts": n_parts, "n_nodes": int(data.graph.n_nodes), "n_pad": int(n_pad),
            "n_edges": int(data.graph.n_edges), "n_features": int(data.x.shape[1]), "exchange": exchange,
            "sparse_features": bool(is_sparse(data.x)), "stats": partition_stats(data.graph, n_parts),
            "files": files, "info": json.loads(json.dumps(info, default=lambda o: np.asarray(o).tolist()))}
    write_atomic(os.path.join(directory, PARTITION_META), json.dumps(meta, indent=2))  # last: the files are in place
    return meta


def read_partition_meta(directory: str | os.PathLike) -> dict[str, Any]:
    """``partitions.json`` of a directory written by :func:`save_partitions` (checked)."""
    path = os.path.join(os.fspath(directory), PARTITION_META)
    if not os.path.isfile(path):
        raise ValueError(f"{directory}: no {PARTITION_META}; write the partitions with `jaxgcn partition "
                         "--dataset ... --parts P --out DIR`")
    try:
        with open(path) as f:
            meta = json.load(f)
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: unreadable ({err}); write the partitions again") from None
    if meta.get("format") != PARTITION_FORMAT:
        raise ValueError(f"{path}: not a jaxgcn partition file (format {meta.get('format')!r})")
    return meta


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
        with np.load(BytesIO(blob), allow_pickle=False) as z:
            missing = [n for n in names if n not in z.files]
            if missing:
                raise ValueError(f"{path}: lacks {missing[0]!r}; write the partitions again")
            parts.append([z[n] for n in names])
    local = jax.tree.unflatten(jax.tree.structure(template), [np.stack(col) for col in zip(*parts)])
    data = from_local(local, mesh)
    return ShardedData(data, mesh, meta["n_nodes"], meta["n_pad"], meta["n_features"], meta["exchange"]), meta
