"""The code blocks of the markdown pages as the tests that run them read them (tests/test_tutorial.py,
tests/test_docs_commands.py): the fenced blocks in order, their shell lines split into commands, and
the ``<!-- not run by the tests: REASON -->`` markers that exclude a block, or some of its lines, from
the run.

A marker sits right before a fenced block (blank lines and other markers may come between) and gives
a reason. ``<!-- not run by the tests: REASON -->`` excludes the whole block; ``<!-- not run by the
tests (lines with `TEXT`, `TEXT2`): REASON -->`` only the lines that contain one of the quoted texts.
A marker followed by no block, by a block that never runs (```text) or naming a text that no line of
its block contains is stale: :func:`read_page` reports it.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import NamedTuple

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
MARKER = re.compile(r"<!--\s*not run by the tests(?:\s*\((?P<lines>[^)]*)\))?\s*:(?P<why>.*?)-->", re.S)
RUNNABLE = ("python", "bash")
SEPARATORS = ("&&", ";")  # commands of one line that all run, one after the other


class Block(NamedTuple):
    """One fenced block: its language (``""`` when none), its text, the line of its opening fence,
    whether a marker excludes all of it, and the texts whose lines a marker excludes."""

    kind: str
    body: str
    line: int
    excluded: bool = False
    excluded_lines: tuple[str, ...] = ()


def fenced(text: str) -> list[tuple[str, str, int, int]]:
    """``(language, body, line of the fence, offset of the fence)`` of every fenced block of ``text``."""
    return [(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1, m.start()) for m in FENCE.finditer(text)]


def shell_lines(script: str) -> list[tuple[str, list[list[str]]]]:
    """The non-empty lines of a shell block, continuations joined and comments dropped, each with its
    commands (argv lists, split at ``&&`` and ``;``). Any other operator (``&``, ``|``, ``>``) stays a
    token of its command, for the caller to refuse."""
    out = []
    for line in re.sub(r"\\\n\s*", " ", script).splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        argvs: list[list[str]] = [[]]
        for token in lexer:
            if token in SEPARATORS:
                argvs.append([])
            else:
                argvs[-1].append(token)
        argvs = [argv for argv in argvs if argv]
        if argvs:
            out.append((line.strip(), argvs))
    return out


def commands(script: str) -> list[list[str]]:
    """Every command of a shell block, in order (see :func:`shell_lines`)."""
    return [argv for _, argvs in shell_lines(script) for argv in argvs]


def read_page(path: Path) -> tuple[list[Block], list[str]]:
    """The page's fenced blocks with their markers applied, and the problems of its markers (stale, or
    without a reason), each naming the page and line."""
    text = path.read_text()
    found = fenced(text)
    starts = {offset: i for i, (_, _, _, offset) in enumerate(found)}
    whole: set[int] = set()
    lines: dict[int, list[str]] = {}
    problems = []
    for m in MARKER.finditer(text):
        where = f"{path.name}:{text.count(chr(10), 0, m.start()) + 1}"
        after = m.end()
        while nxt := re.match(r"\s*" + MARKER.pattern, text[after:], re.S):
            after += nxt.end()
        after += len(text[after:]) - len(text[after:].lstrip())
        i = starts.get(after)
        if i is None:
            problems.append(f"{where}: a 'not run by the tests' marker that no fenced block follows")
            continue
        kind, body, _, _ = found[i]
        if not m.group("why").strip():
            problems.append(f"{where}: a 'not run by the tests' marker that gives no reason")
        if kind not in RUNNABLE:
            problems.append(f"{where}: a 'not run by the tests' marker before a ```{kind} block, which never runs")
        if m.group("lines") is None:
            whole.add(i)
            continue
        texts = re.findall(r"`([^`]+)`", m.group("lines"))
        if kind != "bash":
            problems.append(f"{where}: excluded lines work in ```bash blocks only; exclude the whole block")
            continue
        if not m.group("lines").strip().startswith("lines with") or not texts:
            problems.append(f"{where}: write the excluded lines as (lines with `TEXT`, ...)")
        for quoted in texts:
            if not any(quoted in line for line, _ in shell_lines(body)):
                problems.append(f"{where}: no line of the block that follows contains `{quoted}`")
        lines.setdefault(i, []).extend(texts)
    blocks = [Block(kind, body, line, i in whole, tuple(lines.get(i, ())))
              for i, (kind, body, line, _) in enumerate(found)]
    return blocks, problems
