"""A single run's resumable state is slice 0 of the one state format (``batch-state/``: a manifest
plus one file per slice, :mod:`jaxgcn.store.batch_state`), its unbatched ``RunState`` as it is; read back
from disk it resumes the run bit for bit."""

from __future__ import annotations

import jax
import numpy as np

from jaxgcn import datasets
from jaxgcn.store import batch_state, checkpoint
from jaxgcn.core.models import GCNConfig
from jaxgcn.train import Kipf, TrainConfig, fit

CONFIG = TrainConfig(epochs=30, lr=0.1, early_stopping=Kipf(5))
EVERY = 5


def test_a_single_runs_slice_written_and_read_back_resumes_bit_for_bit(tmp_path):
    prepared = datasets.prepare(datasets.synthetic(200, n_classes=3, n_features=8, seed=4))
    saver = batch_state.saver(tmp_path, extra={"seed": 3}, fingerprint={}, single=True)

    def run(on_checkpoint, resume=None):
        return fit(prepared.data, prepared.n_classes, model_config=GCNConfig(hidden=8), config=CONFIG,
                   key=jax.random.key(3), log=None, checkpoint_every=EVERY, on_checkpoint=on_checkpoint,
                   resume=resume)

    states = {}
    whole = run(lambda s: states.setdefault(int(s.epoch), checkpoint.state_arrays(s)))
    cut = 2 * EVERY
    run(lambda s: saver(0, s) if int(s.epoch) <= cut else None)  # a run killed after epoch `cut`
    manifest = batch_state.load(tmp_path)
    assert manifest["single_run"] is True and manifest["extra"] == {"seed": 3}
    assert list(manifest["slices"]) == ["0"] and manifest["slices"]["0"]["epoch"] == cut
    assert manifest["slices"]["0"]["number"] == 2 and manifest["slices"]["0"]["running"] == 1
    later = {}
    resumed = run(lambda s: later.setdefault(int(s.epoch), checkpoint.state_arrays(s)),
                  resume=lambda template: batch_state.slice_state(tmp_path, manifest, 0, template))
    assert sorted(later) == [e for e in sorted(states) if e > cut] and later
    for epoch in later:  # params, Adam moments, key, window, history: the whole state
        for name, want in states[epoch].items():
            np.testing.assert_array_equal(later[epoch][name], want, err_msg=f"epoch {epoch} {name}")
    assert resumed.epochs_run == whole.epochs_run and resumed.metrics == whole.metrics
