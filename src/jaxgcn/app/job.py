"""What one ``jaxgcn train`` asks for, as a typed value: the data, the configs, the runs, how they
are spread over devices, and where their checkpoints go."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from jaxgcn.core.tasks import task_of
from jaxgcn.app.data import DataRequest, Loaded
from jaxgcn.core.models import Execution, GCNConfig
from jaxgcn.io.reports import RunSummary
from jaxgcn.training.config import TrainConfig


@dataclasses.dataclass(frozen=True)
class Job:
    """One training job.

    Attributes:
        data: the graph, its split(s) and its preparation.
        model, train: the configs every run shares (``seeds`` x ``data.splits`` runs, seeds
            ``seed``, ``seed + 1``, ...).
        execution: how to run, as asked (``backend`` may be ``"auto"``: :func:`jaxgcn.plan.resolve`
            decides); ``aggregate``: ``--aggregate-first`` (``auto``, ``on``, ``off``).
        devices: how many devices the runs (or, sharded, the graph's rows) spread over (None: all).
        save, checkpoint_every, resume: where the final model(s) and the resumable state go, how
            often, and the folder a run continues from.
        debug: check one training step (NaNs, indices) before the loop.
        shard_graph, distributed, exchange: one run with the graph's rows over the devices (of a
            multi-process job), and how they exchange rows (``auto``, ``all_gather``, ``halo``).
        options: the command's options as JSON values, which every checkpoint records (``extra``'s
            ``options``) so that ``--resume`` and the commands that read a checkpoint restore them
            (None: none recorded).
    """

    data: DataRequest
    model: GCNConfig = GCNConfig()
    train: TrainConfig = TrainConfig()
    execution: Execution = Execution()
    aggregate: str = "auto"
    seed: int = 0
    seeds: int = 1
    devices: int | None = None
    save: Path | None = None
    checkpoint_every: int | None = None
    resume: Path | None = None
    debug: bool = False
    shard_graph: bool = False
    distributed: bool = False
    exchange: str = "auto"
    options: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.checkpoint_every is not None and self.save is None:
            raise ValueError("--checkpoint-every K needs --save DIR (where the checkpoints go)")

    @property
    def n_runs(self) -> int:
        return self.seeds * self.data.splits

    @property
    def sharded(self) -> bool:
        return self.shard_graph or self.distributed

    @property
    def seed_list(self) -> list[int]:
        return [self.seed + i for i in range(self.seeds)]

    @property
    def identity_features(self) -> bool:
        """Own files without --features train on one-hot node ids (what a checkpoint records)."""
        return self.data.edges is not None and self.data.features is None


class Outcome(NamedTuple):
    """What a job's runs produced, and what to tell the user about them.

    Attributes:
        runs: one summary per run (seed-major within each split, as ``--seeds N --splits K`` orders them).
        compile_seconds, train_seconds: wall times.
        losses: the loss history: [epochs] of one run, [runs, epochs] of a batch.
        fitted: one run's full result (:class:`jaxgcn.training.loop.FitResult`, what ``save`` writes); None for a batch.
        batch: a batch's :class:`jaxgcn.training.runs.BatchResult` (saved run by run); None for one run.
        loaded: the data as trained on; model, train, execution: the configs as planned.
        facts: what a checkpoint records about the data (None without --save/--resume).
        hint: a one-line hint (divergence, overfitting), or None.
        sharded: a sharded run's layout (:class:`jaxgcn.app.sharded.Layout` facts), or None.
        resumed_epoch: the epoch a ``--resume`` started from (the earliest of a batch's slices; 0:
            started afresh): this process trained the epochs after it, in ``train_seconds``.
    """

    runs: list[RunSummary]
    compile_seconds: float
    train_seconds: float
    losses: np.ndarray
    fitted: Any
    batch: Any
    loaded: Loaded
    model: GCNConfig
    train: TrainConfig
    execution: Execution
    facts: dict[str, Any] | None
    hint: str | None = None
    sharded: Any = None
    resumed_epoch: int = 0

    @property
    def metric(self) -> str:
        """What the runs' ``test_acc``/``val_acc`` hold: the task's metric (:func:`jaxgcn.core.tasks.task_of`),
        accuracy for class ids."""
        if self.loaded is None:
            return "accuracy"
        task = self.train.task if self.train is not None else "auto"
        data = getattr(self.loaded.prepared, "data", None)  # partition files keep no host copy: their info
        labels = data.labels if data is not None else np.empty(  # names the task (class ids unless told)
            (0, 0) if self.loaded.prepared.info.get("task") == "multilabel" else (0,))
        return task_of(task, labels).metric
