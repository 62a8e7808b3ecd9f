"""``sparkwarden record``: scrape the engine's /metrics on an interval into a JSON-lines trace.

Safe to leave running for days: nothing accumulates in memory, every line is flushed as it is
written, and only the series decisions read are kept (a few hundred bytes a line). The drafting
canaries a running daemon takes go in too (``{"t", "canary"}`` lines, from its status file), so
``replay`` reproduces what the daemon decided, passive estimate and canary alike.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from sparkwarden.base import logs
from sparkwarden.config.schema import Config
from sparkwarden.surfaces import status_text as status_mod
from sparkwarden.vllm import metrics
from sparkwarden.vllm.client import VllmClient

log = logs.get("sparkwarden.record")


def run(config: Config, out: Path, interval: float, duration: float | None) -> int:
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    vllm = VllmClient(config.llm.base_url, config.llm.api_key())
    end = None if duration is None else time.monotonic() + duration
    written = failed = 0
    status_file = config.state.dir / status_mod.STATUS_FILE
    last_canary: dict[str, Any] | None = None
    print(
        f"sparkwarden record: {config.llm.base_url}/metrics every {interval:g}s into {out}",
        flush=True,
    )
    try:
        with out.open("a") as trace:
            # the daemon's baseline canaries first: without them a replay would learn another
            for first in baseline_rounds(status_mod.read(status_file)):
                trace.write(json.dumps({"t": first["t"], "canary": first}) + "\n")
                last_canary = first
            while not stop.is_set() and (end is None or time.monotonic() < end):
                began = time.monotonic()
                text = vllm.metrics(timeout=min(10.0, interval))
                if text is None:
                    failed += 1
                    log.warning("scrape_failed", url=f"{config.llm.base_url}/metrics")
                else:
                    line = {"t": round(time.time(), 3), "metrics": metrics.keep_recorded(text)}
                    trace.write(json.dumps(line) + "\n")
                    written += 1
                canary = canary_of(status_mod.read(status_file), "round")
                if canary is not None and canary != last_canary:
                    trace.write(json.dumps({"t": canary["t"], "canary": canary}) + "\n")
                    last_canary = canary
                trace.flush()
                wait = interval - (time.monotonic() - began)
                if end is not None:
                    wait = min(wait, end - time.monotonic())
                stop.wait(max(0.0, wait))
    finally:
        vllm.close()
    print(f"sparkwarden record: {written} scrapes written, {failed} failed", flush=True)
    return 0


def _canary(snapshot: dict[str, Any] | None) -> dict[str, Any]:
    found = ((snapshot or {}).get("acceptance") or {}).get("canary")
    return found if isinstance(found, dict) else {}


def canary_of(snapshot: dict[str, Any] | None, which: str) -> dict[str, Any] | None:
    """The drafting canary a daemon's status snapshot shows as ``which`` (``round``: the last
    one taken), if any."""
    found = _canary(snapshot).get(which)
    return found if isinstance(found, dict) else None


def baseline_rounds(snapshot: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The canaries a daemon's canary baseline was learnt from, oldest first."""
    found = _canary(snapshot).get("baseline_rounds")
    return [r for r in found if isinstance(r, dict)] if isinstance(found, list) else []
