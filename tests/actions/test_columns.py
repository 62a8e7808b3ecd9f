"""Terminal text fits: wrapped within its width, never cut; the tests' width check can fail."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sparkwarden.base.columns import fit
from sparkwarden.restart.step_names import NAME_WIDTH, STEPS
from tests.kits.commands import too_wide


@given(st.lists(st.text(alphabet="abc xyz:/.", min_size=1, max_size=40), max_size=12))
def test_fit_keeps_every_word_within_the_width(words: list[str]) -> None:
    line = "head:    " + " ".join(words)
    rows = fit(line, 30, "      ")
    assert all(len(row) <= 30 for row in rows)
    assert "".join(line.split()) == "".join("".join(rows).split())  # nothing cut


def test_the_step_column_holds_the_longest_name_and_a_space() -> None:
    """'[8/9] gateway_probeskipped': the column was one character short."""
    assert max(len(s) for s in STEPS) + 1 == NAME_WIDTH
    assert f"{'gateway_probe':<{NAME_WIDTH}}skipped" == "gateway_probe skipped"


def test_the_width_check_of_the_tests_can_fail() -> None:
    assert too_wide(["sparkwarden", "status"], "x" * 81) == ["x" * 81]
    assert too_wide(["ssh", "spark", "sparkwarden", "status"], "x" * 81) == ["x" * 81]
    assert too_wide(["/opt/bin/sparkwarden", "history"], "x" * 100, "y" * 101) == ["y" * 101]
    assert too_wide(["sparkwarden", "history"], "", "sparkwarden: " + "refused" * 20) == []
    assert too_wide(["sparkwarden", "status", "--json"], "x" * 500) == []
    assert too_wide(["sparkwarden", "doctor"], '{"event": "log line"' + "x" * 200) == []
    assert too_wide(["systemctl", "status", "sparkwarden"], "x" * 500) == []  # not ours
