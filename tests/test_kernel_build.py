"""Building the fused CSR kernel where the compiler is not the friendly g++ of this machine: a
compiler that refuses -march=native (the build retries without it), one that always fails (the
failure is recorded once per cache key, not retried by every process), the CLI's one line
when ``auto`` keeps to ``segment``, and both branches of the kernel's masked loads and stores:
the portable one built and tested on any machine (``JAXGCN_KERNEL_ISA=portable``), the AVX-512
one compiled wherever the compiler takes it and tested where the CPU has it."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import jaxgcn.native.csr as csr_mod
from jaxgcn import plan
from jaxgcn.native import kernel_build
from jaxgcn.native.csr import csr_from_scipy

GXX = shutil.which("g++")
# the fallback from csr to segment is the CPU plan's (an accelerator's auto is dense or gather, never either)
CPU_FALLBACK = pytest.mark.skipif(jax.default_backend() != "cpu", reason="auto falls back to segment on the CPU only")
REPO = Path(__file__).resolve().parents[1]
AVX512_FLAGS = ("-mavx512f", "-mavx512bw", "-mavx512vl")
# The kernel's correctness tests in tests/test_csr.py that a build for another ISA must pass: every
# regime, the masked skip, the pair, the lanes of the zero-row checks, and the ISA it reports.
KERNEL_TESTS = "regimes or masked or pair or given or isa or first_lanes or cotangent or hidden_dropout"


def _script(tmp_path, name: str, body: str) -> tuple[str, object]:
    """An executable compiler stand-in that logs each invocation's arguments to ``<name>.log``."""
    log = tmp_path / f"{name}.log"
    path = tmp_path / name
    path.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\n{body}\n')
    path.chmod(0o755)
    return str(path), log


@pytest.fixture
def fresh_loader(monkeypatch, tmp_path):
    """A per-process loader that has not run yet, caching in tmp_path; the real kernel loads again
    for the tests that follow (cache_clear on the way out, before the environment is restored)."""
    csr_mod._load()  # the real kernel registered first: these tests never replace its FFI targets
    monkeypatch.setenv("JAXGCN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("JAXGCN_NO_KERNELS", raising=False)
    monkeypatch.setattr(kernel_build, "PREBUILT", tmp_path / "prebuilt")  # none built at install time
    csr_mod._load.cache_clear()
    yield
    csr_mod._load.cache_clear()


@pytest.mark.skipif(GXX is None, reason="needs g++ to stand behind the fake compiler")
def test_a_compiler_refusing_march_native_builds_on_the_retry(monkeypatch, tmp_path, fresh_loader):
    # g++ behind it compiles the retry at -O0 where it is given -O3 (the log keeps what it was given):
    # the same source in half the time (3 s, not 7); this test is about the retry, not the code's speed
    cxx, log = _script(tmp_path, "picky-cxx", f"""for a in "$@"; do
  if [ "$a" = "-march=native" ]; then
    echo "picky-cxx: error: unrecognized command-line option '-march=native'" >&2
    exit 1
  fi
  shift
  if [ "$a" = "-O3" ]; then a="-O0"; fi
  set -- "$@" "$a"
done
exec "{GXX}" "$@\"""")
    monkeypatch.setenv("CXX", cxx)
    assert kernel_build._compiler() == cxx
    assert csr_mod.kernel_possible()  # builds without starting anything of JAX
    path = kernel_build._build(cxx)
    assert path.parent == tmp_path / "cache" / "kernels" and path.suffix == ".so"
    runs = log.read_text().splitlines()
    assert len(runs) == 2 and "-march=native" in runs[0] and "-march=native" not in runs[1] and "-O3" in runs[1]
    assert not list(path.parent.glob("*.failed"))
    kernel_build._build(cxx)
    assert len(log.read_text().splitlines()) == 2  # the cached library: no compiler run

    # the retried build computes the product: registered under its own name, not the real kernel's
    lib = ctypes.cdll.LoadLibrary(str(path))
    jax.ffi.register_ffi_target("jaxgcn_spmm_retry_test", jax.ffi.pycapsule(lib.JaxgcnSpmm), platform="cpu")
    monkeypatch.setattr(csr_mod, "_TARGET", "jaxgcn_spmm_retry_test")
    a = sp.csr_matrix(np.array([[0, 2.0, 0], [3.0, 0, 1.0], [0, 0, 0], [0.5, 0, 4.0]]))
    m = csr_from_scipy(a)
    b = np.arange(21, dtype=np.float32).reshape(3, 7) / 7
    with jax.default_device(jax.devices("cpu")[0]):  # a CPU kernel: its arrays on the CPU, on any machine
        out = csr_mod._call(jnp.asarray(m.indptr), jnp.asarray(m.cols), jnp.asarray(m.data)[:, None],
                            jnp.asarray(b), False)
    np.testing.assert_allclose(np.asarray(out), a @ b.astype(np.float64), rtol=1e-6)


def test_a_failing_compiler_runs_once_per_cache_key(monkeypatch, tmp_path, fresh_loader):
    cxx, log = _script(tmp_path, "broken-cxx", 'echo "broken-cxx: error: no such thing as C++17" >&2\nexit 1')
    monkeypatch.setenv("CXX", cxx)
    # the default build's command line, as the messages below quote it (JAXGCN_KERNEL_ISA=avx2, as CI's
    # AVX2 pass sets it, adds -mno-avx512f)
    monkeypatch.delenv("JAXGCN_KERNEL_ISA", raising=False)
    ok, reason = csr_mod._load()
    assert not ok
    marker = next((tmp_path / "cache" / "kernels").glob("libjaxgcn_spmm-*.failed"))
    assert reason == (f"the csr kernel failed to build (compiling spmm.cc failed: {cxx} -O3 exited 1: broken-cxx: "
                      f"error: no such thing as C++17; details in {marker}; set CXX to another C++17 compiler, or "
                      "delete that file to try again)")
    runs = log.read_text().splitlines()
    assert len(runs) == 2 and "-march=native" in runs[0] and "-march=native" not in runs[1]  # one attempt, retried
    details = marker.read_text()
    assert details.splitlines()[0] == (f"compiling spmm.cc failed: {cxx} -O3 exited 1: broken-cxx: error: no such "
                                       "thing as C++17")
    assert f"$ {cxx} -O3 -march=native -std=c++17" in details and "exited 1" in details
    assert not list(marker.parent.glob("*.so")) and not list(marker.parent.glob("*.tmp"))

    csr_mod._load.cache_clear()  # as a new process would
    assert csr_mod._load() == (False, reason)
    assert not csr_mod.kernel_possible()
    assert len(log.read_text().splitlines()) == 2  # the recorded failure, not the compiler again
    with pytest.raises(ValueError, match=r"^backend='csr' needs the fused CPU kernel, which is unavailable: the csr "
                                         r"kernel failed to build \(compiling spmm.cc failed: .*broken-cxx -O3 exited "
                                         r"1: .*; use backend='segment'"):
        csr_mod.require_kernel()
    assert csr_mod.kernel_status() == (False, reason)  # the one oracle says why, as the plan words it
    assert plan.fallback_note("auto", "segment") == f"backend segment: {reason}"
    assert plan.kernel_available() == (False, reason)


def test_a_changed_compiler_gets_a_new_attempt(monkeypatch, tmp_path, fresh_loader):
    cxx, log = _script(tmp_path, "broken-cxx", "exit 1")
    monkeypatch.setenv("CXX", cxx)
    assert not csr_mod.kernel_possible()
    first = kernel_build._library(cxx)
    assert first.with_suffix(".failed").exists()
    _script(tmp_path, "broken-cxx", "exit 22")  # upgraded in place: a new size, a new key
    assert kernel_build._library(cxx) != first
    assert not csr_mod.kernel_possible()
    assert len(log.read_text().splitlines()) == 4
    assert "exited 22: no output" in kernel_build._library(cxx).with_suffix(".failed").read_text().splitlines()[0]


def test_builds_needed_at_once_run_the_compiler_once(monkeypatch, tmp_path, fresh_loader):
    # a slow compiler (it writes its -o file after 1 s) and three callers at once, as the processes
    # of a --distributed job's first run: one compiles, the others wait for its library
    import threading

    cxx, log = _script(tmp_path, "slow-cxx", """sleep 1
out=""; prev=""
for a in "$@"; do if [ "$prev" = "-o" ]; then out="$a"; fi; prev="$a"; done
echo built > "$out"
""")
    monkeypatch.setenv("CXX", cxx)
    paths, errors = [], []

    def build() -> None:
        try:
            paths.append(kernel_build._build(cxx))
        except Exception as err:  # noqa: BLE001 - reported by the assertion below
            errors.append(err)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(paths) == 3 and len(set(paths)) == 1 and paths[0].read_text() == "built\n"
    assert len(log.read_text().splitlines()) == 1, log.read_text()  # one compiler run, not three
    assert not list(paths[0].parent.glob("*.so.*")) and len(list(paths[0].parent.glob("*.so"))) == 1


@CPU_FALLBACK
def test_no_compiler_says_how_to_get_the_faster_kernel(monkeypatch, fresh_loader):
    monkeypatch.setattr(kernel_build, "_compiler", lambda: None)
    assert csr_mod._load() == (False, "no C++ compiler found (set CXX or install g++ for the faster csr kernel)")
    assert not csr_mod.kernel_possible()
    assert plan.fallback_note("auto", "segment") == ("backend segment: no C++ compiler found (set CXX or install g++ "
                                                     "for the faster csr kernel)")


def test_no_fallback_note_where_the_kernel_runs():
    if not csr_mod.kernel_status()[0]:
        pytest.skip("the kernel does not build here")
    assert plan.fallback_note("auto", "segment") is None
    assert csr_mod.kernel_possible()


@CPU_FALLBACK
def test_the_cli_says_in_one_line_why_auto_keeps_to_segment(monkeypatch, tmp_path, capsys, fresh_loader):
    from cli_run import run_main

    monkeypatch.setenv("JAXGCN_NO_KERNELS", "1")
    assert run_main(["train", "--dataset", "cora", "--epochs", "3", "--early-stopping", "none"]) == 0
    out = capsys.readouterr().out
    assert "backend segment: disabled by JAXGCN_NO_KERNELS" in out.splitlines()


# --- the portable and the AVX-512 branches ---------------------------------------------------------

def _kernel_tests_with(isa: str, tmp_path, tests: str = KERNEL_TESTS, at_least: int = 30) -> None:
    """Run ``tests`` (a -k expression of tests/test_csr.py) in a new process whose kernel is built
    with ``JAXGCN_KERNEL_ISA=isa`` into an empty cache (not the cached native build), and require
    them all to pass. Every program they compile goes into the session's compilation cache (most
    compile in under the 0.1 s that tests/conftest.py sets as the least worth keeping), so that the
    next ISA's process loads them instead of compiling them again (~7 s): a loaded program calls the
    FFI targets by name, i.e. the kernel that process built."""
    env = {**os.environ, "JAXGCN_KERNEL_ISA": isa, "JAXGCN_CACHE_DIR": str(tmp_path / "cache"),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    env.pop("JAXGCN_NO_KERNELS", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                           "tests/test_csr.py", "-k", tests], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert list((tmp_path / "cache" / "kernels").glob("libjaxgcn_spmm-*.so")), "no kernel built for this ISA"
    passed = re.search(r"(\d+) passed", proc.stdout)
    assert passed and int(passed.group(1)) >= at_least and "skipped" not in proc.stdout, proc.stdout[-2000:]


def test_the_portable_build_passes_the_kernel_tests(tmp_path):
    # on an AVX2 or AVX-512 CPU the only run of the portable branch; the ISA test in there asserts "portable"
    if not csr_mod.kernel_status()[0]:
        pytest.skip("the kernel does not build here")
    if csr_mod.kernel_isa() == "portable":
        # this CPU's own build is the portable branch, which all of tests/test_csr.py runs in this
        # session: the flag's build only needs to say so and pass the regime cases
        _kernel_tests_with("portable", tmp_path, "isa or regimes", at_least=9)
    else:
        _kernel_tests_with("portable", tmp_path)


def _compiler_takes(cxx: str, flags: tuple[str, ...], tmp_path) -> bool:
    probe = tmp_path / "probe.cc"
    probe.write_text("int main() { return 0; }\n")
    cmd = [cxx, *flags, "-c", str(probe), "-o", str(tmp_path / "probe.o")]
    return subprocess.run(cmd, capture_output=True).returncode == 0


def test_the_avx512_branch_compiles_wherever_the_compiler_takes_avx512(tmp_path):
    # Compiled, not run (this CPU may lack AVX-512): an error in that branch fails here on any machine.
    cxx = kernel_build._compiler()
    if cxx is None or not _compiler_takes(cxx, AVX512_FLAGS, tmp_path):
        pytest.skip(f"the compiler ({cxx}) does not take {' '.join(AVX512_FLAGS)}")
    out = str(tmp_path / "avx512.so")
    failure = kernel_build._compile(cxx, ("-O1", *AVX512_FLAGS, "-DJAXGCN_EXPECT_ISA=1"), out)
    assert failure is None, failure[1]
    # JAXGCN_PORTABLE selects the portable branch even for an AVX-512 target ... (the preprocessor
    # selects the branch and checks JAXGCN_EXPECT_ISA: -E, 0.1 s where -fsyntax-only takes 1.4 s)
    selected = ("-E", *AVX512_FLAGS, "-DJAXGCN_PORTABLE")
    failure = kernel_build._compile(cxx, (*selected, "-DJAXGCN_EXPECT_ISA=0"), out)
    assert failure is None, failure[1]
    # ... and JAXGCN_EXPECT_ISA is checked: the other answer is refused
    refused = kernel_build._compile(cxx, (*selected, "-DJAXGCN_EXPECT_ISA=1"), out)
    assert refused is not None and "JAXGCN_EXPECT_ISA" in refused[1]


def test_the_avx2_branch_compiles_wherever_the_compiler_takes_avx2(tmp_path):
    # Compiled, not run: -mavx2 selects the AVX2 branch, -mavx512f above it the AVX-512 one
    cxx = kernel_build._compiler()
    if cxx is None or not _compiler_takes(cxx, ("-mavx2",), tmp_path):
        pytest.skip(f"the compiler ({cxx}) does not take -mavx2")
    out = str(tmp_path / "avx2.so")
    assert kernel_build._compile(cxx, ("-fsyntax-only", "-mavx2", "-DJAXGCN_EXPECT_ISA=2"), out) is None
    # which branch the flags select is the preprocessor's: -E (0.1 s) is enough for the other two
    assert kernel_build._compile(cxx, ("-E", "-mavx2", "-DJAXGCN_PORTABLE", "-DJAXGCN_EXPECT_ISA=0"), out) is None
    refused = kernel_build._compile(cxx, ("-E", "-mavx2", "-DJAXGCN_EXPECT_ISA=1"), out)
    assert refused is not None and "JAXGCN_EXPECT_ISA" in refused[1]


@pytest.mark.skipif("avx512f" not in kernel_build._cpu_id().split() or "avx2" not in kernel_build._cpu_id().split(),
                    reason="this CPU has no AVX-512: its native build is the AVX2 branch (or the portable one)")
def test_the_avx2_build_passes_the_kernel_tests_on_an_avx512_cpu(tmp_path):
    # JAXGCN_KERNEL_ISA=avx2 (-mno-avx512f): the branch every AVX2-only CPU runs, tested where it is not native
    _kernel_tests_with("avx2", tmp_path)


def test_an_unknown_isa_is_a_clear_reason(monkeypatch, fresh_loader):
    monkeypatch.setenv("JAXGCN_KERNEL_ISA", "avx9000")
    assert csr_mod._load() == (False, "JAXGCN_KERNEL_ISA='avx9000' is not one of native, avx2, portable")
    assert not csr_mod.kernel_possible()
    # also where pip install built one: the same reason, not a traceback
    (kernel_build.PREBUILT).mkdir()
    (kernel_build.PREBUILT / "build.json").write_text('{"key": "x"}')
    csr_mod._load.cache_clear()
    assert csr_mod._load() == (False, "JAXGCN_KERNEL_ISA='avx9000' is not one of native, avx2, portable")


def test_the_isa_is_part_of_the_cache_key(monkeypatch):
    cxx = kernel_build._compiler() or "/usr/bin/c++"
    monkeypatch.delenv("JAXGCN_KERNEL_ISA", raising=False)
    native = kernel_build._library(cxx)
    monkeypatch.setenv("JAXGCN_KERNEL_ISA", "native")
    assert kernel_build._library(cxx) == native
    monkeypatch.setenv("JAXGCN_KERNEL_ISA", "portable")
    assert kernel_build._library(cxx) != native


# --- the build at install time (setup.py -> kernel_build.build_prebuilt, issue 26) ----------------------

def test_the_install_time_build_is_used_only_where_it_was_built_for(monkeypatch, tmp_path, fresh_loader):
    # The compiler stand-in copies the library this process loaded (the real compiler's build of the
    # same source, flags and CPU) to its -o file: which build is used is what this test is about, and
    # tests/test_packaging.py builds the wheel, and this library in it, with the real compiler.
    if csr_mod._LIBRARY is None:  # fresh_loader loaded it where it builds
        pytest.skip("the kernel does not build here")
    cxx, log = _script(tmp_path, "copying-cxx", f"""out=""; prev=""
for a in "$@"; do if [ "$prev" = "-o" ]; then out="$a"; fi; prev="$a"; done
cp "{csr_mod._LIBRARY._name}" "$out\"""")
    monkeypatch.setattr(kernel_build, "_compiler", lambda: cxx)
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("JAXGCN_KERNEL_ISA", raising=False)
    dest = tmp_path / "prebuilt"
    assert kernel_build.build_prebuilt(dest) == f"jaxgcn: csr kernel built at install time with {cxx} -O3 -march=native"
    assert len(log.read_text().splitlines()) == 1
    assert sorted(p.name for p in dest.iterdir()) == ["build.json", "libjaxgcn_spmm.so"]  # no temp file left
    assert kernel_build.prebuilt() == dest / "libjaxgcn_spmm.so"
    # used without any compiler, and nothing is compiled into the cache (registered under names of
    # its own: this process registered the real kernel's)
    monkeypatch.setattr(kernel_build, "_compiler", lambda: None)
    for target in ("_TARGET", "DENSE_TARGET", "_PAIR_TARGET", "_T_TARGET", "ADAM_TARGET",
                   "DROPOUT_TARGET"):
        monkeypatch.setattr(csr_mod, target, getattr(csr_mod, target) + "_prebuilt_test")
    ok, reason = csr_mod._load()
    assert ok and reason == f"built at install time, in {dest}", reason
    assert not (tmp_path / "cache").exists()
    # not for another CPU (a wheel copied to another machine), another build flavour or compiler
    real_cpu = kernel_build._cpu_id()
    monkeypatch.setattr(kernel_build, "_cpu_id", lambda: real_cpu + " another")
    assert kernel_build.prebuilt() is None
    monkeypatch.setattr(kernel_build, "_cpu_id", lambda: real_cpu)
    monkeypatch.setenv("JAXGCN_KERNEL_ISA", "portable")
    assert kernel_build.prebuilt() is None
    monkeypatch.delenv("JAXGCN_KERNEL_ISA")
    monkeypatch.setenv("CXX", "/bin/true")
    assert kernel_build.prebuilt() is None
    monkeypatch.delenv("CXX")
    assert kernel_build.prebuilt() is not None
    (dest / "build.json").write_text("{not json")
    assert kernel_build.prebuilt() is None


def test_an_install_without_a_working_compiler_says_so_and_builds_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(kernel_build, "_compiler", lambda: None)
    assert "not built at install time: no C++ compiler found" in kernel_build.build_prebuilt(tmp_path / "a")
    assert not (tmp_path / "a").exists()
    cxx, log = _script(tmp_path, "broken-cxx", 'echo "broken-cxx: error: nope" >&2\nexit 1')
    monkeypatch.setattr(kernel_build, "_compiler", lambda: cxx)
    message = kernel_build.build_prebuilt(tmp_path / "b")
    assert "not built at install time (compiling spmm.cc failed" in message and "built on first use" in message
    assert list((tmp_path / "b").iterdir()) == []  # no library, no half-written temp file
    assert len(log.read_text().splitlines()) == 2  # -march=native, then without
