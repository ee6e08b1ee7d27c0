"""The GCN model (Kipf & Welling 2017) as a pure ``(init, apply)`` pair built from a config."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxgcn.core import ops as ops_
from jaxgcn.core.graph import Graph
from jaxgcn.core import hyper
from jaxgcn.core.layers import Features, Params, hash_bits, insert_axes, is_sparse
from jaxgcn.core.ops import Ops, Propagate, spmm_rows
from jaxgcn.core.propagate import BACKENDS

# Propagate: (graph, x [n, width]) -> Â·x [n, width], how a layer aggregates (jaxgcn.core.ops). The
# default is the ops' (the execution's backend); sharded training passes its block exchange.


@dataclasses.dataclass(frozen=True)
class GCNConfig:
    """The ARCHITECTURE of a GCN: everything a checkpoint needs to rebuild the model, nothing about
    how it runs (that is :class:`Execution`). Defaults are the paper's: 2 layers, 16 hidden units,
    dropout 0.5, and no bias (Kipf's reference code; measured here on Cora over 20 seeds: 81.7%
    without bias, 80.6% with it, because with a bias the early-stopping rule fires ~50 epochs sooner).

    Attributes:
        hidden: width of every hidden layer.
        layers: number of graph-convolution layers (>= 1).
        dropout: probability to DROP an input entry of each layer during training.
        bias: add a bias after each propagation (off by default, as in the reference code).
        residual: hidden layers add their input (through a linear projection when widths differ).
        layer_norm: layer normalization before each hidden activation (for deeper stacks).
    """

    hidden: int = 16
    layers: int = 2
    dropout: float = 0.5
    bias: bool = False
    residual: bool = False
    layer_norm: bool = False

    def __post_init__(self) -> None:
        if self.layers < 1:
            raise ValueError(f"layers={self.layers}: a GCN needs at least 1 layer")
        if self.hidden < 1:
            raise ValueError(f"hidden={self.hidden}: the hidden width must be >= 1")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout={self.dropout}: the drop probability must be in [0, 1)")


# float32 matmul precisions an execution may ask for: ``auto`` is decided per platform by the plan
PRECISIONS = ("auto", "default", "high", "highest")
# what each decided precision computes, in the words `jaxgcn info` and train's notes use
PRECISION_MEANING = {"default": "XLA's default (one bfloat16 pass on a TPU; float32 on the CPU)",
                     "high": "3 bfloat16 passes", "highest": "full float32"}


@dataclasses.dataclass(frozen=True)
class Execution:
    """HOW a model runs: choices that leave the model, and (except ``dropout_rng``) its results up to
    float rounding, unchanged. A checkpoint records them for ``--resume`` but does not need them to
    rebuild the model.

    Attributes:
        backend: propagation backend: ``dense``, ``segment``, ``bcoo``, ``csr``, ``gather``, or ``auto`` (the
            default): whatever layout the graph was prepared with (see :func:`jaxgcn.prepare`).
        dropout_rng: ``"hash"`` (fast counter-based masks) or ``"jax"`` (``jax.random.bernoulli``):
            another random stream, so other (equally valid) dropout masks.
        chunk_edges: edge block of the ``segment`` backend (bounds its message buffer); None: all.
        aggregate_first: the first layer computes ``(Â · drop(X)) · W`` instead of ``Â · (drop(X) · W)``
            when its input is dense. Equal in exact arithmetic; cheaper when the input is narrower
            than the layer (the input needs no gradient, so the propagation runs forward only:
            ``--aggregate-first auto`` turns it on when 2 x features < 3 x hidden).
        kernels: DEPRECATED (kept one release for library callers): ``False`` asks the plan for no
            C++ kernel; ``True`` or ``None``: the plan decides (:func:`jaxgcn.plan.concrete`). Nothing
            but the plan reads it; the engine runs a :class:`Decided` execution.
        precision: float32 matmul precision (:data:`PRECISIONS`): ``default`` (XLA's: one bfloat16
            pass on a TPU), ``high`` (3 bfloat16 passes), ``highest`` (full float32), or ``auto``
            (the default): ``highest`` on a TPU or GPU, so float32 runs give the CPU's answers, and
            ``default`` on the CPU, where the setting changes no result (:func:`jaxgcn.plan.precision_for`).
    """

    backend: str = "auto"
    dropout_rng: str = "hash"
    chunk_edges: int | None = None
    aggregate_first: bool = False
    kernels: bool | None = None
    precision: str = "auto"

    def __post_init__(self) -> None:
        if self.backend not in ("auto", *BACKENDS, *ops_.registered_backends()):
            raise ValueError(f"backend={self.backend!r} must be one of "
                             f"{('auto', *BACKENDS, *ops_.registered_backends())}")
        if self.chunk_edges is not None and (self.chunk_edges < 1 or self.backend not in ("segment", "auto")):
            raise ValueError(f"chunk_edges={self.chunk_edges} needs the segment backend and a value >= 1 "
                             f"(backend is {self.backend!r}; csr has no message buffer to bound)")
        if self.dropout_rng not in ("hash", "jax"):
            raise ValueError(f"dropout_rng={self.dropout_rng!r} must be 'hash' or 'jax'")
        if self.kernels is not None and not isinstance(self.kernels, bool):
            raise ValueError(f"kernels={self.kernels!r} must be True, False or None (not planned)")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision={self.precision!r} must be one of {PRECISIONS}")


@dataclasses.dataclass(frozen=True)
class Decided:
    """An :class:`Execution` as the plan decided it (:func:`jaxgcn.plan.concrete`): what the engine
    runs. ``backend`` is concrete (never ``auto``), ``aggregate_first`` decided, and ``ops`` what
    computes the products (XLA's, the C++ kernel's or a registered backend's), ``precision`` the float32
    matmul precision every program of the run is traced with (never ``auto``: :func:`precision_scope`).
    Two decided executions are equal where their ops carry the same name (a compile cache's key; the
    functions are rebuilt)."""

    backend: str
    ops: Ops = dataclasses.field(compare=False, repr=False)
    dropout_rng: str = "hash"
    chunk_edges: int | None = None
    aggregate_first: bool = False
    precision: str = "default"
    ops_name: str = dataclasses.field(default="", init=False)

    def __post_init__(self) -> None:
        if self.backend == "auto":
            raise ValueError("a decided execution has a concrete backend, not 'auto' (jaxgcn.plan.concrete)")
        if self.precision not in PRECISIONS[1:]:
            raise ValueError(f"a decided execution's precision is one of {PRECISIONS[1:]}, not {self.precision!r} "
                             "(jaxgcn.plan.concrete)")
        object.__setattr__(self, "ops_name", self.ops.name)

    @property
    def kernels(self) -> bool:
        """Whether the C++ kernel computes the products (the ops are the kernel's)."""
        return self.ops_name == "native"


def precision_scope(execution: Execution | Decided) -> contextlib.AbstractContextManager[Any]:
    """Where a run's programs are traced (compiled, or called under ``jit``): its decided float32 matmul
    precision (``jax.default_matmul_precision``, part of jit's cache key). ``default`` (and an
    undecided request) enters nothing, so those programs are exactly what they were without the field.

    >>> with precision_scope(Execution()):
    ...     jax.config.jax_default_matmul_precision is None
    True
    """
    precision = execution.precision if isinstance(execution, Decided) else "default"
    if precision == "default":
        return contextlib.nullcontext()
    return jax.default_matmul_precision(precision)


def record(execution: Execution | Decided) -> dict[str, Any]:
    """``execution`` as a checkpoint, a report or a sweep's manifest records it (JSON values): a decided
    one as the request it answers, with ``kernels`` the decision (the layout checkpoints always had)."""
    if isinstance(execution, Decided):
        execution = Execution(execution.backend, execution.dropout_rng, execution.chunk_edges,
                              execution.aggregate_first, execution.kernels, execution.precision)
    return dataclasses.asdict(execution)


class Model(NamedTuple):
    """``init(key, in_dim, n_classes) -> params``; ``apply(params, graph, x, *, key, train) -> logits``."""

    init: Callable[..., Params]
    apply: Callable[..., jax.Array]


def _widths(config: GCNConfig, in_dim: int, n_classes: int) -> list[int]:
    return [in_dim] + [config.hidden] * (config.layers - 1) + [n_classes]


def gcn(config: GCNConfig = GCNConfig(), execution: Execution = Execution(), *,
        propagate: Propagate | None = None, ops: Ops | None = None) -> Model:
    """Build the GCN's pure init/apply functions.

    ``apply`` is :func:`apply_runs` (the one forward pass, written on a run axis) for a batch of
    one run, run as ``execution`` says, with ``ops`` (:class:`jaxgcn.core.ops.Ops`; default: those of
    the planned ``execution``, :func:`ops_of`). ``propagate`` replaces the aggregation ``Â·x``
    (default: the ops').

    Params are ``{"layer_0": {"w", "b", ["w_res"], ["ln"]}, ..., "layer_{L-1}": {"w", "b"}}``;
    ``w_res`` (residual projection) exists in the first layer, whose input may be sparse, and where
    widths differ.
    ``apply(..., embed=True)`` returns the input of the last layer (the last hidden representation,
    [n_nodes, hidden]) instead of the logits.

    ``apply(..., aggregated=A_x)`` takes ``Â · x`` precomputed (:func:`aggregate_input`) for the
    first layer of an ``aggregate_first`` model when dropout leaves ``x`` unchanged (evaluation).
    Hidden layer ``l`` computes ``relu(ln(Â · drop(h) · W + b)) [+ drop(h) · W_res or + h]``; the last
    layer returns logits ``Â · drop(h) · W + b``.

    >>> import numpy as np
    >>> from jaxgcn.core.graph import from_edges, gcn_norm
    >>> g = gcn_norm(from_edges([0, 1], [1, 2])[0])
    >>> model = gcn(GCNConfig(hidden=4))
    >>> params = model.init(jax.random.key(0), 5, 3)
    >>> model.apply(params, g, np.ones((3, 5), np.float32)).shape
    (3, 3)
    """

    def init(key: jax.Array, in_dim: int, n_classes: int) -> Params:
        # Every weight matrix is Glorot-uniform, U(-r, r) with r = sqrt(6 / (in + out)). They are cut
        # from ONE uniform draw: each distinct random shape costs ~0.5 s of XLA compile on CPU.
        widths = _widths(config, in_dim, n_classes)
        shapes = []
        for i, (d_in, d_out) in enumerate(zip(widths[:-1], widths[1:])):
            shapes.append((i, "w", d_in, d_out))
            if i < config.layers - 1 and config.residual and (d_in != d_out or i == 0):
                shapes.append((i, "w_res", d_in, d_out))
        total = sum(d_in * d_out for _, _, d_in, d_out in shapes)
        uniform = jax.random.uniform(key, (total,), jnp.float32, minval=-1.0, maxval=1.0)
        params: Params = {f"layer_{i}": {} for i in range(config.layers)}
        offset = 0
        for i, name, d_in, d_out in shapes:
            block = uniform[offset:offset + d_in * d_out].reshape(d_in, d_out)
            params[f"layer_{i}"][name] = block * jnp.float32(np.sqrt(6.0 / (d_in + d_out)))
            offset += d_in * d_out
        for i, d_out in enumerate(widths[1:]):
            layer = params[f"layer_{i}"]
            if config.bias:
                layer["b"] = jnp.zeros((d_out,), jnp.float32)
            if i < config.layers - 1 and config.layer_norm:
                layer["ln"] = {"scale": jnp.ones((d_out,), jnp.float32), "bias": jnp.zeros((d_out,), jnp.float32)}
        return params

    one = make_run_inputs(dropout=[config.dropout], hidden=[config.hidden])

    def apply(params: Params, graph: Graph, x: Features, *, key: jax.Array | None = None,
              train: bool = False, aggregated: jax.Array | None = None, embed: bool = False) -> jax.Array:
        keys = None
        if train and config.dropout > 0.0:
            if key is None:
                raise ValueError("training with dropout needs a PRNG key: pass key=jax.random.key(seed)")
            keys = jax.random.split(key, config.layers)[:, None]  # [layers, 1 run]
        stacked = jax.tree.map(jnp.expand_dims, params, insert_axes(params))  # a batch of one
        out = apply_runs(config, stacked, graph, x, one, execution=execution, keys=keys, train=train,
                         aggregated=aggregated, embed=embed, propagate=propagate, ops=ops)
        return out[:, 0]

    return Model(init, apply)


def _rows_product(ops: Ops, mat: Any, x: jax.Array) -> jax.Array:
    """A row plan's rows of ``Â · x`` (``mat``: a layer's, ``x``: [m, width]) by the ops' row product
    (the csr kernel's ``spmm_rows`` where they name none), summed in float32, in ``x``'s dtype."""
    return (ops.rows_product or spmm_rows)(mat, x.astype(jnp.float32)).astype(x.dtype)


def aggregate_input(execution: Execution, graph: Graph, x: Features, *,
                    propagate: Propagate | None = None, ops: Ops | None = None, rows: Any = None) -> jax.Array | None:
    """``Â · x`` when the first layer aggregates first (dense ``x``), else None: computed once per
    training loop and reused by every evaluation forward, which then skips a propagation. With the
    evaluation's ``rows`` (a row plan whose first layer computes some rows), only those rows of it:
    over their lists, not every node's."""
    if not execution.aggregate_first or is_sparse(x):
        return None
    ops = ops_of(execution, ops)
    if rows is not None and rows.mats[0] is not None:
        return _rows_product(ops, rows.mats[0], x)
    return (propagate or ops.propagate)(graph, x)


# --- the one forward pass, on a run axis ---------------------------------------------------------
#
# ``jax.vmap`` of a gather + ``segment_sum`` model turns them into batched scatters, which measured
# SLOWER on CPU than running the runs one after another. So the runs are stacked *inside* the
# feature axis: node activations are ``[n_nodes, runs, width]`` and weights ``[in, runs, out]``,
# and one propagation with ``runs * width``-wide rows serves every run. A single run is a batch of
# one (:func:`gcn`); :mod:`jaxgcn.batched` trains many.


RunInputs = hyper.inputs_type(hyper.PER_RUN)  # its fields: the columns of the one declaration
RunInputs.__module__ = __name__
RunInputs.__doc__ = """Per-run device arrays (length R): the hyperparameters that may differ between runs,
    one field per column of :data:`jaxgcn.core.hyper.PER_RUN` (which declares them).

    Attributes:
        lr, weight_decay: learning rate and weight decay (read by the training step).
        keep_threshold: uint32 hash threshold of each run's dropout (:func:`jaxgcn.core.layers.keep_threshold`).
        keep_scale: ``1 - dropout`` of each run (kept entries are divided by it).
        hidden: each run's own hidden width (activations are zero-padded to the widest).
        split: index of each run's split in stacked [n_splits, n] masks.
    """


def make_run_inputs(**values: Any) -> RunInputs:
    """:class:`RunInputs` from per-run host values by name (``dropout=``, ``hidden=``, ``lr=``,
    ``weight_decay=``, ``split=``: :data:`jaxgcn.core.hyper.PER_RUN`; one left out is 0 for every
    run), each column computed as its declaration says (keep thresholds and scales exactly as
    :func:`jaxgcn.core.layers.keep_mask` computes them for one run).

    >>> make_run_inputs(dropout=[0.5, 0.0], hidden=[16, 8]).keep_scale.tolist()
    [0.5, 1.0]
    """
    columns = hyper.host_columns(values)
    return hyper.inputs_type(hyper.PER_RUN)(**{k: jnp.asarray(v) for k, v in columns.items()})


def _hash_seeds(key: jax.Array) -> jax.Array:
    """Each run's two 32-bit hash seeds [R, 2] from its dropout key [R] (:func:`jaxgcn.core.layers.keep_mask`)."""
    if key.shape[0] == 1:  # then no vmap: the same numbers, a smaller program to compile
        return jax.random.bits(key[0], (2,), jnp.uint32)[None]
    return jax.vmap(lambda k: jax.random.bits(k, (2,), jnp.uint32))(key)


def _keep(execution: Execution, key: jax.Array, runs: RunInputs, counter: Any, shape: tuple[int, ...]) -> jax.Array:
    """Per-run keep masks of ``shape`` (``[n, R]`` or ``[n, R, width]``: the run axis second), from
    the runs' keys [R]. ``hash``: the counter hash of :func:`jaxgcn.core.layers.keep_mask` (``counter`` broadcasts
    against ``shape``); ``jax``: ``jax.random.bernoulli`` per run, as a single run draws it."""
    one_run = key.shape[0] == 1  # then no vmap: the same numbers, a smaller program to compile
    if execution.dropout_rng == "jax":
        one = shape[:1] + shape[2:]
        if one_run:
            return jnp.expand_dims(jax.random.bernoulli(key[0], runs.keep_scale[0], one), 1)
        return jax.vmap(lambda k, q: jax.random.bernoulli(k, q, one), out_axes=1)(key, runs.keep_scale)
    expand = [d for d in range(len(shape)) if d != 1]
    seeds = jnp.expand_dims(_hash_seeds(key), expand)  # the run axis in place, a trailing pair of seeds
    threshold = jnp.expand_dims(runs.keep_threshold, expand)
    return hash_bits(counter, seeds) >= threshold


def _drop_input(execution: Execution, x: Features, key: jax.Array, runs: RunInputs) -> Features:
    """Per-run dropout of the shared input: sparse (BCOO/CSR) -> per-run values [nnz, R] (only the
    stored non-zeros, as Kipf's reference drops them); dense [n, F] -> [n, R, F]."""
    r = runs.keep_scale.shape[0]
    if is_sparse(x):
        counter = jax.lax.iota(jnp.uint32, x.nse)[:, None]
        keep = _keep(execution, key, runs, counter, (x.nse, r))
        return jnp.where(keep, x.data[:, None] / runs.keep_scale[None, :], 0.0)
    n, f = x.shape
    counter = jax.lax.iota(jnp.uint32, n)[:, None, None] * jnp.uint32(f) + jax.lax.iota(jnp.uint32, f)[None, None, :]
    keep = _keep(execution, key, runs, counter, (n, r, f))
    return jnp.where(keep, x[:, None, :] / runs.keep_scale[None, :, None], 0.0)


def _drop_hidden(execution: Execution, h: jax.Array, key: jax.Array, runs: RunInputs, *,
                 relu: bool = False, ids: jax.Array | None = None, ops: Ops | None = None) -> jax.Array:
    """Per-run dropout of hidden activations [n, R, H] (with ``relu``: of ``relu(h)``); element
    (i, j) of run r uses counter ``i * hidden_r + j``, as a single run of width ``hidden_r`` does
    (``ids[i] * hidden_r + j`` with the node ids ``ids`` of ``h``'s rows: each node's own mask)."""
    n, r, width = h.shape
    ops = ops_of(execution, ops)
    if ops.drop_hidden is not None:  # one kernel pass, the same masks (the mask kept for the gradient)
        return ops.drop_hidden(h.astype(jnp.float32), _hash_seeds(key), runs.hidden.astype(jnp.uint32),
                            runs.keep_threshold, runs.keep_scale.astype(jnp.float32), relu, ids).astype(h.dtype)
    if relu:
        h = jax.nn.relu(h)
    node = jax.lax.iota(jnp.uint32, n) if ids is None else ids.astype(jnp.uint32)
    counter = (node[:, None, None] * runs.hidden.astype(jnp.uint32)[None, :, None]
               + jax.lax.iota(jnp.uint32, width)[None, None, :])
    keep = _keep(execution, key, runs, counter, (n, r, width))
    if r > 1:  # one run's mask is small: hashing it again costs less than the loop (bench_train.py)
        keep = _materialize(keep, key)
    return jnp.where(keep, h / runs.keep_scale[None, :, None], 0.0)


def _materialize(x: jax.Array, key: jax.Array) -> jax.Array:
    """``x``, computed once into a buffer that every consumer reads.

    XLA's CPU fusion copies cheap elementwise producers into each consumer, so a dropout mask used
    by the forward product and by the gradient was hashed in every one of those fusions (3-5 times
    per epoch: benchmarks/profile_epoch.py). ``lax.optimization_barrier`` does not stop it on CPU
    (the barrier is expanded away before fusion); the output of a while loop is a buffer, and a
    loop whose trip count (1) comes from runtime data cannot be simplified away.
    """
    bits = jax.random.key_data(key).reshape(-1)[0]
    once = jnp.minimum(bits | jnp.uint32(1), jnp.uint32(1))  # 1, from runtime data: unknown to the compiler
    # the body must not return its carry untouched (JAX forwards such a carry around the loop): it
    # xors the mask with "count > 1", false in the one iteration there is
    return jax.lax.while_loop(lambda c: c[0] < once, lambda c: (c[0] + 1, c[1] ^ (c[0] > 1)),
                              (jnp.zeros_like(once), x))[1]


def ops_of(execution: Execution | Decided, ops: Ops | None = None) -> Ops:
    """THE ops of a model or a step: ``ops`` when given, else those the plan decided for ``execution``
    (:class:`Decided`). An undecided request (a library caller's own ``apply_runs``, ``Step`` or runner)
    runs XLA's (or its registered backend's: :func:`jaxgcn.core.ops.for_execution`), and the C++ kernel's
    where it asks for the deprecated ``kernels=True``, as such calls did before the plan decided; every
    job's execution is decided by the plan (:func:`jaxgcn.plan.concrete`)."""
    if ops is not None:
        return ops
    if isinstance(execution, Decided):
        return execution.ops
    return ops_.for_execution(execution, execution.kernels is True)


class FirstLayer(NamedTuple):
    """The first layer's product ``drop(X) · W`` computed ahead of the forward pass that uses it.

    Attributes:
        product: [n, R, out], before propagation.
        values: the per-run dropped feature values [nnz, R] it was computed with (training), or
            None (the features as they are: evaluation).
    """

    product: jax.Array
    values: jax.Array | None


def first_layer_pair(params: Params, x: Features, runs: RunInputs, *, execution: Execution,
                     keys: jax.Array, ops: Ops | None = None) -> tuple[FirstLayer, FirstLayer] | None:
    """The first layer's products for a training step that drops with ``keys[0]`` and for an
    evaluation, both through ``params``' first-layer weights, from ONE pass of the CSR kernel over
    the features and the weights (``ops.pair``, :func:`jaxgcn.native.csr.spmm_pair`); None where the ops
    have no pair for ``x`` (the forward pass then computes its own).

    The training loop evaluates a step's new params, then trains the next step from the same
    params: one gather of each weight row serves both (the evaluation forward was 25-35% of the
    first layer's time, benchmarks/profile_epoch.py).
    """
    pair = ops_of(execution, ops).pair(x)
    if pair is None:
        return None
    w = params["layer_0"]["w"]
    d_in, r, d_out = w.shape
    values = _drop_input(execution, x, keys[0], runs)
    train, shared = pair(x, w.reshape(d_in, r * d_out), values)
    n = x.shape[0]
    return FirstLayer(train.reshape(n, r, d_out), values), FirstLayer(shared.reshape(n, r, d_out), None)


def _layer_norm_runs(params: Params, x: jax.Array, eps: float = 1e-5) -> jax.Array:
    """Layer norm over the last axis of [n, R, d] with per-run ``scale``/``bias`` [R, d]."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * params["scale"][None] + params["bias"][None]


def apply_runs(config: GCNConfig, params: Params, graph: Any, x: Features, runs: RunInputs, *,
               execution: Execution = Execution(), keys: jax.Array | None = None, train: bool = False,
               aggregated: jax.Array | None = None, embed: bool = False,
               propagate: Propagate | None = None, first: FirstLayer | None = None,
               rows: Any = None, ops: Ops | None = None) -> jax.Array:
    """The GCN forward pass (Kipf & Welling 2017, arXiv:1609.02907, eq. 9) for R stacked runs.

    Hidden layer ``l`` computes ``relu(ln(Â · drop(h) · W + b)) [+ drop(h) · W_res or + h]`` and
    the last ``Â · drop(h) · W + b``, for every run at once.

    Args:
        config: the architecture (``hidden`` is the padded width).
        params: stacked params, ``w``: [in, R, out], ``b``: [R, out], ``ln``: [R, d] each.
        graph: the normalized graph (whatever ``propagate`` takes).
        x: shared [n, F] input features (dense, BCOO or CSR).
        runs: per-run inputs (dropout rate and hidden width of each run).
        execution: backend, dropout random stream and first-layer order (:class:`Execution`).
        keys: [layers, R] PRNG keys of each layer's dropout (training only). Each run drops with its
            own rate (``runs``); ``config.dropout`` is not used here.
        train: dropout on.
        aggregated: ``Â · x`` precomputed for an ``aggregate_first`` first layer (:func:`aggregate_input`),
            at the rows the first layer of ``rows`` computes where it has a plan of its own.
        embed: return the input of the last layer ([n, R, hidden]) instead of the logits.
        propagate: the aggregation; default the ops' (the execution's backend).
        first: the first layer's product computed ahead (:func:`first_layer_pair`) with the dropout
            ``keys[0]`` draws (training) or none (evaluation); gradients flow as if computed here.
        rows: the rows each layer computes (a :class:`jaxgcn.core.native_ops.RowPlan`, the csr kernel's), when
            only the logits of ``rows.nodes`` are read: each layer propagates into the rows the
            layers above need, and its dropout draws each row's mask by its node id.
        ops: what computes the products (:class:`jaxgcn.core.ops.Ops`); default those of the planned
            ``execution`` (:func:`ops_of`).

    Returns:
        [n, R, n_classes] logits; [K, R, n_classes] with ``rows``, those of ``rows.nodes`` (each
        equal to that node's row of every node's logits).
    """
    ops = ops_of(execution, ops)
    if propagate is None:
        propagate = ops.propagate
    matmul = ops.matmul_runs
    n = x.shape[0]
    dropping = train and keys is not None  # per-run rates; a rate of 0 keeps everything
    # relu deferred into the next layer's dropout kernel (one pass, forward and gradient)
    defer_relu = dropping and not config.residual and ops.drop_hidden is not None
    h, values = x, None
    for i in range(config.layers):
        if embed and i == config.layers - 1:
            return jax.nn.relu(h) if defer_relu and i > 0 else h  # the last hidden representation (embeddings)
        layer = params[f"layer_{i}"]
        mat, pos = (None, None) if rows is None else (rows.mats[i], rows.pos[i])  # this layer's rows
        if i == 0 and first is not None:
            values = first.values
        elif dropping and i == 0:
            dropped = _drop_input(execution, x, keys[i], runs)
            h, values = (x, dropped) if is_sparse(x) else (dropped, None)
        elif dropping:
            h = _drop_hidden(execution, h, keys[i], runs, relu=defer_relu, ops=ops,
                             ids=None if rows is None else rows.ids[i])
        m = h.shape[0]  # the rows h holds: every node's, or those of rows.ids[i]
        if i == 0 and execution.aggregate_first and values is None and not is_sparse(h):
            # (Â · drop(X)) · W for dense inputs (see Execution); Â·X precomputed when X is undropped
            if aggregated is not None and h is x:  # precomputed at this layer's rows (aggregate_input)
                agg = aggregated.reshape(-1, *h.shape[1:])  # shared [rows, F] or per run [rows, R, F]
            elif mat is not None:  # only the rows the layers above read, over their lists
                agg = _rows_product(ops, mat, h.reshape(n, -1)).reshape(-1, *h.shape[1:])
            else:
                agg = propagate(graph, h.reshape(n, -1)).reshape(h.shape)
            out = matmul(agg, None, layer["w"])
        else:
            if i == 0 and first is not None:
                d_in, r, width = layer["w"].shape
                out = ops.given(x, layer["w"].reshape(d_in, r * width), values,
                                 first.product.reshape(n, r * width)).reshape(n, r, width)
            else:
                out = matmul(h, values, layer["w"])
            r, width = out.shape[1], out.shape[2]
            if mat is not None:  # the rows the layers above read (all the logits: rows.nodes')
                out = _rows_product(ops, mat, out.reshape(m, r * width))
            else:
                out = propagate(graph, out.reshape(n, r * width))
            out = out.reshape(-1, r, width)
        if "b" in layer:
            out = out + layer["b"][None, :, :]
        if i == config.layers - 1:
            return out
        if "ln" in layer:
            out = _layer_norm_runs(layer["ln"], out)
        if not defer_relu:
            out = jax.nn.relu(out)
        if config.residual and "w_res" in layer and pos is not None and values is None and not is_sparse(h):
            # the input's rows taken before the projection: the input (dropped X) has no gradient, so the
            # take has none (taken after, its gradient was a scatter-add over every node's rows)
            out = out + matmul(jnp.take(h, pos, axis=0), None, layer["w_res"])
        elif config.residual:
            skip = matmul(h, values, layer["w_res"]) if "w_res" in layer else h
            out = out + (skip if pos is None else jnp.take(skip, pos, axis=0))
        h, values = out, None
    raise AssertionError("unreachable")
