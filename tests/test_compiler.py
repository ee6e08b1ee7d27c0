"""jaxgcn compiles with XLA options that avoid a CPU miscompilation (jaxgcn.compiler)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxgcn.compiler import compiler_options, jit
from jaxgcn.train import masked_cross_entropy


def per_run_loss(logits: jax.Array, labels: jax.Array, mask: jax.Array) -> jax.Array:
    """The batched path's per-run masked cross-entropy: [R, n, C] -> [R]."""
    return jax.vmap(masked_cross_entropy, in_axes=(0, None, None))(logits, labels, mask)


def test_per_run_reductions_past_32k_elements_are_per_run():
    # 3 runs x 38,000 nodes: jaxlib 0.10.2's YNNPACK reduction fusion returned run 0's loss for all
    # three runs (issue 12). Compiled with jaxgcn's options, each run gets its own loss.
    rng = np.random.default_rng(0)
    logits = jnp.asarray(rng.standard_normal((3, 38_000, 7)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, 7, 38_000), jnp.int32)
    mask = jnp.asarray(rng.random(38_000) < 0.5, jnp.float32)
    got = np.asarray(jit(per_run_loss)(logits, labels, mask))
    want = np.array([float(jax.jit(masked_cross_entropy)(logits[r], labels, mask)) for r in range(3)])
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert len(set(got.tolist())) == 3


def test_options_are_only_those_this_jaxlib_accepts():
    options = compiler_options()
    assert set(options) <= {"xla_cpu_experimental_ynn_fusion_type"}  # a jaxlib without it gets none
    assert jit(lambda x: x + 1)(jnp.zeros(2, jnp.float32)).tolist() == [1.0, 1.0]
