"""jaxgcn: Graph Convolutional Networks (Kipf & Welling, ICLR 2017) in functional JAX.

>>> import jaxgcn
>>> prepared = jaxgcn.prepare(jaxgcn.load_dataset("cora"))
>>> result = jaxgcn.fit(prepared.data, prepared.n_classes, log=None)  # doctest: +SKIP
"""

from jaxgcn.batched import BatchResult, RunSpec, concat_specs, fit_runs, make_specs, unstack_params
from jaxgcn.datasets import (
    RawGraph,
    load_dataset,
    normalize_features,
    planetoid_split,
    prepare,
    synthetic,
    with_random_splits,
)
from jaxgcn.graph import Graph, from_edges, from_scipy, gcn_norm, to_dense, with_dense
from jaxgcn.layers import dropout, gcn_apply, gcn_init, keep_mask, matmul, sparse_features
from jaxgcn.models import GCNConfig, Model, gcn
from jaxgcn.propagate import BACKENDS, choose_backend, propagate
from jaxgcn.sweep import Grid, format_table, run_grid
from jaxgcn.train import (
    FitResult,
    TrainConfig,
    TrainData,
    TrainingDiverged,
    fit,
    l2_penalty,
    make_optimizer,
    make_runner,
    masked_accuracy,
    masked_cross_entropy,
)

from jaxgcn.version import __version__

__all__ = [
    "__version__",
    "BatchResult", "Grid", "RunSpec", "concat_specs", "fit_runs", "format_table", "make_specs", "run_grid",
    "unstack_params", "with_random_splits",
    "BACKENDS", "FitResult", "GCNConfig", "Graph", "Model", "RawGraph", "TrainConfig", "TrainData",
    "TrainingDiverged", "choose_backend", "dropout", "fit", "from_edges", "from_scipy", "gcn",
    "gcn_apply", "gcn_init", "gcn_norm", "keep_mask", "l2_penalty", "load_dataset", "make_optimizer",
    "make_runner", "masked_accuracy", "masked_cross_entropy", "matmul", "normalize_features",
    "planetoid_split", "prepare", "propagate", "sparse_features", "synthetic", "to_dense", "with_dense",
]
