"""The proving steps: the started engine answers /health, one real chat request, and then the
users' path through the gateway. Split from :mod:`sparkwarden.restart.steps` (which stops, drops and
starts); :mod:`sparkwarden.restart.sequence` calls both in order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparkwarden.base.errors import HandedOver, StepFailed
from sparkwarden.config.schema import Config, LlmConfig
from sparkwarden.restart.recorder import Done
from sparkwarden.restart.steps import GATEWAY_TRY, RunState, log
from sparkwarden.vllm.client import VllmClient


class Probes(RunState):
    """Prove the started engine answers: /health, one real chat, then through the gateway."""

    def not_ours(self) -> Done | None:
        """A repair does not wait on the operator's engine: voice comes back at once."""
        if self.theirs is None:
            return None
        return Done(f"repair: {self.theirs}: not waited on (the daemon watches it)", skipped=True)

    def wait_health(self) -> Done:
        if (skip := self.not_ours()) is not None:
            return skip
        docker, active = self.parts.docker, self.chosen()

        def went_down() -> tuple[str, dict[str, Any]] | None:
            state = docker.inspect(active.name)
            if state.up:
                return None
            return (
                f"{active.name} exited with code {state.exit_code} while loading"
                + (" (OOM-killed)" if state.oom_killed else ""),
                {"exit_code": state.exit_code, "oom_killed": state.oom_killed},
            )

        return Done(
            *wait_healthy(
                self.config.llm,
                self.parts.vllm,
                self._waits("wait_health"),
                went_down,
                Loading(
                    f"{active.name} keeps loading and the next sparkwarden finishes this run "
                    "(/health, the chat probe, then voice)"
                ),
                lambda said: self.record.progress("wait_health", said),
            )
        )

    def _waits(self, step: str) -> Waits:
        parts = self.parts
        return Waits(
            parts.monotonic,
            parts.sleep,
            parts.should_abort,
            lambda: parts.heartbeat(self._lease(step)),
        )

    def chat_probe(self) -> Done:
        if (skip := self.not_ours()) is not None:
            return skip
        parts = self.parts
        return Done(*prove_chat(self.config.llm, parts.vllm, parts.monotonic))

    def gateway_probe(self) -> Done:
        """The users' path, retried until ``gateway.timeout``: how long it lagged the engine."""
        if (skip := self.not_ours()) is not None:
            return skip
        client = self.parts.gateway
        if self.config.gateway is None or client is None:
            return Done("no [gateway] configured", skipped=True)
        return Done(*prove_gateway(self.config, client, self._waits("gateway_probe")))


@dataclass(frozen=True)
class Waits:
    """What a probe that retries waits with: the run's clock, its sleep, whether sparkwarden is
    stopping, and the watchdog's beat between tries."""

    monotonic: Callable[[], float]
    sleep: Callable[[float], None]
    should_abort: Callable[[], bool]
    beat: Callable[[], None] = lambda: None


@dataclass(frozen=True)
class Loading:
    """What the boot wait says of the engine it waits for: what goes on when sparkwarden stops
    in the wait, and what may keep it unhealthy."""

    handed_over: str
    unhealthy: str = ""


#: How often a long boot wait says how it goes (the log, the CLI's line, ``STATUS=``).
NOTE_EVERY = 15.0
#: How often the boot wait looks at the engine's container (a Docker call, on a cluster's head
#: a node call), however often it polls ``/health``; and a refusing gateway is retried.
LOOK_EVERY = 1.0


def wait_healthy(
    llm: LlmConfig,
    vllm: VllmClient,
    waits: Waits,
    went_down: Callable[[], tuple[str, dict[str, Any]] | None],
    loading: Loading,
    progress: Callable[[str], None] = lambda _said: None,
) -> tuple[str, dict[str, Any]]:
    """The one boot wait, for a lone host's engine and a cluster's head: poll ``/health``
    (connection refused is "still loading") until it is up: (summary, figures). An engine that
    went down while loading (``went_down``: why, figures) fails it at once, not at the end of a
    cold boot's timeout; sparkwarden stopping hands the boot over (:class:`HandedOver`)."""
    began = waits.monotonic()
    deadline = began + llm.health_timeout
    polls, next_note, next_look = 0, began + NOTE_EVERY, began
    while True:
        polls += 1
        health = vllm.health(timeout=min(10.0, llm.health_timeout))
        elapsed = waits.monotonic() - began
        if health.status == "up":
            figures = {"seconds": round(elapsed, 3), "polls": polls}
            return f"healthy after {elapsed:.1f}s ({polls} polls)", figures
        if waits.monotonic() >= next_look:
            next_look = waits.monotonic() + LOOK_EVERY
            if (down := went_down()) is not None:
                said, figures = down
                raise StepFailed("wait_health", said, {"seconds": round(elapsed, 3), **figures})
        if waits.should_abort():
            raise HandedOver(
                f"sparkwarden is stopping after {elapsed:.0f}s of the boot wait; "
                + loading.handed_over
            )
        if waits.monotonic() + llm.poll_interval > deadline:
            raise StepFailed(
                "wait_health",
                f"not healthy within {llm.health_timeout:g}s{loading.unhealthy}; "
                f"last answer: {health.detail}",
                {"seconds": round(elapsed, 3), "polls": polls, "last": health.detail},
            )
        if waits.monotonic() >= next_note:
            log.info("still_loading", seconds=round(elapsed), last=health.detail)
            progress(f"{elapsed:.0f}s: {health.detail}")
            next_note += NOTE_EVERY
        waits.beat()
        waits.sleep(llm.poll_interval)


def prove_gateway(config: Config, client: VllmClient, waits: Waits) -> tuple[str, dict[str, Any]]:
    """The same chat through the users' gateway, retried until ``gateway.timeout`` (it may lag
    the engine: cooldowns, failed upstreams): (summary, figures with the lag), or StepFailed.
    The one probe of the users' path for a lone host and a cluster's head."""
    gateway = config.gateway
    assert gateway is not None
    began = waits.monotonic()
    deadline = began + gateway.timeout
    attempts = 0
    while True:
        attempts += 1
        left = max(deadline - waits.monotonic(), 1.0)
        outcome = client.chat(gateway.model, timeout=min(left, GATEWAY_TRY))
        lag = round(waits.monotonic() - began, 3)
        figures = {"url": gateway.url, "model": gateway.model, "attempts": attempts}
        if outcome.ok:
            return (
                f"{gateway.url} {outcome.detail}; the users' path lagged the engine by "
                f"{lag:.1f}s ({attempts} attempt{'s' if attempts > 1 else ''})",
                {**figures, "lag_s": lag, "answer": outcome.content[:80]},
            )
        retry = max(config.llm.poll_interval, LOOK_EVERY)
        if waits.should_abort() or waits.monotonic() + retry > deadline:
            raise StepFailed(
                "gateway_probe",
                f"the gateway {gateway.url} did not answer a chat request for "
                f"{gateway.model!r} within {gateway.timeout:g}s, though the engine itself "
                f"answered; last: {outcome.detail}",
                {**figures, "seconds": lag, "last": outcome.detail},
            )
        waits.beat()
        waits.sleep(retry)


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
