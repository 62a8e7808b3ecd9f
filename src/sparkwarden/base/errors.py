"""Errors a user can act on. Each carries what went wrong in words, never a traceback."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: The fix for a user refused a file of root's: the socket's group may read what it needs.
MEMBERS_ONLY = "run as root, or ask root to add you to the control group"

#: An Authorization value as httpx and h11 quote it in their errors ("Bearer sk-...").
_BEARER = re.compile(r"(Bearer|Basic)\s+[^\s'\"]+", re.IGNORECASE)


def scrub(text: str, *secrets: str | None) -> str:
    """Text fit to record: exception messages can carry a request's headers (httpx's "Illegal
    header value b'Bearer ...'"), and they go to the journal, the log, status and webhooks."""
    for secret in secrets:
        for form in (secret, repr(secret)[1:-1]) if secret else ():  # as is, and as quoted
            text = text.replace(form, "[redacted]")
    return _BEARER.sub(r"\1 [redacted]", text)


class SparkwardenError(Exception):
    """Base of every error sparkwarden reports to an operator."""


class ConfigError(SparkwardenError):
    """The config file is missing, unreadable or invalid. Exit code 2; nothing is touched."""


class LockBusy(SparkwardenError):
    """Another sequence holds the lock. Two sequences at once could stop a freshly started LLM."""


class ContainerError(SparkwardenError):
    """A configured container is missing, ambiguous or refuses an operation."""


class NoSuchContainer(ContainerError):
    """A configured name that Docker does not know: a typo, or a container renamed or removed."""


class StepFailed(SparkwardenError):
    """A step of the restart sequence failed; ``step`` names it and ``detail`` holds the figures."""

    def __init__(self, step: str, message: str, detail: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.step = step
        self.detail: dict[str, Any] = dict(detail or {})


class HandedOver(SparkwardenError):
    """sparkwarden is stopping (an upgrade, ``systemctl stop``) while the started engine still
    loads. The run is left open in the journal, voice still paused: resuming voice now would
    put it beside an engine nobody has proven, and the next sparkwarden finishes the run as a
    repair (``/health``, the chat probe, then voice)."""
