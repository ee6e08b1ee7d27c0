"""The record of the figures the README and docs/ quote (``docs/figures.json``), written by what
measures them, so that the pages cannot quote a figure the benchmarks did not print.

Each benchmark that produces a quoted figure takes ``--record FILE``: it stores this run's figures
under their keys, each with the command that printed it (paths shown as ``PATH``), the CPU
(``/proc/cpuinfo``'s model name with its family and model, as ``jaxgcn info`` prints it) and the
date. ``--record-append`` adds this run's values to those the same command recorded on the same CPU
(runs of one session: the pages show them as a range) instead of replacing them. Then ``python
scripts/figures.py`` rewrites every marked figure of the pages from the record, and its ``--check``
(run by the tests) fails where a page and the record differ.

A figure measured by hand (the test suite's time, accuracies from ``jaxgcn train --json``) goes in
through this file as a command, with the same fields::

    python benchmarks/figure_record.py docs/figures.json tests.suite_s 427 --unit s --digits 0 \\
        --command "HOME=\\$(mktemp -d) bash .ci/run" --note "the pytest part, from a clean clone at 5b16bde"
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
from pathlib import Path

ABOUT = ("The figures README.md and docs/ quote, one entry per key: value (several values: runs of one "
         "session, shown as a range), std (shown as value ± std), unit, digits, the command that printed it, "
         "the CPU, the date, and a note where the command alone does not say it all. Written by the "
         "benchmarks' --record FILE (benchmarks/figure_record.py); python scripts/figures.py rewrites the "
         "marked figures of the pages from it.")
PATH_OPTIONS = ("--pyg-python", "--dir", "--data-root", "--cache-parent", "--graph")  # shown as PATH


def figure(value: float | list[float], unit: str, digits: int, std: float | None = None) -> dict:
    """One figure: ``value`` (a list: several runs, shown as a range), ``unit``, the decimals the pages
    show by default, and ``std`` for a mean ± std."""
    out: dict = {"value": [round(v, 4) for v in value] if isinstance(value, list) else round(value, 4),
                 "unit": unit, "digits": digits}
    if std is not None:
        out["std"] = round(std, 4)
    return out


def count_name(n: int) -> str:
    """A node count as a key names it: ``1m``, ``100k``, ``2449029``."""
    if n and n % 1_000_000 == 0:
        return f"{n // 1_000_000}m"
    return f"{n // 1000}k" if n and n % 1000 == 0 else str(n)


def add_record_arguments(ap: argparse.ArgumentParser) -> None:
    """``--record FILE`` and ``--record-append`` on a benchmark's parser."""
    ap.add_argument("--record", metavar="FILE",
                    help="write this run's figures into FILE (docs/figures.json), with the command, CPU and date; "
                         "then run python scripts/figures.py to rewrite the pages' figures from it")
    ap.add_argument("--record-append", action="store_true",
                    help="with --record: add this run's values to those the same command recorded on the same "
                         "CPU (another run of the session, shown as a range) instead of replacing them")


def cpu() -> str:
    """This machine's CPU as ``jaxgcn info`` names it: model name (family F model M)."""
    from jaxgcn.host.machine import read_cpu

    return read_cpu()[0]


def command(argv: list[str]) -> str:
    """The command line of ``argv`` (``sys.argv``) as the pages show it: ``python benchmarks/NAME.py``,
    without the --record options, and with paths (which name this machine's folders) as ``PATH``."""
    args, prev = [], ""
    for arg in argv[1:]:
        prev, last = arg, prev
        if last == "--record" or arg.startswith("--record"):
            continue
        if last in PATH_OPTIONS or os.path.isabs(arg):
            args.append("PATH")
        elif "=" in arg and arg.split("=", 1)[0] in PATH_OPTIONS:
            args.append(arg.split("=", 1)[0] + "=PATH")
        else:
            args.append(arg)
    return shlex.join(["python", f"benchmarks/{Path(argv[0]).name}", *args])


def load(path: Path) -> dict:
    """The record at ``path``; an empty one where there is no file yet."""
    if not path.is_file():
        return {"about": ABOUT, "figures": {}}
    return json.loads(path.read_text())


def _values(value: float | list[float]) -> list[float]:
    return list(value) if isinstance(value, list) else [value]


def update(record: dict, figures: dict[str, dict], meta: dict[str, str], *, append: bool = False,
           drop: tuple[str, ...] = ()) -> list[str]:
    """Store ``figures`` (key -> :func:`figure`) with ``meta`` (command, cpu, date) in ``record``,
    remove the keys in ``drop`` (a claim this run disproved, e.g. "out of memory"), and return what a
    person must know: a CPU that changed (the pages name the CPU beside the figure) and keys removed."""
    messages, stored = [], record.setdefault("figures", {})
    for key, fig in figures.items():
        old = stored.get(key)
        new = {**fig, **meta}
        if old is not None and old.get("cpu") != meta["cpu"]:
            messages.append(f"{key}: recorded on {old.get('cpu')!r} before, now on {meta['cpu']!r}: the pages name "
                         "the CPU beside their figures; change those words too")
        elif append and old is not None and old.get("command") == meta["command"]:
            new["value"] = _values(old["value"]) + _values(fig["value"])
        stored[key] = new
    for key in drop:
        if stored.pop(key, None) is not None:
            messages.append(f"{key}: removed from the record (this run measured otherwise): the pages that quote it "
                         "now fail python scripts/figures.py --check until their words say what was measured")
    record["figures"] = dict(sorted(stored.items()))
    return messages


def save(path: Path, record: dict) -> None:
    path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")


def record(path: str | None, figures: dict[str, dict], *, append: bool = False, drop: tuple[str, ...] = (),
           argv: list[str] | None = None, machine: str | None = None) -> None:
    """Write ``figures`` into the record at ``path`` (a benchmark's ``--record``; nothing when None)
    under this run's command, this CPU (``machine``: the accelerator that measured them, named) and
    today's date, and say what was written."""
    if path is None:
        return
    meta = {"command": command(sys.argv if argv is None else argv), "cpu": machine or cpu(),
            "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat()}
    data = load(Path(path))
    notes = update(data, figures, meta, append=append, drop=drop)
    save(Path(path), data)
    print(f"recorded in {path}: {', '.join(figures) or 'nothing'}; now run python scripts/figures.py")
    for note in notes:
        print(f"note: {note}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", help="the record (docs/figures.json)")
    ap.add_argument("key", help="the figure's key, as the pages' marks name it (tests.suite_s)")
    ap.add_argument("value", type=float, nargs="+", help="its value; several: runs of one session")
    ap.add_argument("--std", type=float, help="a standard deviation, shown as value ± std")
    ap.add_argument("--unit", required=True, help="s, ms, GB, GiB, ×, %%")
    ap.add_argument("--digits", type=int, required=True, help="decimals the pages show by default")
    ap.add_argument("--command", required=True, help="the command that measured it, as a reader runs it")
    ap.add_argument("--cpu", default=None, help="the CPU it ran on (default: this machine's, as jaxgcn info names it)")
    ap.add_argument("--date", default=None, help="YYYY-MM-DD (default: today)")
    ap.add_argument("--note", default=None, help="what the command alone does not say (the revision, the day)")
    args = ap.parse_args()
    value = args.value[0] if len(args.value) == 1 else args.value
    meta = {"command": args.command, "cpu": args.cpu or cpu(),
            "date": args.date or datetime.datetime.now(datetime.timezone.utc).date().isoformat()}
    if args.note:
        meta["note"] = args.note
    data = load(Path(args.file))
    for note in update(data, {args.key: figure(value, args.unit, args.digits, args.std)}, meta):
        print(f"note: {note}")
    save(Path(args.file), data)
    print(f"recorded {args.key} in {args.file}; now run python scripts/figures.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
