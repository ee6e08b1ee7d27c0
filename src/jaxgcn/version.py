"""The package version: the one the installed distribution declares (pyproject.toml)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("jaxgcn")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
