"""One helper for the tests that drive the command line in-process."""

from __future__ import annotations

from jaxgcn.cli import main


def run_main(argv) -> int:
    """``main``'s exit code, whether it returns it or argparse raises SystemExit (arguments may be paths)."""
    try:
        return main([str(a) for a in argv])
    except SystemExit as exc:
        return exc.code
