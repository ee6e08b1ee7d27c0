"""Shared test setup: strict JAX promotion rules and a tiny hand-built graph.

Strict dtype promotion and ``rank_promotion="raise"`` make any silent float32/float64 mix or
implicit broadcast an error (the project's test conventions); pyproject.toml turns warnings into errors.
The dataset cache ($JAXGCN_DATA) is a fresh folder per test session and no mirror is set: the
tests never read or write the user's cache and never reach the network.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

# XLA's flags for the programs the tests themselves run eagerly, op by op (reference values,
# gradients of unjitted functions: some 3,000 one-op programs): the classic loop emitter and LLVM
# level 1, the options jaxgcn.host.compiler gives its own programs (which these flags therefore leave as
# they are). Each one-op program then compiles in about 30 ms instead of 42-54 ms (150 programs of
# distinct shapes, a 2-core Zen 3). Set before JAX starts its CPU client, and only where this jaxlib
# knows them (XLA aborts on an unknown flag): probed once per jaxlib version in a subprocess (~1.7 s; the
# answer is kept in the temp folder, as the mutation pass starts ~80 test sessions), by the process
# that starts first (the xdist controller); the workers and every subprocess inherit the result.
EAGER_XLA_FLAGS = "--xla_cpu_use_fusion_emitters=false --xla_backend_optimization_level=1"


def _jaxlib_takes(flags: str) -> bool:
    import hashlib
    from importlib.metadata import version

    key = hashlib.sha256(f"{sys.executable} {version('jaxlib')} {flags}".encode()).hexdigest()[:16]
    answer = Path(tempfile.gettempdir()) / f"jaxgcn-test-xla-flags-{key}"
    if answer.is_file() and answer.read_text() in ("yes", "no"):
        return answer.read_text() == "yes"
    probe = subprocess.run([sys.executable, "-c", "import jax.numpy as jnp; (jnp.zeros(2) + 1).block_until_ready()"],
                           env={**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}, capture_output=True)
    fd, tmp = tempfile.mkstemp(dir=answer.parent, prefix=answer.name)  # never through a planted link
    with os.fdopen(fd, "w") as f:
        f.write("yes" if probe.returncode == 0 else "no")
    os.replace(tmp, answer)
    return probe.returncode == 0


if "JAXGCN_TEST_EAGER_FLAGS" not in os.environ:
    _flags = f"{os.environ.get('XLA_FLAGS', '')} {EAGER_XLA_FLAGS}".strip()
    _takes = _jaxlib_takes(_flags)
    os.environ["JAXGCN_TEST_EAGER_FLAGS"] = "on" if _takes else "unknown to this jaxlib"
    if _takes:
        os.environ["XLA_FLAGS"] = _flags

import jax  # noqa: E402 - after XLA_FLAGS
import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")
# The dataset cache: a fresh folder per test process (removed by that process at its end).
DATA_DIR = tempfile.mkdtemp(prefix="jaxgcn-test-data-")
os.environ["JAXGCN_DATA"] = DATA_DIR
os.environ.pop("JAXGCN_MIRROR", None)

# JAX's persistent compilation cache, on from the first test, for this process and (through the
# environment) every subprocess it starts: many tests compile the same programs (the same fit on
# the same fixture, the CLI in a subprocess), and a hit skips the compile. The folder is
# $JAX_COMPILATION_CACHE_DIR when set (.ci/run keeps one across its passes), else a fresh temp
# folder per session: the suite never writes into the user's ~/.cache (the CLI keeps a folder
# already configured instead of switching to its own).
# With pytest-xdist the controller sets it first and the workers inherit it: one cache for all.
_OWN_XLA_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _OWN_XLA_CACHE:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxgcn-test-xla-")
XLA_CACHE = os.environ["JAX_COMPILATION_CACHE_DIR"]
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.1")
jax.config.update("jax_compilation_cache_dir", XLA_CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs",
                  float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))


def pytest_unconfigure(config: pytest.Config) -> None:
    """The session's own compilation cache goes with it (removed by the process that made it: the
    xdist controller, or a plain session), and each process's dataset folder with that process."""
    import shutil

    shutil.rmtree(DATA_DIR, ignore_errors=True)
    if _OWN_XLA_CACHE and not hasattr(config, "workerinput"):
        shutil.rmtree(XLA_CACHE, ignore_errors=True)


# On an accelerator (``python -m pytest -o addopts="" -n 0 ...`` on a TPU VM: docs/tpu.md) one process
# holds the chip: a test that starts another Python process skips, and so does one that asks for the
# C++ kernel, which runs on the CPU only. On the CPU (CI) neither applies.
ONE_PROCESS = ("on an accelerator one process holds the chip: this test starts another Python process "
               "(run it on the CPU)")
KERNEL_ONLY = "backend='csr' needs the fused CPU kernel"


def _on_accelerator() -> bool:
    return jax.default_backend() != "cpu"


@pytest.fixture(autouse=True)
def _one_process_on_the_accelerator():
    """On an accelerator, a test's ``subprocess.run``/``Popen`` of a Python or ``jaxgcn`` process skips.
    (Its own MonkeyPatch, not the ``monkeypatch`` fixture: requested here, that one would be set up before
    every test's fixtures and undone after theirs, so a fixture's teardown would still see a test's patches.)"""
    if not _on_accelerator():
        yield
        return

    def guarded(real):
        def call(args, *rest, **kwargs):
            first = str((args if isinstance(args, (list, tuple)) else str(args).split())[0])
            if first == sys.executable or "python" in Path(first).name or Path(first).name == "jaxgcn":
                pytest.skip(ONE_PROCESS)
            return real(args, *rest, **kwargs)
        return call

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess, "run", guarded(subprocess.run))
        patch.setattr(subprocess, "Popen", guarded(subprocess.Popen))
        yield


@pytest.fixture(autouse=True, scope="session")
def _full_float32_on_the_accelerator():
    """On an accelerator the tests' own reference matmuls (``to_dense(g) @ x``, unjitted formulas) run in
    full float32, as the CPU's do: a TPU's default is one bfloat16 pass (dense-formula equivalences were
    off by 2e-3 to 7e-3 there). jaxgcn's own programs decide theirs (``--precision auto``: highest)."""
    if _on_accelerator():
        jax.config.update("jax_default_matmul_precision", "highest")


@pytest.fixture(scope="module")
def cpu_slices():
    """A batch sliced as on the CPU (:func:`jaxgcn.plan.runs_per_device_for` runs per device), for the
    tests of checkpoints kept per slice and resumed inside a batch: an accelerator's plan puts as many
    runs together as its memory holds (all of a test's few), so no batch would have a second slice."""
    if not _on_accelerator():
        yield
        return
    import jaxgcn.sweep
    import jaxgcn.training.runs
    from jaxgcn import plan

    real = plan.slice_size

    def cpu_sized(n_runs, hidden, execution, n_devices, graph, runs_per_device, n_features=None):
        runs_per_device = plan.runs_per_device_for(hidden) if runs_per_device is None else runs_per_device
        return real(n_runs, hidden, execution, n_devices, graph, runs_per_device, n_features)
    with pytest.MonkeyPatch.context() as patch:
        for module in (plan, jaxgcn.training.runs, jaxgcn.sweep):
            patch.setattr(module, "slice_size", cpu_sized)
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """On an accelerator, a test that failed because it asked for the CPU-only C++ kernel is reported
    as skipped, with that reason."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.excinfo is not None and KERNEL_ONLY in str(call.excinfo.value) and _on_accelerator():
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {KERNEL_ONLY}, which runs on the CPU only")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (pyproject's addopts): one worker per CPU this process may use (affinity mask,
    cgroup quota), at most 4: each worker holds its own JAX runtime and module fixtures."""
    from jaxgcn.host.memory import available_cpus

    return min(4, available_cpus())


class EdgeList(NamedTuple):
    """A raw edge list as a user would pass it to ``from_edges`` (``senders[k] -> receivers[k]``)."""

    senders: np.ndarray
    receivers: np.ndarray
    weights: np.ndarray
    n_nodes: int


@pytest.fixture
def raw_edges() -> EdgeList:
    """Six nodes, deliberately dirty input.

    - 0 <-> 1: an undirected pair, both directions listed.
    - 1 <-> 2: both directions listed, and 1 -> 2 listed TWICE (weights 1 and 2): a duplicate.
    - 2 -> 3: listed one way only (weight 0.5): a directed edge that symmetrization must mirror.
    - 3 <-> 4: an undirected pair.
    - 3 -> 3: an explicit self-loop of weight 3 (must keep weight 3, not get another + 1).
    - node 5: isolated (no edge at all).
    """
    senders = np.array([0, 1, 1, 2, 1, 2, 3, 4, 3])
    receivers = np.array([1, 0, 2, 1, 2, 3, 4, 3, 3])
    weights = np.array([1.0, 1.0, 1.0, 1.0, 2.0, 0.5, 1.0, 1.0, 3.0])
    return EdgeList(senders, receivers, weights, 6)


# The cleaned adjacency of ``raw_edges`` (duplicates="max", symmetrized, missing self-loops added),
# worked out by hand: entry [i, j] is the weight of edge j -> i.
#   [1, 2] and [2, 1]: duplicates 1 -> 2 (1, 2) merge to max 2; 2 -> 1 (1) mirrors to max(1, 2) = 2.
#   [2, 3] = [3, 2] = 0.5: the one-way edge, mirrored.  [3, 3] = 3: the explicit self-loop.
EXPECTED_ADJ_MAX = np.array([
    [1.0, 1.0, 0.0, 0.0, 0.0, 0.0],
    [1.0, 1.0, 2.0, 0.0, 0.0, 0.0],
    [0.0, 2.0, 1.0, 0.5, 0.0, 0.0],
    [0.0, 0.0, 0.5, 3.0, 1.0, 0.0],
    [0.0, 0.0, 0.0, 1.0, 1.0, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.0, 1.0],
], dtype=np.float32)


@pytest.fixture
def expected_adj() -> np.ndarray:
    return EXPECTED_ADJ_MAX.copy()


@pytest.fixture
def graph(raw_edges: EdgeList):
    """The fixture graph cleaned with the defaults (not normalized)."""
    from jaxgcn.core.graph import from_edges

    g, _ = from_edges(raw_edges.senders, raw_edges.receivers, raw_edges.weights, n_nodes=raw_edges.n_nodes)
    return g


@pytest.fixture
def node_features() -> np.ndarray:
    """[6, 3] float32 features with distinct, non-zero entries."""
    return (np.arange(18, dtype=np.float32).reshape(6, 3) - 7.5) / 4.0


# The published dataset files a few tests read (raw Planetoid pickles, Shchur et al.'s npz): the folder
# $JAXGCN_TEST_DATA, else a "shared/datasets" folder beside the repository (where CI keeps them).
SHARED_DATASETS = Path(os.environ.get("JAXGCN_TEST_DATA")
                       or Path(__file__).resolve().parents[2] / "shared" / "datasets")
FETCH_HOW = {
    "planetoid": "ind.cora.* and ind.citeseer.* from https://github.com/kimiyoung/planetoid/tree/master/data",
    "gnn-benchmark": "cora.npz and citeseer.npz from https://github.com/shchur/gnn-benchmark/tree/master/data/npz",
}


def shared_file(folder: str, name: str) -> Path:
    """``SHARED_DATASETS/folder/name``, or a skip whose reason says where to get the file and where to
    put it (the tests never download)."""
    path = SHARED_DATASETS / folder / name
    if not path.is_file():
        pytest.skip(f"{path} is absent: put {FETCH_HOW[folder]} in $JAXGCN_TEST_DATA/{folder}/ "
                    "and set JAXGCN_TEST_DATA to that folder to run this test")
    return path


@pytest.fixture(scope="session")
def planetoid_dir() -> Path:
    """The raw Planetoid files (``ind.<name>.*``); skip when absent (see :func:`shared_file`)."""
    return shared_file("planetoid", "ind.cora.graph").parent


def closed_port() -> int:
    """A local port nothing listens on (a skip where the machine has no IPv4 sockets, as :func:`local_server`)."""
    import socket

    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    except OSError as err:
        pytest.skip(f"no local sockets here: {err}")


def local_server(server_class, handler):
    """``server_class`` on a free local port, or a skip where the machine has no IPv4 sockets (the TPU's
    sandbox: "Address family not supported by protocol")."""
    try:
        return server_class(("127.0.0.1", 0), handler)
    except OSError as err:
        pytest.skip(f"no local sockets here: {err}")


@pytest.fixture(scope="session")
def gnnbench_mirror(tmp_path_factory):
    """A local HTTP server laid out as a JAXGCN_MIRROR (``<name>/<filename>``) serving a gnn-benchmark
    file the tests write in the published layout (tests/tiny_datasets.py) as ``tiny-shchur``; yields
    its base URL (set it with ``monkeypatch.setenv("JAXGCN_MIRROR", url)``) and that file's catalogue
    row, its size and SHA-256 as published rows carry them (add it with ``monkeypatch.setitem``)."""
    import threading
    from functools import partial
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    from tiny_datasets import tiny_row, write_gnnbench

    root = tmp_path_factory.mktemp("mirror")
    row = tiny_row(write_gnnbench(root / "tiny-shchur" / "tiny.npz"), "tiny-shchur")

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = local_server(ThreadingHTTPServer, partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", row
    server.shutdown()
    server.server_close()


# The kernel's prefetch tile and thread cut-offs are the machine's (jaxgcn.host.machine); the tests that
# were sized to reach a regime (prefetch, several row chunks) pin the settings they were sized for,
# so that they reach it on every CPU.
REGIME_TUNING = (256 * 1024, 1 << 18, 1 << 17)  # tile bytes, product and pass cut-offs


@pytest.fixture
def regime_tuning():
    """The kernel runs with :data:`REGIME_TUNING` during the test; the machine's settings after."""
    import jaxgcn.native.csr as csr
    from jaxgcn.host import machine

    if not csr.kernel_status()[0]:  # tests/test_csr.py::test_kernel_builds_here says why
        yield
        return
    csr.set_kernel_tuning(machine.Tuning(*REGIME_TUNING))
    yield
    csr.set_kernel_tuning(machine.tuning())
