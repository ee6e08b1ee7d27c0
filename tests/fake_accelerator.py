"""A pytest plugin that makes this CPU process look like a TPU to jaxgcn's plan: ``jax.default_backend()``
returns ``"tpu"``, so the plan (``jaxgcn.plan.current_platform``), the precision and the test session's
accelerator setup (conftest) all act as they do on the chip, while the arrays stay on the CPU. A
development aid, not a pass of CI: it finds the tests that pin the CPU plan's choices before chip time
is spent on them. The Pallas kernels the TPU plan takes run interpreted (Mosaic compiles only on a real
TPU), as on the CPU (so ``test_pallas_gather``'s test of that rule fails under it)::

    PYTHONPATH=tests python -m pytest -o addopts="" -n 0 -p fake_accelerator tests/test_batched.py

Only loading it as a plugin (``-p``) fakes the platform: importing the module (the suite's doctest
collection imports every file of tests/) changes nothing.
"""

import jax


def pytest_configure(config) -> None:
    from jaxgcn.core import pallas_gather

    jax.default_backend = lambda: "tpu"
    pallas_gather.resolve_interpret = lambda interpret: True if interpret is None else interpret
