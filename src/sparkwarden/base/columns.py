"""Terminal lines that fit: wrapped to a width, continued under an indent, never cut.

Operators read ``status``, ``history``, ``doctor`` and ``restart`` over SSH at 3 a.m.; the end of
a line is often its cause ("... exited with code 137"), so a long line wraps, it is not cut.
"""

from __future__ import annotations

import textwrap

#: Where every line of ``history``, ``doctor`` and ``restart`` ends at the latest.
WIDE = 100


def fit(line: str, width: int = WIDE, indent: str = "    ") -> list[str]:
    """``line`` as rows of at most ``width`` columns, each continuation starting with
    ``indent``; a word longer than a row is broken, never dropped."""
    if len(line) <= width:
        return [line]
    return textwrap.wrap(
        line, width, subsequent_indent=indent, break_on_hyphens=False, drop_whitespace=True
    )


def fit_all(lines: list[str], width: int = WIDE, indent: str = "    ") -> str:
    return "\n".join(row for line in lines for row in fit(line, width, indent))
