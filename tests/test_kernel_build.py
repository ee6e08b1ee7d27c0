"""Building the fused CSR kernel where the compiler is not the friendly g++ of this machine: a
compiler that refuses -march=native (the build retries without it), one that always fails (the
failure is recorded once per cache key, not retried by every process), and the CLI's one line
when ``auto`` keeps to ``segment``."""

from __future__ import annotations

import ctypes
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import jaxgcn.csr as csr_mod
from jaxgcn.csr import csr_from_scipy

GXX = shutil.which("g++")


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
    csr_mod._load.cache_clear()
    yield
    csr_mod._load.cache_clear()


@pytest.mark.skipif(GXX is None, reason="needs g++ to stand behind the fake compiler")
def test_a_compiler_refusing_march_native_builds_on_the_retry(monkeypatch, tmp_path, fresh_loader):
    cxx, log = _script(tmp_path, "picky-cxx", f"""for a in "$@"; do
  if [ "$a" = "-march=native" ]; then
    echo "picky-cxx: error: unrecognized command-line option '-march=native'" >&2
    exit 1
  fi
done
exec "{GXX}" "$@\"""")
    monkeypatch.setenv("CXX", cxx)
    assert csr_mod._compiler() == cxx
    assert csr_mod.kernel_possible()  # builds without starting anything of JAX
    path = csr_mod._build(cxx)
    assert path.parent == tmp_path / "cache" / "kernels" and path.suffix == ".so"
    runs = log.read_text().splitlines()
    assert len(runs) == 2 and "-march=native" in runs[0] and "-march=native" not in runs[1] and "-O3" in runs[1]
    assert not list(path.parent.glob("*.failed"))
    csr_mod._build(cxx)
    assert len(log.read_text().splitlines()) == 2  # the cached library: no compiler run

    # the retried build computes the product: registered under its own name, not the real kernel's
    lib = ctypes.cdll.LoadLibrary(str(path))
    jax.ffi.register_ffi_target("jaxgcn_spmm_retry_test", jax.ffi.pycapsule(lib.JaxgcnSpmm), platform="cpu")
    monkeypatch.setattr(csr_mod, "_TARGET", "jaxgcn_spmm_retry_test")
    a = sp.csr_matrix(np.array([[0, 2.0, 0], [3.0, 0, 1.0], [0, 0, 0], [0.5, 0, 4.0]]))
    m = csr_from_scipy(a)
    b = np.arange(21, dtype=np.float32).reshape(3, 7) / 7
    out = csr_mod._call(jnp.asarray(m.indptr), jnp.asarray(m.cols), jnp.asarray(m.data)[:, None],
                        jnp.asarray(b), False)
    np.testing.assert_allclose(np.asarray(out), a @ b.astype(np.float64), rtol=1e-6)


def test_a_failing_compiler_runs_once_per_cache_key(monkeypatch, tmp_path, fresh_loader):
    cxx, log = _script(tmp_path, "broken-cxx", 'echo "broken-cxx: error: no such thing as C++17" >&2\nexit 1')
    monkeypatch.setenv("CXX", cxx)
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
    assert csr_mod.fallback_note() == f"backend segment: {reason}"


def test_a_changed_compiler_gets_a_new_attempt(monkeypatch, tmp_path, fresh_loader):
    cxx, log = _script(tmp_path, "broken-cxx", "exit 1")
    monkeypatch.setenv("CXX", cxx)
    assert not csr_mod.kernel_possible()
    first = csr_mod._library(cxx)
    assert first.with_suffix(".failed").exists()
    _script(tmp_path, "broken-cxx", "exit 22")  # upgraded in place: a new size, a new key
    assert csr_mod._library(cxx) != first
    assert not csr_mod.kernel_possible()
    assert len(log.read_text().splitlines()) == 4
    assert "exited 22: no output" in csr_mod._library(cxx).with_suffix(".failed").read_text().splitlines()[0]


def test_no_compiler_says_how_to_get_the_faster_kernel(monkeypatch, fresh_loader):
    monkeypatch.setattr(csr_mod, "_compiler", lambda: None)
    assert csr_mod._load() == (False, "no C++ compiler found (set CXX or install g++ for the faster csr kernel)")
    assert not csr_mod.kernel_possible()
    assert csr_mod.fallback_note() == ("backend segment: no C++ compiler found (set CXX or install g++ for the "
                                       "faster csr kernel)")


def test_no_fallback_note_where_the_kernel_runs():
    if not csr_mod.kernel_status()[0]:
        pytest.skip("the kernel does not build here")
    assert csr_mod.fallback_note() is None
    assert csr_mod.kernel_possible()


def test_the_cli_says_in_one_line_why_auto_keeps_to_segment(monkeypatch, tmp_path, capsys, fresh_loader):
    from cli_run import run_main

    monkeypatch.setenv("JAXGCN_NO_KERNELS", "1")
    assert run_main(["train", "--dataset", "cora", "--epochs", "3", "--early-stopping", "none"]) == 0
    out = capsys.readouterr().out
    assert "backend segment: disabled by JAXGCN_NO_KERNELS" in out.splitlines()
