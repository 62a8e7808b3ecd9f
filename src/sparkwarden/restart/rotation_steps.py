"""A replica's two rotation steps (:mod:`~sparkwarden.restart.rotation` holds the flag): out of
the gateway's rotation before anything stops, back in once the engine answered a chat and its
own gateway path (its Nginx, the header letting the probe through) did too. A run that fails
before ``rejoin_rotation`` leaves the Spark out: a peer serves its users meanwhile."""

from __future__ import annotations

import time

from sparkwarden.base.errors import StepFailed
from sparkwarden.config.schema import Config, RotationConfig
from sparkwarden.restart import rotation
from sparkwarden.restart.parts import Parts
from sparkwarden.restart.recorder import Done
from sparkwarden.restart.steps import RunState
from sparkwarden.vllm.client import ChatOutcome


class RotationSteps(RunState):
    """``leave_rotation`` and ``rejoin_rotation`` of a replica's run."""

    def _rotation(self) -> RotationConfig:
        assert self.config.rotation is not None
        return self.config.rotation

    def leave_rotation(self) -> Done:
        flag = self._rotation().flag
        was = rotation.read(flag)
        if was is not None and was.by_hand:
            return Done(f"already out: {was.why}; left as it is (only its writer ends it)")
        rotation.take_out(flag, f"run #{self.id}", self.id, since=was.since if was else None)
        if was is not None:
            ago = max(time.time() - was.since, 0.0)
            return Done(
                f"out of the gateway's rotation since {ago:.0f}s ago ({was.why}); now held by "
                f"this run",
                {"flag": str(flag), "out_for_s": round(ago, 1)},
            )
        return Done(
            f"out of the gateway's rotation: {flag} written, its Nginx answers new requests "
            "503 and the gateway sends them to a peer",
            {"flag": str(flag)},
        )

    def rejoin_rotation(self) -> Done:
        settings = self.config.replicas
        flag, url = self._rotation().flag, self._rotation().url
        was = rotation.read(flag)
        if was is not None and was.by_hand:
            return Done(f"left out: {was.why} (only its writer ends it)", skipped=True)
        if self.theirs is not None:  # a repair leaves an operator's engine to load on its own
            rotation.take_out(flag, f"repair: {self.theirs}", since=was.since if was else None)
            return Done(
                f"left out until the operator's engine serves: {self.theirs}; the daemon "
                "brings it back then",
                skipped=True,
            )
        assert settings is not None
        outcome = own_path_chat(self.config, self.parts)
        if not outcome.ok:
            raise StepFailed(
                "rejoin_rotation",
                f"its own gateway path {url} did not answer a chat request though the engine "
                f"did: {outcome.detail}; {settings.self} stays out of the gateway's rotation",
                {"url": url},
            )
        if not rotation.put_back(flag):  # an operator's, written while the path was proven
            return Done(f"left out: {flag} is an operator's now", skipped=True)
        out_for = round(time.time() - was.since, 1) if was is not None else None
        return Done(
            f"back in the gateway's rotation: {url} answered ({outcome.detail}), {flag} removed"
            + (f" after {out_for:.0f}s out" if out_for is not None else ""),
            {"url": url, "out_for_s": out_for},
        )


def own_path_chat(config: Config, parts: Parts) -> ChatOutcome:
    """The chat probe through this Spark's own gateway path (its Nginx, the probe's header
    letting it through the flag): what a run's ``rejoin_rotation`` and the daemon's rejoin
    both ask before the flag goes."""
    assert parts.own_path is not None
    model = config.llm.model or parts.vllm.served_model() or ""
    return parts.own_path.chat(model, timeout=config.llm.probe_timeout)
