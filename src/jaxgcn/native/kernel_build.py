"""Building the fused CSR kernel (``kernels/spmm.cc``) into a shared library, once per machine.

It is compiled with the C++ compiler that builds Python extensions (``g++``/``c++``, or ``$CXX``)
against the FFI headers that jaxlib ships, and cached in ``~/.cache/jaxgcn/native/kernels``
(``$JAXGCN_CACHE_DIR/kernels``) under a key of the source, jaxlib, CPU, compiler and
``JAXGCN_KERNEL_ISA``. A build that fails (with ``-march=native``, then once without it) is
remembered as ``libjaxgcn_spmm-<key>.failed`` beside the cache, so later processes report it without
compiling again. :mod:`jaxgcn.native.csr` loads and registers what this module builds.

Imports no JAX (it finds jaxlib's headers without importing it): the CLI asks whether the kernel
can build before it sets up JAX's devices.
"""

from __future__ import annotations

import hashlib
import json
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

from jaxgcn.host import caches
from jaxgcn.host.machine import cpu_flags, cpuinfo_fields

_SOURCE = Path(__file__).with_name("kernels") / "spmm.cc"
# what the build is made of (the key of its cached library): spmm.cc and the files it includes
_SOURCES = (_SOURCE, *(_SOURCE.with_name(h) for h in ("run_dense.h", "adam.h", "dropout.h")))


def jaxlib_dir() -> Path:
    """jaxlib's package directory (its ``include/`` holds the FFI headers), found without importing it."""
    spec = importlib.util.find_spec("jaxlib")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("jaxlib is not installed (pip install jax)")
    return Path(list(spec.submodule_search_locations)[0])


def jaxlib_version() -> str:
    """The installed jaxlib's version (its distribution's metadata: no import)."""
    try:
        return importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _cache_dir() -> Path:
    return caches.root() / "kernels"


def _cpu_id() -> str:
    """What ``-march=native`` compiles for: the CPU's flags (:func:`jaxgcn.host.machine.cpu_flags`),
    else the processor's name."""
    return cpu_flags(cpuinfo_fields()) or platform.processor()


_NO_COMPILER = "no C++ compiler found (set CXX or install g++ for the faster csr kernel)"

# -march=native first (the kernel's inner loops vectorize for this CPU); some compilers refuse it
# (older Apple clang on arm64, clang on aarch64 Linux, an assembler older than the CPU), so once without.
_FLAG_SETS = (("-O3", "-march=native"), ("-O3",))

# JAXGCN_KERNEL_ISA -> extra compiler flags: "portable" compiles the portable branch of
# LoadFirst/StoreFirst even with -march=native on an AVX2 or AVX-512 CPU, "avx2" the AVX2 branch on
# an AVX-512 CPU (kernels/spmm.cc).
_ISA_FLAGS = {"native": (), "avx2": ("-mno-avx512f",), "portable": ("-DJAXGCN_PORTABLE",)}


def _isa() -> str:
    """The kernel build asked for by ``JAXGCN_KERNEL_ISA`` (default ``native``)."""
    isa = os.environ.get("JAXGCN_KERNEL_ISA") or "native"
    if isa not in _ISA_FLAGS:
        raise ValueError(f"JAXGCN_KERNEL_ISA={isa!r} is not one of {', '.join(_ISA_FLAGS)}")
    return isa


class KernelBuildError(RuntimeError):
    """Every attempt to compile the kernel failed, now or in an earlier process: ``summary`` is the
    last attempt's command and first error line, ``marker`` the file that records them all."""

    def __init__(self, summary: str, marker: Path) -> None:
        super().__init__(f"the csr kernel failed to build ({summary}; details in {marker}; set CXX to another "
                         "C++17 compiler, or delete that file to try again)")
        self.summary, self.marker = summary, marker


def _library(cxx: str) -> Path:
    """Where the build for this source, jaxlib (its FFI headers), CPU, compiler and
    ``JAXGCN_KERNEL_ISA`` is cached; the compiler counts with its size and date, so an upgraded
    compiler gets a new attempt."""
    try:
        st = os.stat(cxx)
        stamp = f"{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        stamp = ""
    return _cache_dir() / f"libjaxgcn_spmm-{_key(cxx, stamp)}.so"


def _key(*parts: str) -> str:
    """A build's key: the sources, jaxlib (its FFI headers), the CPU (``-march=native``),
    ``JAXGCN_KERNEL_ISA`` and ``parts`` (the compiler, for a build on first use)."""
    sources = b"".join(path.read_bytes() for path in _SOURCES)
    return hashlib.sha256(sources + "\0".join((jaxlib_version(), _cpu_id(), _isa(), *parts)).encode()).hexdigest()[:16]


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _compile(cxx: str, flags: tuple[str, ...], out: str) -> tuple[str, str] | None:
    """Run one compilation; None when it succeeded, else (a one-line summary, the details)."""
    include = jaxlib_dir() / "include"
    cmd = [cxx, *flags, "-std=c++17", "-fno-math-errno", "-shared", "-fPIC", "-w", f"-I{include}", str(_SOURCE),
           "-o", out]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except OSError as err:  # not executable, not a program: as permanent as a compile error
        status, stderr = f"could not run ({err})", ""
    else:
        if proc.returncode == 0:
            return None
        status, stderr = f"exited {proc.returncode}", proc.stderr
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    first = next((line for line in lines if "error" in line.lower()), lines[-1] if lines else "no output")
    summary = f"compiling {_SOURCE.name} failed: {cxx} {' '.join(flags)} {status}: {first}"
    return summary, f"$ {' '.join(cmd)}\n{status}\n" + "\n".join(lines[-40:]) + "\n"


def _compile_into(cxx: str, out: Path) -> tuple[tuple[str, ...] | None, list[tuple[str, str]]]:
    """Compile into ``out`` with -march=native and, if that fails, once without (each with the
    flags of ``JAXGCN_KERNEL_ISA``), through a temp file renamed into place: ``(the flags that
    worked, [])``, or ``(None, each attempt's failure)``."""
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    failures = []
    try:
        for flags in _FLAG_SETS:
            failure = _compile(cxx, (*flags, *_ISA_FLAGS[_isa()]), tmp)
            if failure is None:
                os.replace(tmp, out)
                return (*flags, *_ISA_FLAGS[_isa()]), []
            failures.append(failure)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return None, failures


def _build(cxx: str) -> Path:
    """Compile the kernel into the cache (:func:`_compile_into`). When both attempts fail, the
    failure is remembered next to where the library would be (``.failed``, same key) and raised
    again by later calls and processes without running the compiler. Processes that need the same
    build at once (a ``--distributed`` job's first run, test workers) take a file lock: one
    compiles, the others wait for its library or its failure instead of compiling it again."""
    from filelock import FileLock

    out = _library(cxx)
    marker = out.with_suffix(".failed")
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out.with_suffix(".lock"))):
        return _build_locked(cxx, out, marker)


def _build_locked(cxx: str, out: Path, marker: Path) -> Path:
    """:func:`_build` under its lock (another process may have finished the build meanwhile)."""
    if out.exists():
        return out
    if marker.exists():
        raise KernelBuildError((marker.read_text().splitlines() or ["unknown"])[0], marker)
    flags, failures = _compile_into(cxx, out)
    if flags is not None:
        return out
    summary = failures[-1][0]
    _write_atomically(marker, summary + "\n\n" + "\n".join(details for _, details in failures))
    raise KernelBuildError(summary, marker)


# --------------------------------------------------------------------- built at install time

# Where `pip install` puts the library it built (setup.py: build_py), with build.json saying what for.
PREBUILT = _SOURCE.with_name("prebuilt")
_PREBUILT_LIB = "libjaxgcn_spmm.so"


def prebuilt() -> Path | None:
    """The library built at install time, when it was built for this source, jaxlib, CPU and
    ``JAXGCN_KERNEL_ISA`` (a wheel moved to another machine, or a jaxlib upgraded since, is not
    used) and ``CXX``, if set, names the compiler that built it; else None (the first use builds one)."""
    try:
        info = json.loads((PREBUILT / "build.json").read_text())
    except (OSError, ValueError):
        return None
    lib = PREBUILT / _PREBUILT_LIB
    try:
        key = _key()  # no compiler: none is needed to use it
    except ValueError:  # an unknown JAXGCN_KERNEL_ISA: the build path says so
        return None
    if not isinstance(info, dict) or info.get("key") != key or not lib.is_file():
        return None
    cxx = os.environ.get("CXX")
    if cxx and shutil.which(cxx) != info.get("compiler"):
        return None
    return lib


def build_prebuilt(dest: Path) -> str:
    """Build the kernel into ``dest`` (``pip install``'s build step): the library and ``build.json``.
    Never raises: without a compiler or jaxlib, or when the build fails, the package installs without
    it and the first use builds it (or says why not). Returns one line for the install log."""
    try:
        cxx = _compiler()
        if cxx is None:
            return f"jaxgcn: csr kernel not built at install time: {_NO_COMPILER}; it is built on first use"
        dest.mkdir(parents=True, exist_ok=True)
        flags, failures = _compile_into(cxx, dest / _PREBUILT_LIB)
        if flags is None:
            return f"jaxgcn: csr kernel not built at install time ({failures[-1][0]}); it is built on first use"
        _write_atomically(dest / "build.json", json.dumps(
            {"key": _key(), "compiler": cxx, "flags": list(flags), "jaxlib": jaxlib_version()}, indent=1) + "\n")
        return f"jaxgcn: csr kernel built at install time with {cxx} {' '.join(flags)}"
    except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as err:
        return f"jaxgcn: csr kernel not built at install time ({err}); it is built on first use"
