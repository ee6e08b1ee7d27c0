"""One seed-to-key rule, one compile cache, one host driver (issue 44): what makes a batch equal its
single runs, and a single run, a batch slice and a sharded run share their host side."""

from __future__ import annotations

import ast
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxgcn import datasets
from jaxgcn.batched import entries_for, fit_runs, init_params, run_inputs, unstack_params
from jaxgcn.core.models import GCNConfig
from jaxgcn.train import COMPILED, TrainConfig, TrainingDiverged, fit, make_batch_runner, make_runner, run_keys

SRC = Path(__file__).resolve().parents[1] / "src" / "jaxgcn"


@pytest.fixture(scope="module")
def small():
    return datasets.prepare(datasets.synthetic(200, n_classes=3, n_features=8, homophily=0.6, seed=4))


def test_the_seed_rule_gives_the_keys_it_always_gave():
    # a seed's run must stay the run it was (saved models, published numbers): seed 0's two keys,
    # whether the seed, its typed key or its raw uint32 key is given
    for given in (0, jax.random.key(0), jax.random.PRNGKey(0)):
        init_key, run_key = run_keys(given)
        data = [np.asarray(jax.random.key_data(k) if jax.dtypes.issubdtype(k.dtype, jax.dtypes.prng_key) else k)
                for k in (init_key, run_key)]
        assert [d.tolist() for d in data] == [[1797259609, 2579123966], [928981903, 3453687069]], given
    assert jax.random.key_data(run_keys(1)[0]).tolist() != jax.random.key_data(run_keys(0)[0]).tolist()


def test_a_batch_starts_every_run_as_its_single_run(small):
    """The three places that turn a seed into keys (the batch's params, the batch's state, the
    single run's state) agree: each run of a batch starts with its single run's params and key."""
    model, config, seeds = GCNConfig(hidden=4), TrainConfig(epochs=3), [0, 3, 17]
    entries = entries_for(seeds, model_config=model, config=config)
    n_features = int(small.data.x.shape[1])
    params = init_params(model, entries, n_features, small.n_classes)
    batch = make_batch_runner(model, config).init(params, np.asarray(seeds, np.int32), run_inputs(entries))
    runner = make_runner(model, config, n_features, small.n_classes)
    for r, seed in enumerate(seeds):
        one = runner.init(jax.random.key(seed), small.data, runner.inputs())
        jax.tree.map(np.testing.assert_array_equal, unstack_params(params, r), one.params)
        np.testing.assert_array_equal(jax.random.key_data(batch.runs.key[r]), jax.random.key_data(one.key))
    assert not np.array_equal(jax.random.key_data(batch.runs.key[0]), jax.random.key_data(batch.runs.key[1]))


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func).endswith(name)]


def test_only_the_rule_splits_a_key_made_of_a_seed():
    """No module splits ``jax.random.key(seed)`` itself: a fourth place would be one more line to
    keep in step; the sites that start runs call :func:`run_keys`."""
    callers = set()
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for call in _calls(tree, "random.split"):
            assert not (call.args and isinstance(call.args[0], ast.Call) and
                        ast.unparse(call.args[0].func).endswith(("random.key", "random.PRNGKey"))), \
                f"{path.relative_to(SRC)}:{call.lineno} splits a key made of a seed: call run_keys"
        if _calls(tree, "run_keys"):
            callers.add(path.relative_to(SRC).as_posix())
    assert callers == {"training/step.py", "training/runs.py"}


def test_single_runs_and_batches_compile_through_one_cache(small):
    """fit and fit_runs store their programs in the one cache; the same settings again compile nothing."""
    config, model = TrainConfig(epochs=4, early_stopping=None), GCNConfig(hidden=5)
    before = set(COMPILED)
    one = fit(small.data, small.n_classes, model_config=model, config=config, log=None)
    batch = fit_runs(small.data, small.n_classes, entries_for([0, 1], model_config=model, config=config))
    new = [key for key in COMPILED if key not in before]
    assert len(new) == 2 and sum(key[0] == "runs" for key in new) == 1, new
    again = fit_runs(small.data, small.n_classes, entries_for([0, 1], model_config=model, config=config))
    assert one.compile_seconds > 0 and batch.compile_seconds > 0 and again.compile_seconds == 0.0
    np.testing.assert_array_equal(again.history["loss"], batch.history["loss"])


def test_a_run_and_a_batch_that_diverge_are_worded_by_the_one_driver(small):
    """The driver's one divergence check: a single run names its epoch and causes; a batch also
    names its diverged runs, their first one's seed and learning rate, and the same causes."""
    config = TrainConfig(epochs=30, early_stopping=None, optimizer="momentum", lr=1e20)
    with pytest.raises(TrainingDiverged) as single:
        fit(small.data, small.n_classes, config=config, log=None)
    entries = entries_for([5, 6], config=config)
    with pytest.raises(TrainingDiverged, match=r"^run\(s\) \[0, 1\] \(seed 5, lr 1e\+20\): ") as batch:
        fit_runs(small.data, small.n_classes, entries)
    assert str(single.value).startswith("training diverged: the loss became NaN/inf at epoch ")
    assert str(batch.value).endswith(str(single.value))
