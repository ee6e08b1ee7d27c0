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
(``benchmarks/bench_train.py``): no slower. The option is only passed where this jaxlib knows it.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp

# Library (YNNPACK) fusions off: see the module docstring.
_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}


@functools.lru_cache(maxsize=None)
def compiler_options() -> dict[str, str]:
    """The XLA options jaxgcn compiles with: the ones this jaxlib accepts (checked once, on a
    trivial program), so an older or newer jaxlib without them compiles with its defaults.

    >>> isinstance(compiler_options(), dict)
    True
    """
    if jax.default_backend() != "cpu":
        return {}
    try:
        jax.jit(jnp.negative, compiler_options=_OPTIONS).lower(jnp.zeros(1, jnp.float32)).compile()
    except Exception:  # noqa: BLE001 - XLA reports an unknown option with its own error types
        return {}
    return dict(_OPTIONS)


def jit(fun: Callable[..., Any], **kwargs: Any) -> Any:
    """``jax.jit(fun, **kwargs)`` compiled with :func:`compiler_options`.

    >>> float(jit(lambda x: x.sum())(jnp.ones(3)))
    3.0
    """
    return jax.jit(fun, compiler_options=compiler_options(), **kwargs)
