"""docs/tutorial.md runs: every ```python block in one namespace and every ```bash command through the
CLI, in order, in one temporary folder. ``pip install`` lines are what CI's own install step runs,
so they are skipped here; every other line must run and exit 0. A command with ``--devices`` runs in
a fresh process, as the console script: JAX's CPU device count is fixed once JAX has started, and
this process started it long ago. ```text blocks (PyTorch code, torch is not installed) do not run."""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import RUNNABLE, commands, fenced

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "tutorial.md"


def blocks() -> list[tuple[str, str]]:
    """The ```python and ```bash blocks, in order: ``(language, text)``."""
    return [(kind, body) for kind, body, _, _ in fenced(TUTORIAL.read_text()) if kind in RUNNABLE]


def test_the_tutorial_has_the_promised_sections():
    kinds = [kind for kind, _ in blocks()]
    assert kinds.count("python") >= 15 and kinds.count("bash") >= 8
    text = TUTORIAL.read_text()
    for topic in ("jax.jit", "value_and_grad", "jax.vmap", "jax.random.split", "D^-1/2 (A + I) D^-1/2",
                  "--edges edges.csv", "jaxgcn sweep", "jaxgcn plot embeddings",
                  # pitfalls
                  "static_argnames", "TracerBoolConversionError", ".at[", "jax.tree.map", "jax.tree_map",
                  '"jax_debug_nans", True', "FloatingPointError",
                  # NumPy / PyTorch / JAX side by side
                  "gcn_layer_numpy", "torch.sparse.mm", "segment_sum", "```text",
                  # several devices
                  "--shard-graph --devices 4", "jax_num_cpu_devices", "xla_force_host_platform_device_count",
                  "shard_map", "pmap", "psum",
                  # the corrected claims
                  "5.75", "input features", "stacked along the feature axis", "class *ids*", "Rule_Learning",
                  "pip install -e '.[plot]'", "TrainingDiverged"):
        assert topic in text, topic


def test_the_tutorial_does_not_repeat_its_old_mistakes():
    text = TUTORIAL.read_text()
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    assert "averages its neighbours" not in text  # symmetric normalization sums; rows of Â sum to 0.46-5.75
    assert "ReLU and dropout in between" not in text  # dropout also hits the input features
    assert "`vmap` over the runs" not in text  # runs are stacked in the feature axis; vmap was slower
    assert "numpy_dtype_promotion(" not in text  # fit runs under strict promotion without a wrapper
    assert "topics separate" not in text  # they overlap in the PCA plot
    assert "learning rate 100 is large (try" not in text  # lr 100 does not give a NaN
    assert "pip install 'jaxgcn[plot]'" not in text  # not published on an index: a checkout or a git URL
    assert "jax.tree_map(" not in prose  # only shown failing, inside a code block
    for kind, body in blocks():
        for argv in commands(body) if kind == "bash" else []:
            if argv[:2] == ["pip", "install"]:  # from the checkout, not by name from an index
                assert argv[2:] and all(a.startswith((".", "-")) for a in argv[2:]), argv


def test_every_block_runs(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    from jaxgcn.cli import main

    monkeypatch.chdir(tmp_path)
    # the CLI keeps the session's compilation cache (tests/conftest.py), not the user's; the kernel
    # stays in its usual cache, built once (a fresh JAXGCN_CACHE_DIR would rebuild it per process)
    assert os.environ["JAX_COMPILATION_CACHE_DIR"]
    namespace: dict = {"__name__": "tutorial"}
    ran = []
    for kind, body in blocks():
        if kind == "python":
            exec(compile(body, str(TUTORIAL), "exec"), namespace)  # noqa: S102 - the tutorial's own code
            ran.append("python")
            continue
        for argv in commands(body):
            if argv[:2] == ["pip", "install"]:
                continue  # CI's install step
            assert argv[0] == "jaxgcn", f"the tutorial's shell blocks only run jaxgcn: {argv}"
            if "--devices" in argv:  # a fresh process, where the CLI can still set the CPU device count
                proc = subprocess.run([sys.executable, "-m", "jaxgcn.cli", *argv[1:]], capture_output=True,
                                      text=True, timeout=300, check=False)
                code, err = proc.returncode, proc.stderr
            else:
                code = main(argv[1:])
                err = capsys.readouterr().err
            assert code == 0, f"{' '.join(argv)} exited {code}: {err[-2000:]}"
            ran.append(argv[1])
    assert ran.count("python") >= 15 and {"train", "sweep", "plot", "predict", "evaluate", "info"} <= set(ran)
    for png, size in (("curves.png", (1000, 400)), ("embeddings.png", (700, 600)), ("sweep.png", (700, 500)),
                      ("embeddings-named.png", (700, 600))):
        data = (tmp_path / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24]) == size
