"""Docker's restart policy and the crash rule, as pure functions: no Docker, an injected clock."""

from __future__ import annotations

from dataclasses import asdict, replace
from datetime import UTC, datetime

from sparkwarden.base.containers import ContainerState, ExitWatch
from sparkwarden.restart import docker_policy
from sparkwarden.restart.docker_policy import NO, Policy, PolicyView
from sparkwarden.surfaces import status_text

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
WINDOW = 135.0  # stop_timeout + 15


def state(
    name: str = "vllm",
    status_: str = "running",
    policy: str = "no",
    retries: int = 0,
    restarts: int = 0,
) -> ContainerState:
    return ContainerState(
        name, f"id-{name}", status_, T0, None, 0, False, policy, retries, restarts
    )


# --- a die: crash, operator's stop, or operator's start ------------------------------------------


def test_docker_stop_and_docker_restart_are_an_operators_stop_by_their_sigterm_kill() -> None:
    """The die's cause from the events before it; whether a policy or an operator brought the
    engine back (RestartCount) is the reconcile's, tests/daemon/test_reconcile.py."""
    # docker restart: kill (15), die, stop, start, restart; judged at the die
    watch = ExitWatch().on_event("kill", "15", 100.0)
    assert watch.classify_die(100.03, WINDOW) == "operator-stop"
    # a SIGTERM long before the die (the clock) is not this die's cause
    assert watch.classify_die(100.0 + WINDOW + 1, WINDOW) == "crash"
    # docker kill (signal 9) is a crash; a start clears what the events said
    assert ExitWatch().on_event("kill", "9", 10.0).classify_die(10.03, WINDOW) == "crash"
    assert watch.on_event("start", None, 101.0).classify_die(101.5, WINDOW) == "crash"


# --- taking the policy over ----------------------------------------------------------------------


def test_take_over_picks_every_fighting_policy_and_leave_picks_none() -> None:
    states = [
        state("a", policy="unless-stopped"),
        state("b", policy="no"),
        state("c", policy="on-failure", retries=5),
        state("d", policy="always"),
    ]
    assert [s.name for s in docker_policy.to_take_over(states, "take-over")] == ["a", "c", "d"]
    assert docker_policy.to_take_over(states, "leave") == []


def test_the_record_keeps_each_original_and_the_latest_one_seen_wins() -> None:
    taken = docker_policy.remember({}, state("a", policy="on-failure", retries=5), "t1")
    taken = docker_policy.remember(taken, state("b", policy="always"), "t2")
    assert taken == {
        "a": {"name": "on-failure", "retries": 5, "at": "t1", "id": "id-a"},
        "b": {"name": "always", "retries": 0, "at": "t2", "id": "id-b"},
    }
    # the operator set it back by hand: taken again, and that is what will be restored
    again = docker_policy.remember(taken, state("a", policy="unless-stopped"), "t3")
    assert docker_policy.recorded(again["a"]) == Policy("unless-stopped")
    assert str(docker_policy.recorded(taken["a"])) == "on-failure:5"
    assert Policy("on-failure", 5).docker() == {"Name": "on-failure", "MaximumRetryCount": 5}


def test_restore_gives_back_only_what_is_still_ours() -> None:
    taken = {
        "a": {"name": "unless-stopped", "retries": 0, "at": "t"},
        "b": {"name": "always", "retries": 0, "at": "t"},
        "gone": {"name": "always", "retries": 0, "at": "t"},
    }
    plan = docker_policy.to_restore(
        taken, {"a": state("a", policy=NO.name), "b": state("b", policy="on-failure"), "gone": None}
    )
    assert [(name, policy) for name, policy, _ in plan] == [
        ("a", Policy("unless-stopped")),
        ("b", None),
        ("gone", None),
    ]
    assert "left as it is" in plan[1][2] and "no longer exists" in plan[2][2]


def test_restore_never_lands_on_a_container_recreated_since_under_the_name() -> None:
    """Issue 25: the record is of a container, by ID; one recreated by the operator under the
    same name (policy ``no`` or another) is left as it is."""
    taken = docker_policy.remember({}, state("a", policy="always"), "t")
    assert taken["a"]["id"] == state("a").id
    recreated = replace(state("a", policy=NO.name), id="f" * 64)
    ((_, policy, note),) = docker_policy.to_restore(taken, {"a": recreated})
    assert policy is None and "recreated since" in note
    ((_, policy, _),) = docker_policy.to_restore(taken, {"a": state("a", policy=NO.name)})
    assert policy == Policy("always")


def text_of(view: PolicyView) -> str:
    return status_text.format_text({"restart_policy": asdict(view)})


def test_status_shows_what_was_taken_and_the_risk_of_leave_every_time() -> None:
    taken = {"a": {"name": "unless-stopped", "retries": 0, "at": "t"}}
    # being taken over this very tick (Docker still says unless-stopped): not at risk
    for now in ("no", "unless-stopped"):
        over = docker_policy.report("take-over", [state("a", policy=now)], taken)
        assert over == PolicyView("take-over", {"a": "unless-stopped"}, {})
    text = text_of(over)
    assert "policy:      a: Docker's 'unless-stopped' taken over, now 'no'" in text
    assert "RISK" not in text

    # a take-over Docker refused left no record: at risk, and the log says why
    failed = docker_policy.report("take-over", [state("a", policy="always")], {})
    assert failed.at_risk == {"a": "always"} and "(see the log)" in text_of(failed)

    left = docker_policy.report("leave", [state("a", policy="unless-stopped")], {})
    assert left.at_risk == {"a": "unless-stopped"}
    text = text_of(left)
    assert "RISK:        a: Docker restart policy 'unless-stopped'" in text
    assert "restarts a crash into ghost memory (llm.restart_policy = leave)" in text
    assert all(len(line) < 80 for line in text.splitlines())

    none = docker_policy.report("take-over", [state("a")], {})
    assert "policy:" not in text_of(none)
