"""``sparkwarden restart`` against a bare script doing the same steps (bare_restart.py), in turn;
how late its boot wait notices a ready engine; and ``restart --dry-run``'s own wall time, with
the daemon up (the normal case on a box: the daemon makes the plan, the command only asks and
prints) and with none (the fallback: the command loads the config and makes the plan itself);
and a typed restart's own start-up when the daemon runs it (to the command's first line).

    .venv/bin/python benchmarks/restart_overhead.py [--pairs 10]

At the defaults (``llm.poll_interval`` as the schema has it) and, when that differs, at equal
polling (both every 0.2 s). The bare script polls every 0.2 s, as a hand-run curl loop would.
A prober every 10 ms marks when the engine became ready; the run's ``wait_health`` end, read from
its journal, says how late the run noticed.

Targets (issue 34): overhead <= 1.0 s at the defaults (median of alternating pairs, 5 s boot),
a ready engine noticed within 0.2 s, ``restart --dry-run`` <= 0.3 s of wall time (the daemon
up; the fallback's figure is reported beside it, with no target of its own), and a typed
restart's start-up <= 0.3 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, Bench, Line, main_one, spread
from devtools.standin.stage import wait_healthy
from sparkwarden.config.schema import LlmConfig
from sparkwarden.restart.journal import Journal

POLL_S = 0.2
BOOT_DELAY_S = 5
#: The schema's default, the one source of it.
DEFAULT_POLL_S = float(LlmConfig.model_fields["poll_interval"].default)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pairs", type=int, default=10, help="restart pairs (10)")


class Prober:
    """``/health`` every 10 ms in a thread: when the engine became ready, each time."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/health"
        self.ready: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._probe, daemon=True)
        self._thread.start()

    def _probe(self) -> None:
        was_up = True
        with httpx.Client(timeout=1.0) as client:
            while not self._stop.is_set():
                try:
                    up = client.get(self.url).status_code == 200
                except httpx.HTTPError:
                    up = False
                if up and not was_up:
                    self.ready.append(time.time())
                was_up = up
                time.sleep(0.01)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def noticed_late(state: Path, prober: Prober) -> float:
    """How long after the engine was ready the last run's boot wait ended."""
    journal = Journal(state)
    try:
        (run,) = journal.runs(1)
    finally:
        journal.close()
    wait = next(s for s in run.steps if s.name == "wait_health")
    assert wait.duration_s is not None, run
    ended = wait.started_at + wait.duration_s
    ready = max(t for t in prober.ready if t <= ended + 0.05)
    return ended - ready


def measure(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    llm, port = bench.stage.llm("seq-llm", "--boot-delay", str(BOOT_DELAY_S))
    stt, tts = bench.stage.voice("stt"), bench.stage.voice("tts")
    wait_healthy(port)
    polls = {"defaults": DEFAULT_POLL_S}
    if DEFAULT_POLL_S != POLL_S:
        polls["equal polling"] = POLL_S
    configs = {
        name: bench.config(
            name.replace(" ", "-"),
            llm,
            port,
            [stt, tts],
            llm={"poll_interval": f"{poll}s", "health_timeout": "60s"},
        )
        for name, poll in polls.items()
    }
    bare_argv = [
        sys.executable,
        "benchmarks/bare_restart.py",
        llm,
        str(port),
        str(POLL_S),
        stt,
        tts,
    ]

    def timed(argv: list[str]) -> float:
        t = time.perf_counter()
        subprocess.run(argv, cwd=ROOT, check=True, capture_output=True)
        return time.perf_counter() - t

    def ours_argv(config: Path, *more: str) -> list[str]:
        return [sys.executable, "-m", "sparkwarden", "--config", str(config), "restart", *more]

    result: dict[str, Any] = {"boot_delay_s": BOOT_DELAY_S, "bare_poll_s": POLL_S, "at": {}}
    prober = Prober(port)
    try:
        for name, config in configs.items():
            ours, bare, late = [], [], []
            for _ in range(args.pairs):
                bare.append(timed(bare_argv))
                ours.append(timed(ours_argv(config)))
                late.append(noticed_late(config.parent / "state", prober))
            result["at"][name] = {
                "poll_s": polls[name],
                "sparkwarden": spread(ours),
                "bare": spread(bare),
                "overhead": spread([o - b for o, b in zip(ours, bare, strict=True)]),
                "ratio_of_medians": statistics.median(ours) / statistics.median(bare),
                "noticed_late": spread(late),
            }
    finally:
        prober.close()
    dry_argv = ours_argv(configs["defaults"], "--dry-run")
    result["dry_run_no_daemon"] = spread([timed(dry_argv) for _ in range(args.pairs)])
    bench.daemon(configs["defaults"])  # answering on its socket from here
    # in turn with ``status`` (the same light start-up, a snapshot for an answer): on a loaded,
    # shared machine the difference says what the plan itself costs
    status_argv = [*ours_argv(configs["defaults"])[:-1], "status"]
    dry, status = [], []
    for _ in range(args.pairs):
        dry.append(timed(dry_argv))
        t = time.perf_counter()
        subprocess.run(status_argv, cwd=ROOT, check=False, capture_output=True)  # exit 1 or 0
        status.append(time.perf_counter() - t)
    result["dry_run"] = spread(dry)
    result["status_beside"] = spread(status)
    # a typed restart the daemon runs: from the command's start to its first line (the run's
    # number, once the daemon has begun it); the run itself is the daemon's
    typed = [first_line(ours_argv(configs["defaults"])) for _ in range(3)]
    result["typed_start"] = spread(typed)
    return result


def first_line(argv: list[str]) -> float:
    """Seconds from starting ``argv`` to its first line on stdout; it then runs to its end."""
    t = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.readline()
    took = time.perf_counter() - t
    proc.stdout.read()
    assert proc.wait() == 0, argv
    return took


def lines(r: dict[str, Any]) -> list[Line]:
    out = []
    for name, at in r["at"].items():
        out += [
            Line(
                f"restart overhead at {name} (poll {at['poll_s']:g}s, {at['overhead']['n']} "
                "pairs), s",
                at["overhead"]["median"],
                f"ratio {at['ratio_of_medians']:.3f}; bare {at['bare']['median']:.2f}s",
                "<= 1.0",
                at["overhead"]["median"] <= 1.0,
            ),
            Line(
                f"a ready engine noticed at {name}, s after",
                at["noticed_late"]["median"],
                f"max {at['noticed_late']['max']:.3f}",
                "<= 0.2 (max)",
                at["noticed_late"]["max"] <= 0.2,
            ),
        ]
    dry = r["dry_run"]
    out.append(
        Line(
            f"restart --dry-run wall time, the daemon up ({dry['n']} runs), s",
            dry["median"],
            f"max {dry['max']:.2f}"
            + (
                f"; status beside it {r['status_beside']['median']:.2f}"
                if "status_beside" in r
                else ""
            ),
            "<= 0.3",
            dry["median"] <= 0.3,
        )
    )
    if (typed := r.get("typed_start")) is not None:
        out.append(
            Line(
                f"restart through the daemon, start to its first line ({typed['n']} runs), s",
                typed["median"],
                f"max {typed['max']:.2f}",
                "<= 0.3",
                typed["median"] <= 0.3,
            )
        )
    if (alone := r.get("dry_run_no_daemon")) is not None:
        out.append(
            Line(
                f"restart --dry-run wall time, no daemon (the fallback, {alone['n']} runs), s",
                alone["median"],
                f"max {alone['max']:.2f}",
                "none (reported)",
                True,
            )
        )
    return out


if __name__ == "__main__":
    raise SystemExit(main_one(sys.modules[__name__]))
