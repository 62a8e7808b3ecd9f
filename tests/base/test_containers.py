"""Which LLM candidate is active: pure decisions from inspected states."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sparkwarden.base.containers import ContainerState, choose_active, parse_docker_time
from sparkwarden.base.errors import ContainerError

T0 = datetime(2026, 11, 30, 4, 30, tzinfo=UTC)


def state(name: str, status: str, finished: datetime | None = None) -> ContainerState:
    return ContainerState(name, f"id-{name}", status, T0, finished, 0, False)


def test_the_running_one_is_active() -> None:
    assert choose_active([state("a", "exited", T0), state("b", "running")], None).name == "b"


def test_a_paused_llm_still_counts_as_up() -> None:
    assert choose_active([state("a", "paused"), state("b", "exited", T0)], None).name == "a"


def test_two_up_is_an_error_naming_both() -> None:
    with pytest.raises(ContainerError, match=r"a \(running\), b \(paused\)"):
        choose_active([state("a", "running"), state("b", "paused")], None)


def test_after_a_crash_the_last_finished_wins() -> None:
    states = [state("a", "exited", T0), state("b", "exited", T0 + timedelta(hours=3))]
    assert choose_active(states, remembered="a").name == "b"


def test_never_ran_falls_back_to_memory_then_errors() -> None:
    states = [state("a", "created"), state("b", "created")]
    assert choose_active(states, remembered="b").name == "b"
    with pytest.raises(ContainerError, match="none has run before"):
        choose_active(states, remembered=None)


def test_docker_times() -> None:
    assert parse_docker_time("0001-01-01T00:00:00Z") is None
    parsed = parse_docker_time("2026-11-30T04:30:00.123456789Z")
    assert parsed is not None and parsed.tzinfo is not None and parsed.microsecond == 123456


def test_from_inspect_and_uptime() -> None:
    attrs = {
        "Id": "abc",
        "Name": "/vllm",
        "State": {
            "Status": "running",
            "StartedAt": "2026-11-30T04:30:00Z",
            "FinishedAt": "0001-01-01T00:00:00Z",
            "ExitCode": 0,
            "OOMKilled": False,
        },
    }
    parsed = ContainerState.from_inspect(attrs)
    assert parsed.name == "vllm" and parsed.up and parsed.finished_at is None
    assert parsed.uptime_s(T0 + timedelta(hours=2)) == 7200
