"""jaxgcn: Graph Convolutional Networks (Kipf & Welling, ICLR 2017) in functional JAX.

The names below are what a user calls: data in, one run, many runs, a grid. The pieces they are
built from (layers, propagation backends, the training step, the kernel) are importable from
their own modules (``jaxgcn.core.layers``, ``jaxgcn.core.propagate``, ``jaxgcn.training``, ``jaxgcn.native.csr``, ...).

>>> import jaxgcn
>>> prepared = jaxgcn.prepare(jaxgcn.load_dataset("cora"))
>>> result = jaxgcn.fit(prepared.data, prepared.n_classes, log=None)  # doctest: +SKIP
>>> probs = jaxgcn.predict("model", "edges.csv", "features.csv")  # a saved model, new nodes  # doctest: +SKIP

``import jaxgcn`` itself imports nothing heavy (so that ``jaxgcn --help`` answers without JAX):
each name, ``__version__`` too, is imported from its module on first use (PEP 562). The console
script (:mod:`jaxgcn.console`) imports this module before its Ctrl-C handler is in place, so it
imports neither :mod:`importlib.metadata` (~30 ms) nor even :mod:`typing` (~14 ms).
"""

from __future__ import annotations

import importlib
import sys

from jaxgcn import moved

moved.install(sys.meta_path)  # the old flat module names (jaxgcn.graph, ...) still import, for one release

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (type checkers read this name)
if TYPE_CHECKING:  # what the lazy names below are, for type checkers and readers
    from typing import Any

    from jaxgcn.core.data import TrainData  # noqa: F401
    from jaxgcn.datasets import RawGraph, load_dataset, prepare, synthetic, with_random_splits  # noqa: F401
    from jaxgcn.core.graph import Graph, from_edges, from_scipy, gcn_norm  # noqa: F401
    from jaxgcn.core.models import Execution, GCNConfig, gcn  # noqa: F401
    from jaxgcn.sweep import Grid, run_grid  # noqa: F401
    from jaxgcn.training.config import TrainConfig, TrainingDiverged  # noqa: F401
    from jaxgcn.training.loop import FitResult, fit  # noqa: F401
    from jaxgcn.training.runs import BatchResult, Entry, entries_for, fit_runs  # noqa: F401
    from jaxgcn.app.inference import predict  # noqa: F401
    from jaxgcn.version import __version__  # noqa: F401

# each public name -> the module it comes from
_FROM = {
    "__version__": "jaxgcn.version",
    "TrainData": "jaxgcn.core.data",
    **dict.fromkeys(("RawGraph", "load_dataset", "prepare", "synthetic", "with_random_splits"), "jaxgcn.datasets"),
    **dict.fromkeys(("Graph", "from_edges", "from_scipy", "gcn_norm"), "jaxgcn.core.graph"),
    **dict.fromkeys(("Execution", "GCNConfig", "gcn"), "jaxgcn.core.models"),
    **dict.fromkeys(("Grid", "run_grid"), "jaxgcn.sweep"),
    **dict.fromkeys(("TrainConfig", "TrainingDiverged"), "jaxgcn.training.config"),
    **dict.fromkeys(("FitResult", "fit"), "jaxgcn.training.loop"),
    **dict.fromkeys(("BatchResult", "Entry", "entries_for", "fit_runs"), "jaxgcn.training.runs"),
    "predict": "jaxgcn.app.inference",  # a saved model's probabilities on a graph, in one call
}

__all__ = ["__version__", *sorted(set(_FROM) - {"__version__"})]


def __getattr__(name: str) -> Any:
    """One of the names above, imported from its module now."""
    if name not in _FROM:
        raise AttributeError(f"module 'jaxgcn' has no attribute {name!r}")
    value = globals()[name] = getattr(importlib.import_module(_FROM[name]), name)  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
