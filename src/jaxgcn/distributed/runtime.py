"""JAX's multi-process runtime for sharded training: joining a ``jax.distributed`` job
(:func:`initialize`), the 1-D ``nodes`` mesh (:func:`node_mesh`), and global arrays assembled
from each process's own blocks (:func:`to_global`)."""

from __future__ import annotations

import atexit
import os
import socket
import sys
import threading
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


JOIN_TIMEOUT = 120.0  # seconds a process waits for the whole job to form (--join-timeout)
EXIT_NOT_JOINED = 1


def _coordinator_answers(coordinator: str) -> bool:
    """Whether something accepts TCP connections at ``HOST:PORT`` (the coordinator's service)."""
    host, _, port = coordinator.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=2.0):
            return True
    except (OSError, ValueError):
        return False


def not_joined_message(coordinator: str | None, num_processes: int | None, process_id: int | None,
                       timeout: float) -> str:
    """The one message of a process whose job did not form within ``timeout`` seconds: which
    process waited, where, and which processes it waited for."""
    who = "this process" if process_id is None else f"process {process_id}"
    where = f" at {coordinator}" if coordinator else ""
    if coordinator and process_id not in (None, 0) and not _coordinator_answers(coordinator):
        missing = f"process 0, the coordinator, does not answer at {coordinator}: start it there"
    elif num_processes is not None and process_id is not None:
        others = [str(k) for k in range(num_processes) if k != process_id]
        listed = ", ".join(others) if len(others) <= 4 else f"{others[0]}..{others[-1]}"
        missing = (f"not all of the {num_processes} processes joined (the others are --process-id {listed}; "
                   "start each with the same --coordinator and --num-processes)")
    else:
        missing = "not every process of the job joined (check the cluster manager's job)"
    return (f"--distributed: {who} waited {timeout:g} s{where} and the job did not form: {missing}; "
            "--join-timeout SECONDS waits longer")


def initialize(coordinator: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, timeout: float | None = None) -> None:
    """Join a multi-process JAX job (``jax.distributed.initialize``), before any other JAX call.

    With no arguments JAX detects the cluster from its environment (SLURM, Open MPI, Kubernetes,
    Cloud TPU; or ``JAX_COORDINATOR_ADDRESS``/``JAX_NUM_PROCESSES``/``JAX_PROCESS_ID``). On CPU the
    processes exchange data over gloo collectives. A job that has not formed after ``timeout``
    seconds (default ``$JAXGCN_INIT_TIMEOUT``, else :data:`JOIN_TIMEOUT`) ends this process with
    :func:`not_joined_message` on stderr and exit status 1: JAX's own deadline, set later, would
    abort it with a C++ stack trace.
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
    kwargs: dict[str, Any] = {} if coordinator is None else {
        "coordinator_address": coordinator, "num_processes": num_processes, "process_id": process_id}
    wait = float(timeout or os.environ.get("JAXGCN_INIT_TIMEOUT") or JOIN_TIMEOUT)
    kwargs["initialization_timeout"] = int(wait) + 60  # ours ends the wait first, with a message

    def give_up() -> None:
        print(f"jaxgcn: error: {not_joined_message(coordinator, num_processes, process_id, wait)}",
              file=sys.stderr, flush=True)
        os._exit(EXIT_NOT_JOINED)  # JAX's client blocks in C++: no exception can reach it

    watchdog = threading.Timer(wait, give_up)
    watchdog.daemon = True
    watchdog.start()
    try:
        jax.distributed.initialize(**kwargs)
    except (ValueError, RuntimeError) as err:
        raise ValueError(f"--distributed: could not join the job ({str(err).splitlines()[0]}); outside a "
                         "cluster manager give --coordinator HOST:PORT --num-processes N --process-id I") from None
    finally:
        watchdog.cancel()


def quiet_collectives(prefix: bytes = b"[Gloo] ") -> None:
    """Keep the collectives library's own lines (gloo's ``[Gloo] Rank 0 is connected to 1 peer
    ranks...``, printed by C++ on the process's stdout) off the console: from now on the
    process's file descriptor 1 goes through a thread that drops the lines starting with
    ``prefix`` and passes everything else on, in order; at exit it is restored and drained."""
    sys.stdout.flush()
    console = os.dup(1)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 1)
    os.close(write_end)

    def forward() -> None:
        with os.fdopen(read_end, "rb", buffering=0) as pipe:
            pending = b""
            while chunk := pipe.read(65536):
                *lines, pending = (pending + chunk).split(b"\n")
                kept = b"".join(line + b"\n" for line in lines if not line.startswith(prefix))
                if kept:
                    os.write(console, kept)
            if pending and not pending.startswith(prefix):
                os.write(console, pending)

    thread = threading.Thread(target=forward, name="jaxgcn-quiet-collectives", daemon=True)
    thread.start()

    def restore() -> None:
        sys.stdout.flush()
        os.dup2(console, 1)  # the pipe's last writer is gone: the thread drains it and ends
        thread.join(timeout=5.0)

    atexit.register(restore)
