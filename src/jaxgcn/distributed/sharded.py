"""Sharded full-graph training: the one GCN with :func:`~jaxgcn.distributed.blocks.propagate_block`
injected (:func:`sharded_model`), the loss and metrics summed over devices, the training
:class:`jaxgcn.train.Runner` under ``shard_map`` (:func:`make_sharded_runner`) and the host driver
(:func:`fit_sharded`)."""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxgcn.core.diagnostics import divergence_message
from jaxgcn.core.data import TrainData
from jaxgcn.core.tasks import label_dtype
from jaxgcn.distributed.blocks import AXIS, GraphBlock, partition, propagate_block, shard_nodes
from jaxgcn.distributed.runtime import block_of_this_device, to_global
from jaxgcn.core.models import Execution, GCNConfig, Model, gcn
from jaxgcn.plan import Plan, concrete, ops_for
from jaxgcn.training.config import TrainConfig
from jaxgcn.training.loop import FitResult, Layout, compile, fit_result, run, signature
from jaxgcn.training.losses import masked_sums
from jaxgcn.training.state import RunState
from jaxgcn.training.step import Collective, Runner, make_batch_runner


def block_propagation(execution: Execution) -> Callable[[GraphBlock, jax.Array], jax.Array]:
    """:func:`propagate_block` with the row-block products the plan chose for ``execution``
    (:attr:`jaxgcn.core.ops.Ops.csr_product`: the fused kernel where it runs, else XLA's; blocks made as
    neighbour lists: :attr:`jaxgcn.core.ops.Ops.block_lists`, else the XLA gathers of
    :func:`jaxgcn.core.gather.rows_product`)."""
    ops = ops_for(execution)
    lists = {} if ops.block_lists is None else {"lists_product": ops.block_lists}
    return functools.partial(propagate_block, product=ops.csr_product, **lists)


def sharded_model(model_config: GCNConfig, execution: Execution = Execution()) -> Model:
    """The GCN whose propagation is :func:`propagate_block` (to be applied inside ``shard_map``)."""
    return gcn(model_config, execution, propagate=block_propagation(execution))


def sharded_apply(model_config: GCNConfig, mesh: jax.sharding.Mesh, execution: Execution = Execution()) -> Any:
    """``apply(params, blocks, x) -> [P, L, n_classes]`` logits, each device computing its rows."""
    spec = jax.sharding.PartitionSpec(AXIS)
    model = sharded_model(model_config, execution)

    def local(params: Any, block: GraphBlock, x: jax.Array) -> jax.Array:
        return model.apply(params, *block_of_this_device((block, x)))[None]

    # check_vma=False: the kernel's custom call carries no varying-axis type (the gradients of the
    # replicated params are still summed over devices, as the equality tests check).
    return jax.shard_map(local, mesh=mesh, in_specs=(jax.sharding.PartitionSpec(), spec, spec), out_specs=spec,
                         check_vma=False)


def _device_total(tree: Any) -> Any:
    """Sum over the devices of the node mesh (inside ``shard_map``)."""
    return jax.lax.psum(tree, AXIS)


def _device_key(key: jax.Array) -> jax.Array:
    """This device's dropout key: device p draws its masks from ``fold_in(key, p)``."""
    return jax.random.fold_in(key, jax.lax.axis_index(AXIS))


def _device_gather(x: jax.Array, axis: int) -> jax.Array:
    """Every device's block of ``x`` along ``axis``, in device order (inside ``shard_map``)."""
    return jax.lax.all_gather(x, AXIS, axis=axis, tiled=True)


# What the one training step does across the node mesh: psum the loss, metric sums and gradients;
# gather the rows a metric that is no sum reads.
NODES = Collective(total=_device_total, device_key=_device_key, gather=_device_gather)


def sharded_loss(model_config: GCNConfig, mesh: jax.sharding.Mesh, *, train: bool = False,
                 execution: Execution = Execution()) -> Any:
    """``loss(params, key, blocks, x, labels, mask) -> scalar``: the masked mean cross-entropy of
    the whole graph, computed with each device holding its row block (inputs stacked [P, ...]).
    With ``train``, dropout is on; device p draws its masks from ``fold_in(key, p)``."""
    spec = jax.sharding.PartitionSpec(AXIS)
    model = sharded_model(model_config, execution)

    def local(params: Any, key: jax.Array, block: GraphBlock, x: jax.Array, labels: jax.Array,
              mask: jax.Array) -> jax.Array:
        block, x, labels, mask = block_of_this_device((block, x, labels, mask))
        logits = model.apply(params, block, x, key=_device_key(key) if train else None, train=train)
        nll, _, count = _device_total(masked_sums(logits[:, None], labels, mask[None]))
        return nll[0] / jnp.maximum(count[0], 1.0)

    replicated = jax.sharding.PartitionSpec()
    return jax.shard_map(local, mesh=mesh, in_specs=(replicated, replicated, spec, spec, spec, spec),
                         out_specs=replicated, check_vma=False)


def make_sharded_runner(model_config: GCNConfig, config: TrainConfig, n_features: int, n_classes: int,
                        mesh: jax.sharding.Mesh, execution: Execution = Execution()) -> Runner:
    """The :class:`jaxgcn.train.Runner` of one configuration with the graph's rows sharded over
    ``mesh``: :func:`jaxgcn.training.step.make_batch_runner` (the one runner builder, one run) with
    the block exchange as its propagation and :data:`NODES` as its collective, under ``shard_map``; ``data`` is a
    :class:`jaxgcn.train.TrainData` whose fields are stacked [P, L, ...] blocks.

    Each device differentiates its own share of the loss (its nodes' summed cross-entropy over the
    global train count); the gradients are summed with ``psum`` and every device applies the same
    update, so the replicated params stay identical. Device p draws its dropout masks from
    ``fold_in(key, p)``.
    """
    runner = make_batch_runner(model_config, config, execution, propagate=block_propagation(execution),
                               collective=NODES, one=(n_features, n_classes))
    spec, rep = jax.sharding.PartitionSpec(AXIS), jax.sharding.PartitionSpec()

    def on_mesh(fn: Callable[..., Any], in_specs: tuple) -> Callable[..., Any]:
        # check_vma=False: the kernel's custom call carries no varying-axis type
        def local(first: Any, data: TrainData, *rest: Any) -> Any:
            return fn(first, block_of_this_device(data), *rest)
        return jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=rep, check_vma=False)

    return runner._replace(run_until=on_mesh(runner.run_until, (rep, spec, rep, rep)),
                           evaluate=on_mesh(runner.evaluate, (rep, spec, rep)))


class ShardedData(NamedTuple):
    """A prepared dataset laid out for ``mesh``: ``data`` holds global arrays [P, L, ...]."""

    data: Any
    mesh: jax.sharding.Mesh
    n_nodes: int
    n_pad: int
    n_features: int
    exchange: str


def shard_data(data: TrainData, mesh: jax.sharding.Mesh, *, exchange: str = "all_gather",
               lists: bool | None = None) -> ShardedData:
    """Partition a host :class:`jaxgcn.train.TrainData` (from ``prepare(..., on_device=False)``)
    into the mesh's row blocks; each process moves only its own devices' blocks. ``lists``: the blocks
    as neighbour lists (None: where the plan's ops take them, :attr:`jaxgcn.core.ops.Ops.block_lists`:
    on an accelerator)."""
    n_parts = mesh.devices.size
    if lists is None:
        lists = ops_for(Execution()).block_lists is not None
    blocks, n_pad = partition(data.graph, n_parts, exchange=exchange, lists=lists)
    shard = lambda a: shard_nodes(a, n_pad, n_parts)  # noqa: E731
    labels = np.asarray(data.labels)
    stacked = data._replace(graph=blocks, x=shard(data.x), labels=shard(labels.astype(label_dtype(labels))),
                            train_mask=shard(data.train_mask), val_mask=shard(data.val_mask),
                            test_mask=shard(data.test_mask))
    return ShardedData(to_global(stacked, mesh), mesh, data.graph.n_nodes, n_pad, int(data.x.shape[1]), exchange)


def fit_sharded(sharded: ShardedData, n_classes: int, *, model_config: GCNConfig, config: TrainConfig,
                key: jax.Array, execution: Execution | Plan = Execution(), log_every: int = 20,
                log: Callable[[str], None] | None = print, progress: Any = None,
                checkpoint_every: int | None = None, on_checkpoint: Callable[[RunState], None] | None = None,
                resume: Callable[[RunState], RunState] | None = None) -> FitResult:
    """Train full-batch with the graph's rows sharded over ``sharded.mesh`` (every process of a
    ``jax.distributed`` job calls this with the same arguments). The epochs run in compiled chunks
    of ``log_every`` (``checkpoint_every`` when given) with the single-device early-stopping rules.
    Returns a :class:`jaxgcn.train.FitResult` whose params are host NumPy arrays.

    The run state (params, optimizer moments, key, early-stopping records) is replicated on every
    device, so it is one run's :class:`jaxgcn.train.RunState`: ``on_checkpoint`` and ``resume``
    work as in :func:`jaxgcn.train.fit` (every process must pass ``checkpoint_every``, since the
    chunks are collective; one process writes). Each device draws its dropout masks from its
    index, so a resumed run equals the uninterrupted one on the same device count only.
    ``execution``: the plan the application resolved (:func:`jaxgcn.plan.sharded`), or a request
    the plan decides here, once."""
    data, execution = sharded.data, concrete(execution)  # row blocks: the csr product, the kernel where it can run
    runner = make_sharded_runner(model_config, config, sharded.n_features, n_classes, sharded.mesh, execution)
    runs = jax.tree.map(np.asarray, runner.inputs())
    cache_key = ("sharded", model_config, config, execution, n_classes, signature(data), sharded.mesh,
                 sharded.exchange, key.shape, str(key.dtype))
    program = compile(cache_key, runner, (key, None, runs), data, progress=progress, execution=execution)
    state = program.init(key, None, runs)
    if resume is not None:
        state = resume(state)
    return fit_result(run(program, state, data, runs, Layout(), config, log=log, log_every=log_every,
                          progress=progress, checkpoint_every=checkpoint_every, checkpoint=on_checkpoint,
                          diverged=lambda bad, epoch: divergence_message(None, config, epoch)))
