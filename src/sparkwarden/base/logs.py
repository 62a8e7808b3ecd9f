"""Structured logs: JSON lines for the journal, plain key=value lines on a terminal."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog


def setup(level: str = "info", stream: TextIO | None = None, force_json: bool = False) -> None:
    out = stream or sys.stderr
    renderer: Any
    if force_json or not out.isatty():
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
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
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )


def get(name: str = "sparkwarden") -> Any:
    return structlog.get_logger(name)
