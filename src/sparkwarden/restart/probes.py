"""The proving steps: the started engine answers /health, one real chat request, and then the
users' path through the gateway. Split from :mod:`sparkwarden.restart.steps` (which stops, drops and
starts); :mod:`sparkwarden.restart.sequence` calls both in order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkwarden.base.containers import ContainerState
from sparkwarden.base.errors import HandedOver, StepFailed
from sparkwarden.config.schema import LlmConfig
from sparkwarden.restart.steps import GATEWAY_TRY, Done, RunState, log
from sparkwarden.vllm.client import VllmClient


class Probes(RunState):
    """Prove the started engine answers: /health, one real chat, then through the gateway."""

    def not_ours(self) -> Done | None:
        """A repair does not wait on the operator's engine: voice comes back at once."""
        if self.theirs is None:
            return None
        return Done(f"repair: {self.theirs}: not waited on (the daemon watches it)", skipped=True)

    def wait_health(self, active: ContainerState) -> Done:
        if (skip := self.not_ours()) is not None:
            return skip
        llm, parts = self.config.llm, self.parts
        began = parts.monotonic()
        deadline = began + llm.health_timeout
        polls, next_note = 0, began + 15.0
        while True:
            polls += 1
            health = parts.vllm.health(timeout=min(10.0, llm.health_timeout))
            elapsed = parts.monotonic() - began
            if health.status == "up":
                return Done(
                    f"healthy after {elapsed:.1f}s ({polls} polls)",
                    {"seconds": round(elapsed, 3), "polls": polls},
                )
            state = parts.docker.inspect(active.name)
            if not state.up:
                raise StepFailed(
                    "wait_health",
                    f"{active.name} exited with code {state.exit_code} while loading"
                    + (" (OOM-killed)" if state.oom_killed else ""),
                    {
                        "seconds": round(elapsed, 3),
                        "exit_code": state.exit_code,
                        "oom_killed": state.oom_killed,
                    },
                )
            if parts.should_abort():
                raise HandedOver(
                    f"sparkwarden is stopping after {elapsed:.0f}s of the boot wait; "
                    f"{active.name} keeps loading and the next sparkwarden finishes this run "
                    "(/health, the chat probe, then voice)"
                )
            if parts.monotonic() + llm.poll_interval > deadline:
                raise StepFailed(
                    "wait_health",
                    f"not healthy within {llm.health_timeout:g}s; last answer: {health.detail}",
                    {"seconds": round(elapsed, 3), "polls": polls, "last": health.detail},
                )
            if parts.monotonic() >= next_note:
                log.info("still_loading", seconds=round(elapsed), last=health.detail)
                self.progress("wait_health", f"{elapsed:.0f}s: {health.detail}")
                next_note += 15.0
            parts.heartbeat(self._lease("wait_health"))
            parts.sleep(llm.poll_interval)

    def chat_probe(self) -> Done:
        if (skip := self.not_ours()) is not None:
            return skip
        parts = self.parts
        return Done(*prove_chat(self.config.llm, parts.vllm, parts.monotonic))

    def gateway_probe(self) -> Done:
        """The users' path, retried until ``gateway.timeout``: how long it lagged the engine."""
        gateway, client, parts = self.config.gateway, self.parts.gateway, self.parts
        if (skip := self.not_ours()) is not None:
            return skip
        if gateway is None or client is None:
            return Done("no [gateway] configured", skipped=True)
        began = parts.monotonic()
        deadline = began + gateway.timeout
        attempts = 0
        while True:
            attempts += 1
            left = max(deadline - parts.monotonic(), 1.0)
            outcome = client.chat(gateway.model, timeout=min(left, GATEWAY_TRY))
            lag = round(parts.monotonic() - began, 3)
            figures = {"url": gateway.url, "model": gateway.model, "attempts": attempts}
            if outcome.ok:
                return Done(
                    f"{gateway.url} {outcome.detail}; the users' path lagged the engine by "
                    f"{lag:.1f}s ({attempts} attempt{'s' if attempts > 1 else ''})",
                    {**figures, "lag_s": lag, "answer": outcome.content[:80]},
                )
            if parts.should_abort() or parts.monotonic() + self.config.llm.poll_interval > deadline:
                raise StepFailed(
                    "gateway_probe",
                    f"the gateway {gateway.url} did not answer a chat request for "
                    f"{gateway.model!r} within {gateway.timeout:g}s, though the engine itself "
                    f"answered; last: {outcome.detail}",
                    {**figures, "seconds": lag, "last": outcome.detail},
                )
            parts.heartbeat(self._lease("gateway_probe"))
            parts.sleep(self.config.llm.poll_interval)


def prove_chat(
    llm: LlmConfig, vllm: VllmClient, monotonic: Callable[[], float]
) -> tuple[str, dict[str, Any]]:
    """One real chat request, because ``/health`` can be 200 over a dead engine: (summary,
    figures), or StepFailed. The one probe for a single host and a cluster's head."""
    model = llm.model or vllm.served_model()
    if not model:
        raise StepFailed(
            "chat_probe", f"could not learn the served model from /v1/models: {vllm.why_no_model}"
        )
    began = monotonic()
    outcome = vllm.chat(model, timeout=llm.probe_timeout)
    seconds = round(monotonic() - began, 3)
    if not outcome.ok:
        raise StepFailed(
            "chat_probe",
            f"/health said 200 but the chat request failed: {outcome.detail}",
            {"model": model, "seconds": seconds},
        )
    return (
        f"{model} {outcome.detail} in {seconds:.1f}s",
        {"model": model, "seconds": seconds, "answer": outcome.content[:80]},
    )
