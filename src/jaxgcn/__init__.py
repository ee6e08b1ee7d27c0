"""jaxgcn: Graph Convolutional Networks (Kipf & Welling, ICLR 2017) in functional JAX.

The names below are what a user calls: data in, one run, many runs, a grid. The pieces they are
built from (layers, propagation backends, the training step, the kernel) are importable from
their own modules (``jaxgcn.layers``, ``jaxgcn.propagate``, ``jaxgcn.train``, ``jaxgcn.csr``, ...).

>>> import jaxgcn
>>> prepared = jaxgcn.prepare(jaxgcn.load_dataset("cora"))
>>> result = jaxgcn.fit(prepared.data, prepared.n_classes, log=None)  # doctest: +SKIP
"""

from jaxgcn.batched import BatchResult, Entry, entries_for, fit_runs
from jaxgcn.data import TrainData
from jaxgcn.datasets import RawGraph, load_dataset, prepare, synthetic, with_random_splits
from jaxgcn.graph import Graph, from_edges, from_scipy, gcn_norm
from jaxgcn.models import Execution, GCNConfig, gcn
from jaxgcn.sweep import Grid, run_grid
from jaxgcn.train import FitResult, TrainConfig, TrainingDiverged, fit
from jaxgcn.version import __version__

__all__ = [
    "__version__",
    "BatchResult", "Entry", "Execution", "FitResult", "GCNConfig", "Graph", "Grid", "RawGraph", "TrainConfig",
    "TrainData", "TrainingDiverged", "entries_for", "fit", "fit_runs", "from_edges", "from_scipy", "gcn", "gcn_norm",
    "load_dataset", "prepare", "run_grid", "synthetic", "with_random_splits",
]
