"""The training engine, one driver for every kind of run (one run, a batch, the graph sharded).

Its modules import downward only (the import-linter contract in ``pyproject.toml``):

- :mod:`~jaxgcn.training.config`: the settings (the run axis of params: :mod:`jaxgcn.core.layers`);
- :mod:`~jaxgcn.training.losses`: THE masked cross-entropy and metrics, THE L2 term;
- :mod:`~jaxgcn.training.optim`: THE optimizer factory;
- :mod:`~jaxgcn.training.state`: a run's state, THE seed-to-key rule, its one initializer, the early-stopping rule;
- :mod:`~jaxgcn.training.step`: THE training step, for R runs at once (one run is a batch of one);
- :mod:`~jaxgcn.training.loop`: the one compile cache (:func:`~jaxgcn.training.loop.compile`), the one host
  loop (:func:`~jaxgcn.training.loop.drive`), the one host driver (:func:`~jaxgcn.training.loop.run`),
  :func:`~jaxgcn.training.loop.fit` (one run);
- :mod:`~jaxgcn.training.runs`: many runs as one program, in slices (:func:`~jaxgcn.training.runs.fit_runs`).

:mod:`jaxgcn.train` and :mod:`jaxgcn.batched` re-export all of it under the names it always had,
for users' code; no module of the package imports them (``tests/test_lint.py`` checks).
"""
