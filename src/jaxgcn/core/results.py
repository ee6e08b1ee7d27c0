"""What training returns (host values): one run's :class:`FitResult`, a batch's :class:`BatchResult`
(what :func:`jaxgcn.training.loop.run` returns for every kind of run), and the :class:`Evaluation`
of one run's params."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxgcn.core.layers import Params, run_axis


class FitResult(NamedTuple):
    """Outcome of one training run (host values).

    Attributes:
        params: the final params (best params for ``patience`` early stopping).
        metrics: loss/accuracy per split of ``params`` (dropout off).
        epochs_run: epochs trained.
        stopped_early: whether the early-stopping rule ended the run.
        history: ``{"loss", "train_acc", "val_loss", "val_acc"}`` -> [epochs_run] NumPy arrays.
        compile_seconds: time spent compiling (0 when the program was cached).
        train_seconds: wall time of the epochs and the final evaluation.
        restored_epoch: with ``patience`` early stopping, the epoch (1-based) whose params
            ``params`` are (the best validation accuracy); ``None`` otherwise.
    """

    params: Params
    metrics: dict[str, float]
    epochs_run: int
    stopped_early: bool
    history: dict[str, np.ndarray]
    compile_seconds: float
    train_seconds: float
    restored_epoch: int | None = None


class BatchResult(NamedTuple):
    """Outcome of a batch of runs (host NumPy, one entry per run), and what
    :func:`jaxgcn.training.loop.run` returns
    (one run's as a batch of one: :func:`fit_result`).

    Attributes:
        entries: the runs.
        metrics: ``{"train_acc", "val_acc", "test_acc", ...}`` -> [R] of the final (or best) params.
        epochs_run: [R]. stopped_early: [R] bool.
        history: ``{"loss", "train_acc", "val_loss", "val_acc"}`` -> [R, epochs] (NaN after a run stopped).
        params: stacked final params (see :func:`jaxgcn.training.runs.unstack_params`).
        compile_seconds, train_seconds: wall times of compiling and of running the batch.
        restored_epoch: with ``patience`` early stopping, [R] the epoch (1-based) whose params each
            run returns (its best validation accuracy); ``None`` otherwise.
    """

    entries: list[Any]  # each a jaxgcn.training.runs.Entry
    metrics: dict[str, np.ndarray]
    epochs_run: np.ndarray
    stopped_early: np.ndarray
    history: dict[str, np.ndarray]
    params: Params
    compile_seconds: float
    train_seconds: float
    restored_epoch: np.ndarray | None = None


def fit_result(runs: BatchResult) -> FitResult:
    """One run's :class:`FitResult` from :func:`jaxgcn.training.loop.run`'s results."""
    epoch = int(runs.epochs_run[0])
    restored = None if runs.restored_epoch is None else int(runs.restored_epoch[0])
    return FitResult(runs.params, {k: float(v[0]) for k, v in runs.metrics.items()}, epoch,
                     bool(runs.stopped_early[0]), {k: v[0][:epoch] for k, v in runs.history.items()},
                     runs.compile_seconds, runs.train_seconds, restored)


class Evaluation(NamedTuple):
    """Loss and accuracy on each split, computed with dropout off (scalars: device arrays inside the
    program, host values after it)."""

    train_loss: Any
    train_acc: Any
    val_loss: Any
    val_acc: Any
    test_loss: Any
    test_acc: Any


def concat_results(entries: list[Any], parts: list[BatchResult]) -> BatchResult:
    """One :class:`BatchResult` of ``entries`` from those of its slices ``parts``, in order."""
    def cat(get: Callable[[BatchResult], Any]) -> Any:
        return np.concatenate([get(p) for p in parts])
    return BatchResult(
        entries=entries,
        metrics={k: cat(lambda p, k=k: p.metrics[k]) for k in parts[0].metrics},
        epochs_run=cat(lambda p: p.epochs_run),
        stopped_early=cat(lambda p: p.stopped_early),
        history={k: cat(lambda p, k=k: p.history[k]) for k in parts[0].history},
        params=jax.tree.map(lambda *leaves: jnp.concatenate(leaves, axis=run_axis(leaves[0])),
                            *(p.params for p in parts)),
        compile_seconds=sum(p.compile_seconds for p in parts),
        train_seconds=sum(p.train_seconds for p in parts),
        restored_epoch=None if parts[0].restored_epoch is None else cat(lambda p: p.restored_epoch),
    )


def take_runs(params: Params, runs: Any) -> Params:
    """The params of the runs ``runs`` (indices: stacked) or of one run ``runs`` (an int: in the
    single-run layout), from a batch's stacked params."""
    return jax.tree.map(lambda leaf: jnp.take(leaf, runs, axis=run_axis(leaf)), params)


def unstack_params(params: Params, run: int) -> Params:
    """The params of one run, in the single-run layout."""
    return take_runs(params, run)
