"""The C++ kernel's elementwise passes over a batch of runs (registered with the sparse products by
:mod:`jaxgcn.csr`): one Adam step of a params leaf (:func:`adam_leaf`) and the hidden layers' relu
and hash dropout (:func:`hash_dropout`), each one pass where XLA's CPU fusions took several."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxgcn.csr import ADAM_TARGET, DROPOUT_TARGET, require_kernel


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
    XLA compiles them for the CPU (see kernels/adam.h). Needs :func:`jaxgcn.csr.kernel_status`.
    """
    require_kernel()
    out = jax.ShapeDtypeStruct(p.shape, jnp.float32)
    sums = jax.ShapeDtypeStruct((2, p.shape[1]), jnp.float32)
    attrs = {"b1": np.float32(b1), "c1": np.float32(1 - b1), "b2": np.float32(b2), "c2": np.float32(1 - b2),
             "eps": np.float32(eps), "decay": np.int64(decay), "couple": np.int64(couple)}
    return jax.ffi.ffi_call(ADAM_TARGET, (out, out, out, sums), input_output_aliases={0: 0, 1: 1, 2: 2})(
        p, mu, nu, g, hyper, **attrs)


# ----------------------------------------------------------------------------- hash dropout

def _dropout_call(h: jax.Array, seeds: jax.Array, hidden: jax.Array, threshold: jax.Array, scale: jax.Array,
                  relu: bool, bits: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    n, r, w = h.shape
    outs = (jax.ShapeDtypeStruct(h.shape, jnp.float32), jax.ShapeDtypeStruct((n, r, -(-w // 16)), jnp.uint16))
    mode = 0 if bits is None else 1
    bits = jnp.zeros((0,), jnp.uint16) if bits is None else bits
    return jax.ffi.ffi_call(DROPOUT_TARGET, outs)(h, seeds, hidden, threshold, scale, bits, mode=np.int64(mode),
                                                   relu=np.int64(relu))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def hash_dropout(h: jax.Array, seeds: jax.Array, hidden: jax.Array, threshold: jax.Array,
                 scale: jax.Array, relu: bool = False) -> jax.Array:
    """Dropout of R runs' activations ``h`` [n, R, W] (with ``relu``: of ``relu(h)``) with the
    kernel: element (i, r, j) is ``h * (1 / scale[r])`` where ``hash_bits(i * hidden[r] + j,
    seeds[r]) >= threshold[r]`` (:func:`jaxgcn.layers.hash_bits`; ``seeds`` [R, 2] uint32,
    ``hidden`` and ``threshold`` [R] uint32, ``scale`` [R] float32) and, with ``relu``, ``h`` is
    not <= 0; else 0. The masks are those ``jaxgcn.models`` hashes, computed in one pass and kept
    as bits (one uint16 per 16 elements) for the gradient: the same scaling of the incoming
    gradient where kept. Needs :func:`jaxgcn.csr.kernel_status`."""
    return _dropout_call(h, seeds, hidden, threshold, scale, relu)[0]


def _hash_dropout_fwd(h, seeds, hidden, threshold, scale, relu):
    out, bits = _dropout_call(h, seeds, hidden, threshold, scale, relu)
    return out, (seeds, hidden, threshold, scale, bits)


def _hash_dropout_bwd(relu, res, g):
    *rest, bits = res
    return (_dropout_call(g, *rest, relu, bits)[0], None, None, None, None)


hash_dropout.defvjp(_hash_dropout_fwd, _hash_dropout_bwd)
