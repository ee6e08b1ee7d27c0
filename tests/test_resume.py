"""A resumed run equals the uninterrupted one bit for bit: params, Adam state, PRNG key, early-stopping
window, history, at every later checkpoint, on a run where Kipf's rule fires (issue 12)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxgcn import checkpoint, datasets
from jaxgcn.models import GCNConfig
from jaxgcn.train import Kipf, TrainConfig, fit

# lr 0.1 on a weakly homophilous graph: Kipf's rule (window 5) stops the run at epoch ~35 of 60.
CONFIG = TrainConfig(epochs=60, lr=0.1, early_stopping=Kipf(5))
EVERY = 5


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
