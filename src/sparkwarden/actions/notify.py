"""``sparkwarden notify --test``: a distinct ``test`` event to every ``[[notify]]`` target now,
so an operator sees each one answer before a real alert depends on it."""

from __future__ import annotations

from sparkwarden.base.exits import Exit
from sparkwarden.config.schema import Config
from sparkwarden.surfaces.webhooks import send_test

#: Exit codes: every target answered; a target failed, or there is none to test.
ALL_ANSWERED, NOT_ALL = Exit.OK, Exit.FAILED


def run(config: Config) -> int:
    if not config.notify:
        print("no [[notify]] targets in the config: nothing to test")
        return NOT_ALL
    results = send_test(list(config.notify))
    for name, error in results:
        print(f"{name}: answered" if error is None else f"{name}: FAILED: {error}")
    failed = sum(error is not None for _, error in results)
    if failed:
        print(f"{failed} of {len(results)} target(s) failed")
        return NOT_ALL
    print(f"every target answered ({len(results)}); the event was 'test', never an alert")
    return ALL_ANSWERED
