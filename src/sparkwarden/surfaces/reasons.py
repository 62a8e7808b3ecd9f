"""What an operator's typed restart (and its dry run) is recorded under: apart from the schema
(:mod:`~sparkwarden.surfaces.control_schema`, which names it too) so the command builds its
request to the daemon with no pydantic imported."""

from __future__ import annotations


def manual_reason(text: str) -> str:
    """``manual`` or ``manual:TEXT``: an operator's run, whatever its text (never a trigger's
    reason, which would spend the automatic budget)."""
    return text if text == "manual" or text.startswith("manual:") else f"manual:{text}"
