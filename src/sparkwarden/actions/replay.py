"""``sparkwarden replay``: a recorded trace through the daemon's own acceptance decisions:
the passive estimate on every scrape and, with ``acceptance.confirm = "canary"``, the drafting
canaries the daemon took (recorded as ``{"t", "canary"}`` lines)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sparkwarden.base.errors import SparkwardenError
from sparkwarden.config.schema import Config
from sparkwarden.evidence import canary, canary_reading
from sparkwarden.vllm import metrics
from sparkwarden.vllm.metrics import EngineMetrics


def items(path: Path) -> Iterator[tuple[float, EngineMetrics | canary_reading.Round | None]]:
    """(t, the engine's figures or a canary's outcome) per line; a line that is neither is an
    error naming it."""
    try:
        handle = path.open()
    except OSError as exc:
        raise SparkwardenError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                t = float(record["t"])
                if "canary" in record:
                    yield t, canary_reading.Round.from_json(record["canary"])
                    continue
                text = str(record["metrics"])
            except (ValueError, KeyError, TypeError, AttributeError):
                raise SparkwardenError(
                    f'{path}:{number}: not a scrape (want {{"t": seconds, "metrics": text}}) '
                    'nor a canary (want {"t": seconds, "canary": {...}})'
                ) from None
            try:
                yield t, metrics.parse(text)
            except metrics.MetricsError:
                yield t, None


def samples(path: Path) -> Iterator[tuple[float, EngineMetrics | None]]:
    """The scrapes alone (the passive estimate's input)."""
    for t, item in items(path):
        if not isinstance(item, canary_reading.Round):
            yield t, item


def run(config: Config, path: Path, as_json: bool) -> int:
    cfg = config.acceptance
    fires: list[dict[str, Any]] = []
    windows = canaries = 0
    # a canary is written when record sees it, after scrapes taken while it ran: time order
    for decided in canary.replay(sorted(items(path), key=lambda item: item[0]), cfg):
        passive, state = decided.passive, decided.canary
        windows = passive.windows
        taken = decided.by == "canary"
        canaries += taken
        if decided.fire:
            fires.append(
                {
                    "t": decided.t,
                    "reason": "acceptance",
                    "by": decided.by,
                    "acceptance": passive.current,
                    "baseline": passive.baseline,
                    "health": state.health if taken else passive.health,
                    "why": decided.fire,
                }
            )
        if as_json or not (decided.judged or taken or decided.fire):
            continue
        when = datetime.fromtimestamp(decided.t, UTC).strftime("%Y-%m-%d %H:%M:%S")
        if decided.fire:
            print(f"{when}  FIRE  {decided.fire}")
        elif taken:
            print(f"{when}  canary  {state.note}")
        else:
            current = "-" if passive.current is None else f"{passive.current:.1%}"
            base = "-" if passive.baseline is None else f"{passive.baseline:.1%}"
            health = "-" if passive.health is None else f"{passive.health:.2f}"
            print(
                f"{when}  acceptance {current:>6}  baseline {base:>6}  health {health:>4}  "
                f"{passive.note}"
            )
    if as_json:
        print(json.dumps({"fires": fires, "windows": windows, "canaries": canaries}, indent=2))
    else:
        print(f"replay: {windows} judged window(s), {canaries} canary(ies), {len(fires)} fire(s)")
    if cfg.confirm == "canary" and not canaries and not as_json:
        print(
            "replay: no canary in this trace, and acceptance.confirm = canary acts only on a "
            "canary: record next to a running daemon to keep its canaries"
        )
    return 0
