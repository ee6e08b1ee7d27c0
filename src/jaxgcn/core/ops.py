"""THE seam between the model and what computes its products: an :class:`Ops` value, the functions a
forward pass and a training step call (in the style of jraph's ``GraphConvolution(aggregate_nodes_fn=...)``).

Two implementations ship: :func:`xla_ops` (pure XLA, any device) and :func:`native` (the C++
kernel's functions, from :mod:`jaxgcn.core.native_ops`). The execution plan
(:func:`jaxgcn.plan.ops_for`) decides which one a run gets; :mod:`jaxgcn.core.models` only calls them.

A new propagation backend registers its own :class:`Ops` factory under its name (:func:`register`):
``Execution(backend=name)`` then accepts the name and every forward pass of that execution runs it.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental import sparse as jsparse

from jaxgcn.core import feature_lists, native_ops
from jaxgcn.native.csr import CSR, spmm_rows, spmm_xla  # noqa: F401 - spmm_rows: the model's default row product
from jaxgcn.core.propagate import BACKENDS, propagate

# (graph, x [n, width]) -> Â·x [n, width]: how a layer aggregates.
Propagate = Callable[[Any, jax.Array], jax.Array]
# (x, values [nnz, R] | None, w [in, R, out]) -> [n, R, out]: the per-run products x_r @ w_r.
MatmulRuns = Callable[[Any, Any, jax.Array], jax.Array]


class Ops(NamedTuple):
    """What computes a forward pass's products and a step's optimizer pass.

    Attributes:
        name: ``xla``, ``native`` or a registered backend's name.
        propagate: the default aggregation ``Â·x`` (graph, [n, width]) -> [n, width].
        matmul_runs: per-run ``x_r @ w_r`` -> [n, R, out] (:data:`MatmulRuns`): ``x`` the shared input
            (sparse with per-run ``values`` [nnz, R] or shared when None; or dense [n, in]) or
            per-run hidden activations [n, R, in].
        pair: ``pair(x)``: a function ``(x, w [in, R*out], values [nnz, R]) -> (train, shared)``
            computing the first layer's product for a training step and for an evaluation in one pass
            (:func:`jaxgcn.native.csr.spmm_pair`), or None where it does not run for ``x``.
        given: ``(x, w, values, product) -> product`` with the gradients of the product (used with ``pair``).
        rows_product: ``(rows, x [m, W]) -> [K, W]``: some rows of the propagation (row plans); None:
            :data:`spmm_rows` (:func:`jaxgcn.native.csr.spmm_rows`, whose sums are the kernel's propagation's).
        drop_hidden: the hidden layers' (relu and) hash dropout in one pass
            (:func:`jaxgcn.native.fused.hash_dropout`'s signature), or None: XLA draws the masks.
        fused_adam: Adam/AdamW may run as one kernel pass per params leaf (:func:`jaxgcn.native.fused.adam_step`).
        row_plans: a step may compute only the rows its loss reads (:func:`jaxgcn.core.native_ops.row_plan`).
        csr_product: ``(a: CSR, b [m, W]) -> a @ b``: a sharded run's row-block product.
        block_lists: ``(lists, b [m, W]) -> a @ b`` for a row block as neighbour lists, where a sharded
            run's blocks are made so (an accelerator's: XLA's CSR product is a scatter there), or None.
        prepare: ``(data, hops) -> aux``: what these ops precompute of a run's data on the host, once
            (:func:`jaxgcn.core.data.with_focus` stores it as :attr:`jaxgcn.core.data.TrainData.aux`, the step
            reads it; the kernel's: :func:`jaxgcn.core.native_ops.prepare`), or None: nothing.
    """

    name: str
    propagate: Propagate
    matmul_runs: MatmulRuns
    pair: Callable[[Any], Callable[..., tuple[jax.Array, jax.Array]] | None]
    given: Callable[..., jax.Array] | None = None
    rows_product: Callable[[Any, jax.Array], jax.Array] | None = None
    drop_hidden: Callable[..., jax.Array] | None = None
    fused_adam: bool = False
    row_plans: bool = False
    csr_product: Callable[[Any, jax.Array], jax.Array] = spmm_xla
    block_lists: Callable[[Any, jax.Array], jax.Array] | None = None
    prepare: Callable[[Any, int], Any] | None = None


def xla_matmul_runs(x: Any, values: jax.Array | None, w: jax.Array) -> jax.Array:
    """Per-run ``x_r @ w_r`` in XLA (:attr:`Ops.matmul_runs`; ``w``: [in, R, out])."""
    d_in, r, d_out = w.shape
    if isinstance(x, feature_lists.FeatureLists):  # gathers only, forward and gradient
        return feature_lists.matmul_runs(x, values, w)
    if isinstance(x, CSR):
        vals = x.data[:, None] if values is None else values  # XLA where the kernel cannot run (GPU)
        return jnp.stack([spmm_xla(x._replace(data=vals[:, min(k, vals.shape[1] - 1)]), w[:, k])
                          for k in range(r)], axis=1)
    if isinstance(x, jsparse.BCOO):
        rows, cols = x.indices[:, 0], x.indices[:, 1]
        vals = x.data[:, None, None] if values is None else values[:, :, None]
        msgs = w[cols] * vals.astype(w.dtype)  # one gather of R * out-wide rows
        return jax.ops.segment_sum(msgs, rows, num_segments=x.shape[0], indices_are_sorted=True)
    if x.ndim == 2:
        return jnp.einsum("nf,fro->nro", x, w) if r > 1 else (x @ w.reshape(d_in, d_out))[:, None, :]
    # one run: a plain matmul (a batched dot of one costs XLA more to compile)
    if r == 1:
        return (x.reshape(x.shape[0], d_in) @ w.reshape(d_in, d_out))[:, None, :]
    # per-run hidden [n, R, in] x [in, R, out], node-major. A batched dot (einsum "nrf,fro->nro")
    # makes XLA transpose the activations to [R, in, n] and back, strided by R * in floats: 53-69%
    # of a batched epoch on Cora for R = 8-100 (benchmarks/profile_epoch.py). A broadcast product
    # summed over ``in`` instead (which XLA materializes as [n, R, in, out] once ``in`` is large).
    return jnp.sum(x[:, :, :, None] * w.transpose(1, 0, 2)[None], axis=2)


# Per-run inputs narrower than this go to the vector unit, not the matrix unit (one 128-deep pass of the
# MXU per run, each of R runs loading its own [in, out] weights, and 6 passes at precision highest): on a
# TPU v5e, 100 Cora seeds (hidden 16 -> 7 classes) took 6.7 ms an epoch as a batched dot, 2.5 ms so
MXU_MIN_IN = 128


def mxu_matmul_runs(x: Any, values: jax.Array | None, w: jax.Array) -> jax.Array:
    """Per-run ``x_r @ w_r`` for an accelerator's matrix unit (:attr:`Ops.matmul_runs`): per-run inputs
    [n, R, in] as ONE batched dot over the runs where ``in`` is at least :data:`MXU_MIN_IN`. There the
    CPU's broadcast product (:func:`xla_matmul_runs`) would materialize [n, R, in, out] on the vector
    unit: on a TPU v5e, 100 Cora seeds with dense dropped inputs took 24 ms per epoch that way; a
    narrower input (a hidden layer's) takes it."""
    if isinstance(x, (CSR, jsparse.BCOO, feature_lists.FeatureLists)) or x.ndim == 2 or w.shape[1] == 1:
        return xla_matmul_runs(x, values, w)
    if w.shape[0] < MXU_MIN_IN:  # a short contraction: the vector unit's broadcast product, fused
        return xla_matmul_runs(x, values, w)
    return jnp.einsum("nrf,fro->nro", x, w)


# The Pallas kernel's lists need no row chunks: it holds no [rows, K, width] buffer, only its VMEM tables
UNCHUNKED = 2**62


def tpu_matmul_runs(x: Any, values: jax.Array | None, w: jax.Array) -> jax.Array:
    """Per-run ``x_r @ w_r`` on a TPU (:attr:`Ops.matmul_runs`): feature lists' sums by the Pallas kernel
    (:func:`jaxgcn.core.pallas_gather.runs_sum`) where its tables (the larger of X's two sides, R x out
    wide, and the values) fit VMEM, else as on any accelerator (:func:`mxu_matmul_runs`). On a TPU v5e,
    Cora's first layer for 100 runs, forward and weight gradient: 1.67 ms against 13.2 ms for XLA's
    gathers (the code of ``benchmarks/bench_accelerator.py --parts listsum``)."""
    if isinstance(x, feature_lists.FeatureLists):
        from jaxgcn.core import pallas_gather

        d_in, r, d_out = w.shape
        runs = 1 if values is None else values.shape[1]
        if pallas_gather.runs_kernel_fits(max(x.shape), r * d_out, runs, x.nse + 1):
            return feature_lists.matmul_runs(x, values, w, budget=UNCHUNKED, sums=pallas_gather.runs_sum)
    return mxu_matmul_runs(x, values, w)


def xla_ops(execution: Any) -> Ops:
    """The pure-XLA :class:`Ops` of ``execution`` (its ``backend`` and ``chunk_edges`` propagate)."""
    return Ops("xla", functools.partial(propagate, backend=execution.backend, chunk_edges=execution.chunk_edges),
               xla_matmul_runs, lambda x: None)


def native(execution: Any) -> Ops:
    """The C++ kernel's :class:`Ops` of a planned ``execution`` (:func:`jaxgcn.core.native_ops.fields`)."""
    return Ops("native", xla_ops(execution).propagate,
               functools.partial(native_ops.matmul_runs, xla=xla_matmul_runs), **native_ops.fields(execution))


# name -> (execution -> Ops): the registered propagation backends (a new one plugs in here).
_REGISTRY: dict[str, Callable[[Any], Ops]] = {}


def register(name: str, factory: Callable[[Any], Ops]) -> None:
    """Register ``factory(execution) -> Ops`` under ``name``, a new propagation backend
    (``Execution(backend=name)`` then runs these ops).

    >>> register("toy", lambda execution: xla_ops(execution)._replace(name="toy"))
    >>> "toy" in registered_backends()
    True
    >>> unregister("toy")
    """
    if not isinstance(name, str) or not name or name in ("auto", *BACKENDS):
        raise ValueError(f"register: name={name!r} must be a new backend name (not 'auto' or one of {BACKENDS})")
    _REGISTRY[name] = factory


def unregister(name: str) -> None:
    """Forget the implementation registered under ``name`` (a test's toy backend)."""
    _REGISTRY.pop(name, None)


def registered_backends() -> tuple[str, ...]:
    """The propagation backends registered with :func:`register`."""
    return tuple(_REGISTRY)


def accelerator_ops(execution: Any, platform: str = "gpu") -> Ops:
    """XLA's :class:`Ops` for an accelerator (``platform`` tpu or gpu): per-run products on the matrix
    unit (:func:`mxu_matmul_runs`), a sharded run's row blocks as neighbour lists (:attr:`Ops.block_lists`);
    on a TPU the neighbour lists' row sums take the Pallas kernel where it beats XLA's gather
    (:func:`jaxgcn.core.pallas_gather.tpu_row_sum`)."""
    from jaxgcn.core import gather

    ops = xla_ops(execution)._replace(name="xla-mxu", matmul_runs=mxu_matmul_runs)
    rows_sum = None
    if platform == "tpu":
        from jaxgcn.core.pallas_gather import tpu_row_sum as rows_sum

        ops = ops._replace(matmul_runs=tpu_matmul_runs)
    lists_product = functools.partial(gather.rows_product, rows_sum=rows_sum)
    ops = ops._replace(block_lists=lists_product)
    hashed = execution.dropout_rng == "hash"  # masks drawn by node id (jax.random's: by row)
    if execution.backend == "dense" and hashed:
        # each layer at the rows the logits read, as dense rows of Â: the matrix unit's work and Â's
        # reads per epoch fall with the rows (Cora, one run, highest: a third of the epoch was Â's
        # products at every row the logits never read; benchmarks/bench_accelerator.py --parts cora)
        return ops._replace(row_plans=True, rows_product=gather.dense_product,
                            prepare=functools.partial(gather.prepare, layout=gather.dense_rows))
    if execution.backend != "gather":
        return ops
    if platform == "tpu":
        ops = ops._replace(name="xla-mxu-pallas", propagate=functools.partial(propagate, backend="gather",
                                                                               rows_sum=rows_sum))
    # each layer at the rows the logits read
    return ops._replace(row_plans=hashed, prepare=gather.prepare if hashed else None, rows_product=lists_product)


def for_execution(execution: Any, kernel: bool = False, platform: str = "cpu") -> Ops:
    """The :class:`Ops` of ``execution``: a registered backend's, the C++ kernel's where the plan
    decided it runs (``kernel``: :func:`jaxgcn.plan.concrete`), else XLA's (on an accelerator
    ``platform``, tpu or gpu: :func:`accelerator_ops`)."""
    if execution.backend in _REGISTRY:
        return _REGISTRY[execution.backend](execution)
    if kernel:
        return native(execution)
    return xla_ops(execution) if platform == "cpu" else accelerator_ops(execution, platform)
