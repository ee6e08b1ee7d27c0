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


# --- killing and interrupting a saving command in-process (the saved-state tests share these) ----------

class Killed(SystemExit):
    """A process killed right after a save (run_main returns its code, "killed")."""


def kill_after_save(monkeypatch, first: int, epoch: int) -> None:
    """Kill the batch right after the slice whose first run is ``first`` saved its state of ``epoch``."""
    from jaxgcn.store import batch_state

    real = batch_state.saver

    def saver(*args, **kwargs):
        save = real(*args, **kwargs)

        def save_then_kill(slice_first, state):
            save(slice_first, state)
            if (slice_first, int(state.step)) == (first, epoch):
                raise Killed("killed")
        return save_then_kill
    monkeypatch.setattr(batch_state, "saver", saver)


def interrupt_after_groups(monkeypatch) -> None:
    """Ctrl-C right after each group a sweep finishes has been recorded (so after its first)."""
    from jaxgcn.store import batch_state

    real = batch_state.Saver.finish

    def finish_then_interrupt(self, *args):
        real(self, *args)
        raise KeyboardInterrupt
    monkeypatch.setattr(batch_state.Saver, "finish", finish_then_interrupt)


def refused(argv, capsys) -> str:
    """Run ``argv``; assert exit 2 and one error line (unwrapped), and return it."""
    capsys.readouterr()
    assert run_main(argv) == 2
    err = unwrap(capsys.readouterr().err)
    assert len(err.splitlines()) == 1, err
    return err
