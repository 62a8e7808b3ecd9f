"""Structured logs: JSON lines for the journal, plain key=value lines on a terminal."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

# structlog renders tracebacks with rich whenever rich is installed (import-linter, a dev tool,
# brings it in): 52 modules on every command's start and the daemon's, about 0.3 s of the
# restart's overhead over a bare script, for a renderer sparkwarden never uses. Unless something
# in this process already imported rich, structlog is told it is absent.
sys.modules.setdefault("rich", None)  # type: ignore[arg-type]
import structlog  # noqa: E402


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
