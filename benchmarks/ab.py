"""Run one benchmark against two revisions of jaxgcn in the same session, interleaved.

    python benchmarks/ab.py --base da61670 -- bench_train.py --repeats 3
    python benchmarks/ab.py --base HEAD~3 --rounds 2 -- bench_sweep.py --seeds 100 --loop 20

The base revision is checked out into a temporary git worktree; each round runs the benchmark
script (the base's own copy when it has one) once with the base's ``src`` on ``PYTHONPATH`` and
once with this working tree's, alternating, so that drift of the machine hits both alike. Each run's
output is printed under its label; compare the figures line by line.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(tree: Path, script: str, args: list[str], label: str) -> None:
    bench = tree / "benchmarks" / script
    if not bench.is_file():
        bench = ROOT / "benchmarks" / script
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    proc = subprocess.run([sys.executable, str(bench), *args], env=env, capture_output=True, text=True)
    print(f"--- {label} (exit {proc.returncode})")
    print(proc.stdout.rstrip())
    if proc.returncode:
        print(proc.stderr[-2000:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="git revision to compare against")
    ap.add_argument("--rounds", type=int, default=1, help="base/current pairs to run")
    ap.add_argument("bench", nargs=argparse.REMAINDER, help="-- SCRIPT [ARGS...] (a file in benchmarks/)")
    args = ap.parse_args()
    bench = [a for a in args.bench if a != "--"]
    if not bench:
        ap.error("give the benchmark after --, e.g. -- bench_train.py --repeats 3")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), args.base], check=True,
                       capture_output=True)
        try:
            for r in range(args.rounds):
                run(base, bench[0], bench[1:], f"base {args.base}, round {r + 1}")
                run(ROOT, bench[0], bench[1:], f"current tree, round {r + 1}")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
