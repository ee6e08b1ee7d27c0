"""The XLA options of every program jaxgcn compiles, and ``jit`` with them applied.

XLA's CPU backend (jaxlib 0.10.2, and possibly other releases) hands reductions to YNNPACK
("``__ynn_fusion``"). When such a reduction has a leading batch axis and more than 32,768 input
elements, it returns batch element 0's result for every batch element: with 3 runs of 38,000
nodes, ``jnp.sum(nll * mask, axis=-1)`` over ``[3, 38000]`` gave run 0's loss three times. That
made every run of a batch see run 0's validation loss, so all runs stopped when run 0 stopped
(issue 12; ``tests/test_compiler.py`` holds the reproduction). The single-run program has no run
axis and escaped, which is why Cora and CiteSeer batches of 8 runs (8 x 2,708 < 32,768) agreed.

jaxgcn therefore compiles with ``xla_cpu_experimental_ynn_fusion_type`` empty, which turns those
library fusions off; XLA's own fused loops compute the same reductions. Measured on Cora
(``benchmarks/bench_train.py``): no slower.

It also compiles with ``xla_cpu_use_fusion_emitters`` off: XLA then emits its loop fusions with its
classic LLVM emitter instead of lowering each one through MLIR first. The programs are as fast and
compile in about two thirds of the time (compiling is a large part of a newcomer's first ``jaxgcn train``
and of the test suite). ``python benchmarks/ab.py --base HEAD --rounds 2 -- bench_train.py --repeats 3``
with and without it, AMD EPYC family 25 model 1 (Zen 3, AVX2, 32 MiB L3), 2 cores: Cora compile
2.74 / 2.86 s against 3.67 / 3.87 s, steady state 4.21 / 4.49 ms per epoch against 5.26 / 4.67.

And it compiles with LLVM at optimization level 1 (``xla_backend_optimization_level``; XLA's
default is 3): the products that dominate an epoch are the csr kernel and XLA's library dots,
which LLVM's level does not touch, so the programs run as fast and compile in about four fifths
of the time. Measured with ``XLA_FLAGS=--xla_backend_optimization_level=1`` against none, on the
same Zen 3 CPU, in one session: ``bench_train.py --repeats 3`` (two rounds each) Cora compile
1.66 / 1.63 s against 1.98 / 2.26 s, steady state 3.15 / 3.40 ms per epoch against 3.34 / 3.40;
``bench_sweep.py --seeds 48 --loop 16`` (two rounds each) 48 runs in one program 10.8 / 10.2 s
against 10.3 / 10.6 s (compile 2.3 / 2.1 s against 2.8 / 2.6), the same accuracies to the last
digit; ``bench_scale.py --sizes 300000 --epochs 4`` 2.03 against 2.17 s per epoch, compile 1.6
against 2.8 s.

Each option is passed only where this jaxlib knows it (checked one by one).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp

# Library (YNNPACK) fusions off, the classic loop emitter, LLVM level 1: see the module docstring.
_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "", "xla_cpu_use_fusion_emitters": False,
            "xla_backend_optimization_level": 1}


@functools.lru_cache(maxsize=None)
def compiler_options() -> dict[str, str]:
    """The XLA options jaxgcn compiles with: those this jaxlib accepts (each checked once, on a
    trivial program), so an older or newer jaxlib without one compiles with its default for it.

    >>> isinstance(compiler_options(), dict)
    True
    """
    if jax.default_backend() != "cpu":
        return {}
    return {name: value for name, value in _OPTIONS.items() if _accepted(name, value)}


def _accepted(name: str, value: Any) -> bool:
    """Whether this jaxlib's compiler takes the option ``name=value``."""
    try:
        jax.jit(jnp.negative, compiler_options={name: value}).lower(jnp.zeros(1, jnp.float32)).compile()
    except Exception:  # noqa: BLE001 - XLA reports an unknown option with its own error types
        return False
    return True


def jit(fun: Callable[..., Any], **kwargs: Any) -> Any:
    """``jax.jit(fun, **kwargs)`` compiled with :func:`compiler_options`.

    >>> float(jit(lambda x: x.sum())(jnp.ones(3)))
    3.0
    """
    return jax.jit(fun, compiler_options=compiler_options(), **kwargs)
