"""The float32 matmul precision as a decision (issue 45): requested on the Execution (``--precision``),
decided per platform by the plan (:func:`jaxgcn.plan.precision_for`), applied to every compiled program
of a run, reported by ``info`` and ``--json``, and recorded in checkpoints.

On the CPU the precision changes no result, so what can be seen here is the programs' text: a dot
traced under ``highest`` carries ``operand_precision={highest,highest}`` in its HLO, one traced as
before carries none."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from cli_run import run_main, unwrap

from jaxgcn import datasets, plan
from jaxgcn.app import inference
from jaxgcn.core.models import Decided, Execution, GCNConfig
from jaxgcn.store import checkpoint
from jaxgcn.train import TrainConfig, compile_runner

HIGHEST = "operand_precision={highest,highest}"
AUTO = plan.precision_for("auto", jax.default_backend())  # default on the CPU (CI), highest on a TPU/GPU
SYNTH = ["--dataset", "synthetic", "--nodes", "120", "--classes", "3", "--features", "8", "--epochs", "3",
         "--early-stopping", "none", "--no-compile-cache"]


@pytest.fixture(scope="module")
def small():
    return datasets.prepare(datasets.synthetic(120, n_classes=3, n_features=8, homophily=0.6, seed=4),
                            backend="segment")


def test_a_precision_outside_the_four_is_refused_by_name():
    with pytest.raises(ValueError, match=r"^precision='fast' must be one of \('auto', 'default', 'high', "
                                         r"'highest'\)$"):
        Execution(precision="fast")
    decided = plan.concrete(Execution(backend="segment"))
    with pytest.raises(ValueError, match=r"decided execution's precision is one of .* not 'auto'"):
        Decided("segment", decided.ops, precision="auto")


@pytest.mark.parametrize("requested, platform, decided", [
    ("auto", "cpu", "default"), ("auto", "tpu", "highest"), ("auto", "gpu", "highest"),
    ("default", "tpu", "default"), ("high", "tpu", "high"), ("highest", "cpu", "highest"), ("high", "cpu", "high"),
])
def test_auto_is_highest_on_an_accelerator_and_default_on_the_cpu(requested, platform, decided):
    assert plan.precision_for(requested, platform) == decided


@pytest.mark.parametrize("platform, decided", [("cpu", "default"), ("tpu", "highest"), ("gpu", "highest")])
def test_the_plan_decides_the_precision_for_the_platform_jax_runs_on(monkeypatch, small, platform, decided):
    monkeypatch.setattr(jax, "default_backend", lambda: platform)
    chosen = plan.resolve(Execution(), small.data, GCNConfig(), small.n_classes)
    assert chosen.precision == chosen.execution.precision == decided
    assert plan.concrete(Execution(backend="segment", precision="high")).precision == "high"


def _dots(text: str) -> list[str]:
    return [line for line in text.splitlines() if " dot(" in line]


# the compiled text these read is the CPU's: a TPU's compiled HLO has its products fused into
# convolutions, with no dot left to read the precision from (the CLI's test below checks the chip)
cpu_hlo = pytest.mark.skipif(jax.default_backend() != "cpu", reason="reads the CPU's compiled HLO for dot ops")


@cpu_hlo
def test_a_run_s_programs_are_compiled_in_its_decided_precision(small):
    """The training loop and the evaluation of a ``highest`` run multiply in full float32; a
    ``default`` run's model products carry no operand precision (as before the field; only the loss's
    own, which ask for HIGHEST themselves), and the two are two programs in the one compile cache."""
    model, config = GCNConfig(hidden=4), TrainConfig(epochs=2, early_stopping=None)
    highest = compile_runner(model, config, small.data, small.n_classes,
                             Execution(backend="segment", precision="highest"))
    default = compile_runner(model, config, small.data, small.n_classes,
                             Execution(backend="segment", precision="default"))
    for program in (highest.run_until, highest.evaluate):
        dots = _dots(program.as_text())
        assert dots and all(HIGHEST in line for line in dots), dots
    for program in (default.run_until, default.evaluate):
        dots = _dots(program.as_text())
        assert any("operand_precision" not in line for line in dots), dots


@cpu_hlo
def test_a_batch_is_compiled_in_its_decided_precision(small, monkeypatch):
    """fit_runs's programs (the batch path) are traced in the precision too."""
    from jaxgcn.training import loop

    seen = []
    real = loop.compile

    def spy(*args, **kwargs):
        program = real(*args, **kwargs)
        seen.append(program.run_until.as_text())
        return program
    monkeypatch.setattr("jaxgcn.training.runs.compile", spy)
    from jaxgcn.batched import entries_for, fit_runs

    entries = entries_for([0, 1], model_config=GCNConfig(hidden=3), config=TrainConfig(epochs=2, early_stopping=None))
    fit_runs(small.data, small.n_classes, entries, execution=Execution(backend="segment", precision="highest"))
    assert len(seen) == 1 and _dots(seen[0]) and all(HIGHEST in line for line in _dots(seen[0]))


def _save(directory, execution):
    params = {"layer_0": {"w": np.ones((3, 2), np.float32)}, "layer_1": {"w": np.ones((2, 2), np.float32)}}
    return checkpoint.save(directory, params, model_config=GCNConfig(hidden=2), train_config=TrainConfig(),
                           execution=execution, epoch=1, metrics={},
                           info={"n_features": 3, "n_classes": 2, "class_names": None, "norm": "sym"})


def test_a_checkpoint_keeps_the_decided_precision_and_an_older_one_loads_as_auto(tmp_path):
    _save(tmp_path / "ck", plan.concrete(Execution(backend="segment", precision="high")))
    meta = checkpoint.load(tmp_path / "ck").meta
    assert meta["execution"]["precision"] == "high" and checkpoint.precision(meta) == "high"
    path = tmp_path / "ck" / checkpoint.META
    old = json.loads(path.read_text())
    del old["execution"]["precision"]  # written before the field
    path.write_text(json.dumps(old))
    assert checkpoint.precision(checkpoint.load(tmp_path / "ck").meta) == "auto"
    assert checkpoint.precision({"execution": None}) == "auto"
    path.write_text(json.dumps({**old, "execution": {**old["execution"], "precision": "fast"}}))
    with pytest.raises(ValueError, match=r"execution\.precision is 'fast', expected one of auto, default, high, "
                                         r"highest; the file was edited or corrupted"):
        checkpoint.load(tmp_path / "ck")


def test_a_run_saved_before_the_field_resumes_as_a_default_precision_run():
    """Earlier jaxgcn never set a precision: its runs computed in JAX's default, so their state resumes
    where this run decides ``default`` (the CPU's auto) and is refused where it decides another."""
    data = {part: "0" * 64 for part in checkpoint.FINGERPRINT_PARTS}
    saved = {"extra": {"execution": {"backend": "csr"}, "seed": 0}, "data_sha256": data}
    checkpoint.check_resumable(saved, {"execution": {"backend": "csr", "precision": "default"}, "seed": 0}, data, "x")
    with pytest.raises(ValueError, match=r"^x: the run was started with different execution"):
        checkpoint.check_resumable(saved, {"execution": {"backend": "csr", "precision": "highest"}, "seed": 0}, data,
                                   "x")


def test_train_json_states_the_precision_and_evaluate_uses_the_recorded_one(tmp_path, capsys, monkeypatch):
    out, model = tmp_path / "r.json", tmp_path / "m"
    assert run_main(["train", *SYNTH, "--precision", "highest", "--json", out, "--save", model]) == 0
    report = json.loads(out.read_text())
    assert report["precision"] == report["config"]["execution"]["precision"] == "highest"
    assert "precision highest: float32 matmuls in full float32 (--precision)" in capsys.readouterr().out
    assert run_main(["train", *SYNTH, "--json", out]) == 0
    assert json.loads(out.read_text())["precision"] == AUTO  # default on the CPU
    traced = []
    real = inference.gcn

    def spy(*args, **kwargs):  # the precision the evaluation's forward pass is traced in
        model = real(*args, **kwargs)
        return model._replace(apply=lambda *a, **k: traced.append(jax.config.jax_default_matmul_precision)
                              or model.apply(*a, **k))
    monkeypatch.setattr(inference, "gcn", spy)
    assert run_main(["evaluate", "--checkpoint", model]) == 0
    assert run_main(["evaluate", "--checkpoint", model, "--precision", "default"]) == 0
    # `default` enters no scope: the session's setting (None; full float32 on an accelerator: conftest)
    assert traced == ["highest", jax.config.jax_default_matmul_precision]
    # a model trained on the CPU records `default` (the CPU's float32 is exact there): a TPU evaluates it
    # in full float32 too, as `auto` decides there
    plain = tmp_path / "plain"
    assert run_main(["train", *SYNTH, "--save", plain, "--precision", "default"]) == 0
    monkeypatch.setattr(plan, "current_platform", lambda: "tpu")
    traced.clear()
    assert run_main(["evaluate", "--checkpoint", plain]) == 0
    assert traced == ["highest"]


def test_a_bad_precision_flag_exits_2_naming_the_choices(capsys):
    assert run_main(["train", *SYNTH, "--precision", "fast"]) == 2
    err = unwrap(capsys.readouterr().err)
    assert "argument --precision: invalid choice: 'fast' (choose from 'auto', 'default', 'high', 'highest')" in err


def test_info_states_what_auto_gives_here(tmp_path, capsys):
    out = tmp_path / "i.json"
    assert run_main(["info", "--dataset", "synthetic", "--nodes", "120", "--json", out]) == 0
    assert f"precision: --precision auto gives {AUTO} here: float32 matmuls in " in capsys.readouterr().out
    assert json.loads(out.read_text())["precision"] == {"auto": AUTO}
