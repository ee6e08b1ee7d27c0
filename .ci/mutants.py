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
the time of one row after another (512 rows). Each job's pytest runs are forked from a server process
that has imported NumPy, SciPy, JAX, optax, pytest and scikit-learn once (never jaxgcn or the tests):
a row no longer pays those imports, about 3 of a quick row's 5-8 CPU-seconds.

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


def run_tests(server: Server, args: str, timeout: float) -> tuple[str, str]:
    """('pass' | 'fail' | 'timeout' | 'error', detail) of one pytest invocation in the copy."""
    rc, out = server.pytest(["-q", "-x", "-n", "0", "-p", "no:cacheprovider", *shlex.split(args)], timeout)
    if rc is None:
        return "timeout", f"{args}: no result after {timeout:.0f} s"
    if rc == 0:
        return "pass", args
    if rc < 0:  # the planted bug crashed the test process: the suite goes red too
        last = re.findall(r"^(tests/\S+|src/\S+) ", out, re.M)
        return "fail", f"crashed with signal {-rc}" + (f" after {last[-1]}" if last else "")
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", out, re.M)
    if rc == 1 and failed:
        return "fail", failed[0]
    tail = " | ".join(line for line in out.strip().splitlines()[-4:])
    return "error", f"{args}: pytest exited {rc}: {tail[-600:]}"


# The third-party modules every row's pytest imports (about 3 CPU-seconds a process, over half of a
# quick row): a server process per copy imports them once and forks one pytest run per request.
# Nothing of the copy (jaxgcn, tests/) is imported before the fork, so each run reads the files as
# the row left them; JAX's backend is first made in the forked child, never in the server.
# No pytest plugin (hypothesis's, xdist's): each run's pytest imports those itself, since a plugin
# imported before cannot be assert-rewritten (a warning, an error under the suite's filters).
PRELOAD = ("numpy", "scipy.sparse", "scipy.stats", "jax", "jax.numpy", "optax", "pytest", "_pytest.python",
           "sklearn.metrics", "filelock", "platformdirs", "pooch")


def serve() -> int:
    """The server's loop (``--serve``, started by :class:`Server` in a copy): read one JSON request a
    line (pytest arguments, an output file, a timeout), fork, run ``pytest.main`` in the child with its
    output in that file, and answer with the child's exit code (negative: killed by that signal; null:
    killed at the timeout, with every process it started)."""
    import importlib
    import json

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional test dependency: the run imports what it needs itself
            pass
    leaked = sorted(n for n in sys.modules if n.split(".")[0] in ("jaxgcn", "conftest", "cli_run"))
    if leaked:
        raise SystemExit(f"mutants server: {leaked} imported before a row's files are planted")
    sys.path[0] = os.getcwd()  # as `python -m pytest` in the copy has it
    answers = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        answers.flush()
        with open(request["out"], "wb") as out:
            pid = os.fork()
            if pid == 0:  # the child: one pytest run, then exit without the server's cleanup
                code = 3
                try:
                    os.setsid()
                    null = os.open(os.devnull, os.O_RDONLY)
                    os.dup2(null, 0)
                    os.dup2(out.fileno(), 1)
                    os.dup2(out.fileno(), 2)
                    sys.stdin = open(os.devnull)  # noqa: SIM115 (the child exits below)
                    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
                    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
                    import pytest

                    code = int(pytest.main(request["args"]))
                except BaseException as exc:  # noqa: BLE001 (reported in the output, the code says it failed)
                    print(f"mutants server: the pytest run raised {exc!r}", file=sys.stderr)
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
        answers.write(json.dumps({"rc": _wait(pid, request["timeout"])}) + "\n")
        answers.flush()
    return 0


def _wait(pid: int, timeout: float) -> int | None:
    """The exit code of child ``pid`` (negative: the signal that ended it), or None when it ran past
    ``timeout`` seconds and was killed with its process group."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, 9)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return None
        time.sleep(0.02)


class Server:
    """One ``--serve`` process in a copy of the tree (its ``src`` first on the path), asked for one
    pytest run at a time."""

    def __init__(self, root: Path, env: dict[str, str]):
        self.root = root
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve"], cwd=root, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def pytest(self, args: list[str], timeout: float) -> tuple[int | None, str]:
        """(exit code or None at the timeout, the run's output)."""
        import json

        out = self.root.parent / "pytest-output.txt"
        self.proc.stdin.write(json.dumps({"args": args, "out": str(out), "timeout": timeout}) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise SystemExit(f"mutants server in {self.root} exited ({self.proc.wait()})")
        return json.loads(answer)["rc"], out.read_text(errors="replace")

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def _env(root: Path, tmp: Path) -> dict[str, str]:
    """The environment of the pytest runs in the copy ``root``: its own package first (checked: not the
    checkout's editable install), a kernel cache shared by the copies (builds are locked, one per source)
    and no persistent compilation cache (each pytest run compiles into its own fresh one,
    tests/conftest.py: no program compiled for one mutant, or the unmutated tree, is reused by another).
    The copy's server (:class:`Server`) starts with it, and every run it forks inherits it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), os.environ.get("PYTHONPATH", "")])}
    where = subprocess.run([sys.executable, "-c", "import jaxgcn; print(jaxgcn.__file__)"], env=env, cwd=root,
                           capture_output=True, text=True, check=True).stdout.strip()
    if not Path(where).is_relative_to(root):
        raise SystemExit(f"the copy's jaxgcn is shadowed by {where}")
    env.setdefault("JAXGCN_CACHE_DIR", str(tmp / "cache"))
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    return env


def run_mutant(m: Mutant, root: Path, server: Server, timeout: float) -> tuple[str, str]:
    """Plant ``m`` in the copy, run its tests until one fails, and put the file back."""
    target = root / m.file
    original = target.read_text()
    target.write_text(original.replace(m.find, m.replace, 1))
    try:
        for args in m.tests:
            outcome, detail = run_tests(server, args, m.timeout or timeout)
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
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # a copy's pytest server
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per pytest invocation (default 900)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="rows run at once, each in its own copy of the tree (default: the CPUs this process "
                             "may use, at most 4)")
    args = parser.parse_args()
    if args.serve:
        return serve()
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
        servers = [Server(root, _env(root, Path(tmp))) for root in roots]
        idle: queue.Queue[int] = queue.Queue()
        for j in range(jobs):
            idle.put(j)

        def run_one(m: Mutant) -> tuple[Mutant, str, str, float]:
            j = idle.get()
            try:
                t0 = time.monotonic()
                verdict, detail = run_mutant(m, roots[j], servers[j], args.timeout)
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
        for server in servers:
            server.close()
    bad = [(m, v) for m, v in results if v != "killed"]
    print(f"mutants: {len(results) - len(bad)} of {len(results)} killed in {time.monotonic() - start:.0f} s")
    for m, verdict in bad:
        print(f"mutants: {verdict}: {m.name} ({m.file}): {m.why}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
