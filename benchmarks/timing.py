"""The one timing rule of the benchmarks that time a jitted function in this process: median wall
seconds of ``repeats`` calls, each waited for (``jax.block_until_ready``), after one untimed call that
compiles and warms the caches."""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable


def median_seconds(fn: Callable[..., Any], *args: Any, repeats: int = 5) -> float:
    """Median seconds of ``fn(*args)`` over ``repeats`` calls after a warm-up call."""
    import jax

    jax.block_until_ready(fn(*args))  # warm-up: compile and first run
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)
