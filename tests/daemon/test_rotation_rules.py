"""A replica out of the gateway's rotation outside a run (issue 37): a planned restart leaves at
its drain's start; out for a drain whose restart no longer comes, it rejoins once it serves; out
since a failed run, it stays out and is notified once; an operator's flag is theirs. Pure."""

from __future__ import annotations

from dataclasses import replace

from sparkwarden.adapters.host import Memory
from sparkwarden.cluster.replicas import PeerView, serving_of
from sparkwarden.config.schema import Config
from sparkwarden.daemon import gates
from sparkwarden.daemon import intents as do
from sparkwarden.daemon.decide import Mind
from sparkwarden.daemon.observe import HealthCheck, Observation
from sparkwarden.daemon.rotation import on_rotation
from sparkwarden.evidence.triggers import DrainState
from sparkwarden.restart.rotation import Out
from sparkwarden.restart.turn import Answer
from sparkwarden.vllm.client import Health
from sparkwarden.vllm.doctor_rules import check_config
from tests.daemon.test_decide import BUSY, IDLE, T, cfg, facts, pending
from tests.daemon.test_replicas import ACTIVE, NODES, look, planned, replicas

ROTATION = {"url": "http://127.0.0.1:8080/v1", "flag": "/run/sparkwarden/out-of-rotation"}
CFG = cfg(replicas={"self": "spark2", "nodes": NODES, "rotation": ROTATION})
UP = HealthCheck(Health("up", "HTTP 200"), None, None)
DRAIN_OUT = Out(T - 60, "planned schedule restart: draining")


def seen(out: Out | None, check: HealthCheck | None = UP, running: bool = True) -> Observation:
    active = ACTIVE if running else replace(ACTIVE, status="exited")
    return Observation(T, active, "", Memory(90.0, 121.0), check=check, rotation=out)


def kinds(intents: list[do.Intent]) -> list[str]:
    return [type(i).__name__ for i in intents]


def test_a_planned_restart_leaves_the_rotation_when_its_drain_starts_and_only_then() -> None:
    granted = Answer(True, "spark2", 1800.0, "taken")
    mind, said = gates.gate(
        planned(look()), facts(), ACTIVE, IDLE, T, CFG, gates.Turn(False, granted)
    )
    assert [i.why for i in said if isinstance(i, do.LeaveRotation)] == [
        "planned schedule restart: draining"
    ]
    # the drain goes on: not asked again; then the restart itself
    later = T + 5
    mind, said = gates.gate(mind, facts(at=later), ACTIVE, IDLE, later, CFG, gates.Turn(True))
    assert not any(isinstance(i, do.LeaveRotation) for i in said)


def test_observe_mode_and_a_replica_without_rotation_never_leave() -> None:
    observing = cfg(
        replicas={"self": "spark2", "nodes": NODES, "rotation": ROTATION},
        watch={"mode": "observe"},
    )
    for config in (observing, replicas()):
        _, said = gates.gate(planned(look()), facts(), ACTIVE, IDLE, T, config, gates.Turn(True))
        assert not any(isinstance(i, do.LeaveRotation) for i in said)
    assert on_rotation(Mind(), seen(DRAIN_OUT), replicas(), run_going=False) == (Mind(), [])


def test_a_crash_leaves_nothing_to_the_daemon_its_run_leaves_the_rotation() -> None:
    _, said = gates.gate(pending("crash"), facts(), ACTIVE, None, T, CFG, gates.Turn())
    assert kinds(said)[-1] == "Restart"
    assert not any(isinstance(i, do.LeaveRotation) for i in said)


def test_out_for_a_drain_whose_restart_no_longer_comes_it_rejoins_once_serving() -> None:
    _, said = on_rotation(Mind(), seen(DRAIN_OUT), CFG, run_going=False)
    [rejoin] = said
    assert isinstance(rejoin, do.RejoinRotation) and "no longer comes" in rejoin.why
    # not while the drain goes on, a run goes, the engine is down, or its health is unread
    waiting = planned(look()).pending
    assert waiting is not None
    draining = Mind(pending=replace(waiting, drain=DrainState(started=T - 30)))
    assert on_rotation(draining, seen(DRAIN_OUT), CFG, run_going=False)[1] == []
    assert on_rotation(Mind(), seen(DRAIN_OUT), CFG, run_going=True)[1] == []
    assert on_rotation(Mind(), seen(DRAIN_OUT, running=False), CFG, run_going=False)[1] == []
    assert on_rotation(Mind(), seen(DRAIN_OUT, check=None), CFG, run_going=False)[1] == []
    loading = HealthCheck(Health("loading", "refused"), None, None)
    assert on_rotation(Mind(), seen(DRAIN_OUT, check=loading), CFG, run_going=False)[1] == []


def test_out_since_a_failed_run_it_stays_out_and_is_notified_once() -> None:
    failed = Out(T - 300, "run #7", run=7)
    _, said = on_rotation(Mind(), seen(failed), CFG, run_going=False)
    assert kinds(said) == ["Say", "Notify", "RotationTold"]  # noted in the flag itself
    notify = said[1]
    assert isinstance(notify, do.Notify) and notify.kind == "out_of_rotation"
    assert notify.subject == "spark2" and "run #7 did not bring it back" in notify.summary
    told = replace(failed, told=True)  # what the flag says from then on, to any daemon
    assert on_rotation(Mind(), seen(told), CFG, run_going=False) == (Mind(), [])
    again = Out(T, "run #9", run=9)  # another failed run: another episode
    assert kinds(on_rotation(Mind(), seen(again), CFG, run_going=False)[1])[:2] == ["Say", "Notify"]


def test_in_observe_mode_any_flag_sparkwarden_left_is_taken_back_once_serving() -> None:
    """A reload from act to observe mode mid-drain, or after a failed run: observe mode takes
    no replica out, so it leaves none out either."""
    observing = cfg(
        replicas={"self": "spark2", "nodes": NODES, "rotation": ROTATION},
        watch={"mode": "observe"},
    )
    for out in (DRAIN_OUT, Out(T - 300, "run #7", run=7)):
        [rejoin] = on_rotation(Mind(), seen(out), observing, run_going=False)[1]
        assert isinstance(rejoin, do.RejoinRotation) and "observe mode" in rejoin.why
    by_hand = Out(T - 10, "put there by hand", by_hand=True)
    assert on_rotation(Mind(), seen(by_hand), observing, run_going=False)[1] == []


def test_a_holder_whose_peer_goes_out_stops_its_drain_and_rejoins_meanwhile() -> None:
    """Out for its drain, then its only peer crashes: it must not stay out too (its users
    would have no Spark at all); it rejoins, and drains again once the peer serves."""
    granted = Answer(True, "spark2", 1800.0, "taken")
    mind, said = gates.gate(
        planned(look()), facts(), ACTIVE, BUSY, T, CFG, gates.Turn(False, granted)
    )
    assert any(isinstance(i, do.LeaveRotation) for i in said)
    assert mind.pending is not None and mind.pending.drain is not None
    crashed = PeerView("spark1", False, "no LLM container up")
    mind = replace(mind, peers=look(crashed, turn=Answer(True, "spark2", 1700.0, "renewed")))
    mind, said = gates.gate(mind, facts(at=T + 2), ACTIVE, BUSY, T + 2, CFG, gates.Turn(True))
    assert "drain_stopped" in [i.event for i in said if isinstance(i, do.Say)]
    assert mind.pending is not None and mind.pending.drain is None and mind.pending.peers
    [rejoin] = on_rotation(mind, seen(DRAIN_OUT), CFG, run_going=False)[1]
    assert isinstance(rejoin, do.RejoinRotation)
    mind = replace(mind, peers=look())  # the peer serves again: a new drain, out again
    later = T + 4
    mind, said = gates.gate(
        mind, facts(at=later), ACTIVE, BUSY, later, CFG, gates.Turn(False, granted)
    )
    assert any(isinstance(i, do.LeaveRotation) for i in said)


def test_an_operators_flag_is_theirs_and_in_rotation_is_nothing_to_do() -> None:
    by_hand = Out(T - 10, "put there by hand", by_hand=True)
    assert on_rotation(Mind(), seen(by_hand), CFG, run_going=False)[1] == []
    assert on_rotation(Mind(), seen(None), CFG, run_going=False)[1] == []


def test_a_replica_out_of_rotation_is_not_serving_whatever_its_engine_says() -> None:
    assert serving_of(["vllm"], "up", None) == (True, "vllm serving")
    serving, why = serving_of(["vllm"], "up", None, "run #7")
    assert not serving and why == "out of the gateway's rotation: run #7"


def test_doctor_warns_a_replica_that_never_leaves_the_rotation() -> None:
    def warned(config: Config) -> list[str]:
        return [f.check for f in check_config(config, 121.0) if f.check == "replica-rotation"]

    assert warned(replicas()) == ["replica-rotation"]
    assert warned(CFG) == [] and warned(cfg()) == []
