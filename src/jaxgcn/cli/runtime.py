"""JAX's runtime as the training commands need it: the multi-process job, the persistent
compilation cache, CPU devices, and which process writes."""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

import jax

from jaxgcn.host import caches
from jaxgcn.datasets.parsed import CacheNote
from jaxgcn.plan import cpu_devices


def setup(args: argparse.Namespace, from_console: bool) -> None:
    """Before ``train``/``sweep`` touch a device: join the job (``--distributed``), turn the
    compilation cache on, and (from the console script only) expose one CPU device per core."""
    if args.distributed:
        from jaxgcn.distributed.runtime import initialize, quiet_collectives

        if from_console and not getattr(args, "verbose", False):
            quiet_collectives()  # gloo's "[Gloo] Rank 0 is connected..." lines: --verbose shows them
        initialize(args.coordinator, args.num_processes, args.process_id, args.join_timeout)
    elif args.coordinator or args.num_processes or args.process_id is not None:
        raise ValueError("--coordinator/--num-processes/--process-id need --distributed")
    if not args.no_compile_cache:
        enable_compile_cache()
    if from_console:  # in-process callers keep their own JAX device setup
        use_cpu_cores(args)


def enable_compile_cache() -> None:
    """JAX's persistent compilation cache in :func:`jaxgcn.host.caches.root`'s ``xla`` folder,
    unless a cache folder is already configured (``JAX_COMPILATION_CACHE_DIR``, or a library
    caller's ``jax.config``): then that one is kept (the test suite keeps its own)."""
    if jax.config.jax_compilation_cache_dir:
        return
    folder = caches.root() / "xla"
    problem = _unwritable(folder)
    if problem is not None:  # JAX would warn on every compile with its own multi-line UserWarning
        given = os.environ.get(caches.ENV)
        where = f"{caches.ENV}={given}" if given else f"the cache folder {caches.root()}"
        warnings.warn(f"{where}: {folder} cannot hold JAX's compilation cache ({problem}); compiling without it: "
                      f"set {caches.ENV} to a writable folder, or pass --no-compile-cache", CacheNote)
        return
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def _unwritable(folder: Path) -> str | None:
    """Why ``folder`` cannot be created or written (its path runs through a file, a read-only or
    missing mount), or None."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        return err.strerror or type(err).__name__
    return None if os.access(folder, os.W_OK | os.X_OK) else "not writable"


def _cpu_devices(count: int) -> None:
    try:
        jax.config.update("jax_num_cpu_devices", count)  # CPU only; GPUs are what they are
    except RuntimeError:  # JAX is already running (library use)
        pass


def use_cpu_cores(args: argparse.Namespace) -> None:
    """For batched runs, expose one CPU device per core this process may use (affinity mask and
    cgroup quota: :func:`jaxgcn.plan.cpu_devices`) so the run axis is sharded over them (the
    gather/scatter kernels of one device use one core; measured 1.6x on 2 cores). No-op when
    XLA_FLAGS already sets a device count or JAX is already running (library use)."""
    forced = "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
    if getattr(args, "shard_graph", False) or args.distributed:
        if args.devices and not args.distributed and not forced:
            _cpu_devices(args.devices)
        return
    batched = args.command == "sweep" or (args.seeds > 1 or args.splits > 1)
    count = None if forced else cpu_devices(args.backend, args.devices, None, batched)
    if count is not None:
        _cpu_devices(count)


def is_writer() -> bool:
    """Only process 0 of a multi-process job writes files (every process when JAX is not yet
    running, or in a one-process job)."""
    return jax.process_index() == 0
