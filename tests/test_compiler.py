"""jaxgcn compiles with XLA options that avoid a CPU miscompilation (jaxgcn.compiler)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxgcn.compiler import compiler_options, jit
from jaxgcn.train import masked_cross_entropy

# The option that turns the YNNPACK library fusions off, spelled here rather than read from
# jaxgcn.compiler: these tests check that module's option list.
YNN_OFF = {"xla_cpu_experimental_ynn_fusion_type": ""}


def library_fusions_can_be_turned_off() -> bool:
    """Whether this jaxlib's CPU backend takes :data:`YNN_OFF` (jaxlib 0.10.2 does; where it does
    not, jaxgcn compiles with the defaults and there is nothing to check)."""
    if jax.default_backend() != "cpu":
        return False
    try:
        jax.jit(jnp.negative, compiler_options=YNN_OFF).lower(jnp.zeros(1, jnp.float32)).compile()
    except Exception:  # noqa: BLE001 - XLA reports an unknown option with its own error types
        return False
    return True


def per_run_loss(logits: jax.Array, labels: jax.Array, mask: jax.Array) -> jax.Array:
    """The per-run masked cross-entropy of a vmapped batch: [R, n, C] -> [R], the run axis leading."""
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
    # all of them where this jaxlib takes them (a jaxlib without the option gets none)
    assert compiler_options() == (YNN_OFF if library_fusions_can_be_turned_off() else {})
    assert jit(lambda x: x + 1)(jnp.zeros(2, jnp.float32)).tolist() == [1.0, 1.0]
