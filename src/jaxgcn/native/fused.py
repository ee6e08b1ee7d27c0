"""The C++ kernel's passes over a batch of runs other than the sparse products (registered with
those by :mod:`jaxgcn.native.csr`): the per-run dense products (:func:`run_matmul`), one Adam step of a
params leaf (:func:`adam_leaf`; of a params tree, :func:`adam_step`) and the hidden layers' relu
and hash dropout (:func:`hash_dropout`), each one pass where XLA's CPU fusions took several."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxgcn.native.csr import ADAM_TARGET, DENSE_TARGET, DROPOUT_TARGET, require_kernel

# Adam's moment decays and epsilon (optax.scale_by_adam's defaults): the optimizer factory's
# (jaxgcn.training.optim) and the fused step's
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.999, 1e-8


# ----------------------------------------------------------------------------- one optimizer step

def adam_leaf(p: jax.Array, mu: jax.Array, nu: jax.Array, g: jax.Array, hyper: jax.Array, *, b1: float,
              b2: float, eps: float, decay: bool, couple: bool = False
              ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """One Adam step of a params leaf of R runs, in one pass: ``(p', mu', nu', sums)``, the first
    three [O, R, I] like ``p``, ``mu``, ``nu`` and the gradient ``g`` (a weight [in, R, out]; a bias
    as [1, R, d]), and ``sums`` [2, R] each run's sum of squares of ``p`` and of ``p'``.

    ``hyper`` [5, R] holds each run's learning rate, inverse bias corrections ``1 / (1 - b1**t)``
    and ``1 / (1 - b2**t)``, weight decay ``wd`` and 1 where the run steps (0: its leaf stays as it
    was). With ``couple`` the gradient of the coupled L2 term, ``wd * p``, is added to ``g`` first
    (Adam); with ``decay`` ``wd * p`` is added to the update (AdamW). The operations are optax's as
    XLA compiles them for the CPU (see kernels/adam.h). Needs :func:`jaxgcn.native.csr.kernel_status`.
    """
    require_kernel()
    out = jax.ShapeDtypeStruct(p.shape, jnp.float32)
    sums = jax.ShapeDtypeStruct((2, p.shape[1]), jnp.float32)
    attrs = {"b1": np.float32(b1), "c1": np.float32(1 - b1), "b2": np.float32(b2), "c2": np.float32(1 - b2),
             "eps": np.float32(eps), "decay": np.int64(decay), "couple": np.int64(couple)}
    return jax.ffi.ffi_call(ADAM_TARGET, (out, out, out, sums), input_output_aliases={0: 0, 1: 1, 2: 2})(
        p, mu, nu, g, hyper, **attrs)


class FusedStep(NamedTuple):
    """What :func:`adam_step` returns: the params and optimizer state after the step, and each
    run's L2 term (``sum(w**2) / 2`` over the weights it covers, [R], or [1] for one run) of the
    params before and after it."""

    params: Any
    opt_state: Any
    l2_before: jax.Array
    l2_after: jax.Array


def adam_step(params: Any, grads: Any, old_state: Any, new_state: Any, running: jax.Array, covered: Any,
              optimizer: str) -> FusedStep:
    """One Adam (``optimizer`` ``adam``) or AdamW (``adamw``) step from ``params`` and ``old_state``,
    each leaf in one kernel pass (:func:`adam_leaf`: optax's operations as XLA fuses them);
    ``covered``: True on the weights of the L2 term (:func:`jaxgcn.training.losses.l2_covers`).

    ``grads`` are the loss's without the coupled L2 term: for ``adam`` the kernel adds its gradient
    (``weight_decay * w`` on the ``covered`` weights) itself, and returns the L2 terms
    the step's losses need (:class:`FusedStep`), so the weights are read once. ``new_state`` is the
    state optax's own update gave (:func:`jaxgcn.training.optim.optimizer_factory`): its step counts and injected
    hyperparameters are kept, its moments replaced, so XLA drops optax's per-element passes as
    unused. Leaves are stacked (a weight [in, R, out], a bias [R, d]; ``running`` [R]) or one
    run's (``running`` a scalar); a run where ``running`` is False keeps its params and moments as
    they were.
    """
    def adam(state: Any) -> optax.ScaleByAdamState:
        return next(s for s in state.inner_state if isinstance(s, optax.ScaleByAdamState))
    batched, hp = running.ndim == 1, new_state.hyperparams
    with jax.numpy_dtype_promotion("standard"):  # as optax computes them (tree_bias_correction), inverted
        corrections = [1 / (1 - b ** adam(new_state).count).astype(jnp.float32) for b in (ADAM_B1, ADAM_B2)]
    n_runs = running.shape[0] if batched else 1
    hyper = jnp.stack([jnp.broadcast_to(jnp.asarray(v, jnp.float32), (n_runs,)) for v in (
        hp["learning_rate"], *corrections, hp["weight_decay"], running.astype(jnp.float32))])
    stepped, sums = {}, []

    def step(path: Any, p: jax.Array, mu: jax.Array, nu: jax.Array, g: jax.Array, l2: bool) -> jax.Array:
        # as [O, R, I]: a stacked weight is; a stacked bias [R, d], one run's weight [in, out] or bias [d]
        shape = p.shape if p.ndim == 3 else (1, *p.shape) if batched else \
            (p.shape[0], 1, p.shape[1]) if p.ndim == 2 else (1, 1, *p.shape)
        *outs, ss = adam_leaf(*(a.astype(jnp.float32).reshape(shape) for a in (p, mu, nu, g)), hyper,
                              b1=ADAM_B1, b2=ADAM_B2, eps=ADAM_EPS, decay=l2 and optimizer == "adamw",
                              couple=l2 and optimizer == "adam")
        stepped[path] = [o.reshape(p.shape) for o in outs]
        if l2:
            sums.append(ss)
        return stepped[path][0]

    new_params = jax.tree_util.tree_map_with_path(step, params, adam(old_state).mu, adam(old_state).nu, grads, covered)
    mu, nu = ({path: o[k] for path, o in stepped.items()} for k in (1, 2))
    total = 0.5 * sum(sums[1:], sums[0])  # as losses.per_run_l2 adds them: [2, R]
    state = optax.tree_utils.tree_set(new_state, mu=jax.tree_util.tree_map_with_path(lambda path, _: mu[path], params),
                                      nu=jax.tree_util.tree_map_with_path(lambda path, _: nu[path], params))
    return FusedStep(new_params, state, total[0], total[1])


# ----------------------------------------------------------------------------- hash dropout

def _dropout_call(h: jax.Array, seeds: jax.Array, hidden: jax.Array, threshold: jax.Array, scale: jax.Array,
                  relu: bool, bits: jax.Array | None = None, ids: jax.Array | None = None
                  ) -> tuple[jax.Array, jax.Array]:
    n, r, w = h.shape
    outs = (jax.ShapeDtypeStruct(h.shape, jnp.float32), jax.ShapeDtypeStruct((n, r, -(-w // 16)), jnp.uint16))
    mode = 0 if bits is None else 1
    bits = jnp.zeros((0,), jnp.uint16) if bits is None else bits
    ids = jnp.zeros((0,), jnp.uint32) if ids is None or mode == 1 else ids.astype(jnp.uint32)
    return jax.ffi.ffi_call(DROPOUT_TARGET, outs)(h, seeds, hidden, threshold, scale, bits, ids,
                                                   mode=np.int64(mode), relu=np.int64(relu))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def hash_dropout(h: jax.Array, seeds: jax.Array, hidden: jax.Array, threshold: jax.Array,
                 scale: jax.Array, relu: bool = False, ids: jax.Array | None = None) -> jax.Array:
    """Dropout of R runs' activations ``h`` [n, R, W] (with ``relu``: of ``relu(h)``) with the
    kernel: element (i, r, j) is ``h * (1 / scale[r])`` where ``hash_bits(i * hidden[r] + j,
    seeds[r]) >= threshold[r]`` (:func:`jaxgcn.core.layers.hash_bits`; ``seeds`` [R, 2] uint32,
    ``hidden`` and ``threshold`` [R] uint32, ``scale`` [R] float32) and, with ``relu``, ``h`` is
    not <= 0; else 0. With ``ids`` [n] (the node ids of the rows of ``h``, when it holds some
    nodes' rows only), ``ids[i]`` takes the place of ``i``. The masks are those ``jaxgcn.core.models``
    hashes, computed in one pass and kept as bits (one uint16 per 16 elements) for the gradient:
    the same scaling of the incoming gradient where kept. Needs :func:`jaxgcn.native.csr.kernel_status`."""
    return _dropout_call(h, seeds, hidden, threshold, scale, relu, ids=ids)[0]


def _hash_dropout_fwd(h, seeds, hidden, threshold, scale, relu, ids):
    out, bits = _dropout_call(h, seeds, hidden, threshold, scale, relu, ids=ids)
    return out, (seeds, hidden, threshold, scale, bits)


def _hash_dropout_bwd(relu, res, g):
    *rest, bits = res
    return (_dropout_call(g, *rest, relu, bits)[0], None, None, None, None, None)


hash_dropout.defvjp(_hash_dropout_fwd, _hash_dropout_bwd)


# ----------------------------------------------------------------------------- per-run dense products

def _dense_call(mode: int, a: jax.Array, b: jax.Array, w_shape: tuple[int, int, int], w: jax.Array) -> jax.Array:
    h, r, c = w_shape
    rows = h if mode == 2 else a.shape[0]
    out = jax.ShapeDtypeStruct((rows, r * (h if mode == 1 else c)), jnp.float32)
    return jax.ffi.ffi_call(DENSE_TARGET, out)(a, b, w, mode=np.int64(mode))


# The three bilinear products, each the others' gradient (so all orders of reverse mode work):
#   _times(x, w)[i,r,c] = sum_h x[i,r,h] w[h,r,c]   x [n, R*H] -> [n, R*C]
#   _times_t(g, w)[i,r,h] = sum_c g[i,r,c] w[h,r,c]  g [n, R*C] -> [n, R*H] (zero rows of g skipped)
#   _outer(x, g)[h,r,c] = sum_i x[i,r,h] g[i,r,c]    -> [H, R, C]         (zero rows of g skipped)
@jax.custom_vjp
def _times(x: jax.Array, w: jax.Array) -> jax.Array:
    return _dense_call(0, x, x[:0], w.shape, w)


@jax.custom_vjp
def _times_t(g: jax.Array, w: jax.Array) -> jax.Array:
    return _dense_call(1, g, g[:0], w.shape, w)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _outer(x: jax.Array, g: jax.Array, w_shape: tuple[int, int, int]) -> jax.Array:
    return _dense_call(2, x, g, w_shape, jnp.zeros(w_shape, jnp.float32)).reshape(w_shape)  # w: its shape only


_times.defvjp(lambda x, w: (_times(x, w), (x, w)),
              lambda res, o: (_times_t(o, res[1]), _outer(res[0], o, res[1].shape)))
_times_t.defvjp(lambda g, w: (_times_t(g, w), (g, w)),
                lambda res, o: (_times(o, res[1]), _outer(o, res[0], res[1].shape)))
_outer.defvjp(lambda x, g, shape: (_outer(x, g, shape), (x, g)),
              lambda shape, res, o: (_times_t(res[1], o), _times(res[0], o)))


def run_matmul(x: jax.Array, w: jax.Array) -> jax.Array:
    """Per-run products ``x[:, r] @ w[:, r]`` of R runs with the kernel: [n, R, H] x [H, R, C] -> [n, R, C].

    Node-major throughout (no transposes); the gradients skip the all-zero rows of the incoming
    gradient (a loss masked to a few training nodes). Needs :func:`jaxgcn.native.csr.kernel_status`.

    >>> from jaxgcn.native.csr import kernel_status
    >>> x, w = jnp.ones((3, 2, 4)), jnp.arange(16.0).reshape(4, 2, 2)
    >>> run_matmul(x, w)[0].tolist() if kernel_status()[0] else [[24.0, 28.0], [32.0, 36.0]]
    [[24.0, 28.0], [32.0, 36.0]]
    """
    require_kernel()
    n, r, h = x.shape
    if w.ndim != 3 or w.shape[:2] != (h, r):
        raise ValueError(f"run_matmul: x has shape {x.shape}, w {w.shape}; w must be [{h}, {r}, out]")
    out = _times(x.astype(jnp.float32).reshape(n, r * h), w.astype(jnp.float32))
    return out.reshape(n, r, w.shape[2])
