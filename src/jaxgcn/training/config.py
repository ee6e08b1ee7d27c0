"""The training configuration: :class:`TrainConfig` (the paper's defaults), the typed early-stopping
choices (:class:`Kipf`, :class:`Patience`) and why a run ended (``RUNNING`` ... ``DIVERGED``)."""

from __future__ import annotations

import dataclasses

import numpy as np



L2_SCOPES = ("first", "all")
OPTIMIZERS = ("adam", "adamw", "sgd", "momentum")
# Why a run ended, as stored in RunState.reason.
RUNNING, FINISHED, STOPPED_EARLY, DIVERGED = 0, 1, 2, 3


@dataclasses.dataclass(frozen=True)
class Kipf:
    """Kipf's early stopping (the reference code's rule, the default): stop once the validation
    loss, with its L2 term, exceeds the mean of the previous ``window`` epochs' (paper: 10). The
    run keeps its last params."""

    window: int = 10
    kind: str = dataclasses.field(default="kipf", init=False)  # names the choice in saved configs

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"window={self.window} must be >= 1")


@dataclasses.dataclass(frozen=True)
class Patience:
    """Stop ``patience`` epochs after the best validation accuracy (ties: lower validation loss)
    and return that epoch's params (50 is common)."""

    patience: int = 50
    kind: str = dataclasses.field(default="patience", init=False)

    def __post_init__(self) -> None:
        if self.patience < 1:
            raise ValueError(f"patience={self.patience} must be >= 1")


def early_stopping_from(choice: str, *, window: int = 10, patience: int = 50) -> Kipf | Patience | None:
    """The typed early-stopping choice from its name (``"kipf"``, ``"patience"`` or ``"none"``).

    >>> early_stopping_from("patience", patience=20)
    Patience(patience=20, kind='patience')
    """
    choices = {"kipf": lambda: Kipf(window), "patience": lambda: Patience(patience), "none": lambda: None}
    if choice not in choices:
        raise ValueError(f"early_stopping={choice!r} must be one of {tuple(choices)}")
    return choices[choice]()


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimization settings. Defaults are Kipf & Welling's (arXiv:1609.02907, section 5.1).

    Attributes:
        lr: Adam learning rate (paper: 0.01).
        weight_decay: L2 factor; ``weight_decay * sum(w**2) / 2`` is ADDED to the loss (coupled, as
            in the paper; not optax.adamw's decoupled decay). Paper: 5e-4.
        l2: ``"first"`` (paper: first layer's weights only) or ``"all"`` (every weight matrix).
        epochs: maximum number of epochs (paper: 200).
        early_stopping: ONE typed choice: :class:`Kipf` (the default, window 10), :class:`Patience`,
            or ``None`` to run every epoch.
        clip_norm: optional global-norm gradient clipping threshold.
        optimizer: ``"adam"`` (the paper's), ``"adamw"`` (Adam with ``weight_decay`` applied
            DECOUPLED to the weights of the ``l2`` scope, instead of an L2 term in the loss),
            ``"sgd"`` (``p - lr * g``) or ``"momentum"`` (SGD with heavy-ball ``momentum``). Built by
            :func:`optimizer_factory`, the one place every path (single, batched, swept, sharded)
            gets its optimizer from.
        momentum: the momentum of ``"momentum"`` (0.9).
        task: what the runs learn (:func:`jaxgcn.core.tasks.task_of`): ``"auto"`` (the labels decide:
            one class id per node is ``"multiclass"``, a [n, L] matrix of 0/1 is ``"multilabel"``,
            scored by ROC-AUC) or a registered task's name (``"multilabel-f1"``: micro-F1).
    """

    lr: float = 0.01
    weight_decay: float = 5e-4
    l2: str = "first"
    epochs: int = 200
    early_stopping: Kipf | Patience | None = Kipf()
    clip_norm: float | None = None
    optimizer: str = "adam"
    momentum: float = 0.9
    task: str = "auto"

    @property
    def kipf_window(self) -> int:
        """Length of the validation-loss window a run carries (1 when the rule is not Kipf's)."""
        return self.early_stopping.window if isinstance(self.early_stopping, Kipf) else 1

    @property
    def coupled_l2(self) -> float:
        """The factor of the L2 term added to the loss: ``weight_decay``, except for ``adamw``, whose
        optimizer applies the decay itself."""
        return 0.0 if self.optimizer == "adamw" else self.weight_decay

    def __post_init__(self) -> None:
        checks = [
            (self.lr > 0 and np.isfinite(self.lr), f"lr={self.lr} must be a positive number"),
            (self.weight_decay >= 0, f"weight_decay={self.weight_decay} must be >= 0"),
            (self.l2 in L2_SCOPES, f"l2={self.l2!r} must be one of {L2_SCOPES}"),
            (self.epochs >= 1, f"epochs={self.epochs} must be >= 1"),
            (self.early_stopping is None or isinstance(self.early_stopping, (Kipf, Patience)),
             f"early_stopping={self.early_stopping!r} must be Kipf(window), Patience(patience) or None"),
            (self.clip_norm is None or self.clip_norm > 0, f"clip_norm={self.clip_norm} must be > 0"),
            (self.optimizer in OPTIMIZERS, f"optimizer={self.optimizer!r} must be one of {OPTIMIZERS}"),
            (0.0 <= self.momentum < 1.0, f"momentum={self.momentum} must be in [0, 1)"),
            # the registry (jaxgcn.core.tasks.task_of) checks the name where a program is built: no JAX here
            (isinstance(self.task, str) and self.task != "", f"task={self.task!r} must be 'auto' or a task's name"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


class TrainingDiverged(ValueError):
    """The training loss became NaN or infinite."""
