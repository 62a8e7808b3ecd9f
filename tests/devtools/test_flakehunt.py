"""The flake hunt's pure parts: a round's JSON lines folded per test, copies told apart and
named as their original, the tally and the report (devtools/flakehunt.py)."""

from __future__ import annotations

import json

import pytest

from devtools.flakehunt import Outcome, first_line, original, outcomes, report, tally

T = "tests/x/test_a.py::test_one"
U = "tests/x/test_a.py::test_two[case-b]"


def phases(
    nodeid: str,
    *outcomes_: str,
    why: str = "",
    copy: str | None = None,
    whens: tuple[str, ...] = ("setup", "call", "teardown"),
) -> list[str]:
    """The JSON lines the plugin writes for one test, phase by phase."""
    return [
        json.dumps(
            {
                "nodeid": nodeid,
                "copy": copy or nodeid,
                "when": when,
                "outcome": outcome,
                "seconds": 0.5,
                "why": why if outcome == "failed" else "",
            }
        )
        for when, outcome in zip(whens, outcomes_, strict=False)
    ]


def test_a_failure_in_any_phase_fails_the_test_and_says_where() -> None:
    lines = [
        *phases(T, "passed", "passed", "passed"),
        *phases(U, "passed", "passed", "failed", why="container left behind"),
    ]
    got = outcomes(lines, "alone", 1)
    assert [(o.nodeid, o.outcome, o.why) for o in got] == [
        (T, "passed", ""),
        (U, "failed", "teardown: container left behind"),
    ]
    assert got[0].seconds == 1.5


def test_a_skip_is_neither_a_pass_nor_a_failure() -> None:
    skipped = phases(T, "skipped", "passed", whens=("setup", "teardown"))  # no call
    (got,) = outcomes(skipped, "stress", 2)
    assert (got.outcome, got.mode, got.round) == ("skipped", "stress", 2)
    assert tally([got])[T]["stress"].cell() == "skipped"


def test_a_round_that_died_fails_the_tests_it_never_reported() -> None:
    """Killed mid-test (no teardown line), or before a test began (no line at all)."""
    got = outcomes(phases(T, "passed", "passed"), "parallel", 1, expected=[T, U])
    assert [(o.nodeid, o.outcome) for o in got] == [(T, "failed"), (U, "failed")]
    assert got[0].why == "cut short" and got[1].why == "no report: the round died"


def test_copies_are_outcomes_of_their_own_named_as_their_original() -> None:
    lines = [
        *phases(T, "passed", "passed", "passed", copy=f"{T}[flakehunt1]"),
        *phases(
            T, "passed", "failed", "passed", why="AssertionError: run #2", copy=f"{T}[flakehunt2]"
        ),
    ]
    got = outcomes(lines, "parallel", 1, expected=[T, T])
    assert [(o.nodeid, o.outcome) for o in got] == [(T, "passed"), (T, "failed")]
    assert tally(got)[T]["parallel"].cell() == "1/2 50%"


@pytest.mark.parametrize(
    ("copy", "nodeid"),
    [
        (f"{T}[flakehunt3]", T),
        ("m.py::t[case-b-flakehunt2]", "m.py::t[case-b]"),
        ("m.py::t[flakehunt2-case-b]", "m.py::t[case-b]"),
        ("m.py::t[flakehunting]", "m.py::t[flakehunting]"),  # a test's own ID is kept
        (T, T),
    ],
)
def test_a_copy_is_named_as_the_test_it_copies(copy: str, nodeid: str) -> None:
    assert original(copy) == nodeid


def test_a_failure_is_said_in_its_assertion_line() -> None:
    text = "def test():\n>       assert x\nE       AssertionError: run #2\nE       more\nfile.py:3"
    assert first_line(text) == "AssertionError: run #2"
    assert first_line("Timeout (0:05:00)!\nThread 1") == "Thread 1"
    assert first_line("") == ""


def test_the_report_puts_the_flakiest_first_and_counts_how_they_failed() -> None:
    results = [
        Outcome(T, "alone", 1, "passed"),
        Outcome(T, "stress", 1, "passed"),
        Outcome(U, "alone", 1, "passed"),
        Outcome(U, "stress", 1, "failed", why="timed out waiting for the run"),
        Outcome(U, "stress", 2, "failed", why="timed out waiting for the run"),
        Outcome(U, "stress", 3, "passed"),
    ]
    text = report(tally(results), ["alone", "parallel", "stress"])
    lines = text.splitlines()
    assert lines[0].split() == ["test", "alone", "parallel", "stress"]
    assert lines[1].split() == [U, "1/1", "100%", "-", "1/3", "33%"]
    assert lines[2].split() == [T, "1/1", "100%", "-", "1/1", "100%"]
    assert f"  {U} (stress, 2 of 3):" in lines
    assert "    2x timed out waiting for the run" in lines
    assert lines[-1] == "4 of 6 runs passed"
    green = report(tally(results[:3]), ["alone", "stress"])
    assert green.splitlines()[-1] == "3 of 3 runs passed (no flake seen)"
    assert "how they failed" not in green
