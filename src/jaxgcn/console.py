"""The ``jaxgcn`` console script (pyproject's ``[project.scripts]``; ``python -m jaxgcn`` runs it too).

Its first act is to install the Ctrl-C handler (:class:`jaxgcn.host.interrupt.CtrlC`); only then does it
import :mod:`jaxgcn.cli` (argparse, NumPy, the parser: ~0.1 s) and run the command. A Ctrl-C during
those imports is held and ends the command with one line and exit status 130, never a traceback:
what is left before the handler is the interpreter's own start-up, this module, ``jaxgcn/__init__``
and :mod:`jaxgcn.host.interrupt`, which import light standard-library modules only.
"""

from __future__ import annotations

from jaxgcn.host.interrupt import CtrlC


def main() -> int:
    """Run the command of ``sys.argv`` under the console script's Ctrl-C handler; its exit code."""
    ctrl_c = CtrlC()
    try:
        from jaxgcn import cli  # everything heavy: under the handler
    except BaseException:
        ctrl_c.close()
        raise
    return cli.main(ctrl_c=ctrl_c)
