"""jaxgcn compiles with XLA options that avoid a CPU miscompilation (jaxgcn.host.compiler)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxgcn.host.compiler import compiler_options, jit
from jaxgcn.train import masked_cross_entropy

# The options that turn the YNNPACK library fusions off, choose XLA's classic loop emitter and LLVM level 1,
# spelled here rather than read from jaxgcn.host.compiler: these tests check that module's option list.
YNN_OFF = {"xla_cpu_experimental_ynn_fusion_type": ""}
CLASSIC_EMITTER = {"xla_cpu_use_fusion_emitters": False}
LLVM_LEVEL_1 = {"xla_backend_optimization_level": 1}


def accepted(options: dict) -> bool:
    """Whether this jaxlib's CPU backend takes ``options`` (jaxlib 0.10.2 takes both sets; where it
    does not, jaxgcn compiles with the defaults and there is nothing to check)."""
    if jax.default_backend() != "cpu":
        return False
    try:
        jax.jit(jnp.negative, compiler_options=options).lower(jnp.zeros(1, jnp.float32)).compile()
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
    # each where this jaxlib takes it (a jaxlib without an option compiles with its default for it)
    want = {}
    for option in (YNN_OFF, CLASSIC_EMITTER, LLVM_LEVEL_1):
        want.update(option if accepted(option) else {})
    assert compiler_options() == want
    assert jit(lambda x: x + 1)(jnp.zeros(2, jnp.float32)).tolist() == [1.0, 1.0]


def test_an_option_this_jaxlib_does_not_know_is_left_out_alone(monkeypatch):
    # another jaxlib may know one option and not the other: it keeps the one it knows
    import jaxgcn.host.compiler as compiler

    known = compiler.compiler_options()
    monkeypatch.setattr(compiler, "_OPTIONS", {**compiler._OPTIONS, "xla_no_such_option_anywhere": "1"})
    compiler.compiler_options.cache_clear()
    try:
        assert compiler.compiler_options() == known
    finally:
        compiler.compiler_options.cache_clear()
