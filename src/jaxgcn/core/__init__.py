"""The model and its data: the graph and its normalisation, the sparse data a run trains on, the
propagation table, the layers, the GCN, the Ops seam every backend implements (XLA's, and the
C++ kernel's in :mod:`~jaxgcn.core.native_ops`), a run's results, the per-run hyperparameters,
input validation and data diagnostics. Imports only :mod:`jaxgcn.native` and :mod:`jaxgcn.host`."""
