"""The ``jaxgcn`` command line: parses arguments and calls the library, nothing more.

One module per command (``train``, ``sweep``, ``evaluate``, ``predict``, ``info``, ``plot``,
``partition``, ``datasets``), the argument definitions in :mod:`~jaxgcn.cli.parser`, the mapping
of arguments to library configs in :mod:`~jaxgcn.cli.config`. :func:`main` is the one place where
errors become exit codes and messages (one line, or a few short ones:
:func:`~jaxgcn.cli.parser.error_text`). Parsing imports no command module and no JAX:
``--help``, ``--version``, a mistyped flag and every value that needs no data to be judged (a
range, a dataset name, an output folder: :data:`~jaxgcn.cli.common.BEFORE_JAX`) answer in a
fraction of a second.

Importing this package imports light standard-library modules only (the parser is imported when
:func:`main` runs): ``python -m jaxgcn.cli`` imports it before :func:`main` installs the Ctrl-C
handler, and a Ctrl-C in those milliseconds prints a traceback.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import warnings

from jaxgcn.host.interrupt import CtrlC, Terminated

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (~14 ms)
if TYPE_CHECKING:
    import argparse
    from typing import Any, Callable, Sequence

EXIT_DIVERGED = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT: what a shell reports for a command that Ctrl-C stopped
EXIT_TERMINATED = 143  # 128 + SIGTERM: what SLURM, Kubernetes and `kill` send, reported as a shell would
_SHOW_WARNING = warnings.showwarning

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``jaxgcn`` parser (:func:`jaxgcn.cli.parser.build_parser`)."""
    from jaxgcn.cli import parser

    return parser.build_parser()


def _one_line(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
              line: str | None = None) -> None:
    """A library note (:class:`~jaxgcn.datasets.parsed.CacheNote`) as one ``jaxgcn: note:`` line on
    stderr; any other warning as Python shows it."""
    from jaxgcn.datasets.base import CacheNote

    if issubclass(category, CacheNote):
        print(f"jaxgcn: note: {message}", file=sys.stderr, flush=True)
        return
    _SHOW_WARNING(message, category, filename, lineno, file, line)


_LOADED = time.perf_counter()  # where this module was imported: the fallback origin below


def since_process_start() -> float:
    """Seconds since this process started (Python's start-up, the imports, the parsing so far): its
    start time in clock ticks since boot (``/proc/self/stat``) against the seconds since boot
    (``/proc/uptime``); where those are missing, since :mod:`jaxgcn.cli` was imported."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        ticks = int(stat.rpartition(")")[2].split()[19])  # field 22, starttime; the name may hold spaces
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - _LOADED


_PHASES: dict[str, float] = {}  # this command's phases so far, in seconds (main fills it)


def phases() -> dict[str, float]:
    """Where the running command's time went before it ran (start-up, imports, jax set-up), in
    seconds: ``train --verbose`` prints them."""
    return dict(_PHASES)


def interrupted_line(args: Any, started: float, how: str = "interrupted") -> str:
    """The one line Ctrl-C (``how``: "interrupted") or SIGTERM ("terminated (SIGTERM)") ends a command
    with; after a ``--checkpoint-every`` run wrote a checkpoint (since ``started``, a :func:`time.time`),
    where it is and how to resume from it."""
    save, every = getattr(args, "save", None), getattr(args, "checkpoint_every", None)
    sweep = getattr(args, "command", None) == "sweep"  # a saved sweep keeps its finished groups too
    # without jaxgcn.app.saving loaded this process wrote no checkpoint (and importing it starts JAX)
    if save is None or (every is None and not sweep) or "jaxgcn.app.saving" not in sys.modules:
        return f"jaxgcn: {how}"
    from jaxgcn.app.saving import resumable_since

    where = resumable_since(save, started)
    if where is None:
        first = "the first group finished" if every is None else f"the first checkpoint (--checkpoint-every {every})"
        return f"jaxgcn: {how} before {first}; nothing to resume"
    return f"jaxgcn: {how}; the last checkpoint is in {save} ({where}): resume with --resume {save}"


def interrupted(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C (KeyboardInterrupt; SIGTERM: its subclass :class:`~jaxgcn.host.interrupt.Terminated`)
    that ``exc`` is, or that caused or interrupted it: raised inside a Python method that C code
    called, it becomes ``SystemError: ... returned a result with an exception set``, its cause the
    KeyboardInterrupt. None for any other error."""
    seen: BaseException | None = exc
    for _ in range(100):  # a chain, not a cycle
        if seen is None:
            return None
        if isinstance(seen, KeyboardInterrupt):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def main(argv: Sequence[str] | None = None, *, ctrl_c: CtrlC | None = None) -> int:
    """Run the command of ``argv`` (None: ``sys.argv[1:]``); returns the exit code. Ctrl-C ends any
    command with one line on stderr (:func:`interrupted_line`) and exit status 130, as Unix tools do;
    SIGTERM (under the console script's handler) the same way, with status 143.

    ``ctrl_c``: the console script's handler, which :func:`jaxgcn.console.main` installed before it
    imported this package. Without one, ``argv=None`` in the main thread (``python -m jaxgcn.cli``, a
    script made by an older install) installs it here; a call with ``argv`` (tests, notebooks) keeps
    the caller's own SIGINT handling.
    """
    started = time.time()
    parsed: list[Any] = []  # the parsed arguments, once there are any
    if ctrl_c is None and argv is None and threading.current_thread() is threading.main_thread():
        ctrl_c = CtrlC()
    try:
        return _command(argv, parsed, ctrl_c.release if ctrl_c is not None else lambda: None)
    except BaseException as exc:
        stop = interrupted(exc)
        if stop is None:
            raise
        if ctrl_c is not None:
            ctrl_c.close()
        terminated = isinstance(stop, Terminated)
        how = "terminated (SIGTERM)" if terminated else "interrupted"
        print(interrupted_line(parsed[0] if parsed else None, started, how), file=sys.stderr, flush=True)
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    finally:
        if ctrl_c is not None:
            ctrl_c.close()


def _command(argv: Sequence[str] | None, parsed: list[Any], release: Callable[[], None]) -> int:
    """Parse ``argv`` (appending the result to ``parsed``) and run its command, calling ``release``
    just before (:class:`~jaxgcn.host.interrupt.CtrlC`); errors become exit codes and messages
    (:func:`~jaxgcn.cli.parser.error_text`)."""
    from jaxgcn.cli.parser import EXIT_USAGE, error_text
    from jaxgcn.cli.records import parse_args

    from_console = argv is None  # in-process callers keep their own JAX device setup
    try:
        args = parse_args(build_parser(), argv)  # --from-record/--config: defaults from a file
    except SystemExit as exc:  # --help, or a usage error already printed on one line
        return int(exc.code or 0)
    except ValueError as exc:  # a --config/--from-record file that cannot be used
        print(error_text(str(exc)), file=sys.stderr)
        return EXIT_USAGE
    parsed.append(args)
    from jaxgcn.cli.common import before_jax, os_error
    from jaxgcn.cli.errors import to_flags

    try:
        before_jax(args)  # what needs no data is refused before JAX is imported
    except ValueError as exc:
        print(error_text(str(exc)), file=sys.stderr)
        return EXIT_USAGE
    _PHASES.clear()
    _PHASES["start-up"] = since_process_start()
    imported = time.perf_counter()
    # the command runs: now its module (and, for most, JAX) is imported
    from jaxgcn.datasets.base import CacheNote
    from jaxgcn.training.config import TrainingDiverged

    _PHASES["imports"] = time.perf_counter() - imported

    try:
        with warnings.catch_warnings():  # restores showwarning: in-process callers keep theirs
            warnings.showwarning = _one_line
            warnings.simplefilter("always", CacheNote)  # a note for the user, whatever the filters say
            setup = getattr(args, "setup", None)
            if setup is not None:
                start = time.perf_counter()
                setup(args, from_console)
                _PHASES["jax set-up"] = time.perf_counter() - start
            release()  # a Ctrl-C held while JAX was imported and set up ends the command now
            return args.func(args)
    except ValueError as exc:
        code = EXIT_DIVERGED if isinstance(exc, TrainingDiverged) else EXIT_USAGE
        print(error_text(to_flags(str(exc))), file=sys.stderr)
        return code
    except BrokenPipeError:  # stdout closed early (`jaxgcn ... | head`): stop quietly, as other tools do
        if from_console:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 1
    except OSError as exc:  # a file that failed between the checks and its use (disk full, I/O error, a race)
        print(error_text(os_error(args, exc)), file=sys.stderr)
        return EXIT_USAGE
