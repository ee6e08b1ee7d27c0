"""The package version: the one the installed distribution declares (pyproject.toml)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def _installed() -> str:
    try:
        return version("jaxgcn")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


__version__: str = _installed()
"""jaxgcn's version, read from the installed distribution's metadata (pyproject.toml is its one
source); ``0+unknown`` in a source tree that was never installed."""
