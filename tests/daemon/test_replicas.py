"""Replicas (issue 37): a planned restart waits for every peer to serve and for the turn, takes
it before its drain, and only then goes; crashes go at once. Pure gates, an injected clock."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sparkwarden.cluster.replicas import PeersLook, PeerView, peers_out
from sparkwarden.config.schema import Config
from sparkwarden.daemon import gates
from sparkwarden.daemon import intents as do
from sparkwarden.daemon.decide import Mind
from sparkwarden.restart.turn import Answer, Lease, settle
from sparkwarden.surfaces.status_text import replica_lines
from tests.daemon.test_decide import IDLE, T, cfg, events, facts, pending, restarts, up_since

NODES = [{"name": "spark1", "ssh": "root@spark1"}, {"name": "spark2", "ssh": "root@spark2"}]


def replicas(me: str = "spark2", **more: Any) -> Config:
    return cfg(replicas={"self": me, "nodes": NODES}, **more)


CFG = replicas()
FREE = Answer(True, None, None, "read")
SERVING = PeerView("spark1", True, "vllm serving")


def look(*peers: PeerView, turn: Answer | None = FREE, at: float = T) -> PeersLook:
    return PeersLook(at, peers or (SERVING,), turn)


def planned(seen: PeersLook | None, reason: Any = "schedule") -> Mind:
    return replace(pending(reason), peers=seen)


ACTIVE = up_since(7200)


def test_an_unreachable_peer_keeps_a_planned_restart_waiting_and_status_says_which() -> None:
    gone = PeerView("spark1", False, "ssh: connect timed out", reachable=False)
    mind = planned(look(gone))
    assert not gates.wants_turn(mind, facts(), ACTIVE, T, CFG, held=False)
    mind, said = gates.gate(mind, facts(), ACTIVE, IDLE, T, CFG, gates.Turn())
    assert restarts(said) == [] and events(said) == ["restart_waits_for_peers"]
    assert mind.pending is not None and mind.pending.peers is not None
    assert "spark1 unreachable" in mind.pending.peers
    snapshot = {"waits_for": mind.pending.peers, "at": "x", "peers": [gone.to_json()]}
    lines = replica_lines({**snapshot, "turn": None, "turn_error": "ssh: timed out"})
    assert "waits for peer spark1 unreachable" in lines[0]
    assert "spark1 NOT SERVING" in lines[1] and "unread" in lines[2]
    _, again = gates.gate(mind, facts(), ACTIVE, IDLE, T + 1, CFG, gates.Turn())
    assert again == []  # said once, while it waits for the same thing


def test_no_look_yet_or_a_stale_one_is_no_evidence_that_peers_serve() -> None:
    for mind in (planned(None), planned(look(at=T - gates.stale_after(CFG) - 1))):
        assert not gates.wants_turn(mind, facts(), ACTIVE, T, CFG, held=False)
        mind, said = gates.gate(mind, facts(), ACTIVE, IDLE, T, CFG, gates.Turn())
        assert restarts(said) == [] and mind.pending is not None and mind.pending.peers


def test_a_turn_another_holds_keeps_it_waiting() -> None:
    theirs = Answer(True, "spark1", 900.0, "read")
    mind = planned(look(turn=theirs))
    assert not gates.wants_turn(mind, facts(), ACTIVE, T, CFG, held=False)
    mind, said = gates.gate(mind, facts(), ACTIVE, IDLE, T, CFG, gates.Turn())
    assert restarts(said) == [] and mind.pending is not None
    assert mind.pending.peers == "the turn: peer spark1 holds it (expires in 900s)"


def test_peers_serving_and_the_turn_free_it_takes_the_turn_then_drains_then_goes() -> None:
    mind = planned(look())
    assert gates.wants_turn(mind, facts(), ACTIVE, T, CFG, held=False)
    refused = Answer(False, "spark1", 1800.0, "held by spark1")  # taken at the same instant
    waiting, said = gates.gate(mind, facts(), ACTIVE, IDLE, T, CFG, gates.Turn(False, refused))
    assert restarts(said) == [] and waiting.pending is not None
    assert waiting.pending.peers == "the turn: held by spark1"
    granted = Answer(True, "spark2", 1800.0, "taken")
    mind, said = gates.gate(waiting, facts(), ACTIVE, IDLE, T, CFG, gates.Turn(False, granted))
    assert events(said) == ["peers_serving", "draining"] and restarts(said) == []
    quiet = T + CFG.drain.quiet + 1
    _, said = gates.gate(mind, facts(at=quiet), ACTIVE, IDLE, quiet, CFG, gates.Turn(True))
    [run] = restarts(said)
    assert dict(run.gates)["peers"] == "every peer serving; the turn: taken"


def test_a_crash_goes_at_once_whatever_the_peers() -> None:
    gone = PeerView("spark1", False, "no LLM container up")
    mind = planned(look(gone), reason="crash")
    assert not gates.wants_turn(mind, facts(), ACTIVE, T, CFG, held=False)
    _, said = gates.gate(mind, facts(), ACTIVE, None, T, CFG, gates.Turn())
    assert len(restarts(said)) == 1
    assert peers_out(look(gone)) == ["spark1: no LLM container up"]


def test_observe_mode_takes_no_turn_but_still_waits_for_its_peers() -> None:
    observing = replicas(watch={"mode": "observe"})
    theirs = Answer(True, "spark1", 900.0, "read")
    mind = planned(look(turn=theirs))
    assert not gates.wants_turn(mind, facts(), ACTIVE, T, observing, held=False)
    mind, said = gates.gate(mind, facts(), ACTIVE, IDLE, T, observing, gates.Turn())
    assert "draining" in events(said)  # another's turn does not hold an observer back
    gone = PeerView("spark1", False, "no LLM container up")
    _, said = gates.gate(planned(look(gone)), facts(), ACTIVE, IDLE, T, observing, gates.Turn())
    assert events(said) == ["restart_waits_for_peers"]


def test_two_replicas_deciding_at_the_same_instant_restart_one_after_the_other() -> None:
    """Both scheduled at the same minute, both see every peer serving and the turn free; both
    ask the first node at once, which settles one after the other: one goes, one waits."""
    lease: Lease | None = None
    goes = []
    for me, peer in (("spark1", "spark2"), ("spark2", "spark1")):
        config = replicas(me)
        mind = replace(pending("schedule"), peers=PeersLook(T, (PeerView(peer, True, "ok"),), FREE))
        assert gates.wants_turn(mind, facts(), ACTIVE, T, config, held=False)
        lease, asked = settle(lease, "take", me, config.replicas.turn_ttl, T)  # type: ignore[union-attr]
        mind, said = gates.gate(mind, facts(), ACTIVE, IDLE, T, config, gates.Turn(False, asked))
        goes.append("draining" in events(said))
    assert goes == [True, False]


def test_holding_the_turn_it_still_waits_for_a_peer_that_went_down_meanwhile() -> None:
    mind = planned(look())
    granted = Answer(True, "spark2", 1800.0, "taken")
    mind, _ = gates.gate(mind, facts(), ACTIVE, IDLE, T, CFG, gates.Turn(False, granted))
    crashed = PeerView("spark1", False, "no LLM container up")
    mind = replace(mind, peers=look(crashed, turn=Answer(True, "spark2", 1700.0, "renewed")))
    quiet = T + CFG.drain.quiet + 1
    mind, said = gates.gate(mind, facts(at=quiet), ACTIVE, IDLE, quiet, CFG, gates.Turn(True))
    assert restarts(said) == [] and mind.pending is not None
    assert mind.pending.peers == "peer spark1 not serving: no LLM container up"


class FakeLink:
    """The first node as a lease in memory, and peers that serve."""

    timeout = 1.0

    def __init__(self) -> None:
        self.lease: Lease | None = None
        self.now = T
        self.asked: list[str] = []

    def turn(self, action: Any) -> Answer:
        self.asked.append(action)
        self.lease, answer = settle(self.lease, action, "spark2", 60, self.now)
        return answer

    def look(self, renew: bool) -> PeersLook:
        return PeersLook(self.now, (SERVING,), self.turn("renew" if renew else "read"))

    def close(self) -> None:
        pass


def test_the_hands_turn_taken_renewed_lost_and_released() -> None:
    from sparkwarden.daemon.replica_looks import ReplicaLooks

    looks = ReplicaLooks(CFG, lambda _look: None)
    looks.link.close()
    fake = FakeLink()
    looks.link = fake  # type: ignore[assignment]
    assert looks.take().granted and looks.holding
    fake.now += 30
    looks.take_look()  # renewed: expires 60 s from now
    assert looks.holding and fake.lease == Lease("spark2", T, T + 90)
    looks.release()
    assert not looks.holding and fake.lease is None
    looks.release()  # not held: the first node is not asked
    assert fake.asked == ["take", "renew", "release"]
    looks.take()
    fake.lease = Lease("spark1", T, T + 600)  # expired meanwhile and taken by a peer
    looks.take_look()
    assert not looks.holding  # lost: the restart waits again


def test_a_peer_unreachable_past_the_bound_is_notified_once_and_the_restart_keeps_waiting() -> None:
    gone = PeerView("spark1", False, "ssh: connect timed out", reachable=False)
    mind = planned(look(gone))
    told = []
    for t in (T, T + gates.PEER_NOTICE - 1, T + gates.PEER_NOTICE, T + 2 * gates.PEER_NOTICE):
        mind = replace(mind, peers=look(gone, at=t))
        mind, said = gates.gate(mind, facts(at=t), ACTIVE, IDLE, t, CFG, gates.Turn())
        assert restarts(said) == []
        told.append([(n.kind, n.subject) for n in said if isinstance(n, do.Notify)])
    assert told == [[], [], [("node_unreachable", "spark1")], []]
    back = replace(mind, peers=look(at=T + 2 * gates.PEER_NOTICE + 1))
    granted = gates.Turn(False, Answer(True, "spark2", 600.0, "taken"))
    t = T + 2 * gates.PEER_NOTICE + 1
    mind, _ = gates.gate(back, facts(at=t), ACTIVE, IDLE, t, CFG, granted)
    assert mind.pending is not None and mind.pending.peers_since is None  # a new wait, anew


def test_a_typed_restart_says_which_peer_is_out() -> None:
    gone = PeerView("spark1", False, "no LLM container up")
    why, out = gates.typed_why("root", Mind(peers=look(gone)), CFG)
    assert why == "requested by root; peer out: spark1: no LLM container up"
    assert out == ["spark1: no LLM container up"]
    assert gates.typed_why("root", Mind(peers=look()), CFG)[0] == "requested by root"
    assert gates.typed_why("root", Mind(peers=look(gone)), cfg())[0] == "requested by root"
