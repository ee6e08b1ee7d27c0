#!/usr/bin/env python3
"""Write the measured figures of README.md and docs/*.md from their record, docs/figures.json, so
that two pages cannot quote different figures for one measurement. ``tests/test_figures.py`` fails
when a page and the record differ.

A figure on a page is marked with its key, invisibly on GitHub::

    a Cora epoch takes <!-- fig: train.cora.epoch_ms -->0.99-1.00 ms<!-- /fig -->

The record gives each key its value (several: runs of one session, written ``low-high``), an
optional ``std`` (``mean ± std``), its unit and its decimals, with the command that printed it, the
CPU and the date. A mark may show other decimals (``<!-- fig: KEY digits=1 -->``) or leave the unit
out (``bare``, for a table's cells and for ``40-second``). The benchmarks write the record
(``--record docs/figures.json``, ``benchmarks/figure_record.py``). In README.md every figure a reader
sees (a number with ms, s, ×, GB or GiB, or a ``mean ± std``, outside code and HTML comments) must be
marked, so that a new one cannot be quoted without its record.

Usage: ``python scripts/figures.py`` (rewrites the marked figures), ``--check`` (exit 1 naming the
file, line, key, the page's text and the record's, where they differ).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = Path("docs") / "figures.json"
MARK = re.compile(r"<!-- fig: (?P<key>[\w.-]+)(?P<options>(?: [\w=]+)*) -->(?P<text>.*?)<!-- /fig -->")
LOOSE = re.compile(r"<!-- */?fig\b")  # any mark's start, closed or not, well-formed or not
COMPLETE = ("README.md",)  # pages on which every figure of the prose must be marked
FIGURE = re.compile(r"(?<![\w.,])\d[\d,]*(?:\.\d+)?(?:-\d+(?:\.\d+)?)?"
                    r"(?: ?(?:ms|s|GB|GiB)\b| ?×(?! ?\d)| ± \d+(?:\.\d+)?)")
SEPARATE = {"×": "", "%": ""}  # units written against the number; the others after a space


def pages(root: Path) -> list[Path]:
    return [p for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))] if p.is_file()]


def load_figures(root: Path = ROOT) -> dict[str, dict]:
    return json.loads((root / RECORD).read_text())["figures"]


def render(fig: dict, options: str = "") -> str:
    """A figure as a page shows it: ``0.99-1.00 ms``, ``9.4×``, ``81.71 ± 0.63``; ``options`` are the
    mark's (``digits=N``, ``bare``)."""
    digits, bare = fig["digits"], False
    for option in options.split():
        if option == "bare":
            bare = True
        elif re.fullmatch(r"digits=\d", option):
            digits = int(option.split("=")[1])
        else:
            raise ValueError(f"unknown option {option!r} (digits=N or bare)")
    values = fig["value"] if isinstance(fig["value"], list) else [fig["value"]]
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    text = low if low == high else f"{low}-{high}"
    if fig.get("std") is not None:
        text += f" ± {fig['std']:.{digits}f}"
    if bare or not fig["unit"]:
        return text
    return text + SEPARATE.get(fig["unit"], " ") + fig["unit"]


def fill(text: str, figures: dict[str, dict], name: str = "text") -> str:
    """``text`` with every mark's figure written from ``figures``; a key or option it does not know is
    a SystemExit naming the line."""
    def one(match: re.Match) -> str:
        key = match["key"]
        line = text.count("\n", 0, match.start()) + 1
        if key not in figures:
            raise SystemExit(f"{name}:{line}: {key} is not in {RECORD}: record it (benchmarks/figure_record.py)")
        try:
            rendered = render(figures[key], match["options"])
        except ValueError as err:
            raise SystemExit(f"{name}:{line}: {key}: {err}") from None
        return text[match.start():match.start("text")] + rendered + text[match.end("text"):match.end()]

    return MARK.sub(one, text)


def _prose(text: str) -> list[str]:
    """The lines of ``text`` as a reader sees them, less the code: marked figures, other HTML comments
    (which GitHub does not show), fenced blocks and code spans blanked out."""
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), MARK.sub(" ", text), flags=re.S)
    lines, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            lines.append("")
            continue
        lines.append("" if fenced else re.sub(r"`[^`]*`", " ", line))
    return lines


def problems(name: str, text: str, figures: dict[str, dict]) -> list[str]:
    """Where ``text`` (the page ``name``) and the record differ: a mark whose text is not the record's,
    an unknown key or option, a mark left open, and on the pages of COMPLETE a figure not marked."""
    found = []
    for number, line in enumerate(text.split("\n"), 1):
        for match in MARK.finditer(line):
            key, shown = match["key"], match["text"]
            if key not in figures:
                found.append(f"{name}:{number}: {key} is not in {RECORD} (the page shows {shown!r}): record it "
                              "(benchmarks/figure_record.py) or fix the key")
                continue
            try:
                wanted = render(figures[key], match["options"])
            except ValueError as err:
                found.append(f"{name}:{number}: {key}: {err}")
                continue
            if shown != wanted:
                fig = figures[key]
                found.append(f"{name}:{number}: {key}: the page shows {shown!r}, {RECORD} has {wanted!r} "
                             f"({fig['command']}; {fig['cpu']}; {fig['date']})")
        if len(LOOSE.findall(line)) != 2 * len(MARK.findall(line)):
            found.append(f"{name}:{number}: a fig mark that is not <!-- fig: KEY -->TEXT<!-- /fig --> on one line")
    if Path(name).name in COMPLETE:
        for number, line in enumerate(_prose(text), 1):
            found += [f"{name}:{number}: {m.group(0)!r} is a figure outside a fig mark: record it "
                      f"({RECORD}) and mark it" for m in FIGURE.finditer(line)]
    return found


def unused(texts: list[str], figures: dict[str, dict]) -> list[str]:
    """Keys of the record that no page quotes: not an error (a benchmark records every figure it
    measures, the 100k-node row beside the quoted 1M one), but said, so that a stale one is seen."""
    quoted = {m["key"] for text in texts for m in MARK.finditer(text)}
    return [key for key in figures if key not in quoted]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 where a page and the record differ")
    ap.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this one)")
    args = ap.parse_args()
    figures = load_figures(args.root)
    texts = {p: p.read_text() for p in pages(args.root)}
    found = []
    for path, text in texts.items():
        name = str(path.relative_to(args.root))
        if not args.check:
            new = fill(text, figures, name)
            if new != text:
                path.write_text(new)
                print(f"{name}: figures written from {RECORD}")
            text = new
        found += problems(name, text, figures)
    spare = unused(list(texts.values()), figures)
    if spare:
        print(f"recorded in {RECORD}, quoted by no page: {', '.join(spare)}")
    for line in found:
        print(line, file=sys.stderr)
    if found and args.check:
        print("run python scripts/figures.py to write the pages' figures from the record", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
