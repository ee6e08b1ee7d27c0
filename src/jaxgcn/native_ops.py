"""The C++ kernel's side of the ops seam (:class:`jaxgcn.ops.Ops`, ``native``): the first layer's
sparse product and pair, the per-run dense products, the fused hash dropout and Adam pass, row
plans and the sharded path's CSR product, all from :mod:`jaxgcn.csr` and :mod:`jaxgcn.fused`, and
the one availability oracle (:func:`kernel_status`). The execution plan gives a run these ops where the
backend is ``csr`` and the kernel can run here (:func:`jaxgcn.plan.ops_for`).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.experimental import sparse as jsparse

from jaxgcn import csr
from jaxgcn.csr import CSR, spmm, spmm_given, spmm_pair
from jaxgcn.fused import hash_dropout, run_matmul


def matmul_runs(x: Any, values: jax.Array | None, w: jax.Array, *, xla: Callable[..., jax.Array]) -> jax.Array:
    """Per-run ``x_r @ w_r`` (:attr:`jaxgcn.ops.Ops.matmul_runs`) on the kernel where it serves: a
    CSR input (R matrices with one pattern, no [nnz, R*out] buffer) and per-run hidden activations
    [n, R, in]; else ``xla``'s (a BCOO or dense [n, in] input)."""
    d_in, r, d_out = w.shape
    if isinstance(x, CSR):
        return spmm(x, w.reshape(d_in, r * d_out), values).reshape(x.shape[0], r, d_out)
    if isinstance(x, jsparse.BCOO) or x.ndim == 2:
        return xla(x, values, w)
    # one run too: the kernel reads each array once in its own layout, and its weight gradient sums
    # the live rows in order: the same sums over some rows only (jaxgcn.graph.row_plan) as over
    # every row, bit for bit, where XLA's dot blocks them anew
    return run_matmul(x, w)


def pair(x: Any) -> Callable[..., tuple[jax.Array, jax.Array]] | None:
    """The first layer's training/evaluation pair in one pass (:func:`jaxgcn.csr.spmm_pair`), for CSR features."""
    return spmm_pair if isinstance(x, CSR) else None


def csr_product(a: CSR, b: jax.Array) -> jax.Array:
    """``a @ b`` with the fused kernel (a sharded run's row block: :func:`jaxgcn.distributed.propagate_block`)."""
    return spmm(a, b.astype(jnp.float32)).astype(b.dtype)


def fields(execution: Any) -> dict[str, Any]:
    """The kernel's :class:`jaxgcn.ops.Ops` fields for a planned ``execution``: the hidden dropout
    fused and row plans taken where the masks are the counter hash's (row plans: backend ``csr``)."""
    hashed = execution.dropout_rng == "hash"
    return dict(pair=pair, given=spmm_given, drop_hidden=hash_dropout if hashed else None,
                fused_adam=True, row_plans=execution.backend == "csr" and hashed, csr_product=csr_product)


def kernel_status() -> tuple[bool, str]:
    """THE availability oracle: whether the C++ kernel can run here, and why not (it builds on the
    first call, ~5 s, once per machine; a JAX on another platform than the CPU never runs it). Only the
    plan asks it (:func:`jaxgcn.plan.kernel_available` is its face for the CLI); the kernel's own calls
    guard themselves (:func:`jaxgcn.csr.require_kernel`).

    >>> ok, reason = kernel_status()
    >>> isinstance(ok, bool) and isinstance(reason, str) and bool(reason)
    True
    """
    return csr._status()
