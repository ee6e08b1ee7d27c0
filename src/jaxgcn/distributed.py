"""Full-graph GCN training sharded over devices and processes: nodes in P contiguous row blocks.

Device p owns nodes ``[p * L, (p + 1) * L)`` (the node count padded to ``P * L``): their features,
labels, masks, self-loop weights and the rows of the adjacency for the edges pointing INTO them, as
a local CSR block. Under ``jax.shard_map`` each propagation first gathers the source rows the block
needs, then aggregates its own rows: with the fused kernel on the CPU, with XLA's gather and
segment sum on GPUs/TPUs (:func:`jaxgcn.csr.csr_matmul`). Two exchanges:

- ``all_gather`` (the simple baseline): every device receives every node's (transformed) features;
  the block's columns are global node ids. Per device: ``P * L`` rows of width ``w``.
- ``halo``: device q sends device p only the rows of q that p's edges read (an ``all_to_all`` of
  ``[P, H, w]`` buffers, H = the largest such set over all pairs); the block's columns index
  ``[own L rows | H rows from device 0 | ... | H rows from device P-1]``. Per device:
  ``L + P * H`` rows. H is small when the numbering has locality (see :func:`partition_stats` and
  :func:`jaxgcn.graph.reorder`), and about L on a graph without any.

The gradient of either exchange is its transpose (a reduce-scatter, or the reverse all-to-all),
which autodiff derives. No message is lost at partition borders: the sharded model equals the
single-device one (tested on a graph whose edges cross every border, for both exchanges).

The model code is unchanged: the sharded model is ``gcn(config, propagate=propagate_block)``, the
one forward pass with this module's exchange injected as its aggregation (:func:`sharded_model`). The
training loop (:func:`make_sharded_runner`) is the single-device one (same ``RunState``, same
early-stopping rule) with the loss and metrics summed over devices.

Several processes (hosts) form one job with ``jax.distributed.initialize`` (:func:`initialize`);
each process then passes only the blocks of its own devices (:func:`to_global`).
"""

from __future__ import annotations

import hashlib
import os
import time
from io import BytesIO
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from jaxgcn.csr import CSR, csr_from_scipy, csr_matmul
from jaxgcn.compiler import jit
from jaxgcn.graph import Graph
from jaxgcn.models import GCNConfig, Model, aggregate_input, gcn
from jaxgcn.outputs import write_atomic

AXIS = "nodes"
EXCHANGES = ("all_gather", "halo")


class GraphBlock(NamedTuple):
    """One device's rows of the adjacency (inside ``shard_map``; stacked [P, ...] outside).

    Attributes:
        adj: :class:`~jaxgcn.csr.CSR` of shape [L, P * L] (``all_gather``: columns are global ids)
            or [L, L + P * H] (``halo``: own rows, then H received rows per device).
        self_weights: [L] diagonal of the local rows.
        send: ``halo`` only: [P, H] int32, ``send[p]`` = the local rows device p needs from this one
            (padded with row 0, which no column reads); None for ``all_gather``.
    """

    adj: CSR
    self_weights: Any
    send: Any = None

    @property
    def n_nodes(self) -> int:
        return int(self.self_weights.shape[-1])


def _pad(a: np.ndarray, size: int, value: int) -> np.ndarray:
    return np.concatenate([a, np.full(size - a.size, value, a.dtype)])


def stack_csr(blocks: list[CSR], n_cols: int) -> CSR:
    """Stack same-shape host CSR blocks [L, n_cols] along a new leading axis, padding each to the
    largest entry count with zero-valued entries in its last row and last column."""
    n_rows = blocks[0].shape[0]
    nnz = max(1, max(b.nse for b in blocks))
    fields: dict[str, list[np.ndarray]] = {k: [] for k in CSR._fields}
    for b in blocks:
        extra = nnz - b.nse
        indptr = np.asarray(b.indptr).copy()
        indptr[-1] += extra  # the padding entries belong to the last row
        t_indptr = np.asarray(b.t_indptr).copy()
        t_indptr[-1] += extra  # ... and to the last column
        fields["indptr"].append(indptr)
        fields["cols"].append(_pad(np.asarray(b.cols), nnz, n_cols - 1))
        fields["data"].append(_pad(np.asarray(b.data), nnz, 0))
        fields["t_indptr"].append(t_indptr)
        fields["t_rows"].append(_pad(np.asarray(b.t_rows), nnz, n_rows - 1))
        fields["t_perm"].append(np.concatenate([np.asarray(b.t_perm), np.arange(b.nse, nnz, dtype=np.int32)]))
    return CSR(**{k: np.stack(v) for k, v in fields.items()})


def _adjacency(graph: Graph, n_pad: int) -> sp.csr_matrix:
    """The normalized adjacency without self-loops, as a host SciPy CSR padded to n_pad nodes."""
    n = graph.n_nodes
    if graph.csr is not None:
        c = graph.csr
        indptr = np.concatenate([np.asarray(c.indptr, np.int64), np.full(n_pad - n, np.asarray(c.indptr)[-1])])
        return sp.csr_matrix((np.asarray(c.data), np.asarray(c.cols), indptr), shape=(n_pad, n_pad))
    return sp.csr_matrix((np.asarray(graph.weights), (np.asarray(graph.receivers), np.asarray(graph.senders))),
                         shape=(n_pad, n_pad))


def _halo(rows: sp.csr_matrix, part: int, n_parts: int, local: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Column ids of one block after the halo remap (with H unknown yet: position within the
    source device's set), and, per source device q, the sorted local rows of q this block reads."""
    cols = rows.indices.astype(np.int64)
    owner = cols // local
    remote = owner != part
    needed = np.unique(cols[remote])
    starts = np.searchsorted(needed // local, np.arange(n_parts + 1))
    per_source = [needed[starts[q]:starts[q + 1]] - q * local for q in range(n_parts)]
    position = np.searchsorted(needed, cols[remote]) - starts[owner[remote]]
    return position, per_source


def partition(graph: Graph, n_parts: int, *, exchange: str = "all_gather") -> tuple[GraphBlock, int]:
    """Split a normalized host graph into ``n_parts`` row blocks, stacked along a leading axis.

    Returns the stacked :class:`GraphBlock` and the padded node count ``P * L``.
    """
    if exchange not in EXCHANGES:
        raise ValueError(f"exchange={exchange!r} must be one of {EXCHANGES}")
    if n_parts < 1:
        raise ValueError(f"n_parts={n_parts} must be >= 1")
    n = graph.n_nodes
    local = -(-n // n_parts)
    n_pad = local * n_parts
    adj = _adjacency(graph, n_pad)
    row_blocks = [adj[p * local:(p + 1) * local] for p in range(n_parts)]
    self_w = _pad(np.asarray(graph.self_weights, np.float32), n_pad, 0).reshape(n_parts, local)
    if exchange == "all_gather":
        blocks = [csr_from_scipy(b) for b in row_blocks]
        return GraphBlock(stack_csr(blocks, n_pad), self_w), n_pad
    halos = [_halo(b, p, n_parts, local) for p, b in enumerate(row_blocks)]
    width = max(1, max(len(s) for _, per_source in halos for s in per_source))  # H
    n_cols = local + n_parts * width
    blocks, send = [], np.zeros((n_parts, n_parts, width), np.int32)  # send[q, p]: rows q sends p
    for p, (b, (position, per_source)) in enumerate(zip(row_blocks, halos)):
        cols = b.indices.astype(np.int64)
        owner = cols // local
        remote = owner != p
        new_cols = cols - p * local
        new_cols[remote] = local + owner[remote] * width + position
        blocks.append(csr_from_scipy(sp.csr_matrix((b.data, new_cols, b.indptr), shape=(local, n_cols))))
        for q, rows in enumerate(per_source):
            send[q, p, :rows.size] = rows
    return GraphBlock(stack_csr(blocks, n_cols), self_w, send), n_pad


def partition_stats(graph: Graph, n_parts: int) -> dict[str, Any]:
    """How well the node numbering suits ``n_parts`` row blocks: the fraction of edges crossing a
    border, and the rows each device holds for a propagation under each exchange (``halo_rows`` =
    L + P * H, ``all_gather_rows`` = P * L).

    >>> from jaxgcn.graph import from_edges, gcn_norm
    >>> g = gcn_norm(from_edges(np.arange(7), np.arange(1, 8))[0])  # a path 0-1-...-7
    >>> s = partition_stats(g, 2)
    >>> s["cut_fraction"], s["halo_width"], s["halo_rows"], s["all_gather_rows"]
    (0.1428..., 1, 6, 8)
    """
    n = graph.n_nodes
    local = -(-n // n_parts)
    adj = _adjacency(graph, local * n_parts)
    rows = np.repeat(np.arange(adj.shape[0]), np.diff(adj.indptr))
    cut = float(np.mean(rows // local != adj.indices // local)) if adj.nnz else 0.0
    width = 1
    for p in range(n_parts):
        _, per_source = _halo(adj[p * local:(p + 1) * local], p, n_parts, local)
        width = max(width, max(len(s) for s in per_source))
    return {"parts": n_parts, "rows_per_device": local, "cut_fraction": cut, "halo_width": width,
            "halo_rows": local + n_parts * width, "all_gather_rows": local * n_parts}


def propagate_block(block: GraphBlock, x: jax.Array) -> jax.Array:
    """``Â · x`` for this device's rows (inside ``shard_map``): exchange the source rows, aggregate."""
    if block.send is None:
        sources = jax.lax.all_gather(x, AXIS, tiled=True)  # [P * L, width]
    else:
        received = jax.lax.all_to_all(x[block.send], AXIS, 0, 0)  # [P, H, width]: [q] came from device q
        sources = jnp.concatenate([x, received.reshape(-1, x.shape[-1])])
    # the fused kernel on the CPU; XLA's gather + segment sum on GPUs/TPUs (no custom call there)
    return block.self_weights[:, None].astype(x.dtype) * x + csr_matmul(block.adj, sources)


def shard_nodes(x: Any, n_pad: int, n_parts: int) -> Any:
    """Pad a per-node host array to ``n_pad`` rows and stack it as [P, L, ...]; a host CSR becomes
    stacked CSR row blocks."""
    if isinstance(x, CSR):
        m = sp.csr_matrix((np.asarray(x.data), np.asarray(x.cols), np.asarray(x.indptr)), shape=x.shape)
        m = sp.vstack([m, sp.csr_matrix((n_pad - m.shape[0], m.shape[1]), dtype=m.dtype)], format="csr")
        local = n_pad // n_parts
        return stack_csr([csr_from_scipy(m[p * local:(p + 1) * local]) for p in range(n_parts)], m.shape[1])
    x = np.asarray(x)
    padded = np.concatenate([x, np.zeros((n_pad - x.shape[0], *x.shape[1:]), x.dtype)])
    return padded.reshape(n_parts, n_pad // n_parts, *x.shape[1:])


def node_mesh(n_devices: int | None = None) -> jax.sharding.Mesh:
    """A 1-D mesh named ``nodes`` over the first ``n_devices`` devices of the job (all by default)."""
    devices = jax.devices()
    if n_devices is not None and not 1 <= n_devices <= len(devices):
        raise ValueError(f"--devices {n_devices}: this job has {len(devices)} device(s) "
                         f"({devices[0].platform}); give 1..{len(devices)}")
    return jax.sharding.Mesh(np.asarray(devices[: n_devices or None]), (AXIS,))


def _mine(mesh: jax.sharding.Mesh) -> list[int]:
    """Positions along the ``nodes`` axis of this process's devices."""
    return [k for k, d in enumerate(mesh.devices.flat) if d.process_index == jax.process_index()]


def _from_local(tree: Any, mesh: jax.sharding.Mesh) -> Any:
    """This process's blocks [len(mine), ...] -> global arrays [P, ...] sharded over ``nodes``."""
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))
    n_parts = mesh.devices.size
    return jax.tree.map(lambda a: jax.make_array_from_process_local_data(
        sharding, np.asarray(a), (n_parts, *np.shape(a)[1:])), tree)


def to_global(tree: Any, mesh: jax.sharding.Mesh) -> Any:
    """Stacked host arrays [P, ...] -> global arrays sharded over the mesh's ``nodes`` axis, each
    process passing only the blocks of its own devices (in one process this is a plain device_put)."""
    mine = _mine(mesh)
    return _from_local(jax.tree.map(lambda a: np.asarray(a)[mine], tree), mesh)


def _local(tree: Any) -> Any:
    return jax.tree.map(lambda a: a[0], tree)


def sharded_model(model_config: GCNConfig) -> Model:
    """The GCN whose propagation is :func:`propagate_block` (to be applied inside ``shard_map``)."""
    return gcn(model_config, propagate=propagate_block)


def sharded_apply(model_config: GCNConfig, mesh: jax.sharding.Mesh) -> Any:
    """``apply(params, blocks, x) -> [P, L, n_classes]`` logits, each device computing its rows."""
    spec = jax.sharding.PartitionSpec(AXIS)
    model = sharded_model(model_config)

    def local(params: Any, block: GraphBlock, x: jax.Array) -> jax.Array:
        return model.apply(params, *_local((block, x)))[None]

    # check_vma=False: the kernel's custom call carries no varying-axis type (the gradients of the
    # replicated params are still summed over devices, as the equality tests check).
    return jax.shard_map(local, mesh=mesh, in_specs=(jax.sharding.PartitionSpec(), spec, spec), out_specs=spec,
                         check_vma=False)


def _sums(logits: jax.Array, labels: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Local (summed cross-entropy, hits, count) of the masked nodes."""
    logp = jax.nn.log_softmax(logits)
    # a one-hot product, not take_along_axis: its gradient would be a scatter (slow on the CPU)
    nll = -jnp.sum(jax.nn.one_hot(labels, logits.shape[-1], dtype=logp.dtype) * logp, axis=-1)
    hit = (jnp.argmax(logits, axis=-1) == labels).astype(mask.dtype)
    return jnp.sum(nll * mask), jnp.sum(hit * mask), jnp.sum(mask)


def _global_metrics(logits: jax.Array, labels: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Masked mean cross-entropy and accuracy over the whole graph (inside ``shard_map``)."""
    nll, hits, count = jax.lax.psum(jnp.stack(_sums(logits, labels, mask)), AXIS)
    count = jnp.maximum(count, 1.0)
    return nll / count, hits / count


def sharded_loss(model_config: GCNConfig, mesh: jax.sharding.Mesh, *, train: bool = False) -> Any:
    """``loss(params, key, blocks, x, labels, mask) -> scalar``: the masked mean cross-entropy of
    the whole graph, computed with each device holding its row block (inputs stacked [P, ...]).
    With ``train``, dropout is on; device p draws its masks from ``fold_in(key, p)``."""
    spec = jax.sharding.PartitionSpec(AXIS)
    model = sharded_model(model_config)

    def local(params: Any, key: jax.Array, block: GraphBlock, x: jax.Array, labels: jax.Array,
              mask: jax.Array) -> jax.Array:
        block, x, labels, mask = _local((block, x, labels, mask))
        k = jax.random.fold_in(key, jax.lax.axis_index(AXIS)) if train else None
        return _global_metrics(model.apply(params, block, x, key=k, train=train), labels, mask)[0]

    replicated = jax.sharding.PartitionSpec()
    return jax.shard_map(local, mesh=mesh, in_specs=(replicated, replicated, spec, spec, spec, spec),
                         out_specs=replicated, check_vma=False)


def make_sharded_runner(model_config: Any, config: Any, n_features: int, n_classes: int,
                        mesh: jax.sharding.Mesh) -> Any:
    """The :class:`jaxgcn.train.Runner` of one configuration with the graph's rows sharded over
    ``mesh``: the same ``RunState``, Adam step and early-stopping rule as single-device training,
    with ``data`` a :class:`jaxgcn.train.TrainData` whose fields are stacked [P, L, ...] blocks.

    Inside ``shard_map`` each device differentiates its own share of the loss (its nodes' summed
    cross-entropy over the global train count); the parameter gradients are summed with ``psum``
    and every device applies the same update, so the replicated params stay identical. Device p
    draws its dropout masks from ``fold_in(key, p)``.
    """
    import optax

    from jaxgcn.train import (RUNNING, Evaluation, Patience, Runner, TrainData, l2_penalty, make_optimizer,
                              make_runner, record_epoch)

    model = sharded_model(model_config)
    opt = make_optimizer(config)
    single = make_runner(model_config, config, n_features, n_classes)
    keep_best = isinstance(config.early_stopping, Patience)
    spec, rep = jax.sharding.PartitionSpec(AXIS), jax.sharding.PartitionSpec()

    def l2(params: Any) -> jax.Array:
        return config.coupled_l2 * l2_penalty(params, config.l2)

    def epoch_step(state: Any, data: TrainData, aggregated: jax.Array | None, n_train: jax.Array) -> Any:
        key, k_drop = jax.random.split(state.key)
        k_local = jax.random.fold_in(k_drop, jax.lax.axis_index(AXIS))

        def local_loss(params: Any) -> jax.Array:
            logits = model.apply(params, data.graph, data.x, key=k_local, train=True)
            return _sums(logits, data.labels, data.train_mask)[0] / n_train

        loss, grads = jax.value_and_grad(local_loss)(state.params)
        reg, reg_grads = jax.value_and_grad(l2)(state.params)
        loss, grads = jax.lax.psum((loss, grads), AXIS)
        grads = jax.tree.map(jnp.add, grads, reg_grads)
        updates, opt_state = opt.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        logits = model.apply(params, data.graph, data.x, aggregated=aggregated)
        _, train_acc = _global_metrics(logits, data.labels, data.train_mask)
        val_loss, val_acc = _global_metrics(logits, data.labels, data.val_mask)
        return record_epoch(state, config, keep_best, params, opt_state, key, loss + reg, train_acc, val_loss,
                            val_acc, kipf_loss=val_loss + l2(params))

    def local_run(state: Any, data: TrainData, stop_epoch: jax.Array) -> Any:
        data = _local(data)
        n_train = jnp.maximum(jax.lax.psum(jnp.sum(data.train_mask), AXIS), 1.0)
        aggregated = aggregate_input(model_config, data.graph, data.x, propagate=propagate_block)

        def cond(s: Any) -> jax.Array:
            return (s.reason == RUNNING) & (s.epoch < stop_epoch)

        return jax.lax.while_loop(cond, lambda s: epoch_step(s, data, aggregated, n_train), state)

    def run_until(state: Any, data: TrainData, stop_epoch: jax.Array) -> Any:
        return jax.shard_map(local_run, mesh=mesh, in_specs=(rep, spec, rep), out_specs=rep,
                             check_vma=False)(state, data, stop_epoch)

    def local_evaluate(params: Any, data: TrainData) -> Evaluation:
        data = _local(data)
        logits = model.apply(params, data.graph, data.x)
        parts = []
        for mask in (data.train_mask, data.val_mask, data.test_mask):
            parts += list(_global_metrics(logits, data.labels, mask))
        return Evaluation(*parts)

    def evaluate(params: Any, data: TrainData) -> Evaluation:
        return jax.shard_map(local_evaluate, mesh=mesh, in_specs=(rep, spec), out_specs=rep,
                             check_vma=False)(params, data)

    return Runner(single.init, run_until, evaluate, single.final_params)


class ShardedData(NamedTuple):
    """A prepared dataset laid out for ``mesh``: ``data`` holds global arrays [P, L, ...]."""

    data: Any
    mesh: jax.sharding.Mesh
    n_nodes: int
    n_pad: int
    n_features: int
    exchange: str


def shard_data(data: Any, mesh: jax.sharding.Mesh, *, exchange: str = "all_gather") -> ShardedData:
    """Partition a host :class:`jaxgcn.train.TrainData` (from ``prepare(..., on_device=False)``)
    into the mesh's row blocks; each process moves only its own devices' blocks."""
    n_parts = mesh.devices.size
    blocks, n_pad = partition(data.graph, n_parts, exchange=exchange)
    shard = lambda a: shard_nodes(a, n_pad, n_parts)  # noqa: E731
    stacked = data._replace(graph=blocks, x=shard(data.x), labels=shard(np.asarray(data.labels, np.int32)),
                            train_mask=shard(data.train_mask), val_mask=shard(data.val_mask),
                            test_mask=shard(data.test_mask))
    return ShardedData(to_global(stacked, mesh), mesh, data.graph.n_nodes, n_pad, int(data.x.shape[1]), exchange)


def fit_sharded(sharded: ShardedData, n_classes: int, *, model_config: Any, config: Any, key: jax.Array,
                log_every: int = 20, log: Callable[[str], None] | None = print, progress: Any = None) -> Any:
    """Train full-batch with the graph's rows sharded over ``sharded.mesh`` (every process of a
    ``jax.distributed`` job calls this with the same arguments). The epochs run in compiled chunks
    of ``log_every`` with the single-device early-stopping rules. Returns a
    :class:`jaxgcn.train.FitResult` whose params are host NumPy arrays."""
    from jaxgcn.train import (DIVERGED, STOPPED_EARLY, FitResult, TrainingDiverged, drive, log_hook, progress_hook,
                              single_view)

    data = sharded.data
    runner = make_sharded_runner(model_config, config, sharded.n_features, n_classes, sharded.mesh)
    start = time.perf_counter()
    if progress is not None:
        progress.compiling()
    init = jit(runner.init).lower(key, None).compile()
    state = init(key, None)
    run_until = jit(runner.run_until, donate_argnums=0).lower(state, data, jnp.int32(0)).compile()
    evaluate = jit(runner.evaluate).lower(state.params, data).compile()
    compile_seconds = time.perf_counter() - start
    if progress is not None:
        progress.compiled(compile_seconds)
    start = time.perf_counter()
    hooks = [log_hook(log, log_every)] if log is not None and log_every > 0 else []
    if progress is not None:
        hooks.append(progress_hook(progress))
    state, seen = drive(lambda s, stop: run_until(s, data, jnp.int32(stop)), state, single_view,
                        epochs=config.epochs, chunk=log_every, hooks=hooks)
    epoch, reason = seen.epoch, int(seen.reason[0])
    if reason == DIVERGED:
        raise TrainingDiverged(f"training diverged: the loss became NaN/inf at epoch {epoch}; lower --lr "
                               "or normalize the features (--feature-norm)")
    params = runner.final_params(state)
    metrics = {k: float(v) for k, v in evaluate(params, data)._asdict().items()}
    history = {k: np.asarray(v)[:epoch] for k, v in state.history.items()}
    params = jax.tree.map(np.asarray, params)
    return FitResult(params, metrics, epoch, reason == STOPPED_EARLY, history, compile_seconds,
                     time.perf_counter() - start)


def initialize(coordinator: str | None = None, num_processes: int | None = None,
               process_id: int | None = None) -> None:
    """Join a multi-process JAX job (``jax.distributed.initialize``), before any other JAX call.

    With no arguments JAX detects the cluster from its environment (SLURM, Open MPI, Kubernetes,
    Cloud TPU; or ``JAX_COORDINATOR_ADDRESS``/``JAX_NUM_PROCESSES``/``JAX_PROCESS_ID``). On CPU the
    processes exchange data over gloo collectives.
    """
    given = {"coordinator": coordinator, "num_processes": num_processes, "process_id": process_id}
    if any(v is not None for v in given.values()) and any(v is None for v in given.values()):
        missing = ", ".join(f"--{k.replace('_', '-')}" for k, v in given.items() if v is None)
        raise ValueError(f"--distributed: give --coordinator, --num-processes and --process-id together "
                         f"(missing {missing}), or none of them to detect the cluster (SLURM etc.)")
    if num_processes is not None and not 0 <= process_id < num_processes:
        raise ValueError(f"--process-id {process_id} must be in [0, {num_processes}) for --num-processes "
                         f"{num_processes}")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    kwargs = {} if coordinator is None else {"coordinator_address": coordinator, "num_processes": num_processes,
                                             "process_id": process_id}
    timeout = os.environ.get("JAXGCN_INIT_TIMEOUT")
    if timeout:
        kwargs["initialization_timeout"] = int(timeout)
    try:
        jax.distributed.initialize(**kwargs)
    except (ValueError, RuntimeError) as err:
        raise ValueError(f"--distributed: could not join the job ({str(err).splitlines()[0]}); outside a "
                         "cluster manager give --coordinator HOST:PORT --num-processes N --process-id I") from None


# ----------------------------------------------------------------------------- partition files

PARTITION_FORMAT = "jaxgcn-partitions"
PARTITION_META = "partitions.json"


def _template(halo: bool, sparse_features: bool) -> Any:
    """The pytree structure of stacked sharded data (leaves are placeholders)."""
    from jaxgcn.train import TrainData

    csr = lambda: CSR(*([0] * 6))  # noqa: E731
    block = GraphBlock(csr(), 0, 0 if halo else None)
    return TrainData(block, csr() if sparse_features else 0, 0, 0, 0, 0)


def _leaf_names(tree: Any) -> list[str]:
    paths, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [jax.tree_util.keystr(path).strip(".").replace(".", "/") for path, _ in paths]


def save_partitions(directory: str | os.PathLike, data: Any, n_parts: int, *, exchange: str = "all_gather",
                    info: dict[str, Any] | None = None) -> dict[str, Any]:
    """Partition a host :class:`jaxgcn.train.TrainData` into ``n_parts`` row blocks and write one
    file per block (``part-00000.npz``...) plus ``partitions.json``, so that each process of a
    ``--distributed`` job later reads only the blocks of its own devices (:func:`load_partitions`).
    Files are written to a temporary name and renamed; the JSON is written last. Returns the JSON."""
    import json

    from jaxgcn.layers import is_sparse

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
    import json

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
    for k in _mine(mesh):
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
    data = _from_local(local, mesh)
    return ShardedData(data, mesh, meta["n_nodes"], meta["n_pad"], meta["n_features"], meta["exchange"]), meta
