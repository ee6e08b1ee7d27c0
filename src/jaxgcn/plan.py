"""THE execution plan: every decision about how a training job runs, made once, before anything
compiles (:func:`resolve`).

- the platform it runs on (:func:`current_platform`: cpu, gpu or tpu), which every decision below
  reads: on an accelerator no scatter (``dense`` or ``gather``), dense features, the runs its memory
  holds, full float32 matmuls, and the device's own memory as the budget (docs/tpu.md);
- the concrete backend, never ``auto`` (:func:`backend_for`, asked before the graph is laid out:
  :func:`jaxgcn.datasets.prepare` lays it out for the backend decided here);
- whether the C++ kernel runs the products (the propagation, the first layer's pair, the per-run
  dense products): where the backend is ``csr`` and the kernel can run here. ``--backend
  segment`` means no C++ kernel anywhere;
- ``aggregate_first`` (``--aggregate-first auto``: dense inputs with 2 x features < 3 x hidden);
- how many runs one execution of a batched program trains, and over how many devices;
- the peak-memory estimate of exactly that execution, and the line that says why ``auto`` fell
  back from the kernel.

An :class:`~jaxgcn.core.models.Execution` is a request (``backend`` may be ``auto``); the engine runs
the :class:`~jaxgcn.core.models.Decided` execution the plan makes of it (:func:`concrete`): a concrete
``backend``, ``aggregate_first`` and the :class:`~jaxgcn.core.ops.Ops` that compute the products
(:func:`ops_for`: XLA's, the C++ kernel's or a registered backend's). Nothing under
``jit`` asks whether the kernel exists, and only the plan and the kernel's own modules ask at all.
Each public entry point (``fit``, ``fit_runs``, ``fit_sharded``, ``compile_runner``, inference)
decides the execution it is given once, at its top (:func:`concrete`), so a library user gets the
same decisions as the command line; the engine below them receives decided values and refuses an
undecided one (:func:`require_decided`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Sequence

import jax
import numpy as np

from jaxgcn.core import hyper, ops as ops_
from jaxgcn.core.data import with_focus
from jaxgcn.host import memory
from jaxgcn.core.layers import is_sparse
from jaxgcn.host.memory import MemoryEstimate
from jaxgcn.core.models import Decided, Execution, GCNConfig
from jaxgcn.native.csr import UNAVAILABLE, kernel_status  # THE availability oracle: asked here only
from jaxgcn.core.ops import Ops
from jaxgcn.core.propagate import BACKENDS, DENSE_MAX_NODES, DENSE_MIN_DENSITY, graph_backend

# Runs per device in one execution of the program: a power of two (XLA's CPU loops over a
# [.., R] axis of 12 ran 1.5-2x slower per element than over 8 or 16) with R x hidden about 256
# floats, the width of one gathered row of the first layer's weights. Measured on Cora (2-core
# CPU, Kipf's stopping, fit_runs, ms per run-epoch, before the evaluation/next-step pair and the
# masked loss): hidden 16: 0.540 / 0.497 at R = 8 / 16; hidden 32: 1.005 / 0.961 / 0.974 at
# R = 4 / 8 / 16; hidden 64: 1.748 / 1.841 / 2.104 at R = 4 / 8 / 16 (now 0.413 / 0.375 at
# hidden 16, R = 8 / 16: benchmarks/profile_epoch.py). Larger batches run as repeated executions
# of the same compiled program.
ROW_FLOATS = 256
MAX_RUNS_PER_DEVICE = 16
AGGREGATE_FIRST = ("auto", "on", "off")


def runs_per_device_for(hidden: int) -> int:
    """The default batch of ``fit_runs``: the largest power of two <= 256 / ``hidden``, at most 16.

    >>> [runs_per_device_for(h) for h in (8, 16, 32, 64, 512)]
    [16, 16, 8, 4, 1]
    """
    fit = max(1, ROW_FLOATS // max(1, int(hidden)))
    return min(MAX_RUNS_PER_DEVICE, 1 << (fit.bit_length() - 1))


# On an accelerator (TPU, GPU) XLA's scatter, which `segment` and `bcoo` (and a sparse first-layer
# product) run on, is the bottleneck: 1M nodes / 25M nonzeros / 16 columns, one propagation took 3.1 s
# as segment_sum on a TPU v5e against 0.17 s for a bare row gather. So `auto` there never picks them:
# dense Â on the MXU while n² float32 fits ACCEL_DENSE_BYTES (Cora's 2708² is 29 MB), else the
# scatter-free neighbour lists (`gather`); a TPU job of many runs: `gather` (LISTS_MIN_RUNS).
ACCEL_DENSE_BYTES = 2**30
# A TPU job of this many runs trains on `gather` with feature lists (v5e: 100 Cora seeds 0.89 s against
# 2.7 s on dense Â and features; one run's epoch 1.15 ms against 0.45 ms: bench_accelerator.py).
LISTS_MIN_RUNS = 8
ACCEL_MAX_RUNS = 128  # runs per program on an accelerator, memory permitting (one program for 100 seeds)


def current_platform() -> str:
    """The platform JAX runs on here: ``cpu``, ``gpu`` or ``tpu`` (``jax.default_backend()``)."""
    return jax.default_backend()


def backend_for(requested: str, n_nodes: int, n_edges: int, platform: str | None = None, runs: int = 1) -> str:
    """THE backend decision: ``requested`` made concrete for a cleaned graph of ``n_nodes`` nodes and
    ``n_edges`` directed off-diagonal edges on ``platform`` (None: :func:`current_platform`); explicit
    names are validated and kept.

    On the CPU, ``auto`` is ``dense`` for graphs of at most 1,024 nodes where at least 10% of the node
    pairs are edges; otherwise ``csr`` where the fused kernel runs (a C++ compiler; it builds on
    first use), else ``segment``. On an accelerator it is ``dense`` while the n x n float32 adjacency
    takes at most :data:`ACCEL_DENSE_BYTES`, else ``gather``: never a scatter; a job of at least
    :data:`LISTS_MIN_RUNS` ``runs`` on a TPU: ``gather`` (with feature lists). ``csr`` asked for where
    the kernel cannot run is refused, with why.

    >>> backend_for("auto", 100, 2000, "cpu"), backend_for("auto", 100, 400, "cpu") in ("csr", "segment")
    ('dense', True)
    >>> backend_for("auto", 2708, 10556, "tpu"), backend_for("auto", 1_000_000, 25_000_000, "tpu")
    ('dense', 'gather')
    """
    platform = platform or current_platform()
    if requested == "auto" and platform == "tpu" and runs >= LISTS_MIN_RUNS:
        return "gather"
    if requested == "auto" and platform != "cpu":
        return "dense" if 4 * n_nodes * n_nodes <= ACCEL_DENSE_BYTES else "gather"
    if requested == "auto":
        if n_nodes <= DENSE_MAX_NODES and n_edges >= DENSE_MIN_DENSITY * n_nodes * n_nodes:
            return "dense"
        return "csr" if kernel_status()[0] else "segment"
    if requested not in BACKENDS:
        raise ValueError(f"backend {requested!r} is not one of {('auto', *BACKENDS)}")
    if requested == "csr":
        _require_kernel()
    return requested


def _require_kernel() -> None:
    """Refuse backend ``csr`` where the C++ kernel cannot run, with the oracle's reason and the fix."""
    ok, reason = kernel_status()
    if not ok:
        raise ValueError(UNAVAILABLE.format(reason))


def planned(execution: Execution | Decided | Plan, graph: Any = None) -> Decided:
    """THE decision a public entry point makes once, at its top, before it builds anything: the
    request ``execution`` made a :class:`~jaxgcn.core.models.Decided` (a decided one is returned as it
    is; a :class:`Plan`, its decided execution). The backend becomes concrete (``auto``: the layout
    ``graph`` was prepared with; a sharded run's row blocks, ``graph=None``: ``csr``) and the ops are
    chosen: the C++ kernel's where the backend is ``csr`` and the kernel can run here (the deprecated
    ``Execution(kernels=False)`` keeps it off)."""
    if isinstance(execution, Plan):
        return execution.execution
    if isinstance(execution, Decided):
        return execution
    backend = execution.backend
    if backend == "auto":
        backend = "csr" if graph is None else graph_backend(graph)
    request = dataclasses.replace(execution, backend=backend)
    kernel = backend == "csr" and execution.kernels is not False and kernel_status()[0]
    ops = ops_.for_execution(request, kernel, current_platform())
    return Decided(backend, ops, execution.dropout_rng, execution.chunk_edges,
                   execution.aggregate_first, precision_for(execution.precision, current_platform()))


def precision_for(requested: str, platform: str) -> str:
    """THE float32 matmul precision decision: ``auto`` is ``highest`` on an accelerator (a TPU's
    default is one bfloat16 pass: the CPU's answers need full float32) and ``default`` on the CPU,
    where the setting changes no result and the programs stay as they were; an explicit value is kept.

    >>> precision_for("auto", "tpu"), precision_for("auto", "cpu"), precision_for("high", "tpu")
    ('highest', 'default', 'high')
    """
    if requested != "auto":
        return requested
    return "default" if platform == "cpu" else "highest"


concrete = planned  # the name the entry points (fit, fit_runs, fit_sharded, ...) call it by: one function


def require_decided(execution: Any) -> Decided:
    """``execution`` as it is, where the plan decided it (a :class:`~jaxgcn.core.models.Decided`); else a
    ValueError: an engine function was handed an execution nobody planned (it would silently run
    without the kernel, or on a backend other than the one the graph was prepared for)."""
    if not isinstance(execution, Decided):
        raise ValueError(f"execution backend={execution.backend!r} kernels={execution.kernels!r} reached the engine "
                         "undecided; decide it first with jaxgcn.plan.concrete(execution, graph)")
    return execution


def ops_for(execution: Execution | Decided, graph: Any = None) -> Ops:
    """THE choice of what computes a run's products (:class:`jaxgcn.core.ops.Ops`): a registered backend's
    ops, the C++ kernel's (:func:`jaxgcn.core.ops.native`) where it runs the products, else XLA's
    (:func:`planned`)."""
    return planned(execution, graph).ops


def kernel_available() -> tuple[bool, str]:
    """Whether the C++ kernel can run here, and why not: what the CLI and the sharded path ask the plan
    (:func:`jaxgcn.native.csr.kernel_status`, the one oracle, asked only here)."""
    return kernel_status()


def aggregate_first(choice: str, n_features: int, hidden: int, dense: bool) -> bool:
    """THE ``--aggregate-first`` rule: the first layer computes ``(A X) W`` when its input is dense
    and ``choice`` is ``on``, or ``auto`` and 2 x features < 3 x hidden (its backward pass then needs
    no propagation). Sparse inputs always take ``A (X W)``.

    >>> aggregate_first("auto", 16, 16, True), aggregate_first("auto", 1433, 16, True)
    (True, False)
    >>> aggregate_first("on", 1433, 16, False)
    False
    """
    if choice not in AGGREGATE_FIRST:
        raise ValueError(f"aggregate_first={choice!r} must be one of {AGGREGATE_FIRST}")
    return dense and {"on": True, "off": False, "auto": 2 * n_features < 3 * hidden}[choice]


def with_first_layer(execution: Decided, choice: str, hidden: int, n_features: int, dense: bool) -> Decided:
    """``execution`` with the ``aggregate_first`` ``choice`` decided for an input of ``n_features`` columns."""
    return dataclasses.replace(execution, aggregate_first=aggregate_first(choice, n_features, hidden, dense))


def run_mesh(n_devices: int | None = None) -> jax.sharding.Mesh | None:
    """A 1-D mesh named ``runs`` over this process's devices, or None with a single device (in a
    multi-process job each process runs its own share of the runs: :func:`jaxgcn.sweep.run_grid`)."""
    devices = jax.local_devices()[: n_devices or None]
    return jax.sharding.Mesh(np.asarray(devices), ("runs",)) if len(devices) > 1 else None


def batch_mesh(n_runs: int, execution: Execution, n_devices: int | None,
               graph: Any = None) -> jax.sharding.Mesh | None:
    """The run-axis mesh for a batch, or None. The C++ kernel already uses every core of the CPU,
    and XLA cannot partition a custom call (it would replicate it on each device: measured 0.79 s
    per run on 2 CPU devices against 0.55 s on one), so a batch the kernel runs stays on one device."""
    if n_runs <= 1 or planned(execution, graph).kernels:
        return None
    return run_mesh(n_devices)


def _on_runs_axis(mesh: jax.sharding.Mesh, ndim: int, axis: int | None) -> jax.sharding.NamedSharding:
    """A leaf of ``ndim`` axes with its ``axis`` (None: none) split over the mesh's ``runs`` axis."""
    spec = [None] * ndim
    if axis is not None:
        spec[axis] = "runs"
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))


def on_runs(tree: Any, mesh: jax.sharding.Mesh | None, axes: Any = 0) -> Any:
    """``tree`` placed with each leaf's run axis (``axes``: one for all, or a tree of them) on the
    mesh's ``runs`` axis (as it is without a mesh)."""
    if mesh is None:
        return tree
    if isinstance(axes, int):
        return jax.tree.map(lambda leaf: jax.device_put(leaf, _on_runs_axis(mesh, leaf.ndim, axes)), tree)
    return jax.tree.map(lambda leaf, axis: jax.device_put(leaf, _on_runs_axis(mesh, leaf.ndim, axis)), tree, axes)


def replicated(tree: Any, mesh: jax.sharding.Mesh | None) -> Any:
    """``tree`` copied onto every device of ``mesh`` (as it is without a mesh)."""
    if mesh is None:
        return tree
    return jax.device_put(tree, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))


def run_shardings(tree: Any, axes: Any, mesh: jax.sharding.Mesh) -> Any:
    """The sharding of each leaf of ``tree`` (None leaves kept) with its run axis in ``axes`` over ``runs``."""
    return jax.tree.map(lambda leaf, axis: None if leaf is None else _on_runs_axis(mesh, leaf.ndim, axis),
                        tree, axes, is_leaf=lambda x: x is None)


def features_layout(backend: str, n_nodes: int, n_features: int, platform: str | None = None,
                    free: int | None = None, nnz: int | None = None, runs: int = 1) -> str:
    """How sparse input features are laid out for ``backend`` on ``platform`` (None: here): ``csr`` for
    the kernel, ``bcoo`` on the CPU. On an accelerator, where a sparse product is a scatter: ``dense``
    where the n x features float32 matrix takes at most a quarter of the ``free`` device bytes (None:
    :func:`jaxgcn.host.memory.budget`), one product on the MXU; else ``lists``
    (:mod:`jaxgcn.core.feature_lists`: the product and its gradient as gathers). On a TPU, ``lists``
    for a job of at least :data:`LISTS_MIN_RUNS` ``runs`` wherever the Pallas kernel of their sums holds
    them (:func:`jaxgcn.core.pallas_gather.lists_kernel_fits` of the ``nnz``).

    On a TPU v5e, 100 Cora seeds: 2.7 s dense, 4.6 s as lists of XLA's gathers, 0.89 s with the kernel.

    >>> features_layout("gather", 2708, 1433, "tpu", 16 * 2**30), features_layout("segment", 2708, 1433, "cpu")
    ('dense', 'bcoo')
    >>> features_layout("gather", 2708, 1433, "tpu", 16 * 2**30, nnz=49_216, runs=100)
    'lists'
    >>> features_layout("dense", 2708, 1433, "tpu", 2**20)
    'lists'
    """
    if backend == "csr":
        return "csr"
    platform = platform or current_platform()
    if platform == "cpu":
        return "bcoo"
    if platform == "tpu" and runs >= LISTS_MIN_RUNS and nnz is not None:
        from jaxgcn.core.pallas_gather import lists_kernel_fits

        if lists_kernel_fits(n_nodes, n_features, nnz):
            return "lists"
    free = memory.budget().free if free is None else free
    return "dense" if 4 * n_nodes * n_features <= free // 4 else "lists"



def accelerator_runs(n_runs: int, per_run_bytes: int, free: int) -> int:
    """Runs per program on an accelerator: all of ``n_runs`` up to :data:`ACCEL_MAX_RUNS`, as many as
    take half of the ``free`` device bytes at ``per_run_bytes`` each (a run axis R wide costs the chip
    little: R x hidden-wide rows are gathered at the cost of one), in programs of equal size (the last
    one is padded to it: 100 runs of which 76 fit are two programs of 50, not 76 and 24 padded to 76).

    >>> accelerator_runs(100, 10 * 2**20, 16 * 2**30), accelerator_runs(100, 2**30, 16 * 2**30)
    (100, 8)
    >>> accelerator_runs(100, 100 * 2**20, 15 * 2**30)
    50
    """
    fit = max(1, min(n_runs, ACCEL_MAX_RUNS, (free // 2) // max(1, per_run_bytes)))
    return -(-n_runs // -(-n_runs // fit))


def _per_run_bytes(hidden: int, graph: Any, n_features: int | None) -> int:
    """The bytes one more run of a batch adds on ``graph`` (:func:`jaxgcn.host.memory.estimate`, with the
    hidden width standing in for the classes it is not given), and with dense input features of
    ``n_features`` columns, its dropped copy and that copy's gradient-pass twin."""
    n = int(graph.n_nodes)
    return memory.per_run_bytes(n, int(graph.n_edges), hidden, hidden, hidden=hidden) + \
        (8 * n * n_features if n_features else 0)


def slice_size(n_runs: int, hidden: int, execution: Execution, n_devices: int | None, graph: Any,
               runs_per_device: int | None, n_features: int | None = None) -> int:
    """The runs of one slice of ``fit_runs``: runs per device times the run-axis mesh size (on the CPU,
    :func:`runs_per_device_for`; on an accelerator, what its memory holds: :func:`accelerator_runs`)."""
    mesh = batch_mesh(n_runs, execution, n_devices, graph)
    if runs_per_device is None and graph is not None and current_platform() != "cpu":
        per_device = -(-n_runs // (mesh.size if mesh is not None else 1))
        per_run = _per_run_bytes(hidden, graph, n_features)
        runs_per_device = accelerator_runs(per_device, per_run, memory.budget().free)
    if runs_per_device is None:
        runs_per_device = runs_per_device_for(hidden)
    return max(1, runs_per_device) * (mesh.size if mesh is not None else 1)


def runs_per_program(n_runs: int, hidden: int, execution: Execution, n_devices: int | None = None,
                     graph: Any = None, runs_per_device: int | None = None, n_features: int | None = None) -> int:
    """How many runs ``fit_runs`` executes together in one program (the last slice is padded to
    the same size): what a memory estimate must plan for. Arguments as ``fit_runs`` (``n_features``:
    the columns of dense input features, None for sparse ones)."""
    return min(n_runs, slice_size(n_runs, hidden, execution, n_devices, graph, runs_per_device, n_features))


def program_key(entry: Any) -> tuple[GCNConfig, Any]:
    """The configs (model, train) of the program an entry (:class:`jaxgcn.training.runs.Entry`) runs
    in: its own, with the per-run fields (learning rate, weight decay, dropout: those
    :data:`jaxgcn.core.hyper.PER_RUN` says vary) set to their defaults, since they are inputs of the compiled program
    (:class:`jaxgcn.core.models.RunInputs`). Entries with equal keys share one program; any other
    difference (hidden width, epochs, L2 scope, ...) separates them. Runs of several widths could
    share one program padded to the widest, but then every run costs the widest: a 16/32/64 grid
    on Cora took 114 s padded to 64 and far less as one program per width (compiling one is ~1 s).

    >>> from jaxgcn.training.runs import Entry, TrainConfig
    >>> a, b = Entry(GCNConfig(dropout=0.1), TrainConfig(lr=0.05), 0), Entry(GCNConfig(), TrainConfig(), 1)
    >>> program_key(a) == program_key(b), program_key(a) == program_key(b._replace(model=GCNConfig(hidden=32)))
    (True, False)
    """
    return hyper.blank(entry.model, "model"), hyper.blank(entry.train, "train")


def program_of(entries: Sequence[Any]) -> tuple[GCNConfig, Any]:
    """The one program's configs of ``entries`` (:func:`program_key`), or a ValueError naming the
    first field in which two of them differ (group them first: :func:`jaxgcn.sweep.run_entries`):
    what one compiled program of :func:`jaxgcn.training.runs.fit_runs` runs."""
    if not entries:
        raise ValueError("entries: give at least one run")
    key = program_key(entries[0])
    for j, entry in enumerate(entries):
        other = program_key(entry)
        if other == key:
            continue
        for name, mine, theirs in (("model", key[0], other[0]), ("train", key[1], other[1])):
            for field in dataclasses.fields(mine):
                a, b = getattr(mine, field.name), getattr(theirs, field.name)
                if a != b:
                    raise ValueError(f"entries[0] and entries[{j}] differ in {name}.{field.name} ({a!r} vs {b!r}): "
                                     f"one program shares everything but {', '.join(hyper.varying())}, seed and "
                                     "split; "
                                     "run them as separate groups (jaxgcn.sweep.run_entries does)")
    return key


class Plan(NamedTuple):
    """How a training job runs (:func:`resolve`, :func:`sharded`): what the application hands the
    engine (``fit``, ``fit_runs``, ``fit_sharded``, the sweep: ``execution=plan``).

    Attributes:
        execution: the decided execution (:class:`~jaxgcn.core.models.Decided`): concrete backend (never
            ``auto``), the ops and ``aggregate_first`` decided: what the engine runs.
        runs: the runs one execution of the program trains (1 for a single run).
        memory: the peak-memory estimate of that execution.
        note: why ``auto`` kept off the C++ kernel (one line), or None.
        platform: the platform JAX runs on (``jax.default_backend()``: cpu, gpu, tpu).
        focused: the data the plan read, with the row plans it counted for its memory estimate
            (:class:`Focused`), which the run takes instead of building them again (:func:`focused`);
            None where the ops take no row plans.
    """

    execution: Decided
    runs: int
    memory: MemoryEstimate
    note: str | None
    platform: str = "cpu"
    focused: Focused | None = None

    @property
    def backend(self) -> str:
        """The concrete propagation backend."""
        return self.execution.backend

    @property
    def ops(self) -> Ops:
        """What computes the products (:func:`ops_for`): XLA's, the kernel's or a registered backend's."""
        return self.execution.ops

    @property
    def precision(self) -> str:
        """The float32 matmul precision every program runs in (:func:`precision_for`)."""
        return self.execution.precision


def layout_facts(graph: Any) -> dict[str, Any]:
    """What a memory estimate reads of a laid-out graph (:func:`jaxgcn.host.memory.estimate`'s keywords):
    whether the adjacency is symmetric (no transposed copy: the CSR's flag, the neighbour lists'
    missing transpose), and the neighbour lists' padded slots."""
    lists = graph.lists
    symmetric = (graph.csr is None or graph.csr.symmetric) and (lists is None or lists.transpose is None)
    return {"symmetric": symmetric, "list_slots": None if lists is None else lists.slots}


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Focused:
    """``data``: ``source`` (the very object a :class:`Plan` read) focused for a model of ``hops`` layers
    with the row plans its ops take (:func:`jaxgcn.core.data.with_focus`). Compared by identity: it holds
    the data's arrays."""

    source: Any
    hops: int
    data: Any


def _row_planned(data: Any, execution: Decided, layers: int) -> Focused | None:
    """``data`` focused with the row plans the decided ``execution``'s ops take (on an accelerator,
    ``gather`` with the hash's dropout), or None where they take none."""
    ops = execution.ops
    if execution.backend not in ("gather", "dense") or not ops.row_plans:  # the csr kernel's: CSR rows
        return None
    return Focused(data, layers, with_focus(data, layers, ops.prepare))


def layer_rows(data: Any, execution: Decided, layers: int) -> memory.RowPlans | None:
    """What the row plans of a ``gather`` run make each of ``layers`` layers compute, in the larger of a
    training step's and an evaluation's pass (:class:`jaxgcn.host.memory.RowPlans`), where the decided
    ``execution``'s ops take them (on an accelerator, with the hash's dropout); None where every layer
    computes every row. The plans are built here as the run builds them (the ops' ``prepare`` of the
    focused data: :func:`jaxgcn.core.gather.prepare`), so their rows and slots are exact, where counting
    rows apart from the plans would be a second copy of their rule; :func:`resolve` hands the plans it
    builds to the run (:func:`focused`), so a job builds them once. The csr kernel's row plans (CSR rows
    on the CPU) keep the estimate over every row."""
    return _rows_of(_row_planned(data, execution, layers), execution)


def _rows_of(made: Focused | None, execution: Decided) -> memory.RowPlans | None:
    """:func:`layer_rows` of the row plans ``made`` holds."""
    aux = None if made is None else made.data.aux
    if aux is None:
        return None
    layers, n, plans = made.hops, int(made.data.graph.n_nodes), (aux.train_rows, aux.eval_rows)
    mats = [[None] * layers if p is None else list(p.mats) for p in plans]  # None: every row
    dense = execution.backend == "dense"  # rows of Â as dense matrices (gather.dense_rows), else lists
    rows = tuple(max(n if m[i] is None else len(m[i] if dense else m[i].order) for m in mats) for i in range(layers))
    slots = tuple(0 if dense or any(m[i] is None for m in mats) else max(_larger_direction(m[i]) for m in mats)
                  for i in range(layers))
    held = sum(leaf.nbytes for leaf in jax.tree.leaves(plans))
    return memory.RowPlans(rows, slots, held, execution.aggregate_first)


def focused(data: Any, hops: int, execution: Decided, plan: Any = None) -> Any:
    """``data`` focused for a model of ``hops`` layers with what the decided ``execution``'s ops
    precompute of it (:func:`jaxgcn.core.data.with_focus`): what ``fit`` and ``fit_runs`` train on. Built
    once per job: where ``plan``, the :class:`Plan` the entry point was handed (``execution`` is its
    decided one), built them from this very ``data`` (the same object) for this depth, for its memory
    estimate, the run takes those (a ``gather`` plan's row plans: a host pass over the neighbourhoods of
    every node a run reads); otherwise they are built here."""
    made = plan.focused if isinstance(plan, Plan) else None
    if made is not None and made.source is data and made.hops == hops:
        return made.data
    return with_focus(data, hops, execution.ops.prepare)


def _larger_direction(lists: Any) -> int:
    """The padded slots of ``lists`` or of their transpose's, whichever hold more (the larger gather of a
    row plan's product: forward over its own lists, its gradient over the transpose's)."""
    transposed = lists.transpose.slots if lists.transpose is not None else 0
    return max(lists.slots - transposed, transposed)


def resolve(execution: Execution, data: Any, model_config: GCNConfig, n_classes: int, *, n_runs: int = 1,
            devices: int | None = None, aggregate: str = "off", n_nodes: int | None = None) -> Plan:
    """THE plan of a job training ``n_runs`` runs of ``model_config`` on ``data`` (a prepared
    :class:`~jaxgcn.core.data.TrainData`) on ``devices`` devices (None: all of this process's).

    ``aggregate`` is the ``--aggregate-first`` choice (``auto``, ``on``, ``off``).
    """
    x, graph = data.x, data.graph
    n_features, dense = int(x.shape[1]), not is_sparse(x)
    requested = execution.backend
    execution = with_first_layer(planned(execution, graph), aggregate, model_config.hidden, n_features, dense)
    made = _row_planned(data, execution, model_config.layers)  # built once: the run takes them (focused)
    runs = 1 if n_runs <= 1 else runs_per_program(n_runs, model_config.hidden, execution, devices, graph,
                                                  n_features=n_features if dense else None)
    est = memory.estimate(int(n_nodes if n_nodes is not None else x.shape[0]), graph.n_edges, n_features, n_classes,
                   hidden=model_config.hidden, layers=model_config.layers, backend=execution.backend,
                   feature_nnz=None if dense else int(x.nse), chunk_edges=execution.chunk_edges, runs=runs,
                   row_plans=_rows_of(made, execution), device=current_platform() != "cpu", **layout_facts(graph))
    return Plan(execution, runs, est, fallback_note(requested, execution.backend), current_platform(), made)


def sharded(execution: Execution, estimate: MemoryEstimate) -> Plan:
    """THE plan of one run with the graph's rows sharded over devices: each row block is a CSR
    product (``auto``: ``csr``; the kernel where it runs), ``execution``'s ``aggregate_first`` (decided
    for the blocks' input: :func:`with_first_layer`), and the per-device ``estimate``."""
    return Plan(planned(execution), 1, estimate, None, current_platform())


def fallback_note(requested: str, backend: str) -> str | None:
    """The one line that says why the ``requested`` backend ``auto`` became ``segment``: the C++
    kernel cannot run here (e.g. ``backend segment: no C++ compiler found (...)``); None otherwise."""
    if requested != "auto" or backend != "segment":
        return None
    ok, reason = kernel_status()
    return None if ok else f"backend segment: {reason}"


def cpu_devices(backend: str, devices: int | None, cores: int | None, batched: bool) -> int | None:
    """How many CPU devices a process should expose before JAX starts (None: leave JAX's default):
    for a batch, one per core (``devices`` when given), so XLA spreads the run axis over them (the
    gather/scatter kernels of one device use one core: measured 1.6x on 2 cores); but one device
    when the C++ kernel runs the batch, as it already uses every core. The kernel is looked up
    without starting JAX (its cached build or recorded failure: a compiler that is present but
    fails still gets the runs spread over devices). ``cores``: those this process may use (None:
    :func:`jaxgcn.host.memory.available_cpus`)."""
    cores = devices or cores or memory.available_cpus()
    if not batched or cores < 2:
        return None
    from jaxgcn.native.csr import kernel_possible

    if backend in ("auto", "csr") and not devices and kernel_possible():
        return None
    return cores


def batch_bytes(data: Any, model_config: GCNConfig, n_runs: int, n_classes: int,
                execution: Execution = Execution()) -> int:
    """Peak bytes that ``n_runs`` runs of a batch add on top of the shared data: the per-run parts of
    :func:`jaxgcn.host.memory.estimate` (activations, message buffers, params with optimizer state)."""
    n, f = data.x.shape
    csr = data.graph.csr
    kwargs = dict(hidden=model_config.hidden, layers=model_config.layers,
                  backend=planned(execution, data.graph).backend,
                  feature_nnz=int(data.x.nse) if hasattr(data.x, "nse") else None,
                  chunk_edges=execution.chunk_edges, symmetric=csr is None or csr.symmetric)
    return memory.per_run_bytes(int(n), data.graph.n_edges, int(f), n_classes, **kwargs) * n_runs


def require_sharded(execution: Execution) -> None:
    """A run with the graph's rows sharded over devices aggregates each row block its own way (a CSR
    product on a CPU, neighbour lists on a TPU or GPU): another backend is refused, ``csr`` needs the kernel."""
    backend = execution.backend
    if backend not in ("auto", "csr") or execution.chunk_edges is not None:
        raise ValueError(f"--shard-graph aggregates each row block its own way (a CSR product by the fused kernel "
                         f"on a CPU, neighbour lists on a TPU or GPU); drop --backend {backend}"
                         + (" and --chunk-edges" if execution.chunk_edges else ""))
    if backend == "csr":
        _require_kernel()


def exchange_for(choice: str, stats: dict[str, Any]) -> str:
    """How the devices of a sharded run exchange rows, for a partition's statistics
    (:func:`jaxgcn.distributed.partition_stats`): ``auto`` is halo when it receives fewer rows.

    >>> exchange_for("auto", {"halo_rows": 10, "all_gather_rows": 30}), exchange_for("all_gather", {})
    ('halo', 'all_gather')
    """
    if choice == "auto":
        return "halo" if stats["halo_rows"] < stats["all_gather_rows"] else "all_gather"
    return choice


DEEP_LAYERS = 32  # from this depth on the compile time is worth a note
COMPILE_SECONDS_PER_LAYER = 0.15  # measured: Cora, 2 to 64 layers, 1.7 to 11.1 s (2-core Zen 3 EPYC)


def compile_note(model_config: GCNConfig) -> str | None:
    """A note before a deep model compiles (XLA compiles every layer's ops: the time grows with
    depth, and nothing is printed meanwhile), or None for the usual depths.

    >>> compile_note(GCNConfig(layers=2)) is None
    True
    >>> compile_note(GCNConfig(layers=1000))[:60]
    'note: 1000 layers: compiling takes about 150 s or more (0.15'
    """
    layers = model_config.layers
    if layers < DEEP_LAYERS:
        return None
    return (f"note: {layers} layers: compiling takes about {COMPILE_SECONDS_PER_LAYER * layers:.0f} s or more "
            f"({COMPILE_SECONDS_PER_LAYER} s per layer on a 2-core CPU; each layer's ops are compiled), before the "
            "first epoch")
