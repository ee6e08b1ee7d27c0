"""The wheel that ``pip install .`` builds ships what the package needs at run time.

Built offline (``--no-build-isolation``: the setuptools already installed, no index) from a copy
of the source tree, so that stale files in the checkout's ``build/`` can neither leak into the
wheel nor hide a missing package-data pattern.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from email.parser import Parser
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import jaxgcn.version

ROOT = Path(__file__).resolve().parents[1]
_NOT_SOURCE = shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
                                     ".pytest_cache", ".hypothesis", "bench-out", "prebuilt")


def _can_build_wheels() -> str | None:
    """Why setuptools cannot build a wheel offline here, or None when it can."""
    if importlib.util.find_spec("setuptools") is None:
        return "setuptools is not installed"
    # setuptools >= 70.1 registers bdist_wheel itself, wheel < 0.46 registered it for older ones
    if not entry_points(group="distutils.commands", name="bdist_wheel"):
        import setuptools

        return (f"setuptools {setuptools.__version__} has no bdist_wheel command (it needs setuptools >= 70.1, "
                "or the 'wheel' package < 0.46 beside it)")
    return None


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    """The wheel built from a copy of the repository, opened."""
    reason = _can_build_wheels()
    if reason is not None:
        pytest.skip(f"cannot build a wheel offline: {reason}")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src-copy"
    shutil.copytree(ROOT, src, ignore=_NOT_SOURCE)
    out = tmp / "dist"
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
           str(src), "-w", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}"
    (built,) = out.glob("jaxgcn-*.whl")
    with zipfile.ZipFile(built) as zf:
        yield zf


def _pyproject_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


def test_wheel_ships_license(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    found = [n for n in names if fnmatch.fnmatch(n, "*.dist-info/licenses/LICENSE")
             or fnmatch.fnmatch(n, "*.dist-info/LICENSE")]
    assert found, f"no LICENSE under *.dist-info/ in the wheel: {sorted(n for n in names if '.dist-info/' in n)}"
    text = wheel.read(found[0]).decode("utf-8")
    assert text == (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "MIT License" in text and "the jaxgcn contributors" in text


def test_wheel_ships_package_data(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    expected = {"jaxgcn/py.typed", "jaxgcn/native/kernels/spmm.cc", "jaxgcn/native/kernels/run_dense.h",
                "jaxgcn/native/kernels/adam.h",
                "jaxgcn/native/kernels/dropout.h",
                "jaxgcn/datasets/data/LICENSE-planetoid.txt"}
    bundled = sorted((ROOT / "src/jaxgcn/datasets/data").glob("*.npz"))
    assert {p.name for p in bundled} >= {"cora.npz", "citeseer.npz"}
    expected |= {f"jaxgcn/datasets/data/{p.name}" for p in bundled}
    missing = sorted(expected - names)
    assert not missing, f"missing from the wheel: {missing}"
    for p in bundled:  # the real arrays, not a Git LFS pointer or a truncated copy
        assert wheel.getinfo(f"jaxgcn/datasets/data/{p.name}").file_size == p.stat().st_size


def test_the_console_script_is_the_entry_that_holds_ctrl_c_first(wheel: zipfile.ZipFile) -> None:
    # jaxgcn.console installs the Ctrl-C handler before it imports jaxgcn.cli (test_newcomer_paths)
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    assert "[console_scripts]\njaxgcn = jaxgcn.console:main\n" in wheel.read(entry_points).decode("utf-8")


def test_one_version_source(wheel: zipfile.ZipFile) -> None:
    (meta,) = [n for n in wheel.namelist() if fnmatch.fnmatch(n, "*.dist-info/METADATA")]
    built = Parser().parsestr(wheel.read(meta).decode("utf-8"))["Version"]
    assert built == _pyproject_version() == jaxgcn.version.__version__
    assert jaxgcn.version.__version__ != "0+unknown"


def test_wheel_ships_the_kernel_built_for_this_machine(wheel: zipfile.ZipFile) -> None:
    # setup.py builds the csr kernel into the wheel where a compiler is found (issue 26): the first
    # `jaxgcn train` then loads it instead of compiling it; the wheel is tagged for this platform
    import json

    from jaxgcn.native import kernel_build

    if kernel_build._compiler() is None:
        pytest.skip("no C++ compiler here: the wheel ships no kernel, the first use says why")
    names = set(wheel.namelist())
    assert {"jaxgcn/native/kernels/prebuilt/libjaxgcn_spmm.so", "jaxgcn/native/kernels/prebuilt/build.json"} <= names
    info = json.loads(wheel.read("jaxgcn/native/kernels/prebuilt/build.json"))
    assert info["key"] == kernel_build._key() and info["jaxlib"] == kernel_build.jaxlib_version()
    assert not Path(wheel.filename).name.endswith("-none-any.whl"), wheel.filename
