"""Hunt a flaky test: run a chosen set many times, alone, beside copies of itself on pytest-xdist
workers, and under CPU load (Debian's ``stress-ng``), then report each test's pass rate per way.

    .venv/bin/python -m devtools.flakehunt --runs 10 tests/restart/test_docker_policy_docker.py
    .venv/bin/python -m devtools.flakehunt --runs 5 --modes stress -- -k crash tests/daemon

A red run must mean a real defect: a test that passes 9 runs in 10 races, in the product or in
itself, and the ways it fails (each failure's first line, counted) say where to look. Each round
is one pytest process; this module is also the pytest plugin (``-p devtools.flakehunt``) that
writes every test's phases as JSON lines, so the tally never parses pytest's text. A test that
has no report (its round was killed, or hung past ``--round-timeout``) counts as failed.
docs/testing.md: how to hunt a flake with it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

#: How a round runs the set: each test alone, one after the other; ``--workers`` copies of each
#: at once on xdist workers (they compete for the cores, Docker and the ports, as in the suite's
#: parallel phase); alone, while ``stress-ng`` keeps every core busy (a slow CI machine).
MODES = ("alone", "parallel", "stress")
#: The environment variable that tells the plugin where to write (unset: the plugin is idle).
LOG = "FLAKEHUNT_LOG"
ROOT = Path(__file__).resolve().parents[1]


# --- the plugin: copies of each test, one JSON line per phase of each (setup, call, teardown) ---

#: The environment variable that asks the plugin for this many copies of every test.
COPIES = "FLAKEHUNT_COPIES"
#: A copy's parametrization ID: ``test_x[flakehunt2]``, ``test_y[case-flakehunt2]``.
COPY = "flakehunt"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test made ``FLAKEHUNT_COPIES`` times, each a node ID of its own (pytest runs a node
    ID named twice once), so that xdist's workers run the copies at once."""
    copies = int(os.environ.get(COPIES) or 1)
    if copies > 1:
        metafunc.fixturenames.append("flakehunt_copy")
        ids = [f"{COPY}{n}" for n in range(1, copies + 1)]
        metafunc.parametrize("flakehunt_copy", range(copies), indirect=True, ids=ids)


@pytest.fixture
def flakehunt_copy(request: pytest.FixtureRequest) -> int:
    """Which copy this is (the parametrization's only use)."""
    return int(request.param)


def original(nodeid: str) -> str:
    """The node ID a copy was made from."""
    match = re.fullmatch(r"(.*)\[(.*)\]", nodeid)
    if match is None:
        return nodeid
    kept = [part for part in match[2].split("-") if not re.fullmatch(rf"{COPY}\d+", part)]
    return f"{match[1]}[{'-'.join(kept)}]" if kept else match[1]


def pytest_runtest_logreport(report: Any) -> None:
    """Written by the process that reports (xdist's controller, not its workers: it hears them
    all), appended so that a round killed mid-way keeps what it had."""
    path = os.environ.get(LOG)
    if not path or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    why = ""
    if report.failed:
        why = str(getattr(report, "longreprtext", "") or "")
    line = {
        "nodeid": original(report.nodeid),
        "copy": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "seconds": round(float(report.duration), 3),
        "why": first_line(why),
    }
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


def first_line(text: str) -> str:
    """What a failure says, in one line: pytest's ``E`` line (the assertion or the exception),
    else the last line of the report (a timeout's, a crash's)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    said = [line[1:].strip() for line in lines if line.startswith("E ")]
    return (said[0] if said else lines[-1] if lines else "")[:200]


# --- the pure parts: a round's lines to outcomes, outcomes to a report ----------------------------


@dataclass(frozen=True)
class Outcome:
    """One test's result in one round."""

    nodeid: str
    mode: str
    round: int
    outcome: str  # passed, failed or skipped
    seconds: float = 0.0
    why: str = ""


def outcomes(
    lines: Iterable[str], mode: str, round_: int, expected: Sequence[str] = ()
) -> list[Outcome]:
    """A round's JSON lines folded per test, in the order they came: failed when any phase
    failed (a teardown's error too), skipped when it was skipped and nothing failed. A test
    run twice in one round (parallel copies) is two outcomes. ``expected`` tests with no
    report at all failed: their round died before it could say."""
    done: list[Outcome] = []
    going: dict[str, list[dict[str, Any]]] = {}
    for text in lines:
        if not text.strip():
            continue
        phase = json.loads(text)
        key = phase.get("copy", phase["nodeid"])
        going.setdefault(key, []).append(phase)
        if phase["when"] == "teardown":
            done.append(_fold(going.pop(key), mode, round_))
    for phases in going.values():  # cut before its teardown said
        cut = _fold(phases, mode, round_)
        done.append(replace(cut, outcome="failed", why=cut.why or "cut short"))
    counts = Counter(o.nodeid for o in done)
    for nodeid in expected:
        if counts[nodeid] > 0:
            counts[nodeid] -= 1
        else:
            done.append(Outcome(nodeid, mode, round_, "failed", 0.0, "no report: the round died"))
    return done


def _fold(phases: list[dict[str, Any]], mode: str, round_: int) -> Outcome:
    nodeid = phases[0]["nodeid"]
    seconds = round(sum(float(p["seconds"]) for p in phases), 3)
    failed = [p for p in phases if p["outcome"] == "failed"]
    if failed:
        where = failed[0]
        why = f"{where['when']}: {where['why']}" if where["when"] != "call" else where["why"]
        return Outcome(nodeid, mode, round_, "failed", seconds, why)
    skipped = any(p["outcome"] == "skipped" for p in phases)
    return Outcome(nodeid, mode, round_, "skipped" if skipped else "passed", seconds)


@dataclass
class Rate:
    """A test's runs in one mode."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: list[float] = field(default_factory=list)
    whys: Counter[str] = field(default_factory=Counter)

    @property
    def runs(self) -> int:
        return self.passed + self.failed

    def cell(self) -> str:
        if not self.runs:
            return "skipped" if self.skipped else "-"
        return f"{self.passed}/{self.runs} {100 * self.passed / self.runs:.0f}%"


def tally(results: Iterable[Outcome]) -> dict[str, dict[str, Rate]]:
    """Per test, per mode: how many runs passed, failed (and how), were skipped."""
    rates: dict[str, dict[str, Rate]] = {}
    for o in results:
        rate = rates.setdefault(o.nodeid, {}).setdefault(o.mode, Rate())
        if o.outcome == "passed":
            rate.passed += 1
        elif o.outcome == "failed":
            rate.failed += 1
            rate.whys[o.why] += 1
        else:
            rate.skipped += 1
        rate.seconds.append(o.seconds)
    return rates


def _worst(by_mode: dict[str, Rate]) -> float:
    """A test's lowest pass rate over the modes it ran in."""
    return min((r.passed / r.runs for r in by_mode.values() if r.runs), default=1.0)


def report(rates: dict[str, dict[str, Rate]], modes: Sequence[str]) -> str:
    """A table of pass rates, the flakiest test first, then each failure's words, counted."""
    rows = sorted(rates.items(), key=lambda kv: (_worst(kv[1]), kv[0]))
    width = max((len(nodeid) for nodeid in rates), default=4)
    out = [f"{'test':<{width}}  " + "  ".join(f"{m:>14}" for m in modes)]
    for nodeid, by_mode in rows:
        cells = [by_mode.get(m, Rate()).cell() for m in modes]
        out.append(f"{nodeid:<{width}}  " + "  ".join(f"{c:>14}" for c in cells))
    failing = [(n, m, r) for n, by_mode in rows for m, r in by_mode.items() if r.failed]
    if failing:
        out.append("")
        out.append("how they failed:")
        for nodeid, mode, rate in failing:
            out.append(f"  {nodeid} ({mode}, {rate.failed} of {rate.runs}):")
            out += [f"    {n}x {why}" for why, n in rate.whys.most_common()]
    total = [r for by_mode in rates.values() for r in by_mode.values()]
    passed, runs = sum(r.passed for r in total), sum(r.runs for r in total)
    out.append("")
    out.append(f"{passed} of {runs} runs passed" + (" (no flake seen)" if passed == runs else ""))
    return "\n".join(out)


def round_argv(mode: str, selection: Sequence[str], workers: int) -> list[str]:
    """The round's pytest command: ``parallel`` on ``workers`` xdist workers (with as many
    copies of every test: :data:`COPIES`), the others one test at a time."""
    argv = [sys.executable, "-m", "pytest", "-p", "devtools.flakehunt", "-p", "no:cacheprovider"]
    argv += ["-q", "--no-header"]
    if mode == "parallel":  # the suite's groups kept: a module's shared fixture is made once
        return [*argv, "-n", str(workers), "--dist", "loadgroup", *selection]
    return [*argv, *selection]


# --- the hunt ------------------------------------------------------------------------------------


def collect(selection: Sequence[str]) -> list[str]:
    """The node IDs the selection names (pytest's own collection)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            *selection,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    ids = [line for line in done.stdout.splitlines() if "::" in line and " " not in line]
    if not ids:
        raise SystemExit(f"flakehunt: the selection names no test\n{done.stdout}{done.stderr}")
    return ids


@contextlib.contextmanager
def cpu_load(cpus: int) -> Iterator[None]:
    """``stress-ng`` keeping ``cpus`` workers busy (0: one per core) for the block, ended by its
    own process group."""
    stress = shutil.which("stress-ng")
    if stress is None:
        raise SystemExit("flakehunt: stress-ng is missing (bash scripts/setup-host installs it)")
    proc = subprocess.Popen(
        [stress, "--cpu", str(cpus), "--cpu-load", "100", "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        process_group=0,
    )
    try:
        time.sleep(1.0)  # its workers are up before the tests start
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_round(
    mode: str,
    round_: int,
    selection: Sequence[str],
    expected: Sequence[str],
    args: argparse.Namespace,
    logs: Path,
) -> list[Outcome]:
    log = logs / f"{mode}-{round_}.jsonl"
    log.write_text("")  # a kept folder used again: this round only
    argv = round_argv(mode, selection, args.workers)
    copies = args.workers if mode == "parallel" else 1
    env = {**os.environ, LOG: str(log), COPIES: str(copies)}
    load = cpu_load(args.stress_cpus) if mode == "stress" else contextlib.nullcontext()
    with load, (logs / f"{mode}-{round_}.out").open("w") as out:
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, process_group=0
        )
        try:
            proc.wait(timeout=args.round_timeout)
        except subprocess.TimeoutExpired:  # its tests are counted failed: no report
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except BaseException:  # the hunt stopped (Ctrl-C, SIGTERM): the round's tests clean up
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait()
            raise
    wanted = [nodeid for nodeid in expected for _ in range(copies)]
    return outcomes(log.read_text().splitlines(), mode, round_, wanted)


def _as_interrupt(_signum: int, _frame: object) -> None:
    """SIGTERM ends the hunt as Ctrl-C does: the round under way is told to end first."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.flakehunt",
        description="Run tests many times (alone, in parallel, under CPU load) and report "
        "each one's pass rate. Arguments after the options are pytest's: node IDs, paths, -k.",
    )
    parser.add_argument("--runs", type=int, default=5, help="rounds per mode (default 5)")
    parser.add_argument(
        "--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}"
    )
    parser.add_argument(
        "--workers", type=int, default=3, help="parallel: copies of each test at once (3)"
    )
    parser.add_argument(
        "--stress-cpus", type=int, default=0, help="stress: stress-ng's CPU workers (0: one a core)"
    )
    parser.add_argument(
        "--round-timeout", type=float, default=1800, help="seconds a round may take (1800)"
    )
    parser.add_argument("--json", type=Path, help="also write every outcome here, as JSON")
    parser.add_argument("--keep", type=Path, help="keep each round's output in this folder")
    parser.add_argument("selection", nargs="+", help="pytest's arguments: what to run")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _as_interrupt)
    modes = [m for m in args.modes.split(",") if m]
    if bad := [m for m in modes if m not in MODES]:
        parser.error(f"unknown mode(s) {', '.join(bad)}: of {', '.join(MODES)}")
    expected = collect(args.selection)
    logs = args.keep or Path(tempfile.mkdtemp(prefix="flakehunt-"))
    logs.mkdir(parents=True, exist_ok=True)
    print(
        f"flakehunt: {len(expected)} test(s), {args.runs} round(s) of {', '.join(modes)}; "
        f"rounds' output in {logs}",
        flush=True,
    )
    results: list[Outcome] = []
    for round_ in range(1, args.runs + 1):  # modes interleaved: the machine's mood is shared
        for mode in modes:
            began = time.monotonic()
            got = run_round(mode, round_, args.selection, expected, args, logs)
            results += got
            failed = sum(1 for o in got if o.outcome == "failed")
            print(
                f"  round {round_} {mode}: {len(got) - failed} of {len(got)} passed "
                f"({time.monotonic() - began:.0f} s)",
                flush=True,
            )
    print()
    print(report(tally(results), modes))
    if args.json:
        args.json.write_text(json.dumps([o.__dict__ for o in results], indent=1))
    green = all(o.outcome != "failed" for o in results)
    if args.keep is None and green:
        shutil.rmtree(logs, ignore_errors=True)
    elif not green:
        print(f"each failed round's pytest output: {logs}/MODE-ROUND.out")
    return 0 if green else 1


if __name__ == "__main__":
    sys.exit(main())
