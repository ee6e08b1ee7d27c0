"""Ctrl-C (SIGINT) and SIGTERM of the ``jaxgcn`` console script: held while the package is imported, then raised.

:mod:`jaxgcn.console` installs :class:`CtrlC` before it imports anything else of the package, and
:func:`jaxgcn.cli.main` ends a command that Ctrl-C stopped with one line and exit status 130; SIGTERM
(what SLURM, Kubernetes and ``kill`` send) the same way, as :class:`Terminated`, with status 143. This
module is loaded in the few milliseconds between the interpreter's start and the handler, where a
Ctrl-C still prints a traceback, so it imports built-in modules only: ``_signal`` and ``_thread``,
which :mod:`signal` and :mod:`threading` wrap (those two import :mod:`enum` and :mod:`functools`,
~6 ms), and not :mod:`typing` (~14 ms).
"""

from __future__ import annotations

import _signal
import _thread
import sys
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as Ctrl-C is: every ``finally`` and ``except KeyboardInterrupt`` that cleans up
    after Ctrl-C (temporary files, a half-written slice) runs for it too."""


class CtrlC:
    """Ctrl-C (SIGINT) and SIGTERM of the console script. Held while the library and JAX are imported and set
    up (a KeyboardInterrupt inside jaxlib's import can crash the process at exit) and raised at
    :meth:`release`; from then on raised at once, and again every half second until
    :func:`jaxgcn.cli.main` has it: Python drops one raised inside a garbage-collector callback (JAX
    registers one) with an "Exception ignored" message, which is left out, and C++ code may drop
    one too."""

    def __init__(self) -> None:
        self.held, self.pending, self.caught, self.repeating = True, False, False, False
        self.signum = 0  # the first signal that came: the one raised, repeated and reported
        self.lock = _thread.allocate_lock()  # threading.Lock
        self.hook = sys.unraisablehook
        _signal.signal(_signal.SIGINT, self.on_signal)
        _signal.signal(_signal.SIGTERM, self.on_signal)
        sys.unraisablehook = self.on_unraisable

    def on_signal(self, signum: int, frame: object) -> None:
        if self.caught:  # main has it: a repeat changes nothing
            return
        self.signum = self.signum or signum
        if self.held:
            self.pending = True
            return
        if not self.repeating:
            self.repeating = True
            _thread.start_new_thread(self.repeat, ())  # low-level: Thread.start() waits in Python code
        self.raise_it()

    def raise_it(self) -> None:
        raise Terminated if self.signum == _signal.SIGTERM else KeyboardInterrupt

    def repeat(self) -> None:
        while True:
            time.sleep(0.5)
            with self.lock:
                if self.caught:
                    return
                _thread.interrupt_main(self.signum)  # runs on_signal again, with the first signal

    def on_unraisable(self, unraisable: Any) -> None:  # a sys.UnraisableHookArgs
        if not issubclass(unraisable.exc_type, KeyboardInterrupt):  # a dropped Ctrl-C: repeat() raises it again
            self.hook(unraisable)

    def release(self) -> None:
        self.held = False
        if self.pending:
            self.raise_it()

    def close(self) -> None:
        with self.lock:
            self.caught = True
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)  # runs a pending repeat first, in on_signal
        _signal.signal(_signal.SIGTERM, _signal.SIG_DFL)
        sys.unraisablehook = self.hook
