"""A journal whose state dir fills up mid-run: from the first step that ends once ``when()``
holds, every write fails as SQLite says it on a full disk."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from sparkwarden.restart.journal import Journal

FULL = "database or disk is full"


def fill_when(journal: Journal, when: Callable[[], bool]) -> None:
    """Make ``journal`` full from the first ``end_step`` at which ``when()`` is true."""
    real_end = journal.end_step

    def full(step_id: int, result: Any, detail: dict[str, Any]) -> float:
        if when():
            journal.begin_step = _raise  # type: ignore[method-assign]
            raise sqlite3.OperationalError(FULL)
        return real_end(step_id, result, detail)

    journal.end_step = full  # type: ignore[method-assign]


def _raise(*_args: Any) -> int:
    raise sqlite3.OperationalError(FULL)
