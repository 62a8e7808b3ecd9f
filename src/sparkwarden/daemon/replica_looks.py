"""On a replica: a thread that looks at every peer and the turn each ``replicas.check_interval``,
and the turn this Spark takes, renews and releases.

A look is SSH to every peer (bounded by the connect timeout), so it is taken off the main loop
and handed to it as a :class:`~sparkwarden.cluster.replicas.PeersLook`, judged there
(:func:`sparkwarden.daemon.gates.gate`). While this Spark holds the turn each look renews it,
during the run too (the main thread is then in the sequence); a renewal refused (the turn
expired and was taken) means it is held no more. The main thread takes it (the gate asked) and
the hands release it when the run ends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from sparkwarden.base import logs
from sparkwarden.base.errors import SparkwardenError
from sparkwarden.cluster.replica_link import ReplicaLink
from sparkwarden.cluster.replicas import PeersLook
from sparkwarden.config.schema import Config
from sparkwarden.restart.turn import Answer

log = logs.get("sparkwarden.replicas")


class ReplicaLooks:
    def __init__(self, config: Config, sink: Callable[[PeersLook], None]) -> None:
        assert config.replicas is not None
        self.config = config
        self.interval = config.replicas.check_interval
        self.sink = sink
        self.link = ReplicaLink(config)
        self._lock = threading.Lock()  # ``holding``, between the main thread and the looks
        self._holding = False
        #: the last refusal, and when: not asked again before a look newer than it
        self.refused: tuple[float, Answer] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="replica-looks", daemon=True)

    @property
    def holding(self) -> bool:
        return self._holding

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.link.timeout + 5)
        self.release()
        self.link.close()

    def take(self) -> Answer:
        """Ask the first node for the turn (the main thread, when the gate wants it)."""
        try:
            answer = self.link.turn("take")
        except SparkwardenError as exc:
            answer = Answer(False, None, None, f"the first node did not answer: {exc}")
        with self._lock:
            self._holding = answer.granted
        self.refused = None if answer.granted else (time.time(), answer)
        log.info("turn_asked", granted=answer.granted, why=answer.why)
        return answer

    def release(self) -> None:
        """Give the turn back, if held (the run ended, or its restart was dropped)."""
        with self._lock:
            if not self._holding:
                return
            self._holding = False
            try:
                answer = self.link.turn("release")
            except SparkwardenError as exc:  # it expires by itself within turn_ttl
                log.warning("turn_release_failed", error=str(exc))
                return
        log.info("turn_released", why=answer.why)

    def take_look(self) -> PeersLook:
        """Every peer and the turn; renewed when held. A renewal racing a release is refused
        (only ``False`` is ever set from here)."""
        renew = self._holding
        look = self.link.look(renew)
        with self._lock:
            if renew and self._holding and look.turn is not None and not look.turn.granted:
                self._holding = False  # expired and taken meanwhile: not ours any more
                log.warning("turn_lost", why=look.turn.why)
        return look

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sink(self.take_look())
            except Exception as exc:  # a look that failed must not end the watch
                log.warning("replica_look_failed", error=f"{type(exc).__name__}: {exc}")
            self._stop.wait(self.interval)
