"""A newcomer's path runs as written (issue 27): every ```bash and ```python block of README.md and of
the docs/ pages (docs/tutorial.md has its own test, tests/test_tutorial.py) runs, page by page, in
order, in a fresh folder with an empty HOME and no dataset cache, and exits 0; or a marker right
before it, ``<!-- not run by the tests: REASON -->`` (or ``(lines with `TEXT`)`` for some of its
lines, tests/doc_blocks.py), says why not: a download, data of gigabytes, a GPU, several hosts, a
``pip install``, a server, minutes of work. A block without either fails, so no new block is
silently left out, and a marker that no longer matches its block fails too.

The folder holds the reader's own files the pages start from (``edges.csv``, ``my_graph/``, ...:
:func:`write_readers_files`); files one block writes (``split.csv``, ``a.json``) are read by the
next, and a block whose first line is ``# NAME`` (a config file shown on the page) is written to
``NAME``. ``jaxgcn`` runs in this process, except with ``--devices``/``--distributed`` or an
environment variable before it (``XLA_FLAGS=... jaxgcn``), which JAX reads when it starts: those,
and ``python ...`` lines, run in a fresh process."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from doc_blocks import RUNNABLE, read_page, shell_lines

ROOT = Path(__file__).resolve().parents[1]
ALL_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PAGES = [p for p in ALL_PAGES if p.name != "tutorial.md"]  # tests/test_tutorial.py runs that one
PROGRAMS = ("jaxgcn", "python", "python3")
ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
OPERATORS = {"&", "|", "||", "<", ">", ">>", "(", ")"}
OUTPUTS = ("--json", "--csv", "--out", "--save", "--save-split", "--log", "--tensorboard", "-o")
N = 90  # nodes of the reader's own graph: 3 communities of 30


def write_readers_files(folder: Path) -> None:
    """The files the pages assume the reader brings: a graph of N integer-named nodes in 3 communities,
    as CSV (``edges.csv``, ``feats.csv``, ``labels.csv``; the same as ``e.csv``, ``f.csv``, ``l.csv``),
    a header-less ``edges.txt``, ``x.npy`` features, a graph with new nodes (``e2.csv``, ``f2.csv``)
    and an ``npz:my_graph/`` folder."""
    rng = np.random.default_rng(0)
    label = np.arange(N) % 3
    src = rng.integers(N, size=4 * N)
    dst = np.array([rng.choice(np.flatnonzero(label == label[u])) for u in src])  # within the community
    x = (rng.normal(size=(N, 4)) + label[:, None]).round(3).astype(np.float32)
    for edges, feats, labels in (("edges.csv", "feats.csv", "labels.csv"), ("e.csv", "f.csv", "l.csv")):
        (folder / edges).write_text("src,dst\n" + "".join(f"{u},{v}\n" for u, v in zip(src, dst)))
        (folder / feats).write_text("node,f0,f1,f2,f3\n" + "".join(
            f"{u},{','.join(map(str, row))}\n" for u, row in enumerate(x)))
        (folder / labels).write_text("node,label\n" + "".join(f"{u},{c}\n" for u, c in enumerate(label)))
    (folder / "edges.txt").write_text("".join(f"{u} {v}\n" for u, v in zip(src, dst)))
    np.save(folder / "x.npy", x)
    new = N + np.arange(10)  # ten nodes the model never saw, linked to old ones
    (folder / "e2.csv").write_text((folder / "e.csv").read_text() + "".join(f"{u},{u - N}\n" for u in new))
    (folder / "f2.csv").write_text((folder / "f.csv").read_text() + "".join(
        f"{u},{','.join(map(str, x[u - N]))}\n" for u in new))
    (folder / "my_graph").mkdir()
    sp.save_npz(folder / "my_graph" / "adjacency.npz", sp.coo_matrix((np.ones(src.size), (src, dst)), shape=(N, N)))
    np.save(folder / "my_graph" / "features.npy", x)
    np.save(folder / "my_graph" / "labels.npy", label)


def unrunnable(argv: list[str]) -> str | None:
    """Why the test cannot run this command as it is (then the page must mark it), or None."""
    program = next((a for a in argv if not ENV.match(a)), "")
    if program not in PROGRAMS:
        return f"`{program}` is not a program this test runs ({', '.join(PROGRAMS)})"
    if OPERATORS & set(argv):
        return f"the shell operator {sorted(OPERATORS & set(argv))[0]} (background, pipe, redirection)"
    return None


def page_problems(page: Path, runs: bool) -> list[str]:
    """What keeps a page's blocks from being either run or marked: its markers' problems, a block of
    commands without a runnable language, and (``runs``: a page this test runs) a command line that
    the test cannot run and no marker excludes."""
    blocks, problems = read_page(page)
    for block in blocks:
        where = f"{page.name}:{block.line}"
        if block.kind not in RUNNABLE and re.search(r"^(\$ )?(jaxgcn|python3?|pip) ", block.body, re.M):
            problems.append(f"{where}: a ```{block.kind} block of commands: make it ```bash")
        if not runs or block.kind != "bash" or block.excluded:
            continue
        for line, argvs in shell_lines(block.body):
            if not any(text in line for text in block.excluded_lines):
                problems += [f"{where}: `{line}`: {why}; run it or mark it `<!-- not run by the tests "
                             f"(lines with `...`): REASON -->`" for why in map(unrunnable, argvs) if why]
    return problems


def test_every_block_runs_or_a_marker_says_why_not():
    problems = [p for page in ALL_PAGES for p in page_problems(page, runs=page in PAGES)]
    assert not problems, "\n".join(problems)


def test_markers_are_read_as_documented(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("\n".join([
        "<!-- not run by the tests: needs a GPU -->", "", "```bash", "jaxgcn train", "```",     # 1-5
        "<!-- not run by the tests (lines with `pubmed`, `ogbn-arxiv`): downloads -->",        # 6
        "<!-- not run by the tests (lines with `--seeds 100`): 9 s -->",                       # 7
        "```bash", "jaxgcn train --dataset pubmed && jaxgcn info", "jaxgcn download ogbn-arxiv",
        "jaxgcn train --seeds 100", "jaxgcn info --dataset cora", "```",                       # 8-13
        "```python", "print(1)", "```",                                                         # 14-16
        "<!-- not run by the tests: nothing follows -->", "text", "```bash", "jaxgcn info", "```",  # 17-21
        "<!-- not run by the tests (lines with `citeseer`): no such line -->",                 # 22
        "```bash", "jaxgcn info", "pip install .", "jaxgcn train &", "```",                     # 23-27
        "<!-- not run by the tests:  -->", "```text", "out", "```",                             # 28-31
        "```", "jaxgcn datasets", "```", ""]))                                                  # 32-34
    blocks, problems = read_page(page)
    assert [(b.kind, b.line, b.excluded, b.excluded_lines) for b in blocks] == [
        ("bash", 3, True, ()), ("bash", 8, False, ("pubmed", "ogbn-arxiv", "--seeds 100")), ("python", 14, False, ()),
        ("bash", 19, False, ()), ("bash", 23, False, ("citeseer",)), ("text", 29, True, ()), ("", 32, False, ())]
    stale = [
        "page.md:17: a 'not run by the tests' marker that no fenced block follows",
        "page.md:22: no line of the block that follows contains `citeseer`",
        "page.md:28: a 'not run by the tests' marker that gives no reason",
        "page.md:28: a 'not run by the tests' marker before a ```text block, which never runs"]
    assert problems == stale
    how = "; run it or mark it `<!-- not run by the tests (lines with `...`): REASON -->`"
    assert page_problems(page, runs=False) == [*stale, "page.md:32: a ``` block of commands: make it ```bash"]
    assert page_problems(page, runs=True) == [
        *stale,
        "page.md:23: `pip install .`: `pip` is not a program this test runs (jaxgcn, python, python3)" + how,
        "page.md:23: `jaxgcn train &`: the shell operator & (background, pipe, redirection)" + how,
        "page.md:32: a ``` block of commands: make it ```bash"]
    assert shell_lines(blocks[1].body)[0] == ("jaxgcn train --dataset pubmed && jaxgcn info",
                                              [["jaxgcn", "train", "--dataset", "pubmed"], ["jaxgcn", "info"]])
    assert unrunnable(["XLA_FLAGS=--x", "jaxgcn", "train"]) is None and unrunnable(["srun", "jaxgcn"])


def run(argv: list[str], where: str, capsys) -> None:
    """One command of a page, in this process or a fresh one; it must exit 0 and write the outputs
    it names."""
    from jaxgcn.cli import main

    env = dict(a.split("=", 1) for a in argv if ENV.match(a))
    argv = [a for a in argv if not ENV.match(a)]
    if argv[0] == "jaxgcn" and not env and not {"--devices", "--distributed"} & set(argv):
        code, err = main(argv[1:]), capsys.readouterr().err
    else:
        fresh = [sys.executable, *(["-m", "jaxgcn.cli"] if argv[0] == "jaxgcn" else []), *argv[1:]]
        proc = subprocess.run(fresh, env={**os.environ, **env}, capture_output=True, text=True, timeout=300,
                              check=False)
        code, err = proc.returncode, proc.stderr
    assert code == 0, f"{where}: `{' '.join(argv)}` exited {code}: {err[-2000:]}"
    for flag, value in zip(argv, argv[1:]):
        if flag == "--tensorboard" and importlib.util.find_spec("tensorboardX") is None:  # an optional extra (not
            assert "tensorboardX is not installed" in err, f"{where}: `{' '.join(argv)}`: {err[-2000:]}"  # on a TPU VM)
        elif flag in OUTPUTS and value != "-":
            assert Path(value).exists(), f"{where}: `{' '.join(argv)}` exited 0 without writing {flag} {value}"


def test_a_command_must_exit_0_and_write_its_outputs_and_gets_its_environment(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    greets = "import os, sys; sys.exit(os.environ['GREETING'] != 'hi')"
    run(["GREETING=hi", "python", "-c", greets], "page.md:1", capsys)
    for argv in (["jaxgcn", "trian"], ["GREETING=hi", "jaxgcn", "trian"]):  # in this process, then as python -m
        with pytest.raises(AssertionError, match=r"page.md:2: `jaxgcn trian` exited 2: .*invalid choice: 'trian'"):
            run(argv, "page.md:2", capsys)
    with pytest.raises(AssertionError, match="`jaxgcn --version --json r.json` exited 0 without writing --json r.json"):
        run(["jaxgcn", "--version", "--json", "r.json"], "page.md:3", capsys)
    run(["jaxgcn", "--version", "--out", "-"], "page.md:4", capsys)  # standard output, not a file


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_the_commands_of_the_page_run(page, tmp_path, monkeypatch, capsys):
    # a newcomer's machine: an empty HOME, so jaxgcn's cache folder is ~/.cache/jaxgcn there and holds
    # no dataset; only the C++ kernel is the one the session builds (linked: a new cache would rebuild
    # it in every fresh process), and the CLI keeps the session's compilation cache (tests/conftest.py)
    from jaxgcn.host import caches

    kernels = caches.root() / "kernels"
    kernels.mkdir(parents=True, exist_ok=True)
    for name in (caches.ENV, "JAXGCN_DATA", "JAXGCN_MIRROR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert caches.root().is_relative_to(tmp_path / "home")  # the per-user cache folder of that HOME
    caches.root().mkdir(parents=True)
    (caches.root() / "kernels").symlink_to(kernels, target_is_directory=True)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    write_readers_files(tmp_path / "work")
    assert os.environ["JAX_COMPILATION_CACHE_DIR"]

    blocks, _ = read_page(page)
    namespace: dict = {"__name__": page.stem}
    for block in blocks:
        where = f"{page.name}:{block.line}"
        if named := re.match(r"# ([\w.-]+)\n", block.body):  # a file the page shows, then uses
            Path(named.group(1)).write_text(block.body)
        if block.kind not in RUNNABLE or block.excluded:
            continue
        if block.kind == "python":
            exec(compile(block.body, where, "exec"), namespace)  # noqa: S102 - the page's own code
            continue
        for line, argvs in shell_lines(block.body):
            if not any(text in line for text in block.excluded_lines):
                for argv in argvs:
                    run(argv, where, capsys)
