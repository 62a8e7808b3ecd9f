"""A foreground run's signals: held while it goes and given back after; ``nohup`` kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from sparkwarden.actions.foreground import HELD, uncut
from sparkwarden.cli import EXIT_READER_GONE
from tests.kits.signals import as_at_a_terminal


@as_at_a_terminal()
def test_the_terminal_s_signals_are_held_and_said_then_given_back() -> None:
    before = {signum: signal.getsignal(signum) for signum in (*HELD, signal.SIGTSTP)}
    with uncut("the restart") as came:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: no KeyboardInterrupt
        os.kill(os.getpid(), signal.SIGQUIT)  # Ctrl-\: no core dump
        os.kill(os.getpid(), signal.SIGTERM)
        assert signal.getsignal(signal.SIGTSTP) is signal.SIG_IGN  # Ctrl-Z: not stopped
    assert came == ["SIGINT", "SIGQUIT", "SIGTERM"]
    assert {signum: signal.getsignal(signum) for signum in before} == before


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGINT, signal.SIGQUIT])
def test_a_signal_ignored_at_start_stays_ignored(signum: signal.Signals) -> None:
    """Under ``nohup`` a hang-up is no news (the output is not moved), and a script's
    background job (``sparkwarden restart &``) is not the terminal's to interrupt: the shell
    ignored SIGINT and SIGQUIT for it. Such a run goes on quietly, as any run goes on."""
    with as_at_a_terminal():
        signal.signal(signum, signal.SIG_IGN)
        with uncut("the restart") as came:
            assert signal.getsignal(signum) is signal.SIG_IGN
            os.kill(os.getpid(), signum)
        assert came == []
        assert signal.getsignal(signum) is signal.SIG_IGN


def test_a_reader_that_quit_ends_any_command_quietly(make_config: Any) -> None:
    """``sparkwarden cluster status | head -1`` once ended in a BrokenPipeError traceback: every
    command whose output's reader is gone ends quietly, as a filter does (exit 141)."""
    config = make_config(["a"], 1)
    for command in (["status"], ["history"], ["check-config"], ["status", "--json"]):
        reader, writer = os.pipe()
        os.close(reader)  # the reader quit before the first line
        try:
            done = subprocess.run(
                [sys.executable, "-m", "sparkwarden", "--config", str(config), *command],
                stdout=writer,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
                check=False,
            )
        finally:
            os.close(writer)
        assert done.returncode == EXIT_READER_GONE, (command, done.returncode, done.stderr)
        assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
