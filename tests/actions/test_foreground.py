"""A foreground run's signals: held while it goes and given back after; ``nohup`` kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

from sparkwarden.actions.foreground import HELD, uncut
from sparkwarden.cli import EXIT_READER_GONE


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
