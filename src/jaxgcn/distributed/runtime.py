"""JAX's multi-process runtime for sharded training: joining a ``jax.distributed`` job
(:func:`initialize`), the 1-D ``nodes`` mesh (:func:`node_mesh`), and global arrays assembled
from each process's own blocks (:func:`to_global`)."""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np

from jaxgcn.distributed.blocks import AXIS


def node_mesh(n_devices: int | None = None) -> jax.sharding.Mesh:
    """A 1-D mesh named ``nodes`` over the first ``n_devices`` devices of the job (all by default)."""
    devices = jax.devices()
    if n_devices is not None and not 1 <= n_devices <= len(devices):
        raise ValueError(f"--devices {n_devices}: this job has {len(devices)} device(s) "
                         f"({devices[0].platform}); give 1..{len(devices)}")
    return jax.sharding.Mesh(np.asarray(devices[: n_devices or None]), (AXIS,))


def own_parts(mesh: jax.sharding.Mesh) -> list[int]:
    """Positions along the ``nodes`` axis of this process's devices."""
    return [k for k, d in enumerate(mesh.devices.flat) if d.process_index == jax.process_index()]


def from_local(tree: Any, mesh: jax.sharding.Mesh) -> Any:
    """This process's blocks [len(mine), ...] -> global arrays [P, ...] sharded over ``nodes``."""
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))
    n_parts = mesh.devices.size
    return jax.tree.map(lambda a: jax.make_array_from_process_local_data(
        sharding, np.asarray(a), (n_parts, *np.shape(a)[1:])), tree)


def to_global(tree: Any, mesh: jax.sharding.Mesh) -> Any:
    """Stacked host arrays [P, ...] -> global arrays sharded over the mesh's ``nodes`` axis, each
    process passing only the blocks of its own devices (in one process this is a plain device_put)."""
    mine = own_parts(mesh)
    return from_local(jax.tree.map(lambda a: np.asarray(a)[mine], tree), mesh)


def block_of_this_device(tree: Any) -> Any:
    """Inside ``shard_map``: each leaf's one block [1, ...] -> [...] (this device's rows)."""
    return jax.tree.map(lambda a: a[0], tree)


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
