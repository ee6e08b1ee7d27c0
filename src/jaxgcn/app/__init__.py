"""The application layer: what the ``jaxgcn`` commands do, on typed values, below the command line.

- :mod:`~jaxgcn.app.data`: :class:`~jaxgcn.app.data.DataRequest` (which graph, which split, how
  prepared; the catalogue entry looked up once) and :func:`~jaxgcn.app.data.load`;
- :mod:`~jaxgcn.app.job`: :class:`~jaxgcn.app.job.Job` (one ``jaxgcn train``) and its
  :class:`~jaxgcn.app.job.Outcome`;
- :mod:`~jaxgcn.app.train`: a job on one device (one run or a batch), with THE plan and its memory check;
- :mod:`~jaxgcn.app.sharded`: a job with the graph's rows over devices and processes;
- :mod:`~jaxgcn.app.saving`: checkpoints, resume and the final models of every kind of job;
- :mod:`~jaxgcn.app.sweep`: a sweep's saved progress (``sweep --save``/``--resume``).
- :mod:`~jaxgcn.app.inference`: a saved model applied to data as it was trained (``evaluate``,
  ``predict``, ``plot embeddings``): its logits, scores and predictions.

Nothing here reads arguments or prints: notes go to a ``say`` callback as they happen and the
rest comes back in the outcome; :mod:`jaxgcn.cli` parses, calls and prints.
"""

from typing import Any, Callable

from jaxgcn.app import sharded, train
from jaxgcn.app.data import DataRequest, Loaded, load
from jaxgcn.app.job import Job, Outcome


def run(job: Job, say: Callable[[str], None] = print, **kwargs: Any) -> Outcome:
    """Run ``job`` (notes to ``say``): :func:`jaxgcn.app.sharded.run` when it shards the graph
    (``writer``: whether this process writes, default True), else :func:`jaxgcn.app.train.run`;
    ``kwargs``: their ``progress``, ``log_every``."""
    if job.sharded:
        return sharded.run(job, say, writer=kwargs.pop("writer", True), **kwargs)
    return train.run(job, say, **kwargs)


__all__ = ["DataRequest", "Job", "Loaded", "Outcome", "load", "run"]
