#!/usr/bin/env python3
"""Run the mutation table: plant each known bug in a copy of the tree and check the tests catch it.

Each row of ``tests/mutants.toml`` names a file, an exact piece of its text (which must occur exactly
once, so a row cannot go stale silently), the buggy text that replaces it, the tests that must catch
it and why. For every row this script applies the change to a private copy of the work tree (the
checkout itself is never modified), runs the row's tests there with the copy's ``src`` first on
``sys.path``, and reports the row as

- ``killed``: a test failed (pytest exit status 1), crashed the test process or timed out;
- ``SURVIVED``: every test passed, so the tests do not guard what the row says they guard;
- ``ERROR``: the row could not be applied, or pytest could not run its tests (no test selected, a
  collection error): the row itself must be fixed.

Rows run ``--jobs`` at a time (default: the CPUs this process may use, at most 4), each job with its
own copy of the tree, and are reported in the table's order: on 2 cores the pass takes about half
the time of one row after another (512 rows).

The exit status is 0 only when every row was killed. A C++ row changes ``kernels/spmm.cc``, whose
hash is part of the kernel's cache key, so the kernel is rebuilt for that mutant (a few seconds).

Usage::

    python .ci/mutants.py                      # every row of tests/mutants.toml
    python .ci/mutants.py --only NAME --only NAME2
    python .ci/mutants.py --list               # the rows, without running anything
    python .ci/mutants.py --table other.toml   # another table of the same format
    python .ci/mutants.py --jobs 1             # one row after another
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import queue
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIELDS = ("name", "file", "find", "replace", "tests", "why")
OPTIONAL = ("timeout",)  # seconds per pytest invocation, for a row whose bug makes a test hang


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    find: str
    replace: str
    tests: tuple[str, ...]
    why: str
    timeout: float | None = None


def load_table(path: Path) -> list[Mutant]:
    """The rows of one table, checked: every field present, names unique, ``find`` exactly once in
    ``file`` and different from ``replace``."""
    rows = tomllib.loads(path.read_text()).get("mutant", [])
    if not rows:
        raise SystemExit(f"{path}: no [[mutant]] rows")
    mutants, problems = [], []
    for i, row in enumerate(rows):
        missing = [f for f in FIELDS if f not in row]
        extra = sorted(set(row) - set(FIELDS) - set(OPTIONAL))
        if missing or extra:
            problems.append(f"row {i} ({row.get('name', '?')}): missing {missing}, unknown {extra}")
            continue
        tests = row["tests"]
        m = Mutant(row["name"], row["file"], row["find"], row["replace"],
                   tuple(tests) if isinstance(tests, list) else (tests,), row["why"], row.get("timeout"))
        target = REPO / m.file
        if not target.is_file():
            problems.append(f"{m.name}: {m.file} does not exist")
        elif (count := target.read_text().count(m.find)) != 1:
            problems.append(f"{m.name}: its 'find' text occurs {count} times in {m.file}, not once")
        if m.find == m.replace:
            problems.append(f"{m.name}: 'replace' equals 'find'")
        if not m.tests:
            problems.append(f"{m.name}: no tests")
        mutants.append(m)
    names = [m.name for m in mutants]
    problems += [f"{n}: name used {names.count(n)} times" for n in sorted(set(names)) if names.count(n) > 1]
    if problems:
        raise SystemExit(f"{path}: broken rows:\n  " + "\n  ".join(problems))
    return mutants


def copy_tree(dest: Path) -> Path:
    """The work tree's tracked and unignored files copied to ``dest/<repo name>``, with the folder
    beside the repository that the tests look for (``../shared``) linked next to it."""
    listing = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                             capture_output=True, check=True).stdout.decode()
    root = dest / REPO.name
    for rel in filter(None, listing.split("\0")):
        src = REPO / rel
        if src.is_file():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / rel)
    shared = REPO.parent / "shared"
    if shared.is_dir():
        (dest / "shared").symlink_to(shared)
    return root


def run_tests(root: Path, args: str, env: dict[str, str], timeout: float) -> tuple[str, str]:
    """('pass' | 'fail' | 'timeout' | 'error', detail) of one pytest invocation in the copy."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-n", "0", "-p", "no:cacheprovider", *shlex.split(args)]
    try:
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", f"{args}: no result after {timeout:.0f} s"
    out = proc.stdout + proc.stderr
    if proc.returncode == 0:
        return "pass", args
    if proc.returncode < 0:  # the planted bug crashed the test process: the suite goes red too
        last = re.findall(r"^(tests/\S+|src/\S+) ", out, re.M)
        return "fail", f"crashed with signal {-proc.returncode}" + (f" after {last[-1]}" if last else "")
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", out, re.M)
    if proc.returncode == 1 and failed:
        return "fail", failed[0]
    tail = " | ".join(line for line in out.strip().splitlines()[-4:])
    return "error", f"{args}: pytest exited {proc.returncode}: {tail[-600:]}"


def _env(root: Path, tmp: Path) -> dict[str, str]:
    """The environment of the pytest runs in the copy ``root``: its own package first (checked: not the
    checkout's editable install), a kernel cache shared by the copies (builds are locked, one per source)
    and no persistent compilation cache (each pytest run compiles into its own fresh one,
    tests/conftest.py: no program compiled for one mutant, or the unmutated tree, is reused by another)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), os.environ.get("PYTHONPATH", "")])}
    where = subprocess.run([sys.executable, "-c", "import jaxgcn; print(jaxgcn.__file__)"], env=env, cwd=root,
                           capture_output=True, text=True, check=True).stdout.strip()
    if not Path(where).is_relative_to(root):
        raise SystemExit(f"the copy's jaxgcn is shadowed by {where}")
    env.setdefault("JAXGCN_CACHE_DIR", str(tmp / "cache"))
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    return env


def run_mutant(m: Mutant, root: Path, env: dict[str, str], timeout: float) -> tuple[str, str]:
    """Plant ``m`` in the copy, run its tests until one fails, and put the file back."""
    target = root / m.file
    original = target.read_text()
    target.write_text(original.replace(m.find, m.replace, 1))
    try:
        for args in m.tests:
            outcome, detail = run_tests(root, args, env, m.timeout or timeout)
            if outcome in ("fail", "timeout"):
                return "killed", detail
            if outcome == "error":
                return "ERROR", detail
        return "SURVIVED", "every test passed: " + "; ".join(m.tests)
    finally:
        target.write_text(original)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, action="append", help="a mutation table (default tests/mutants.toml)")
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="run only these rows")
    parser.add_argument("--list", action="store_true", help="print the rows and exit")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per pytest invocation (default 900)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="rows run at once, each in its own copy of the tree (default: the CPUs this process "
                             "may use, at most 4)")
    args = parser.parse_args()
    mutants = [m for table in (args.table or [REPO / "tests" / "mutants.toml"]) for m in load_table(table)]
    unknown = sorted(set(args.only) - {m.name for m in mutants})
    if unknown:
        raise SystemExit(f"--only: no row named {', '.join(unknown)}")
    if args.only:
        mutants = [m for m in mutants if m.name in args.only]
    if args.list:
        for m in mutants:
            print(f"{m.name:42s} {m.file}\n    {m.why}\n    tests: {'; '.join(m.tests)}")
        return 0
    jobs = max(1, min(args.jobs or min(4, len(os.sched_getaffinity(0))), len(mutants)))
    with tempfile.TemporaryDirectory(prefix="jaxgcn-mutants-") as tmp:
        # one copy of the tree per job: a row plants its bug in the copy its job owns while it runs
        roots = [copy_tree(Path(tmp) / f"copy-{j}") for j in range(jobs)]
        envs = [_env(root, Path(tmp)) for root in roots]
        idle: queue.Queue[int] = queue.Queue()
        for j in range(jobs):
            idle.put(j)

        def run_one(m: Mutant) -> tuple[Mutant, str, str, float]:
            j = idle.get()
            try:
                t0 = time.monotonic()
                verdict, detail = run_mutant(m, roots[j], envs[j], args.timeout)
                return m, verdict, detail, time.monotonic() - t0
            finally:
                idle.put(j)

        results, start = [], time.monotonic()
        print(f"mutants: {len(mutants)} rows, {jobs} at once, tree copied to {roots[0]}"
              + (f" and {jobs - 1} more" if jobs > 1 else ""), flush=True)
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            for m, verdict, detail, seconds in pool.map(run_one, mutants):  # reported in the table's order
                results.append((m, verdict))
                print(f"{verdict:8s} {seconds:6.1f} s  {m.name:42s} {detail}", flush=True)
    bad = [(m, v) for m, v in results if v != "killed"]
    print(f"mutants: {len(results) - len(bad)} of {len(results)} killed in {time.monotonic() - start:.0f} s")
    for m, verdict in bad:
        print(f"mutants: {verdict}: {m.name} ({m.file}): {m.why}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
