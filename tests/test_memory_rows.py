"""The peak-memory estimate of a run whose layers compute only the rows the logits read (the
``gather`` backend's row plans on an accelerator: :class:`jaxgcn.host.memory.RowPlans`), checked
against XLA's own compiled memory analysis of the training loop, and the one rule for the bytes one
more run of a batch adds (:func:`jaxgcn.host.memory.per_run_bytes`)."""

from __future__ import annotations

import pytest

from jaxgcn import plan
from jaxgcn.core.models import Execution, GCNConfig
from jaxgcn.datasets import load_dataset, prepare, synthetic


def test_the_bytes_of_one_more_run_are_what_they_were():
    """The slice rule (plan._per_run_bytes: the hidden width standing in for the classes, dense
    features' dropped copy added) and the sweep's chunks (plan.batch_bytes) read one rule; these are
    the figures both gave before they did."""
    cora = prepare(load_dataset("cora"), backend="segment")  # BCOO features
    small = prepare(synthetic(500, n_features=12, avg_degree=4.0, seed=3), backend="gather")  # dense features
    for prepared, execution, want in ((cora, Execution(backend="segment"), (32789920, 3515392, 28055904, 38914336)),
                                      (small, Execution(backend="gather"), (6064288, 689152, 2143296, 3324032))):
        graph, data, classes = prepared.data.graph, prepared.data, prepared.n_classes
        got = (plan._per_run_bytes(16, graph, 1433), plan._per_run_bytes(32, graph, None),
               plan.batch_bytes(data, GCNConfig(), 3, classes, execution),
               plan.batch_bytes(data, GCNConfig(hidden=64, layers=3), 1, classes, execution))
        assert got == want
