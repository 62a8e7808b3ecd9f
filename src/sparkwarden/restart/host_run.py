"""A lone Spark's run: a run of one node, whose steps act in this process on its Docker engine,
/proc and the engine's HTTP API (:mod:`~sparkwarden.restart.steps`, ``probes``).
:mod:`~sparkwarden.restart.sequence` takes them in order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkwarden.restart.journal import Plan
from sparkwarden.restart.probes import Probes
from sparkwarden.restart.recorder import Done, Step
from sparkwarden.restart.rotation_steps import RotationSteps
from sparkwarden.restart.steps import LlmSteps, VoiceSteps


class HostRun(VoiceSteps, LlmSteps, Probes, RotationSteps):
    """One node, this host: its nine steps (:data:`~sparkwarden.restart.step_names.STEPS`), a
    replica's eleven when it leaves the gateway's rotation (``REPLICA_STEPS``)."""

    skip_why = "not reached: an earlier step failed"

    @property
    def rotates(self) -> bool:
        """A replica that leaves its gateway's rotation for each run."""
        return self.config.rotation is not None

    def opening(self) -> Plan:
        """A repair's adopted voice and stop, before anything can fail: a repair cut short
        must not forget the list."""
        if self.resume is None:
            return {}
        return {
            "voice_paused": self.paused,
            "voice_mode": self.config.voice.mode,
            "llm_stopped": self.resume.llm_stopped,
            "container": self.resume.container,
        }

    def step(self, name: str, body: Callable[[], Done]) -> Any:
        return self.record.step(name, body)

    def find(self) -> Done:
        return self.detect()

    def leaving(self) -> list[Step]:
        return [("leave_rotation", self.leave_rotation)] if self.rotates else []

    def restarts(self) -> bool:
        return True

    def stops(self) -> list[Step]:
        return [("stop_llm", self.stop_llm)]

    def starts(self) -> list[Step]:
        return [("start_llm", self.start_llm)]

    def checks(self) -> list[Step]:
        return [("rejoin_rotation", self.rejoin_rotation)] if self.rotates else []

    def engine(self) -> tuple[str | None, str | None]:
        return (self.container.name, self.container.id) if self.container else (None, None)

    def failed_nodes(self) -> tuple[str, ...]:
        return ()
