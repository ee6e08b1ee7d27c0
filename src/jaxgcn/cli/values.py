"""argparse value types: integers in a range, comma-separated lists, byte sizes, paths (``~``
expanded), and their limits."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Callable

INT32_MAX = 2**31 - 1  # counts, ids and training seeds reach the device as int32
MAX_EPOCHS = 1_000_000  # --epochs/--window/--patience: per-epoch history and the window are held in memory
MAX_LAYERS = 1_000  # every layer is unrolled into the one compiled program
MAX_RUNS = 10_000  # --seeds/--splits: every run's spec and split masks are built up front
STDOUT = "-"  # predict --out -: the CSV to standard output


def int_in(lo: int, hi: int, why: str = "") -> Callable[[str], int]:
    """An argparse type: an integer in [lo, hi]; anything else is refused on one line."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'a positive integer' if lo == 1 else 'an integer'}") \
                from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"{text} is not a positive integer" if lo == 1 else
                                             f"{text} is below {lo}; give an integer from {lo} to {hi:,}{why}")
        if value > hi:
            raise argparse.ArgumentTypeError(f"{text} is too large; give an integer from {lo} to {hi:,}{why}")
        return value
    return parse


positive_int = int_in(1, INT32_MAX)
run_index = int_in(0, MAX_RUNS - 1)
epochs = int_in(1, MAX_EPOCHS, " (every epoch's metrics are kept)")
layers = int_in(1, MAX_LAYERS)
runs = int_in(1, MAX_RUNS)
seed = int_in(0, INT32_MAX, " (seeds are int32 on the device; --seed + --seeds - 1 must fit too)")
data_seed = int_in(0, 2**63 - 1)


def positive_float(text: str) -> float:
    """An argparse type: a finite number above 0 (seconds, say); anything else is refused on one line."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def probability(text: str) -> float:
    """An argparse type: a number strictly between 0 and 1 (a decision threshold)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1 (a probability threshold, e.g. 0.5)")
    return value


def list_of(kind: Any, what: str, each: Any = None) -> Callable[[str], tuple]:
    """A comma-separated list of ``kind``; ``each`` (an argparse type) then checks every value's range."""
    def parse(text: str) -> tuple:
        try:
            values = tuple(kind(v) for v in text.split(",") if v.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of {what}") from None
        if not values:
            raise argparse.ArgumentTypeError(f"{text!r}: give at least one value")
        return tuple(each(str(v)) for v in values) if each is not None else values
    return parse


def canonical_choice(choices: Any, value: Any) -> Any:
    """``value`` as it is spelled in ``choices`` when it differs only in case (``ADAM``: ``adam``);
    anything else unchanged, for argparse to judge.

    >>> canonical_choice(("row", "none"), "None"), canonical_choice(("row",), "rows"), canonical_choice(None, "X")
    ('none', 'rows', 'X')
    """
    if choices is None or not isinstance(value, str) or value in choices:
        return value
    return next((c for c in choices if isinstance(c, str) and c.lower() == value.lower()), value)


def choice_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    """An argparse type for one of ``choices`` (for lists, whose values ``choices=`` cannot check);
    case-insensitive, as the flags' ``choices`` are (:func:`canonical_choice`)."""
    def parse(text: str) -> str:
        value = canonical_choice(choices, text.strip())
        if value not in choices:
            raise argparse.ArgumentTypeError(f"invalid choice: {value!r} (choose from "
                                             f"{', '.join(repr(c) for c in choices)})")
        return value
    return parse


def path(text: str) -> Path:
    """An argparse type for every path argument: ``~`` and ``~user`` expanded, since no shell does it
    inside an argument (``--json=~/r.json``, a quoted path, a --config file's value).

    >>> str(path("out/r.json"))
    'out/r.json'
    """
    return Path(os.path.expanduser(text))


SAVED_FILES = ("checkpoint.json", "runs.json")  # what names a checkpoint folder when given in its place


def checkpoint_path(text: str) -> Path:
    """``--checkpoint``/``--resume``: a checkpoint folder, ``~`` expanded as :func:`path` does; the
    ``checkpoint.json`` (or a several-run save's ``runs.json``) inside one names that folder.

    >>> str(checkpoint_path("runs/m")), str(checkpoint_path("runs/m/checkpoint.json"))
    ('runs/m', 'runs/m')
    """
    given = path(text)
    return given.parent if given.name in SAVED_FILES else given


def count_or_path(text: str) -> str:
    """``--features``: a feature count (``64``) or a file, whose ``~`` is expanded as :func:`path` does."""
    return os.path.expanduser(text)


def byte_size(text: str) -> int:
    """An argparse type: a positive size such as ``4G``, ``512M`` or ``1000``."""
    units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    body, unit = (text[:-1], text[-1].upper()) if text[-1:].upper() in units and text[-1:].isalpha() else (text, "")
    try:
        value = int(float(body) * units[unit])
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 4G or 512M") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def host_port(text: str) -> str:
    """``--coordinator``: ``HOST:PORT`` with a host and a port from 1 to 65535, checked before JAX
    starts (gRPC crashed the process, status -11, on ``nohost:notaport``). An IPv6 host is bracketed:
    ``[::1]:1234``.

    >>> host_port("10.0.0.1:1234"), host_port("[::1]:8476")
    ('10.0.0.1:1234', '[::1]:8476')
    """
    host, sep, port = text.rpartition(":")
    fix = "give process 0's address as HOST:PORT, e.g. 10.0.0.1:1234"
    if not sep or not host.strip() or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT; {fix}")
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise argparse.ArgumentTypeError(f"{text!r}: port {port!r} is not an integer from 1 to 65535; {fix}")
    return text


def name_value(text: str) -> tuple[str, str]:
    """``plot sweep --fix``: ``NAME=VALUE``.

    >>> name_value("dropout=0.5")
    ('dropout', '0.5')
    """
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE, e.g. dropout=0.5")
    return name.strip(), value.strip()
