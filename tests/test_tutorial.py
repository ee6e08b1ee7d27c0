"""docs/tutorial.md runs: every ```python block in one namespace and every ```bash command through the
CLI, in order, in one temporary folder. ``pip install`` lines are what CI's own install step runs,
so they are skipped here; every other line must run and exit 0."""

from __future__ import annotations

import re
import shlex
import struct
from pathlib import Path

import pytest

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "tutorial.md"
BLOCK = re.compile(r"^```(python|bash)\n(.*?)^```", re.M | re.S)


def blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(TUTORIAL.read_text())]


def commands(script: str) -> list[list[str]]:
    """The shell lines of a block (continuations joined, comments dropped), split into argv lists."""
    joined = re.sub(r"\\\n\s*", " ", script)
    out = []
    for line in joined.splitlines():
        argv = shlex.split(line, comments=True)
        if argv:
            out.append(argv)
    return out


def test_the_tutorial_has_the_promised_sections():
    kinds = [kind for kind, _ in blocks()]
    assert kinds.count("python") >= 5 and kinds.count("bash") >= 6
    text = TUTORIAL.read_text()
    for topic in ("jax.jit", "value_and_grad", "jax.vmap", "jax.random.split", "D^-1/2 (A + I) D^-1/2",
                  "--edges edges.csv", "jaxgcn sweep", "jaxgcn plot embeddings"):
        assert topic in text, topic


def test_every_block_runs(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    from jaxgcn.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JAXGCN_CACHE_DIR", str(tmp_path / "cache"))  # not the user's compilation cache
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
            code = main(argv[1:])
            out = capsys.readouterr()
            assert code == 0, f"{' '.join(argv)} exited {code}: {out.err[-2000:]}"
            ran.append(argv[1])
    assert ran.count("python") >= 5 and {"train", "sweep", "plot", "predict", "evaluate", "info"} <= set(ran)
    for png, size in (("curves.png", (1000, 400)), ("embeddings.png", (700, 600)), ("sweep.png", (700, 500))):
        data = (tmp_path / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24]) == size
