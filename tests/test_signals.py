"""The console script's signal handler (jaxgcn.host.interrupt.CtrlC) in this process, with real signals
(``os.kill`` of this process): of two signals the first one wins, and after a command the handlers and
the unraisable hook are the ones Python had before, so a later Ctrl-C or SIGTERM acts as usual."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from jaxgcn.cli import main
from jaxgcn.host.interrupt import CtrlC, Terminated


@pytest.fixture
def handlers():
    """This process's SIGINT/SIGTERM handlers and unraisable hook put back after the test, whatever it did."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), sys.unraisablehook
    yield
    signal.signal(signal.SIGINT, before[0])
    signal.signal(signal.SIGTERM, before[1])
    sys.unraisablehook = before[2]


def held_then_released(first: int, second: int) -> type[BaseException]:
    """Send this process ``first`` then ``second`` while the handler holds them; what release raises."""
    ctrl_c = CtrlC()
    try:
        os.kill(os.getpid(), first)
        os.kill(os.getpid(), second)
        assert ctrl_c.pending and ctrl_c.signum == first
        with pytest.raises(KeyboardInterrupt) as raised:
            ctrl_c.release()
        return raised.type
    finally:
        ctrl_c.close()


def test_of_two_signals_the_first_wins(handlers):
    assert held_then_released(signal.SIGTERM, signal.SIGINT) is Terminated  # status 143, as SIGTERM asked
    assert held_then_released(signal.SIGINT, signal.SIGTERM) is KeyboardInterrupt  # status 130, not 143


def test_a_signal_after_main_has_it_changes_nothing(handlers):
    ctrl_c = CtrlC()
    ctrl_c.caught = True  # as close() sets it, before the handlers are put back
    assert ctrl_c.on_signal(signal.SIGTERM, None) is None
    assert ctrl_c.signum == 0 and not ctrl_c.pending
    ctrl_c.close()


def test_close_restores_pythons_handlers_and_the_unraisable_hook(handlers):
    hook = sys.unraisablehook
    ctrl_c = CtrlC()
    assert signal.getsignal(signal.SIGINT) == ctrl_c.on_signal == signal.getsignal(signal.SIGTERM)
    assert sys.unraisablehook == ctrl_c.on_unraisable
    ctrl_c.close()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert sys.unraisablehook is hook


def test_a_command_run_under_the_handler_puts_pythons_back(handlers, capsys):
    """``main(argv, ctrl_c=...)`` (the console script's call) closes the handler when the command ends,
    so Ctrl-C in a notebook or test after it is Python's KeyboardInterrupt, and SIGTERM ends the process."""
    hook = sys.unraisablehook
    ctrl_c = CtrlC()
    assert main(["datasets"], ctrl_c=ctrl_c) == 0
    assert ctrl_c.caught and not ctrl_c.held
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert sys.unraisablehook is hook
    with pytest.raises(KeyboardInterrupt):  # Python's own handler again
        os.kill(os.getpid(), signal.SIGINT)


def test_an_unraisable_error_other_than_ctrl_c_still_reaches_the_previous_hook(handlers):
    seen = []
    sys.unraisablehook = seen.append
    ctrl_c = CtrlC()
    try:
        ctrl_c.on_unraisable(type("Args", (), {"exc_type": ValueError})())
        ctrl_c.on_unraisable(type("Args", (), {"exc_type": Terminated})())  # a dropped signal: repeat() raises it
    finally:
        ctrl_c.close()
    assert [a.exc_type for a in seen] == [ValueError]
