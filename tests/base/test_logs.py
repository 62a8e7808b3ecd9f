"""Severity reaches journald: each line under systemd starts with its syslog priority."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sparkwarden.base import logs, streams


def lines_logged(tmp_path: Path, journal_stream: str | None) -> list[str]:
    out = tmp_path / "out"
    with out.open("w") as stream:
        st = os.fstat(stream.fileno())
        env = {"JOURNAL_STREAM": journal_stream or f"{st.st_dev}:{st.st_ino}"}
        with pytest.MonkeyPatch.context() as patch:
            for key, value in env.items():
                patch.setenv(key, value)
            logs.setup("info", stream=stream)
            log = logs.get("test")
            log.debug("routine")
            log.info("ready")
            log.warning("trigger_refused")
            log.error("gave_up", why="restart budget spent")
    logs.setup("warning")
    return out.read_text().splitlines()


def test_each_line_to_the_journal_carries_its_priority(tmp_path: Path) -> None:
    """journald reads ``<N>`` (SyslogLevelPrefix=, on by default) and strips it."""
    lines = lines_logged(tmp_path, None)
    assert [line[:4] for line in lines] == ["<6>{", "<4>{", "<3>{"]  # debug: below info
    assert '"event": "gave_up"' in lines[2]


def test_a_stream_that_is_not_the_journal_gets_no_prefix(tmp_path: Path) -> None:
    """$JOURNAL_STREAM names another file (output moved to a pipe or a file): plain lines."""
    lines = lines_logged(tmp_path, "1:2")
    assert lines and all(line.startswith("{") for line in lines)


def test_a_log_line_that_cannot_be_written_is_dropped_not_raised() -> None:
    """A reader that quit (EPIPE): the work the line reports goes on, and the pipe is replaced
    by /dev/null, so what the stream held is not written again at every line."""
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as broken:
        logs.setup("info", stream=broken)
        try:
            logs.get("test").error("step_failed", step="chat_probe")  # EPIPE inside
            logs.get("test").info("step_ended", step="resume_voice")
        finally:
            logs.setup("warning")
        assert os.path.realpath(f"/proc/self/fd/{write}") == os.devnull
        print("x", file=broken, flush=True)  # no error now


def test_a_file_is_never_replaced(tmp_path: Path) -> None:
    """An operator's ``> restart.log``: kept, whatever failed."""
    with (tmp_path / "restart.log").open("w") as kept:
        streams.to_nowhere(kept.fileno())
        print("kept", file=kept, flush=True)
    assert (tmp_path / "restart.log").read_text() == "kept\n"
