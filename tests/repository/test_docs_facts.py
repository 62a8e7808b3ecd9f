"""Facts the docs state, read from their one source in the code."""

from __future__ import annotations

import re

from sparkwarden.restart.step_names import STEPS
from tests.kits.commands import docs_text


def test_the_docs_count_the_steps_the_sequence_has() -> None:
    """README said "step N of 8" while the sequence had 9 (gateway_probe came later)."""
    counts = set(re.findall(r"step N of (\d+)", docs_text()))
    assert counts == {str(len(STEPS))}, counts
