"""A newcomer's first command against the same command once the caches are filled (issue 26).

    python benchmarks/bench_first_run.py [--dataset cora] [--repeats 3]
    python benchmarks/ab.py --base REV --rounds 2 -- bench_first_run.py

Each round runs ``jaxgcn train --dataset cora --verbose`` (``python -m jaxgcn.cli``) with an empty
cache folder (``JAXGCN_CACHE_DIR``: no compiled XLA programs, no kernel compiled on first use; the
kernel ``pip install`` built into the package is used when it was built for this CPU), then again
with that folder filled. It prints the medians, their ratio, and the phases ``--verbose`` reports
(where this revision has it). It also times what answers without training: ``--help``, ``--version``
and a mistyped value (medians), and how long the kernel takes to compile here (what a first run
without an install-time build adds). Name the CPU (``lscpu``) beside the figures.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Wall seconds of one process, start to exit, and its output."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 2):
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return seconds, proc.stdout + proc.stderr


def phases(output: str) -> str:
    match = re.search(r"^phases: .*$", output, flags=re.M)
    return match[0] if match else "phases: (this revision has no --verbose)"


def kernel_compile_seconds(env: dict[str, str]) -> str:
    """One compile of the kernel into a scratch folder (what a first use without an install-time
    build adds), or why it cannot be timed."""
    code = ("import sys, tempfile, time\nfrom pathlib import Path\n"
            "try:\n    from jaxgcn.native import kernel_build\nexcept ImportError:\n    print('n/a'); sys.exit()\n"
            "d = Path(tempfile.mkdtemp())\nt = time.perf_counter()\nmsg = kernel_build.build_prebuilt(d)\n"
            "print(f'{time.perf_counter() - t:.2f} s ({msg})')\n")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="cora")
    ap.add_argument("--repeats", type=int, default=3, help="first/warm pairs (medians)")
    args = ap.parse_args()
    jaxgcn = [sys.executable, "-m", "jaxgcn.cli"]
    train = [*jaxgcn, "train", "--dataset", args.dataset, "--quiet", "--verbose"]
    first, warm, first_out, warm_out = [], [], "", ""
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            env = {**os.environ, "JAXGCN_CACHE_DIR": f"{tmp}/{i}"}
            env.pop("JAX_COMPILATION_CACHE_DIR", None)
            seconds, first_out = timed(train, env)
            if "unrecognized arguments: --verbose" in first_out:  # a revision without --verbose
                train = train[:-1]
                seconds, first_out = timed(train, env)
            first.append(seconds)
            seconds, warm_out = timed(train, env)
            warm.append(seconds)
        quick = {name: statistics.median(timed([*jaxgcn, *argv], dict(os.environ))[0] for _ in range(5))
                 for name, argv in (("--help", ["--help"]), ("--version", ["--version"]),
                                    ("a mistyped value", ["train", "--lr", "abc"]))}
    f, w = statistics.median(first), statistics.median(warm)
    print(f"jaxgcn train --dataset {args.dataset}: first run (empty caches) {f:.2f} s | caches filled {w:.2f} s | "
          f"ratio {f / w:.2f}x (medians of {args.repeats})")
    print(f"  first: {phases(first_out)}")
    print(f"  warm:  {phases(warm_out)}")
    print("answers without training (medians of 5): "
          + " | ".join(f"{name} {seconds:.2f} s" for name, seconds in quick.items()))
    print(f"compiling the kernel here: {kernel_compile_seconds(dict(os.environ))}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; source: {Path(__file__).name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
