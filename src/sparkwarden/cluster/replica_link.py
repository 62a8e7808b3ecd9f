"""A replica set over the SSH link: each peer's ``sparkwarden node serving``, and the turn kept
by the first node (``sparkwarden node turn``, or this process's own journal when the first node
is this Spark). Thin: what the answers mean is :mod:`sparkwarden.cluster.replicas`' (pure)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from sparkwarden.base.errors import SparkwardenError, scrub
from sparkwarden.cluster.link import NodeFailed, NodeUnreachable, SshLink
from sparkwarden.cluster.node import Params
from sparkwarden.cluster.replica_verbs import turn_here
from sparkwarden.cluster.replicas import PeersLook, PeerView
from sparkwarden.config.schema import Config, ReplicaNode, ReplicasConfig
from sparkwarden.restart.turn import Action, Answer

#: Added to each call's connect timeout: the peer's Python starting, its /health (10 s at most).
CALL_MARGIN = 20.0


class ReplicaLink:
    """This Spark's reach to its peers and to the turn (one SSH connection per peer)."""

    def __init__(self, config: Config) -> None:
        assert config.replicas is not None
        self.config = config
        self.replicas: ReplicasConfig = config.replicas
        self.link = SshLink(self.replicas)
        self.timeout = self.replicas.connect_timeout * 3 + CALL_MARGIN

    def serving(self, peer: ReplicaNode) -> PeerView:
        try:
            answer = self.link.call(peer, "serving", Params(), self.timeout)
        except NodeUnreachable as exc:
            return PeerView(peer.name, False, scrub(exc.detail), reachable=False)
        except NodeFailed as exc:
            return PeerView(peer.name, False, scrub(exc.detail))
        return PeerView(peer.name, bool(answer.get("serving")), str(answer.get("why") or ""))

    def turn(self, action: Action) -> Answer:
        """Ask the first node; :class:`SparkwardenError` when it cannot be asked."""
        me, ttl = self.replicas.self, self.replicas.turn_ttl
        first = self.replicas.reached(self.replicas.first)
        if not first.ssh:
            return turn_here(self.config, action, me, ttl)
        params = Params(action=action, holder=me, ttl=ttl)
        return Answer.from_json(self.link.call(first, "turn", params, self.timeout))

    def look(self, renew: bool) -> PeersLook:
        """Every peer, in parallel, and the turn: read, or renewed when this Spark holds it."""
        peers = self.replicas.peers
        with ThreadPoolExecutor(max_workers=len(peers) + 1) as pool:
            views = [pool.submit(self.serving, peer) for peer in peers]
            turn = pool.submit(self.turn, "renew" if renew else "read")
            try:
                answer, error = turn.result(), ""
            except SparkwardenError as exc:
                answer, error = None, scrub(str(exc))
            return PeersLook(time.time(), tuple(v.result() for v in views), answer, error)

    def close(self) -> None:
        self.link.close()
