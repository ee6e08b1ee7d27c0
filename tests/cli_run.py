"""One helper for the tests that drive the command line in-process."""

from __future__ import annotations

import re

from jaxgcn.cli import main


def run_main(argv) -> int:
    """``main``'s exit code, whether it returns it or argparse raises SystemExit (arguments may be paths)."""
    try:
        return main([str(a) for a in argv])
    except SystemExit as exc:
        return exc.code


def _fits(line: str, width: int) -> bool:
    """A line of a wrapped message: at most ``width`` characters, or a single word or command in
    backquotes (never broken)."""
    words = re.sub(r"`[^`]*`", "command", line.removeprefix("jaxgcn: error: ")).split()
    return len(line) <= width or len(words) <= 1


def unwrap(text: str) -> str:
    """``text`` (stderr) with every wrapped error message joined back into its one line: the lines
    after a ``jaxgcn: error:`` line that start with two spaces continue it
    (:func:`jaxgcn.cli.parser.error_text`). Asserts on the way that every line of a wrapped message
    fits in ``ERROR_WIDTH`` characters or is one word (a path, URL or flag is never broken)."""
    from jaxgcn.cli.parser import ERROR_WIDTH

    lines: list[str] = []
    first = ""  # the first line of the message being joined
    for line in text.splitlines():
        if lines and lines[-1].startswith("jaxgcn: error: ") and line.startswith("  ") and line.strip():
            assert _fits(first, ERROR_WIDTH) and _fits(line, ERROR_WIDTH), (first, line)
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
            first = line
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")
