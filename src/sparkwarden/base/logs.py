"""Structured logs: JSON lines for the journal, plain key=value lines on a terminal; a line
that cannot be written is dropped, never raised into the work it reports (:class:`Sturdy`).

Under systemd each line starts with its syslog priority (``<3>`` for an error): journald reads
the prefix (``SyslogLevelPrefix=``, on by default), strips it, and files the line at that
priority, so ``journalctl -u sparkwarden -p err`` shows the errors alone.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO, cast

import structlog

# Streams that outlive their reader live in base.streams (a quick command prints through them
# without structlog).
from sparkwarden.base.streams import Sturdy

__all__ = ["PRIORITY", "get", "setup", "to_journal"]

#: structlog's level names as syslog priorities (RFC 5424), what journald files a line under.
PRIORITY = {"debug": 7, "info": 6, "warning": 4, "error": 3, "critical": 2}


def to_journal(out: TextIO) -> bool:
    """True when ``out`` is the stream systemd connected to the journal: ``$JOURNAL_STREAM``
    names its device and inode, so a pipe or a file the output was moved to is not mistaken."""
    device, _, inode = os.environ.get("JOURNAL_STREAM", "").partition(":")
    try:
        st = os.fstat(out.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return f"{st.st_dev}:{st.st_ino}" == f"{device}:{inode}"


def _prefixed(render: Callable[..., Any]) -> Callable[..., str]:
    def render_with_priority(logger: Any, method: str, event: dict[str, Any]) -> str:
        priority = PRIORITY.get(str(event.get("level", method)), PRIORITY["info"])
        return f"<{priority}>{render(logger, method, event)}"

    return render_with_priority


def setup(level: str = "info", stream: TextIO | None = None, force_json: bool = False) -> None:
    out = stream or sys.stderr
    renderer: Any
    if force_json or not out.isatty():
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    if to_journal(out):
        renderer = _prefixed(renderer)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(cast(TextIO, Sturdy(out))),
        cache_logger_on_first_use=False,
    )


def get(name: str = "sparkwarden") -> Any:
    return structlog.get_logger(name)
