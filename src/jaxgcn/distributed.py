"""Full-graph GCN training sharded over devices: nodes in P contiguous row blocks.

Device p owns nodes ``[p * L, (p + 1) * L)`` (the node count padded to ``P * L``): their features,
labels, masks, self-loop weights and the rows of the adjacency for the edges pointing INTO them, as
a local CSR block whose columns are global node ids. Under ``jax.shard_map`` each propagation
all-gathers the (transformed) node features, the simple baseline, and aggregates its own rows with
the fused kernel; the gradient of the all-gather is a reduce-scatter, which autodiff derives. No
message is lost at partition borders: the sharded model equals the single-device one (tested on a
graph whose edges cross every border).

The model code is unchanged: :func:`jaxgcn.propagate.propagate` recognises a :class:`GraphBlock`
and does the gather itself, so ``gcn(config).apply`` runs inside ``shard_map`` as it is.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from jaxgcn.csr import CSR, csr_from_scipy, spmm
from jaxgcn.graph import Graph

AXIS = "nodes"


class GraphBlock(NamedTuple):
    """One device's rows of the adjacency (inside ``shard_map``; stacked [P, ...] outside).

    Attributes:
        adj: :class:`~jaxgcn.csr.CSR` of shape [L, P * L]: row i is local node i, columns global ids.
        self_weights: [L] diagonal of the local rows.
    """

    adj: CSR
    self_weights: Any

    @property
    def n_nodes(self) -> int:
        return int(self.self_weights.shape[-1])


def _pad(a: np.ndarray, size: int, value: int) -> np.ndarray:
    return np.concatenate([a, np.full(size - a.size, value, a.dtype)])


def partition(graph: Graph, n_parts: int) -> tuple[GraphBlock, int]:
    """Split a normalized host graph into ``n_parts`` row blocks, stacked along a leading axis.

    Every block's CSR is padded to the largest block's entry count with zero-valued entries in its
    last row and last column, so the blocks stack into one array per field. Returns the stacked
    blocks and the padded node count ``P * L``.
    """
    n = graph.n_nodes
    local = -(-n // n_parts)
    n_pad = local * n_parts
    if graph.csr is not None:
        c = graph.csr
        rows = np.repeat(np.arange(n), np.diff(np.asarray(c.indptr)))
        adj = sp.csr_matrix((np.asarray(c.data), (rows, np.asarray(c.cols))), shape=(n_pad, n_pad))
    else:
        adj = sp.csr_matrix((np.asarray(graph.weights), (np.asarray(graph.receivers), np.asarray(graph.senders))),
                            shape=(n_pad, n_pad))
    blocks = [csr_from_scipy(adj[p * local:(p + 1) * local]) for p in range(n_parts)]
    nnz = max(1, max(b.nse for b in blocks))
    fields = {k: [] for k in CSR._fields}
    for b in blocks:
        extra = nnz - b.nse
        indptr = np.asarray(b.indptr).copy()
        indptr[-1] += extra  # the padding entries belong to the last local row
        t_indptr = np.asarray(b.t_indptr).copy()
        t_indptr[-1] += extra  # ... and to the last (global) column
        fields["indptr"].append(indptr)
        fields["cols"].append(_pad(np.asarray(b.cols), nnz, n_pad - 1))
        fields["data"].append(_pad(np.asarray(b.data), nnz, 0))
        fields["t_indptr"].append(t_indptr)
        fields["t_rows"].append(_pad(np.asarray(b.t_rows), nnz, local - 1))
        fields["t_perm"].append(np.concatenate([np.asarray(b.t_perm), np.arange(b.nse, nnz, dtype=np.int32)]))
    adj_blocks = CSR(**{k: np.stack(v) for k, v in fields.items()})
    self_w = _pad(np.asarray(graph.self_weights, np.float32), n_pad, 0).reshape(n_parts, local)
    return GraphBlock(adj_blocks, self_w), n_pad


def propagate_block(block: GraphBlock, x: jax.Array) -> jax.Array:
    """``Â · x`` for this device's rows: all-gather x over the ``nodes`` axis, aggregate locally."""
    everything = jax.lax.all_gather(x, AXIS, tiled=True)  # [P * L, width]
    return block.self_weights[:, None].astype(x.dtype) * x + spmm(block.adj, everything.astype(jnp.float32)).astype(x.dtype)


def shard_nodes(x: np.ndarray, n_pad: int, n_parts: int) -> np.ndarray:
    """Pad a per-node host array to ``n_pad`` rows and stack it as [P, L, ...]."""
    x = np.asarray(x)
    padded = np.concatenate([x, np.zeros((n_pad - x.shape[0], *x.shape[1:]), x.dtype)])
    return padded.reshape(n_parts, n_pad // n_parts, *x.shape[1:])


def to_global(tree: Any, mesh: jax.sharding.Mesh) -> Any:
    """Stacked host arrays [P, ...] -> global arrays sharded over the mesh's ``nodes`` axis, each
    process passing only the blocks of its own devices (for multi-process ``jax.distributed`` runs;
    in one process this is a plain device_put)."""
    devices = list(mesh.devices.flat)
    mine = [k for k, d in enumerate(devices) if d.process_index == jax.process_index()]
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))
    return jax.tree.map(lambda a: jax.make_array_from_process_local_data(sharding, np.asarray(a)[mine]), tree)


def sharded_apply(model: Any, mesh: jax.sharding.Mesh) -> Any:
    """``apply(params, blocks, x) -> [P, L, n_classes]`` logits, each device computing its rows."""
    spec = jax.sharding.PartitionSpec(AXIS)

    def local(params: Any, block: GraphBlock, x: jax.Array) -> jax.Array:
        block, x = jax.tree.map(lambda a: a[0], (block, x))
        return model.apply(params, block, x)[None]

    # check_vma=False: the kernel's custom call carries no varying-axis type (the gradients of the
    # replicated params are still summed over devices, as the equality tests check).
    return jax.shard_map(local, mesh=mesh, in_specs=(jax.sharding.PartitionSpec(), spec, spec), out_specs=spec,
                         check_vma=False)


def sharded_loss(model: Any, mesh: jax.sharding.Mesh, *, train: bool = False) -> Any:
    """``loss(params, key, blocks, x, labels, mask) -> scalar``: the masked mean cross-entropy of
    the whole graph, computed with each device holding its row block (inputs stacked [P, ...]).
    With ``train``, dropout is on; device p draws its masks from ``fold_in(key, p)``."""
    spec = jax.sharding.PartitionSpec(AXIS)

    def local(params: Any, key: jax.Array, block: GraphBlock, x: jax.Array, labels: jax.Array,
              mask: jax.Array) -> jax.Array:
        block, x, labels, mask = jax.tree.map(lambda a: a[0], (block, x, labels, mask))
        k = jax.random.fold_in(key, jax.lax.axis_index(AXIS)) if train else None
        logits = model.apply(params, block, x, key=k, train=train)
        logp = jax.nn.log_softmax(logits)
        picked = jnp.take_along_axis(logp, jnp.maximum(labels, 0)[:, None], axis=1)[:, 0]
        total = jax.lax.psum(-jnp.sum(picked * mask), AXIS)
        return total / jax.lax.psum(jnp.sum(mask), AXIS)

    replicated = jax.sharding.PartitionSpec()
    return jax.shard_map(local, mesh=mesh, in_specs=(replicated, replicated, spec, spec, spec, spec),
                         out_specs=replicated, check_vma=False)


def fit_sharded(graph: Graph, x: np.ndarray, labels: np.ndarray, masks: dict[str, np.ndarray], n_classes: int, *,
                model_config: Any, config: Any, key: jax.Array, n_devices: int | None = None) -> dict[str, float]:
    """Train full-batch with the graph's rows sharded over ``n_devices`` devices (all by default):
    Adam with the coupled L2 of :func:`jaxgcn.train.make_optimizer`, ``config.epochs`` epochs (no
    early stopping yet). ``x`` is a dense host [n, F] array. Returns the accuracy per split."""
    import optax

    from jaxgcn.models import gcn
    from jaxgcn.train import l2_penalty, make_optimizer

    devices = jax.devices()[: n_devices or None]
    n_parts = len(devices)
    mesh = jax.sharding.Mesh(np.asarray(devices), (AXIS,))
    blocks, n_pad = partition(graph, n_parts)
    shard = lambda a: shard_nodes(np.asarray(a), n_pad, n_parts)  # noqa: E731
    xs, ys, train_mask = shard(np.asarray(x, np.float32)), shard(np.asarray(labels, np.int32)), shard(masks["train"])
    model = gcn(model_config)
    loss_f = sharded_loss(model, mesh, train=True)
    opt = make_optimizer(config)
    k_init, key = jax.random.split(key)
    params = model.init(k_init, xs.shape[-1], n_classes)
    opt_state = opt.init(params)

    @jax.jit
    def step(params: Any, opt_state: Any, key: jax.Array) -> tuple[Any, Any, jax.Array]:
        def objective(p: Any) -> jax.Array:
            return loss_f(p, key, blocks, xs, ys, train_mask) + config.weight_decay * l2_penalty(p, config.l2)

        loss, grads = jax.value_and_grad(objective)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    for _ in range(config.epochs):
        key, k = jax.random.split(key)
        params, opt_state, loss = step(params, opt_state, k)
    logits = jax.jit(sharded_apply(model, mesh))(params, blocks, xs).reshape(n_pad, -1)[: len(labels)]
    pred = np.asarray(logits).argmax(axis=1)
    return {f"{name}_acc": float(np.mean(pred[np.asarray(m) > 0] == np.asarray(labels)[np.asarray(m) > 0]))
            for name, m in masks.items()} | {"loss": float(loss)}
