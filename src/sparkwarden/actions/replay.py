"""``sparkwarden replay``: a recorded trace through the daemon's own acceptance decision."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sparkwarden import acceptance, metrics
from sparkwarden.config import Config
from sparkwarden.errors import SparkwardenError
from sparkwarden.metrics import EngineMetrics


def samples(path: Path) -> Iterator[tuple[float, EngineMetrics | None]]:
    """(t, the engine's figures) per line; a line that is not a scrape is an error naming it."""
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
                t, text = float(record["t"]), str(record["metrics"])
            except (ValueError, KeyError, TypeError):
                raise SparkwardenError(
                    f'{path}:{number}: not a scrape (want {{"t": seconds, "metrics": text}})'
                ) from None
            try:
                yield t, metrics.parse(text)
            except metrics.MetricsError:
                yield t, None


def run(config: Config, path: Path, as_json: bool) -> int:
    fires: list[dict[str, Any]] = []
    windows = 0
    for decision in acceptance.replay(samples(path), config.acceptance):
        state = decision.state
        windows = state.windows
        if decision.fire:
            fire = decision.fire
            fires.append(
                {
                    "t": fire.t,
                    "reason": "acceptance",
                    "acceptance": fire.acceptance,
                    "baseline": fire.baseline,
                    "health": fire.health,
                    "why": fire.why,
                }
            )
        if as_json:
            continue
        when = datetime.fromtimestamp(decision.t, UTC).strftime("%Y-%m-%d %H:%M:%S")
        if decision.fire:
            print(f"{when}  FIRE  {decision.fire.why}")
        else:
            current = "-" if state.current is None else f"{state.current:.1%}"
            base = "-" if state.baseline is None else f"{state.baseline:.1%}"
            health = "-" if state.health is None else f"{state.health:.2f}"
            print(
                f"{when}  acceptance {current:>6}  baseline {base:>6}  health {health:>4}  "
                f"{state.note}"
            )
    if as_json:
        print(json.dumps({"fires": fires, "windows": windows}, indent=2))
    else:
        print(f"replay: {windows} judged window(s), {len(fires)} fire(s)")
    return 0
