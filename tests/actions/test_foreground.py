"""A foreground run's signals: held while it goes and given back after; ``nohup`` kept."""

from __future__ import annotations

import os
import signal

from sparkwarden.actions.foreground import HELD, uncut


def test_the_terminal_s_signals_are_held_and_said_then_given_back() -> None:
    before = {signum: signal.getsignal(signum) for signum in (*HELD, signal.SIGTSTP)}
    with uncut("the restart") as came:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: no KeyboardInterrupt
        os.kill(os.getpid(), signal.SIGQUIT)  # Ctrl-\: no core dump
        os.kill(os.getpid(), signal.SIGTERM)
        assert signal.getsignal(signal.SIGTSTP) is signal.SIG_IGN  # Ctrl-Z: not stopped
    assert came == ["SIGINT", "SIGQUIT", "SIGTERM"]
    assert {signum: signal.getsignal(signum) for signum in before} == before


def test_a_sighup_nohup_ignored_stays_ignored() -> None:
    """Under ``nohup`` (or a redirect), a hang-up is no news: the output is not moved."""
    was = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with uncut("the restart") as came:
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
        assert came == []
    finally:
        signal.signal(signal.SIGHUP, was)
