"""A resumed run equals the uninterrupted one bit for bit: params, Adam state, PRNG key, early-stopping
window, best-model tracking, history, at every later checkpoint, on a run where Kipf's rule fires
(issue 12) and on one where patience fires after the checkpoint it resumes from, which holds the best
epoch (a resume that forgot the best params, accuracy, loss or epoch would return other params)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxgcn import datasets
from jaxgcn.store import batch_state, checkpoint
from jaxgcn.core.models import GCNConfig
from jaxgcn.train import Kipf, Patience, TrainConfig, fit

# lr 0.1 on a weakly homophilous graph: Kipf's rule (window 5) stops the run at epoch ~35 of 60.
CONFIG = TrainConfig(epochs=60, lr=0.1, early_stopping=Kipf(5))
EVERY = 5
# The same graph and lr with patience 15, key 3: the best validation accuracy (0.868) is at epoch
# 43, no later epoch reaches it (0.849 at most) and the rule fires at epoch 58 (measured). Resumed
# from the checkpoint of epoch 45, the run must still return epoch 43's params and stop at 58.
PATIENCE = TrainConfig(epochs=80, lr=0.1, early_stopping=Patience(15))
PATIENCE_CUT = 45


@pytest.fixture(scope="module")
def prepared():
    return datasets.prepare(datasets.synthetic(400, n_classes=4, n_features=16, homophily=0.5, signal=0.3, seed=1))


def run(prepared, resume=None):
    """The run's result and its state at every checkpoint, as the arrays a checkpoint stores."""
    states = {}

    def keep(state):
        states[int(state.epoch)] = checkpoint.state_arrays(state)

    res = fit(prepared.data, prepared.n_classes, model_config=GCNConfig(), config=CONFIG,
              key=jax.random.key(3), log=None, checkpoint_every=EVERY, on_checkpoint=keep, resume=resume)
    return res, states


def test_resumed_run_equals_the_uninterrupted_one_bit_for_bit(prepared):
    whole, states = run(prepared)
    assert whole.stopped_early and whole.epochs_run < CONFIG.epochs and whole.epochs_run > 3 * EVERY
    cut = 2 * EVERY
    saved = states[cut]  # what a run killed after epoch `cut` left on disk
    resumed, later = run(prepared, resume=lambda template: checkpoint.restore_state(template, saved, "test"))
    assert sorted(later) == [e for e in sorted(states) if e > cut]
    for epoch in later:  # every leaf of the state: params, Adam moments and count, key, window, history
        for name, want in states[epoch].items():
            np.testing.assert_array_equal(later[epoch][name], want, err_msg=f"epoch {epoch} {name}")
    assert resumed.epochs_run == whole.epochs_run and resumed.stopped_early
    assert resumed.metrics == whole.metrics
    for got, want in zip(jax.tree.leaves(resumed.params), jax.tree.leaves(whole.params)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    for name, want in whole.history.items():
        np.testing.assert_array_equal(resumed.history[name], want)


def test_the_saved_state_holds_the_key_and_the_optimizer_moments(prepared):
    """A resume that dropped the key or the Adam moments would still train; the state must hold both
    and they must change between checkpoints (else restoring them would prove nothing)."""
    _, states = run(prepared)
    first, second = states[EVERY], states[2 * EVERY]
    changed = [name for name in first if not np.array_equal(first[name], second[name])]
    key_leaves = [name for name, arr in first.items() if arr.dtype == np.uint32 and arr.shape == (2,)]
    assert key_leaves and set(key_leaves) <= set(changed)
    assert len(changed) >= 8  # params, mu, nu, count, key, epoch, window, history...


def named_arrays(state):
    """Every array of a run state by its path (``.best_params['layer_0']['w']``, ``.key``, ...)."""
    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    return {jax.tree_util.keystr(path): np.asarray(jax.random.key_data(leaf) if jax.dtypes.issubdtype(
        leaf.dtype, jax.dtypes.prng_key) else leaf) for path, leaf in leaves}


def test_a_patience_run_resumed_after_its_best_epoch_returns_the_same_best_params(prepared, tmp_path):
    """The checkpoint holds the best params, accuracy, loss and epoch: resumed after the best epoch,
    patience fires at the same epoch and the run returns the same params, read back from disk as
    ``--resume`` reads them."""
    def run(resume=None, keep_until=PATIENCE.epochs):
        states = {}
        saver = batch_state.saver(tmp_path / "ck", extra={}, fingerprint={}, single=True)  # slice 0, as --save writes

        def on_checkpoint(state):
            states[int(state.epoch)] = named_arrays(state)
            if int(state.epoch) <= keep_until:  # a run killed after epoch keep_until saved nothing later
                checkpoint.save(tmp_path / "ck", state.params, model_config=GCNConfig(), train_config=PATIENCE,
                                info=prepared.info, epoch=int(state.epoch), metrics={}, state=state,
                                write_state=lambda s: saver(0, s))

        res = fit(prepared.data, prepared.n_classes, model_config=GCNConfig(), config=PATIENCE,
                  key=jax.random.key(3), log=None, checkpoint_every=EVERY, on_checkpoint=on_checkpoint,
                  resume=resume)
        return res, states

    whole, states = run(keep_until=PATIENCE_CUT)
    assert whole.stopped_early and whole.restored_epoch < PATIENCE_CUT < whole.epochs_run - EVERY
    best = whole.restored_epoch
    assert whole.epochs_run == best + PATIENCE.early_stopping.patience
    val_acc = whole.history["val_acc"]
    assert np.all(val_acc[PATIENCE_CUT:] < val_acc[best - 1])  # nothing after the cut ties the best
    saved = checkpoint.load(tmp_path / "ck")
    assert saved.meta["epoch"] == PATIENCE_CUT
    manifest = batch_state.load(tmp_path / "ck")
    assert manifest["slices"]["0"]["epoch"] == PATIENCE_CUT
    cut_state = states[PATIENCE_CUT]
    assert int(cut_state[".best_epoch"]) == best  # the state it resumes from holds the best epoch
    assert not np.array_equal(cut_state[".best_params['layer_0']['w']"], cut_state[".params['layer_0']['w']"])

    resumed, later = run(resume=lambda template: batch_state.slice_state(tmp_path / "ck", manifest, 0, template),
                         keep_until=0)
    assert sorted(later) == [e for e in sorted(states) if e > PATIENCE_CUT] and later
    for epoch in later:  # params, Adam moments and count, key, best params/acc/loss/epoch, history
        assert sorted(later[epoch]) == sorted(states[epoch])
        for name, want in states[epoch].items():
            np.testing.assert_array_equal(later[epoch][name], want, err_msg=f"epoch {epoch} {name}")
    assert (resumed.epochs_run, resumed.stopped_early, resumed.restored_epoch) == \
        (whole.epochs_run, whole.stopped_early, whole.restored_epoch)
    assert resumed.metrics == whole.metrics
    for got, want in zip(jax.tree.leaves(resumed.params), jax.tree.leaves(whole.params)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    for name, want in whole.history.items():
        np.testing.assert_array_equal(resumed.history[name], want, err_msg=name)
