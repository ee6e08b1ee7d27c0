"""Peak-memory planning for full-batch training, before anything is allocated.

:func:`estimate` adds up what one training run holds at its peak: the feature matrix, the adjacency
in the chosen backend's layout, the per-edge message buffers that gather-based backends materialize,
node activations and their gradients, params with Adam's moments, and the runtime itself. The
benchmark ``benchmarks/bench_scale.py`` prints it beside the measured peak RSS.

:func:`available_bytes` and :func:`available_cpus` say what this process may use on any machine:
psutil's figures and the CPU affinity mask, capped by a container's cgroup (v1 or v2) limits. This
module is the package's lowest layer: it imports only the standard library and psutil.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, NamedTuple

GiB = 2**30
GATHER_CHUNK_ELEMENTS = 2**24  # jaxgcn.core.gather.CHUNK_ELEMENTS (this layer imports no jaxgcn module)
RUNTIME_BYTES = 400 * 2**20  # Python, NumPy, SciPy, JAX and XLA's CPU client, measured ~0.35-0.4 GB


class MemoryEstimate(NamedTuple):
    """Bytes per part and in total (``parts`` keeps the order in which they are printed)."""

    parts: dict[str, int]
    total: int

    def describe(self) -> str:
        """One line: ``total (part a, part b, ...)`` in GiB."""
        shown = ", ".join(f"{name} {size / GiB:.2f}" for name, size in self.parts.items() if size >= GiB / 200)
        return f"{self.total / GiB:.2f} GiB ({shown})"


class RowPlans(NamedTuple):
    """What a run's row plans (the ``gather`` backend's on an accelerator: :func:`jaxgcn.core.gather.prepare`)
    make each layer compute, and hold: :func:`estimate` then counts each layer's activations and
    buffers at its rows (a 2-layer model on a 1M-node graph with 80 training nodes computes its last
    layer at 580 rows, its first at ~15,000, and only ``X·W`` at every node's).

    Attributes:
        rows: per layer, the output rows it computes in the larger of a training step's and an
            evaluation's pass (``n_nodes``: every row).
        slots: per layer, the padded slots of those rows' neighbour lists or of their transpose's,
            whichever is larger (the forward gather's or the gradient's), the larger plan's; 0 where
            the layer propagates over every node's lists.
        held: the bytes both plans hold (their lists, orders, node ids and places).
        aggregate_first: the first layer propagates its input, not its product (``--aggregate-first``),
            at the input's width, and with no gradient: over its rows' lists (an evaluation's once per
            call), or over every node's where it has no rows of its own.
    """

    rows: tuple[int, ...]
    slots: tuple[int, ...]
    held: int
    aggregate_first: bool = False


def estimate(
    n_nodes: int,
    n_edges: int,
    n_features: int,
    n_classes: int,
    *,
    hidden: int = 16,
    layers: int = 2,
    backend: str = "csr",
    feature_nnz: int | None = None,
    chunk_edges: int | None = None,
    symmetric: bool = True,
    runs: int = 1,
    list_slots: int | None = None,
    row_plans: RowPlans | None = None,
    device: bool = False,
) -> MemoryEstimate:
    """Estimate the peak bytes of training a GCN full-batch.

    Args:
        n_nodes, n_edges: graph size (``n_edges``: directed off-diagonal edges, as ``Graph.n_edges``).
        n_features, n_classes: input and output widths.
        hidden, layers: the architecture.
        backend: ``dense``, ``segment``, ``bcoo``, ``csr`` or ``gather``.
        feature_nnz: stored entries of sparse features; ``None`` for dense features.
        chunk_edges: edge block of the chunked ``segment`` propagation (bounds its message buffer).
        symmetric: the normalized adjacency equals its transpose (``csr`` then keeps no transposed copy).
        runs: runs stacked in one program (each holds its own activations and params).
        list_slots: ``gather``: the padded slots of the neighbour lists, the transpose's included
            (``NeighbourLists.slots``); None: the bound of power-of-two widths, twice the entries per direction.
        row_plans: the rows each layer computes (:class:`RowPlans`); None: every row.
        device: the estimate of an accelerator's memory: no ``runtime`` part (Python, NumPy and JAX's
            client live in the host's), and a single run's dense features count once (measured on a TPU
            v5e with row plans: the peak of the 1M-node synthetic graph's training was 0.703 GiB with
            0.672 GiB of it the data, the features included: its compiler fuses the dropout and the
            product that the CPU's buffer assignment holds copies for), and with row plans a layer's
            product at its input's rows once (:func:`_row_parts`).

    >>> est = estimate(1_000_000, 20_000_000, 100, 47, hidden=128)
    >>> round(est.parts["adjacency"] / GiB, 2), est.parts["messages"]
    (0.16, 0)
    """
    f4 = 4
    widths = [n_features] + [hidden] * (layers - 1) + [n_classes]
    features = _features_bytes(n_nodes, n_features, feature_nnz, backend, runs, row_plans is not None, device)
    if backend == "dense":
        adjacency = n_nodes * n_nodes * f4
    elif backend == "csr":
        # row pointers, columns, values, self-weights; a directed graph adds its transposed pattern
        # (pointers, rows, permutation) and the values gathered into that order by the backward pass
        transposed = (n_nodes + 1) * f4 + n_edges * 3 * f4
        adjacency = (n_nodes + 1) * f4 + n_edges * 2 * f4 + n_nodes * f4 + (0 if symmetric else transposed)
    else:
        adjacency = n_edges * 3 * f4 + n_nodes * f4
    widest = max(widths[1:]) * runs
    if backend in ("segment", "bcoo"):
        block = n_edges if not chunk_edges or backend == "bcoo" else min(n_edges, chunk_edges)
        messages = 2 * block * widest * f4  # gathered rows and their gradient
    elif backend == "gather":
        lists, messages = _gather_bytes(n_nodes, n_edges, widest, symmetric, list_slots)
        adjacency += lists
    else:
        messages = 0
    # per layer output: pre-activation, activation, dropout output, gradient; plus the logits' softmax
    activations = sum(4 * n_nodes * w * f4 for w in widths[1:]) * runs + 2 * n_nodes * n_classes * f4 * runs
    if row_plans is not None:
        first = _gather_bytes(n_nodes, n_edges, n_features * runs, symmetric, list_slots)[1] \
            if backend == "gather" and row_plans.aggregate_first else messages  # the input's propagation
        activations, messages = _row_parts(n_nodes, widths, runs, row_plans, (first, messages), device)
        adjacency += row_plans.held
    if feature_nnz is not None and backend != "csr":
        messages += 2 * feature_nnz * hidden * runs * f4  # the sparse input product gathers too
    n_params = sum(a * b for a, b in zip(widths[:-1], widths[1:]))
    params = 6 * n_params * f4 * runs  # params, grads, 2 Adam moments, best params, update
    parts = {"features": features, "adjacency": adjacency, "messages": messages, "activations": activations,
             "params": params, "runtime": 0 if device else RUNTIME_BYTES}
    return MemoryEstimate(parts, sum(parts.values()))


def _features_bytes(n_nodes: int, n_features: int, feature_nnz: int | None, backend: str, runs: int,
                    row_plans: bool, device: bool) -> int:
    """The features' part of :func:`estimate`, decided once for the host's memory or the device's
    (``row_plans``: whether the layers compute the rows of row plans)."""
    f4 = 4
    if feature_nnz is not None:  # values, dropped values and columns; row pointers; the kernel's transpose
        return feature_nnz * (2 * f4 + f4) + (n_nodes + 1) * f4 + (feature_nnz * 3 * f4 if backend == "csr" else 0)
    if device and runs == 1:
        copies = 1  # a TPU's compiler fuses the dropout and the product (estimate's ``device``)
    elif row_plans:
        # as XLA's buffer assignment holds them: the matrix, the dropout's per-node counter, and per run
        # the dropped copy and the two layouts the first layer's product and its weight gradient read it in
        copies = 3 * runs + 1
    else:
        copies = 3  # the matrix, its dropped copy, and (aggregate-first) the propagated copy
    return copies * n_nodes * n_features * f4


def _row_parts(n_nodes: int, widths: list[int], runs: int, plans: RowPlans, full: tuple[int, int],
               device: bool) -> tuple[int, int]:
    """The activations and the largest layer's message buffers where each layer computes the rows of
    ``plans`` (``full``: the buffers of a propagation over every node's lists, the first layer's and a
    later one's). Layer l's product ``h·W`` spans the rows its input holds (the first layer's: every
    node's, then gathered; an aggregate-first one's: its own rows of ``Â·X``), its output the rows it
    computes; each with its gradient. A layer's gather over its rows' lists holds [rows, K, width] (in
    chunks of :data:`GATHER_CHUNK_ELEMENTS`) and its weighted copy. On a ``device`` the product at the
    input's rows counts once: the forward's is read only by the gather into the layer's rows (``h·W``'s
    own gradient reads ``h``, not it) and is dead before the backward pass makes its gradient; the CPU's
    figures, checked against its compiled peak, keep both."""
    if len(plans.rows) != len(widths) - 1 or len(plans.slots) != len(plans.rows):
        raise ValueError(f"row_plans: {len(plans.rows)} layers of rows and {len(plans.slots)} of slots, "
                         f"for a model of {len(widths) - 1} layers; give one of each per layer")
    # an aggregate-first layer takes its rows of Â·X before its product (the product spans them only)
    f4, inputs, activations, messages = 4, plans.rows[0] if plans.aggregate_first else n_nodes, 0, 0
    for layer, (rows, slots, width) in enumerate(zip(plans.rows, plans.slots, widths[1:])):
        w = width * runs
        activations += ((1 if device else 2) * inputs + 2 * rows) * w * f4
        # the gathered rows and their gradient's; an aggregate-first layer's: its input's, with no gradient
        gather_width, directions = (widths[0] * runs, 1) if layer == 0 and plans.aggregate_first else (w, 2)
        gathered = (directions * min(slots * gather_width, GATHER_CHUNK_ELEMENTS) + (rows + 1) * gather_width) * f4
        messages = max(messages, gathered if slots else full[min(layer, 1)])
        inputs = rows
    return activations + 2 * inputs * widths[-1] * runs * f4, messages  # and the logits' softmax


def per_run_bytes(n_nodes: int, n_edges: int, n_features: int, n_classes: int, **options: Any) -> int:
    """The bytes one more run of a batch adds to :func:`estimate` (its ``runs=2`` total minus its
    ``runs=1`` total; ``options``: its other keywords): what the plan's runs per program and the
    sweep's chunks are sized by.

    >>> per_run_bytes(1000, 8000, 16, 4, hidden=16)
    359680
    """
    one, two = (estimate(n_nodes, n_edges, n_features, n_classes, runs=r, **options).total for r in (1, 2))
    return two - one


def _gather_bytes(n_nodes: int, n_edges: int, widest: int, symmetric: bool, list_slots: int | None) -> tuple[int, int]:
    """The ``gather`` backend's neighbour lists (a column and a weight per padded slot, and the order
    of each direction) and its buffers: one [rows, K, width] gather (bounded by the row chunks) and
    its weighted copy, then the bucket outputs stacked before the order gather."""
    f4, directions = 4, 1 if symmetric else 2
    slots = 2 * n_edges * directions if list_slots is None else list_slots
    lists = slots * 2 * f4 + n_nodes * f4 * directions
    one_way = slots // directions
    return lists, 2 * min(one_way * widest, GATHER_CHUNK_ELEMENTS) * f4 + (n_nodes + 1) * widest * f4


# Where the machine facts are read: module constants so tests can point them at a fake tree.
CGROUP_ROOT = Path("/sys/fs/cgroup")
MEMINFO = Path("/proc/meminfo")
DEFAULT_AVAILABLE = 8 * GiB  # assumed only when neither psutil nor /proc/meminfo can say
_NO_LIMIT = 2**60  # cgroup v1 writes ~2**63 for "unlimited"; no real machine has an exabyte


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _number(path: Path) -> int | None:
    """An integer file of the cgroup tree; None when absent, ``max``, negative or absurdly large."""
    text = _read(path)
    try:
        value = int(text) if text is not None else None
    except ValueError:  # "max"
        return None
    return value if value is not None and 0 <= value < _NO_LIMIT else None


def _stat(path: Path, name: str) -> int:
    for line in (_read(path) or "").splitlines():
        field, _, value = line.partition(" ")
        if field == name and value.strip().isdigit():
            return int(value)
    return 0


def cgroup_memory_free(root: Path | None = None) -> int | None:
    """Bytes this container may still use under its cgroup memory limit (v2 ``memory.max`` minus
    ``memory.current``, v1 ``memory/memory.limit_in_bytes`` minus ``memory.usage_in_bytes``, the
    reclaimable page cache ``inactive_file`` not counted as used); None where there is no limit."""
    root = CGROUP_ROOT if root is None else root
    for limit, usage, stat, cache in (("memory.max", "memory.current", "memory.stat", "inactive_file"),
                                      ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes",
                                       "memory/memory.stat", "total_inactive_file")):
        cap = _number(root / limit)
        if cap is not None:
            used = (_number(root / usage) or 0) - _stat(root / stat, cache)
            return max(cap - max(used, 0), 0)
    return None


def _meminfo_available(meminfo: Path) -> int | None:
    for line in (_read(meminfo) or "").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def available_bytes(root: Path | None = None, meminfo: Path | None = None) -> int:
    """Memory this process may still allocate: the machine's available memory (psutil, on Linux,
    macOS and Windows; without psutil ``MemAvailable`` of /proc/meminfo, else ``DEFAULT_AVAILABLE``,
    8 GiB), capped by the container's cgroup memory limit minus its usage where there is one, and
    by what an address-space limit (``ulimit -v``) leaves (:func:`address_space_free`).

    ``root`` and ``meminfo`` replace ``CGROUP_ROOT`` and ``MEMINFO`` (tests).

    >>> available_bytes() > 0
    True
    """
    try:
        import psutil

        machine: int | None = int(psutil.virtual_memory().available)
    except ImportError:
        machine = _meminfo_available(MEMINFO if meminfo is None else meminfo)
    if machine is None:
        machine = DEFAULT_AVAILABLE
    limits = [v for v in (machine, cgroup_memory_free(root), address_space_free()) if v is not None]
    return min(limits)


def address_space_free() -> int | None:
    """What ``ulimit -v`` (``RLIMIT_AS``, as batch schedulers set it) still lets this process map:
    the soft limit minus its virtual size now; None without such a limit. An allocation past it
    fails (``std::bad_alloc`` inside XLA) however much memory the machine has free.

    >>> free = address_space_free()
    >>> free is None or free >= 0
    True
    """
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    try:
        import psutil

        used = int(psutil.Process().memory_info().vms)
    except ImportError:
        try:
            used = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            used = 0
    return max(int(soft) - used, 0)


def cgroup_cpus(root: Path | None = None) -> int | None:
    """CPUs the cgroup's CPU quota allows, rounded up (v2 ``cpu.max`` ``quota period``, v1
    ``cpu/cpu.cfs_quota_us`` / ``cpu/cpu.cfs_period_us``); None where there is no quota."""
    root = CGROUP_ROOT if root is None else root
    v2 = (_read(root / "cpu.max") or "").split()
    if len(v2) != 2:
        v2 = [_read(root / "cpu" / "cpu.cfs_quota_us") or "", _read(root / "cpu" / "cpu.cfs_period_us") or ""]
    try:
        q, p = int(v2[0]), int(v2[1])
    except ValueError:  # "max" (v2), absent
        return None
    return max(1, math.ceil(q / p)) if q > 0 and p > 0 else None


def available_cpus(root: Path | None = None) -> int:
    """CPUs this process may run on: its affinity mask (``taskset``, SLURM) where the OS has one,
    else ``os.cpu_count()``, capped by the cgroup CPU quota (containers); at least 1.

    ``root`` replaces ``CGROUP_ROOT`` (tests).

    >>> available_cpus() >= 1
    True
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS and Windows have no affinity call
        cpus = os.cpu_count() or 1
    quota = cgroup_cpus(root)
    return max(1, cpus if quota is None else min(cpus, quota))


class Budget(NamedTuple):
    """The memory a job may fill: ``free`` bytes on ``where`` (None: this host's RAM, the CPU's memory;
    else the accelerator's name, e.g. ``TPU v5 lite (tpu:0)``)."""

    free: int
    where: str | None = None

    def describe(self) -> str:
        """``15.7 GiB available`` and, on an accelerator, ``on <device>``."""
        return f"{self.free / GiB:.1f} GiB available" + (f" on {self.where}" if self.where else "")


def device_budget(device: Any = None) -> Budget | None:
    """An accelerator's free memory, ``memory_stats()``'s ``bytes_limit`` minus ``bytes_in_use``,
    named by its kind and id (``device``: JAX's first local device); None for a CPU device or one
    that keeps no statistics (the host's RAM is then the budget: :func:`budget`).

    >>> class Fake:
    ...     platform, device_kind, id = "tpu", "TPU v5 lite", 0
    ...     def memory_stats(self): return {"bytes_limit": 16 * GiB, "bytes_in_use": GiB}
    >>> device_budget(Fake()).describe()
    '15.0 GiB available on TPU v5 lite (tpu:0)'
    """
    if device is None:
        import jax

        device = jax.local_devices()[0]
    if device.platform == "cpu":
        return None
    stats = device.memory_stats() or {}
    limit = stats.get("bytes_limit")
    if not limit:
        return None
    name = f"{device.device_kind} ({device.platform}:{device.id})"
    return Budget(int(limit) - int(stats.get("bytes_in_use", 0)), name)


def budget(device: Any = None) -> Budget:
    """THE memory a job is checked against: the accelerator's free memory where JAX runs on one
    (:func:`device_budget`), else the host's (:func:`available_bytes`)."""
    return device_budget(device) or Budget(available_bytes())


def check_fits(est: MemoryEstimate, available: int | None = None, *, what: str = "training",
               where: str | None = None) -> None:
    """Raise a ValueError naming the estimate and the ways to shrink it when it exceeds memory
    (``available`` bytes on ``where``: None for the host, else the accelerator's name)."""
    available = available_bytes() if available is None else available
    if est.total <= available:
        return
    options = []
    if est.parts["messages"] > est.total // 4:
        options.append("--backend csr (no per-edge message buffer) or --chunk-edges N with --backend segment")
    if est.parts["activations"] > est.total // 4:
        options.append("a smaller --hidden")
    if est.parts["adjacency"] > est.total // 2:
        options.append("a sparse backend (--backend auto never picks dense for a graph this size)")
    options.append("fewer --seeds per program" if est.parts["params"] > est.total // 4
                   else "a machine with more memory")
    raise ValueError(f"{what} needs about {est.describe()}, more than the {Budget(available, where).describe()}; "
                     f"options: {'; '.join(options)}")


def estimate_sharded(
    n_nodes: int,
    n_edges: int,
    n_features: int,
    n_classes: int,
    *,
    parts: int,
    exchange_rows: int | None = None,
    hidden: int = 16,
    layers: int = 2,
    feature_nnz: int | None = None,
    device: bool = False,
) -> MemoryEstimate:
    """Estimate the peak bytes ONE of ``parts`` devices holds in sharded training
    (:mod:`jaxgcn.distributed`), with the edges spread evenly over the row blocks. On an accelerator
    (``device``) each block is neighbour lists, its own and its transpose's (gathers both ways:
    :func:`jaxgcn.distributed.partition` with ``lists``), with their gather buffers, and no host runtime.

    ``exchange_rows`` is the number of node rows a device receives for one propagation:
    ``parts * L`` with the all-gather (the default), ``L + parts * H`` with the halo exchange
    (:func:`jaxgcn.distributed.partition_stats`).

    >>> one = estimate_sharded(1_000_000, 20_000_000, 100, 47, parts=1, hidden=128)
    >>> four = estimate_sharded(1_000_000, 20_000_000, 100, 47, parts=4, hidden=128)
    >>> round(one.parts["adjacency"] / four.parts["adjacency"], 1), four.parts["exchange"] == one.parts["exchange"]
    (3.9, True)
    """
    f4 = 4
    local = -(-n_nodes // parts)
    rows = parts * local if exchange_rows is None else exchange_rows
    widths = [n_features] + [hidden] * (layers - 1) + [n_classes]
    local_edges = -(-n_edges // parts)
    if feature_nnz is None:
        features = 2 * local * n_features * f4  # the block and its dropped copy
    else:
        local_nnz = -(-feature_nnz // parts)
        features = local_nnz * 6 * f4 + (local + n_features + 2) * f4  # values, dropped values, pattern + transpose
    if device:  # the block's lists both ways (padded slots: at most twice its entries), self-loops
        lists, messages = _gather_bytes(local, local_edges, max(widths[1:]), False, 2 * 2 * local_edges)
        adjacency = lists + local * f4
    else:  # the block's CSR (cols, values) and its transposed pattern (rows, permutation), self-loops, pointers
        adjacency, messages = local_edges * 4 * f4 + (local + rows + 2) * f4 + local * f4, 0
    exchange = 2 * rows * max(widths[1:]) * f4  # the received rows and their gradient
    activations = sum(4 * local * w * f4 for w in widths[1:]) + 2 * local * n_classes * f4
    n_params = sum(a * b for a, b in zip(widths[:-1], widths[1:]))
    params = 6 * n_params * f4
    parts_ = {"features": features, "adjacency": adjacency, "exchange": exchange, "messages": messages,
              "activations": activations, "params": params, "runtime": 0 if device else RUNTIME_BYTES}
    return MemoryEstimate(parts_, sum(parts_.values()))
