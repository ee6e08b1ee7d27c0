"""The ``jaxgcn`` command line: parses arguments and calls the library, nothing more.

One module per command (``train``, ``sweep``, ``evaluate``, ``predict``, ``info``, ``plot``,
``partition``, ``datasets``), the argument definitions in :mod:`~jaxgcn.cli.parser`, the mapping
of arguments to library configs in :mod:`~jaxgcn.cli.config`. :func:`main` is the one place where
errors become exit codes and one-line messages. Parsing imports no command module and no JAX:
``--help``, ``--version`` and a mistyped flag answer in a fraction of a second.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

from jaxgcn.cli.parser import EXIT_USAGE, build_parser
from jaxgcn.cli.records import parse_args

EXIT_DIVERGED = 1
_SHOW_WARNING = warnings.showwarning

__all__ = ["build_parser", "main"]


def _one_line(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
              line: str | None = None) -> None:
    """A library note (:class:`~jaxgcn.datasets.parsed.CacheNote`) as one ``jaxgcn: note:`` line on
    stderr; any other warning as Python shows it."""
    from jaxgcn.datasets.parsed import CacheNote

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
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat.rpartition(")")[2].split()[19])  # field 22, starttime; the name may hold spaces
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - _LOADED


_PHASES: dict[str, float] = {}  # this command's phases so far, in seconds (main fills it)


def phases() -> dict[str, float]:
    """Where the running command's time went before it ran (start-up, imports, jax set-up), in
    seconds: ``train --verbose`` prints them."""
    return dict(_PHASES)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``jaxgcn`` console script; returns the exit code."""
    from_console = argv is None  # in-process callers keep their own JAX device setup
    try:
        args = parse_args(build_parser(), argv)  # --from-record/--config: defaults from a file
    except SystemExit as exc:  # --help, or a usage error already printed on one line
        return int(exc.code or 0)
    except ValueError as exc:  # a --config/--from-record file that cannot be used
        print(f"jaxgcn: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _PHASES.clear()
    _PHASES["start-up"] = since_process_start()
    imported = time.perf_counter()
    # the command runs: now the library (and JAX) is imported
    from jaxgcn.cli.common import os_error
    from jaxgcn.cli.config import to_flags
    from jaxgcn.datasets.parsed import CacheNote
    from jaxgcn.train import TrainingDiverged

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
            return args.func(args)
    except ValueError as exc:
        code = EXIT_DIVERGED if isinstance(exc, TrainingDiverged) else EXIT_USAGE
        print(f"jaxgcn: error: {to_flags(str(exc))}", file=sys.stderr)
        return code
    except BrokenPipeError:  # stdout closed early (`jaxgcn ... | head`): stop quietly, as other tools do
        if from_console:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 1
    except OSError as exc:  # a file that failed between the checks and its use (disk full, I/O error, a race)
        print(f"jaxgcn: error: {os_error(args, exc)}", file=sys.stderr)
        return EXIT_USAGE
