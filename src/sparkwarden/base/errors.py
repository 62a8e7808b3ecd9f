"""Errors a user can act on. Each carries what went wrong in words, never a traceback."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

#: The fix for a user refused a file of root's: the socket's group may read what it needs.
MEMBERS_ONLY = "run as root, or ask root to add you to the control group"

#: How much outside text (an engine's error body, a gateway's answer, Docker's message) is kept
#: when it is recorded; the rest is counted, not stored ("… (+N chars)").
KEEP = 300
#: How much of a message of sparkwarden's own (which quotes scrubbed outside text) is recorded.
RECORDED = 1000

#: An Authorization value as httpx and h11 quote it in their errors ("Bearer sk-...").
_BEARER = re.compile(r"(Bearer|Basic)\s+[^\s'\"]+", re.IGNORECASE)

#: Every key this process has read (:func:`remember_secret`): each scrub removes all of them, so
#: a key an engine or a proxy repeats in its error ("unknown api key sk-...") is never recorded,
#: whichever client or step the text came through.
_SECRETS: frozenset[str] = frozenset()

#: Characters a terminal or a log reader acts on: C0/C1 controls (escape sequences, newlines
#: that forge a line), format characters (bidi overrides), line and paragraph separators.
_UNSAFE = frozenset(("Cc", "Cf", "Cs", "Zl", "Zp"))


def remember_secret(secret: str | None) -> None:
    """Every later :func:`scrub` in this process removes ``secret``, wherever it appears."""
    global _SECRETS  # replaced whole, never changed in place: other threads may be scrubbing
    if secret:
        _SECRETS = _SECRETS | {secret}


def inert(text: str) -> str:
    """Control and format characters spelt out (``\\x1b``, ``\\n``, ``\\u202e``): text a
    terminal shows as it is, on one line."""
    if text.isprintable():
        return text
    return "".join(
        ch.encode("unicode_escape").decode("ascii") if unicodedata.category(ch) in _UNSAFE else ch
        for ch in text
    )


def scrub(text: str, *secrets: str | None, keep: int = KEEP) -> str:
    """Text from outside, fit to record and print: every key removed (those given and each one
    this process read), ``Bearer …`` values removed, control characters made inert, and at most
    ``keep`` characters kept (the rest counted). Exception messages and error bodies go to the
    journal, the log, status, history, webhooks and a member's terminal."""
    for secret in (*secrets, *_SECRETS):
        for form in (secret, repr(secret)[1:-1]) if secret else ():  # as is, and as quoted
            text = text.replace(form, "[redacted]")
    text = _BEARER.sub(r"\1 [redacted]", text)
    head, rest = text[:keep], len(text) - keep
    return inert(head) + (f"… (+{rest} chars)" if rest > 0 else "")


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
