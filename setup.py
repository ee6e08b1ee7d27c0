"""Builds the fused csr kernel (src/jaxgcn/native/kernels/spmm.cc) at install time, where a C++ compiler and
jaxlib's FFI headers are at hand, so that the first `jaxgcn train` does not compile it. Where the
build cannot run, the package installs without it and builds it on first use (jaxgcn.native.kernel_build).
Everything else about the package is in pyproject.toml."""

import importlib
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _kernel_build():
    """jaxgcn.native.kernel_build from the source tree (it and what it imports use only the standard
    library), and sys.path as it was afterwards."""
    sys.path.insert(0, str(ROOT / "src"))
    try:
        return importlib.import_module("jaxgcn.native.kernel_build")
    finally:
        sys.path.remove(str(ROOT / "src"))


class BuildPyWithKernel(build_py):
    """build_py, then the kernel into the package's kernels/prebuilt (the source tree's for an editable install)."""

    def run(self):
        super().run()
        rel = Path("jaxgcn") / "native" / "kernels" / "prebuilt"
        dest = ROOT / "src" / rel if getattr(self, "editable_mode", False) else Path(self.build_lib) / rel
        print(_kernel_build().build_prebuilt(dest), file=sys.stderr)


class PlatformDistribution(Distribution):
    """A wheel with a compiled library in it is for one platform (not py3-none-any)."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithKernel}, distclass=PlatformDistribution)
