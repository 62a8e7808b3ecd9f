"""`sparkwarden run` as a real process, supervising real containers."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.standin.stage import Stage, wait_healthy
from sparkwarden.base import faults
from sparkwarden.evidence.canary import WORKLOAD_NOT_DRAFTER
from sparkwarden.surfaces import control
from sparkwarden.vllm import metrics
from tests.kits.clock import missed_a_minute_ago
from tests.kits.commands import run_cli, running_step, start_cli
from tests.kits.daemonkit import DaemonProcess, Daemons, NotifySink, wait_for
from tests.kits.soundness import assert_sound, no_overlap

pytestmark = pytest.mark.docker

FAST = {
    "watch": {"interval": "0.5s", "boot_grace": "0s"},
    "health": {"interval": "1s", "timeout": "2s", "chat_interval": "0s", "failures": 2},
    "schedule": {"cron": ""},
    "budget": {"backoff": "1s"},
    "drain": {"quiet": "0s", "deadline": "10s"},
    "docker": {"timeout": "5s", "retry_for": "5s"},
}


@pytest.fixture
def start_daemon(tmp_path: Path, make_config: Any, control_dir: Path) -> Iterator[Any]:
    pool = Daemons(tmp_path)

    def start(
        llm_names: list[str],
        port: int,
        voice_names: list[str],
        env: dict[str, str] | None = None,
        ready: bool = True,
        **sections: Any,
    ) -> DaemonProcess:
        merged: dict[str, Any] = {k: dict(v) for k, v in FAST.items()}
        merged["control"] = {"socket": str(control_dir / "control.sock"), "group": ""}
        for key, values in sections.items():
            if isinstance(values, dict):
                merged.setdefault(key, {}).update(values)
            else:  # an array of tables, e.g. [[notify]]
                merged[key] = values
        return pool.start(make_config(llm_names, port, voice_names, **merged), env, ready)

    yield start
    pool.stop_all()


def test_docker_kill_is_a_crash_recovered_docker_stop_is_left_alone(
    stage: Stage, start_daemon: Any
) -> None:
    llm, port = stage.llm("llm")
    stt = stage.voice("stt")
    wait_healthy(port)
    daemon = start_daemon([llm], port, [stt])

    stage.client.containers.get(llm).kill()
    (run,) = wait_for("a crash run", lambda: daemon.runs_with("crash"))
    assert run["result"] == "ok", run
    assert run["container"] == llm and "stop_llm" in [s["name"] for s in run["steps"]]
    assert stage.status(llm) == "running" and stage.status(stt) == "running"
    why = " ".join(run_cli(daemon.config, "why").stdout.split())
    assert f"fired: the crash trigger: {llm} is exited (exit code 137" in why, why
    assert "drain: none: crash is not planned, it goes at once" in why, why
    assert f"ended: ok: {llm} answered a chat request" in why, why

    stage.client.containers.get(llm).stop(timeout=5)  # the operator's own hands
    daemon.after_looks(6)
    assert len(daemon.history()) == 1, "a hand-made stop must not be restarted"
    status = daemon.status()
    assert status["llm"]["operator_stopped"] == llm
    assert status["_exit"] == 1  # the LLM is down
    text = run_cli(daemon.config, "status").stdout
    assert "stopped by hand" in text


def test_decaying_acceptance_triggers_acceptance_on_passive_evidence_with_confirm_none(
    stage: Stage, start_daemon: Any
) -> None:
    llm, port = stage.llm(
        "llm",
        "--acceptance",
        "0.6",
        "--decay-to",
        "0.1",
        "--decay-after",
        "12",
        "--decay-over",
        "1",
        "--drafts-per-s",
        "300",
    )
    wait_healthy(port)
    daemon = start_daemon(
        [llm],
        port,
        [],
        acceptance={
            "window": "1s",
            "min_draft_tokens": 100,
            "warmup": "0s",
            "learn_windows": 2,
            "consecutive": 2,
            "confirm": "none",
        },
    )
    run = wait_for("an acceptance run", lambda: daemon.runs_with("acceptance"), timeout=40)[0]
    assert run["result"] == "ok"
    log = daemon.text()
    assert '"event": "drained"' in log and "healthy share of drafting" in log


#: Users whose traffic swings math -> prose -> math (12 s each: busy 8 s, idle 4 s, from the
#: daemon's first scrape), on a depth law that is not the one the passive estimate assumes:
#: learnt on math, its baseline makes every prose phase look like a decay (health ~0.6).
SWINGING = (
    "--traffic",
    "math,prose",
    "--law",
    "deeper-easier",
    "--swing-every",
    "12",
    "--busy-for",
    "8",
    "--idle-for",
    "4",
    "--drafts-per-s",
    "300",
)
#: Short windows, and canaries as soon as the engine has idled a second.
CANARY_FAST = {
    "window": "1s",
    "min_draft_tokens": 100,
    "warmup": "0s",
    "learn_windows": 2,
    "consecutive": 2,
    "canary_consecutive": 2,
    "canary_idle": "1s",
    "canary_interval": "2s",
    "canary_soon": "1s",
    "canary_max_tokens": 64,
}


#: A per-token decay that begins on the test's cue (the stand-in's SIGUSR2), once the daemon
#: reports its baseline: a decay on a timer raced the canaries, which a loaded machine takes
#: late, and a baseline learnt after it began was the decayed engine's (nothing to restart).
DECAY_ON_CUE = ("--decay-kind", "per-token", "--decay-after", "86400", "--decay-over", "1")


def learnt_baseline(daemon: DaemonProcess) -> None:
    """Once the daemon reports its canary's baseline (learnt on the healthy engine)."""
    wait_for(
        "the canary's baseline", lambda: daemon.status()["acceptance"]["canary"]["baseline"], 90
    )


def begin_decay(stage: Stage, llm: str) -> None:
    """The cue of ``DECAY_ON_CUE``."""
    stage.client.containers.get(llm).kill(signal="SIGUSR2")


def baseline_then_decay(stage: Stage, llm: str, daemon: DaemonProcess) -> None:
    learnt_baseline(daemon)
    begin_decay(stage, llm)


def canaries(daemon: DaemonProcess) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for line in daemon.text().splitlines()
        if '"event": "drafting_canary"' in line
    ]


def test_swinging_traffic_fools_the_passive_estimate_alone(stage: Stage, start_daemon: Any) -> None:
    """The hazard the canary exists for: with confirm = "none" the swing restarts a healthy
    engine."""
    llm, port = stage.llm("llm", *SWINGING)
    wait_healthy(port)
    daemon = start_daemon([llm], port, [], acceptance={**CANARY_FAST, "confirm": "none"})
    (run, *_) = wait_for("a false acceptance run", lambda: daemon.runs_with("acceptance"), 90)
    assert "healthy share of drafting" in run["plan"]["why"]


def test_swinging_traffic_restarts_nothing_under_the_canary(
    stage: Stage, start_daemon: Any
) -> None:
    llm, port = stage.llm("llm", *SWINGING)
    wait_healthy(port)
    daemon = start_daemon([llm], port, [], acceptance=CANARY_FAST)

    def cleared() -> bool:
        notes = [c["note"] for c in canaries(daemon) if c["valid"]]
        return len(notes) >= 6 and any(n.startswith(WORKLOAD_NOT_DRAFTER) for n in notes)

    wait_for("a low passive estimate the canary clears, over two swings", cleared, timeout=120)
    assert daemon.history() == [], "a swing of the workload must not restart anything"
    canary = daemon.status()["acceptance"]["canary"]
    assert canary["confirm"] == "canary" and canary["health"] > 0.9
    assert set(canary["baseline"]) == {"math", "code", "prose"}
    assert "canary:      health " in run_cli(daemon.config, "status").stdout


def test_a_decay_the_canary_confirms_restarts_once_with_reason_acceptance(
    stage: Stage, start_daemon: Any
) -> None:
    llm, port = stage.llm("llm", *SWINGING, *DECAY_ON_CUE, "--decay-once", "/tmp/decayed")
    wait_healthy(port)
    daemon = start_daemon([llm], port, [], acceptance=CANARY_FAST)
    learnt_baseline(daemon)
    # recorded from after the baseline was learnt: record still writes the baseline's canary
    trace = daemon.config.parent / "day.jsonl"
    recorder = start_cli(daemon.config, "record", "--out", str(trace), "--interval", "0.5s")
    wait_for("the recorder's first look", lambda: trace.exists() and trace.stat().st_size, 30)
    begin_decay(stage, llm)
    (run,) = wait_for("an acceptance run", lambda: daemon.runs_with("acceptance"), timeout=120)
    assert run["result"] == "ok"
    why = run["plan"]["why"]
    assert why.startswith("drafting canary at ") and "math " in why and "prose " in why
    shown = run_cli(daemon.config, "history").stdout
    assert "why: drafting canary at" in shown
    # the restarted engine drafts as before: a new baseline, and no second restart
    ended = datetime.fromisoformat(run["ended_at"]).timestamp()
    wait_for(
        "two valid canaries after the restart",
        lambda: sum(c["valid"] for c in canaries(daemon) if c["t"] > ended) >= 2,
        timeout=60,
    )
    assert len(daemon.runs_with("acceptance", finished=False)) == 1
    recorder.send_signal(signal.SIGTERM)
    assert recorder.wait(timeout=30) == 0
    # the recorded day, replayed, decides what the daemon decided, and for the same reason
    replayed = json.loads(run_cli(daemon.config, "replay", str(trace), "--json").stdout)
    assert [(f["by"], f["why"]) for f in replayed["fires"]] == [("canary", why)]
    assert replayed["canaries"] >= 4


#: The same users, never idle: busy the whole time (3 requests running), so a canary read from
#: the engine's counters can never count.
NEVER_IDLE = (*SWINGING[: SWINGING.index("--idle-for")], "--idle-for", "0", *SWINGING[-2:])
OWN_STATS = ("--per-request-spec-decode-metrics", "summary")


def test_a_never_idle_engine_reporting_its_own_stats_is_confirmed_under_load(
    stage: Stage, start_daemon: Any
) -> None:
    """vLLM's per-request spec-decode metrics: a canary counts while users run, so a decay on
    a box that never idles is confirmed and restarted, once."""
    llm, port = stage.llm(
        "llm", *NEVER_IDLE, *OWN_STATS, *DECAY_ON_CUE, "--decay-once", "/tmp/decayed"
    )
    wait_healthy(port)
    daemon = start_daemon([llm], port, [], acceptance=CANARY_FAST)
    baseline_then_decay(stage, llm, daemon)
    (run,) = wait_for("an acceptance run", lambda: daemon.runs_with("acceptance"), timeout=120)
    assert run["result"] == "ok"
    assert run["plan"]["why"].startswith("drafting canary at ")
    taken = [c for c in canaries(daemon) if c["valid"]]
    assert len(taken) >= 3 and all(c["own_stats"] is True for c in taken)
    engine = metrics.parse(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
    assert (engine.running or 0) >= 3  # the users never left: the counters' way cannot count
    canary = daemon.status()["acceptance"]["canary"]
    assert canary["own_stats"] is True
    assert "own stats" in run_cli(daemon.config, "status").stdout
    ended = datetime.fromisoformat(run["ended_at"]).timestamp()
    wait_for(
        "two valid canaries after the restart, under load",
        lambda: sum(c["valid"] for c in canaries(daemon) if c["t"] > ended) >= 2,
        timeout=60,
    )
    assert len(daemon.runs_with("acceptance", finished=False)) == 1


def test_a_never_idle_engine_without_its_own_stats_is_reported_never_restarted(
    stage: Stage, start_daemon: Any
) -> None:
    """Without them, the first canary finds out (discarded: others ran), later ones wait for
    an idle moment that never comes, and a decay (whole drafts spoilt: the passive estimate
    sees those) is said in status, not acted on."""
    whole = ("--decay-kind", "whole", "--decay-after", "15", "--decay-over", "1")
    llm, port = stage.llm("llm", *NEVER_IDLE, *whole)
    wait_healthy(port)
    patient = {**CANARY_FAST, "canary_max_wait": "20s"}
    daemon = start_daemon([llm], port, [], acceptance=patient)
    status = wait_for(
        "status saying no valid canary could be taken",
        lambda: (s := daemon.status())["acceptance"]["canary"]["waiting_too_long"] and s,
        timeout=150,
    )
    canary = status["acceptance"]["canary"]
    assert canary["own_stats"] is False and canary["valid"] == 0 and canary["discarded"] >= 1
    assert "no valid canary could be taken" in canary["note"]
    shown = run_cli(daemon.config, "status").stdout
    assert "idle only" in shown and "SUSPICIOUS" in shown
    assert daemon.history() == [], "evidence no canary could confirm must not restart anything"


def test_zombie_engine_triggers_unhealthy(stage: Stage, start_daemon: Any) -> None:
    llm, port = stage.llm("llm", "--mode", "chat-fails")
    stt = stage.voice("stt")
    wait_healthy(port)
    daemon = start_daemon([llm], port, [stt], health={"chat_interval": "1s"})
    run = wait_for("an unhealthy run", lambda: daemon.runs_with("unhealthy"), timeout=40)[0]
    assert run["result"] == "failed"  # still a zombie after the restart
    steps = {s["name"]: s for s in run["steps"]}
    assert steps["chat_probe"]["result"] == "failed"
    # voice came back after the failed run (read from its record: the retry, a second later,
    # pauses it again, so a look at the container races it)
    assert (
        steps["resume_voice"]["result"] == "ok"
        and stt in steps["resume_voice"]["detail"]["resumed"]
    )


def test_crash_loop_spends_the_budget_and_gives_up(stage: Stage, start_daemon: Any) -> None:
    llm, port = stage.llm("llm", "--crash-after", "5", start=False)
    stt = stage.voice("stt")
    daemon = start_daemon(
        [llm], port, [stt], budget={"max_runs": 2, "window": "1h", "backoff": "0s"}
    )
    # started under a daemon already looking: it restarts only an engine it has seen serve
    stage.client.containers.get(llm).start()
    status = wait_for("gave up", lambda: (s := daemon.status())["gave_up"] and s, timeout=60)
    assert status["daemon"]["state"] == "gave up" and status["_exit"] == 1
    assert "restart budget spent" in status["gave_up"]["why"]
    assert [r["reason"] for r in daemon.history()] == ["crash", "crash"]
    assert stage.status(stt) == "running"
    no_overlap(daemon.history())
    text = run_cli(daemon.config, "status").stdout
    assert "GAVE UP" in text and "sparkwarden reset" in text

    assert_sound(
        stage,
        daemon.history(),
        llm=llm,
        port=port,
        voice={stt: "running"},
        gave_up=status["gave_up"],
    )

    assert run_cli(daemon.config, "reset").returncode == 0
    assert wait_for("gave-up cleared", lambda: daemon.status()["gave_up"] is None)
    assert daemon.status()["daemon"]["state"] != "gave up"


def test_kill_9_mid_sequence_then_a_new_daemon_repairs(stage: Stage, start_daemon: Any) -> None:
    llm, port = stage.llm("llm", "--boot-delay", "5")
    stt = stage.voice("stt")
    wait_healthy(port)
    daemon = start_daemon([llm], port, [stt])
    restart = start_cli(daemon.config, "restart")
    try:
        wait_for("wait_health", lambda: running_step(daemon.config) == "wait_health")
        daemon.signal(signal.SIGKILL)
        daemon.wait()
        assert stage.status(stt) == "paused"  # the box as the crash left it
    finally:
        restart.kill()
        restart.wait()

    second = start_daemon([llm], port, [stt])
    repair = wait_for("a repair run", lambda: second.runs_with("repair"), timeout=60)[0]
    assert repair["result"] == "ok", repair
    steps = {s["name"]: s["result"] for s in repair["steps"]}
    assert steps["stop_llm"] == "skipped" and steps["chat_probe"] == "ok"
    assert steps["resume_voice"] == "ok"
    interrupted = [r for r in second.history() if r["reason"] == "manual"]
    assert interrupted[0]["result"] == "interrupted"
    assert stage.status(stt) == "running" and stage.status(llm) == "running"


def test_an_upgrade_mid_boot_hands_the_run_to_the_next_daemon(
    stage: Stage, start_daemon: Any
) -> None:
    """SIGTERM (what `install-service` sends the old code) while the started engine loads: the
    old daemon neither resumes voice nor records a verdict; the new one finishes the run as a
    repair, /health then the chat probe, and only then resumes voice."""
    llm, port = stage.llm("llm", "--boot-delay", "15")
    stt = stage.voice("stt")
    wait_healthy(port, timeout=60)
    daemon = start_daemon([llm], port, [stt])
    restart = start_cli(daemon.config, "restart")
    try:
        wait_for("wait_health", lambda: running_step(daemon.config) == "wait_health")
        assert stage.status(stt) == "paused"
        boot = wait_for("the boot in status", lambda: daemon.status().get("booting"))
        assert boot["reason"] == "manual" and boot["why"].startswith("requested by root (uid 0")
        assert boot["health_timeout_s"] == 30.0 and 0 <= boot["waited_s"] < 30  # write_config
        text = run_cli(daemon.config, "status").stdout
        assert "booting:     run #1 (manual: requested by root" in text, text
        assert "of health_timeout 0m30s" in text.replace("\n             ", " "), text
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0
    finally:
        out, err = restart.communicate(timeout=30)
    assert restart.returncode == 1 and "the next sparkwarden finishes it" in err, out + err
    run = daemon.history()[0]
    assert run["result"] == "running" and run["error"] is None, run  # no verdict yet
    assert stage.status(stt) == "paused"  # not beside an engine nobody has proven
    assert '"run_handed_over"' in daemon.text() and '"run_ended"' not in daemon.text()
    started_at = stage.attrs(llm)["State"]["StartedAt"]

    second = start_daemon([llm], port, [stt], ready=False)
    repair = wait_for("the repair's end", lambda: second.runs_with("repair"), timeout=90)[0]
    assert repair["result"] == "ok", repair
    steps = {s["name"]: s for s in repair["steps"]}
    assert steps["stop_llm"]["result"] == "skipped"  # the loading engine is not restarted
    assert steps["wait_health"]["result"] == "ok" and steps["chat_probe"]["result"] == "ok"
    assert steps["resume_voice"]["result"] == "ok"
    assert steps["resume_voice"]["started_at"] > steps["chat_probe"]["started_at"]
    assert stage.attrs(llm)["State"]["StartedAt"] == started_at
    first = next(r for r in second.history() if r["id"] == run["id"])
    assert first["result"] == "interrupted", first
    assert_sound(stage, second.history(), llm=llm, port=port, voice={stt: "running"})


def test_watchdog_ready_status_and_pings_stop_when_the_loop_is_stuck(
    stage: Stage, start_daemon: Any, control_dir: Path
) -> None:
    llm, port = stage.llm("llm")
    wait_healthy(port)
    sink = NotifySink(control_dir / "notify.sock")
    messages = sink.messages
    try:
        daemon = start_daemon(
            [llm],
            port,
            [],
            llm={"probe_timeout": "3s"},
            env={
                "NOTIFY_SOCKET": str(sink.path),
                "WATCHDOG_USEC": "1000000",
                "SPARKWARDEN_ENABLE_FAULTS": "1",
            },
        )
        ready = wait_for("READY=1", lambda: [m for _, m in messages if "READY=1" in m])
        assert "STATUS=" in ready[0] and llm in ready[0]
        wait_for("watchdog pings", lambda: sum("WATCHDOG=1" in m for _, m in messages) >= 3)
        assert daemon.request({"cmd": "fault", "name": "hang-loop"})["ok"]
        hung_at = time.monotonic()

        def pings_stopped() -> bool:
            last = max(t for t, m in messages if "WATCHDOG=1" in m)
            return time.monotonic() - last > 3.0

        wait_for("pings to stop", pings_stopped, timeout=40)
        assert time.monotonic() - hung_at < 40
        daemon.signal(signal.SIGTERM)
        daemon.wait()
        wait_for("STOPPING=1", lambda: any("STOPPING=1" in m for _, m in messages))
    finally:
        sink.close()


def test_hold_blocks_automatic_restarts(stage: Stage, start_daemon: Any) -> None:
    llm, port = stage.llm("llm")
    wait_healthy(port)
    daemon = start_daemon([llm], port, [])
    held = run_cli(daemon.config, "hold", "1h", "--reason", "swapping-fans")
    assert held.returncode == 0, held.stderr
    stage.client.containers.get(llm).kill()
    status = wait_for(  # once down for the settle time, the hold's wait
        "the hold's wait",
        lambda: (s := daemon.status())["daemon"]["command"] == "sparkwarden release" and s,
    )
    assert status["hold"]["reason"] == "swapping-fans"
    assert '"waiting"' in daemon.text()
    daemon.after_looks(4)  # looks go on: still no run
    assert daemon.history() == []
    assert run_cli(daemon.config, "release").returncode == 0
    assert wait_for("hold released", lambda: daemon.status()["hold"] is None)
    # the engine is still down: the next look recovers it
    (run,) = wait_for("the crash run", lambda: daemon.runs_with("crash"), timeout=30)
    assert run["result"] == "ok" and stage.status(llm) == "running"


def test_a_hold_mid_drain_ends_the_drain_and_status_says_held(
    stage: Stage, start_daemon: Any
) -> None:
    """Issue 12's bug: a hold refusing a planned restart mid-drain left the state "draining"."""
    llm, port = stage.llm("llm")
    wait_healthy(port)
    daemon = start_daemon(
        [llm], port, [], watch={"max_uptime": "1s"}, drain={"quiet": "1h", "deadline": "2h"}
    )
    wait_for("draining", lambda: daemon.status()["daemon"]["state"] == "draining")
    assert run_cli(daemon.config, "hold", "1h").returncode == 0
    status = wait_for("held", lambda: (s := daemon.status())["daemon"]["state"] == "held" and s)
    assert status["daemon"]["pending"] is None
    assert daemon.history() == []


def test_missed_schedule_is_made_up_at_boot_after_a_drain(stage: Stage, start_daemon: Any) -> None:
    llm, port = stage.llm("llm")
    wait_healthy(port)
    # one run missed a minute ago, the next a day away: "* * * * *" fired again a minute later
    # when the daemon started late in a minute, and `why` then told of run #2
    daemon = start_daemon([llm], port, [], schedule=missed_a_minute_ago(min_uptime="0s"))
    run = wait_for("a schedule run", lambda: daemon.runs_with("schedule"), timeout=60)[0]
    assert run["result"] == "ok"
    assert "making up the run due at" in daemon.text()
    # "why did it restart at 3 a.m.?": the trigger, the gates with the drain's end, the steps
    why = " ".join(run_cli(daemon.config, "why").stdout.split())
    assert f"run #{run['id']}: schedule" in why and "fired: the schedule trigger: making up" in why
    assert "gates: hold: none; budget: 0 of 3 automatic runs used before it; drain: " in why
    assert "drain: none" not in why, why  # a planned restart drained first
    assert all(step["name"] in why for step in run["steps"]) and "ended: ok:" in why


def test_status_contract_with_and_without_the_daemon(stage: Stage, start_daemon: Any) -> None:
    llm, port = stage.llm("llm")
    wait_healthy(port)
    daemon = start_daemon([llm], port, [])
    status = wait_for(
        "a health check", lambda: (s := daemon.status())["llm"]["health"] != "not checked yet" and s
    )
    for key in (
        "daemon",
        "llm",
        "memory",
        "acceptance",
        "next_restart",
        "budget",
        "hold",
        "last_run",
    ):
        assert key in status
    assert status["daemon"]["running"] is True and status["daemon"]["pid"] == daemon.pid
    assert status["daemon"]["state"] == "idle"
    assert status["llm"]["container"] == llm and status["llm"]["status"] == "running"
    assert status["llm"]["uptime_s"] >= 0
    assert status["memory"]["total_gib"] > status["memory"]["available_gib"] > 0
    assert status["budget"] == {"used": 0, "limit": 3, "why": "ok"}
    assert set(status["acceptance"]) >= {"current", "baseline", "health", "method", "note"}
    assert status["_exit"] == 0
    text = run_cli(daemon.config, "status")
    assert "acceptance:  " in text.stdout and ", health " in text.stdout
    assert all(len(line) <= 80 for line in text.stdout.splitlines())
    assert "\x1b[" not in text.stdout

    daemon.stop()
    offline = daemon.status()
    assert offline["daemon"]["running"] is False and offline["_exit"] == 3
    assert "NOT RUNNING" in run_cli(daemon.config, "status").stdout


def test_two_restart_requests_never_start_two_sequences(
    stage: Stage, start_daemon: Any, tmp_path: Path
) -> None:
    llm, port = stage.llm("llm")
    wait_healthy(port)
    # the daemon's run holds after start_llm until the second request was refused: a second
    # CLI's start-up on a loaded machine outlasted a 4 s boot, and found no run (CI)
    release = tmp_path / "release"
    held = {faults.ENABLE: "1", faults.STALL_AT: "start_llm", faults.RELEASE: str(release)}
    daemon = start_daemon([llm], port, [], env=held)
    first = start_cli(daemon.config, "restart")
    wait_for("the first run to hold", Path(f"{release}.held").exists, timeout=60)
    second = run_cli(daemon.config, "restart")
    assert second.returncode == 1 and "another sequence is running" in second.stderr
    release.touch()
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, out + err
    assert "run #1 by the daemon" in out and "[8/9] resume_voice" in out
    assert [r["result"] for r in daemon.history()] == ["ok"]


def as_user(uid: int, gid: int, socket_path: Path, payload: dict[str, Any]) -> str:
    """A bare client as another user (Debian's python3: root's venv is not readable to them)."""
    code = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "try:\n"
        "    s.connect(sys.argv[1])\n"
        "except PermissionError:\n"
        "    print('not allowed: permission denied'); sys.exit()\n"
        "s.sendall(sys.argv[2].encode() + b'\\n')\n"
        "print(s.makefile().readline())\n"
    )
    result = subprocess.run(
        ["/usr/bin/python3", "-c", code, str(socket_path), json.dumps(payload)],
        user=uid,
        group=gid,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
    )
    return result.stdout + result.stderr


def test_control_socket_lets_the_group_in_and_keeps_others_out(
    stage: Stage, start_daemon: Any
) -> None:
    llm, port = stage.llm("llm")
    wait_healthy(port)
    daemon = start_daemon([llm], port, [], control={"group": "users"})
    sock = daemon.settings.control.socket
    assert oct(sock.stat().st_mode & 0o777) == "0o660" and sock.stat().st_gid == 100

    nobody, nogroup, users = 65534, 65534, 100
    assert '"ok": true' in as_user(nobody, users, sock, {"cmd": "status"})
    assert "not allowed" in as_user(nobody, nogroup, sock, {"cmd": "status"})
    sock.chmod(0o666)  # past the file mode, the peer check still says no
    refused = as_user(nobody, nogroup, sock, {"cmd": "status"})
    assert "may not control sparkwarden" in refused

    for raw in (
        b"not json\n",
        b'{"cmd": "format-disk"}\n',
        b'{"cmd": "hold", "seconds": -1}\n',
        b"x" * 10_000,
    ):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(sock))
            conn.sendall(raw)
            answer = json.loads(conn.makefile().readline())
        assert answer["ok"] is False and answer["error"]
    assert daemon.request({"cmd": "fault", "name": "hang-loop"})["ok"] is False  # faults off
    assert control.call(sock, {"cmd": "status"})["ok"] is True


@pytest.mark.alone  # its floor is the host's MemAvailable less 1.5 GiB
def test_memory_floor_pauses_voice_and_resumes_it_when_memory_is_back(
    stage: Stage, start_daemon: Any
) -> None:
    import psutil

    llm, port = stage.llm("llm")
    stt = stage.voice("stt")
    wait_healthy(port)
    gib = 1024**3
    floor = psutil.virtual_memory().available / gib - 1.5
    daemon = start_daemon(
        [llm],
        port,
        [stt],
        memory={"floor_gib": round(floor, 2), "floor_for": "1s", "floor_action": "pause_voice"},
    )
    hog = bytearray(3 * gib)
    hog[::4096] = b"\x01" * (len(hog) // 4096)  # touch every page: really resident
    try:
        wait_for("voice paused for memory", lambda: stage.status(stt) == "paused", timeout=20)
        assert daemon.status()["memory"]["below_floor"] is True
    finally:
        del hog
    wait_for("voice resumed", lambda: stage.status(stt) == "running", timeout=20)
    # said just after the unpause returns: waited for, not raced
    wait_for("the resume said", lambda: '"voice_resumed_after_memory"' in daemon.text())
    assert '"memory_floor"' in daemon.text(), daemon.text()
    assert daemon.history() == []  # a warning and a pause, not a restart


def test_a_crash_while_sparkwarden_was_down_is_seen_when_it_comes_back(
    stage: Stage, start_daemon: Any
) -> None:
    llm, port = stage.llm("llm")
    stt = stage.voice("stt")
    wait_healthy(port)
    start_daemon([llm], port, [stt]).stop()
    stage.client.containers.get(llm).kill()  # nobody is watching
    second = start_daemon([llm], port, [stt])
    run = wait_for("the missed crash", lambda: second.runs_with("crash"), timeout=30)[0]
    assert run["result"] == "ok"
    assert '"event": "container_event"' in second.text()
    second.stop()
    third = start_daemon([llm], port, [stt])
    third.after_looks(6)
    assert len(third.history()) == 1, "an event already handled must not be replayed"
    assert_sound(stage, third.history(), llm=llm, port=port, voice={stt: "running"})


def test_a_docker_that_accepts_and_never_answers_fails_calls_at_the_timeout(
    stage: Stage, start_daemon: Any, control_dir: Path
) -> None:
    """Every Docker call has a timeout: against a socket that accepts and never answers, the
    loop gives each call up at ``docker.timeout``, says so, and is never wedged, so it keeps
    the watchdog's lease (a loop wedged past its lease stops the pings: the test above)."""
    from tests.kits.dockersockets import HungEngine

    llm, port = stage.llm("llm")
    wait_healthy(port)
    sink = NotifySink(control_dir / "notify.sock")
    hung = HungEngine()
    try:
        daemon = start_daemon(
            [llm],
            port,
            [],
            env={
                "DOCKER_HOST": hung.url,
                "NOTIFY_SOCKET": str(sink.path),
                "WATCHDOG_USEC": "1000000",
            },
            docker={"timeout": "2s", "retry_for": "1s"},
        )
        status = wait_for(
            "status to say Docker does not answer",
            lambda: (
                (s := daemon.status())
                and (
                    "did not answer in time" in s["llm"]["note"]
                    or "unreachable" in s["llm"]["note"]
                )
                and s
            ),
            timeout=60,
        )
        assert status["daemon"]["state"] == "waiting"  # for Docker, not idle
        assert status["daemon"]["command"] == "docker info"
        assert hung.accepted >= 1  # the calls did reach the hung socket
        count = len(sink.saying("WATCHDOG=1"))
        wait_for(
            "pings to go on while calls time out",
            lambda: len(sink.saying("WATCHDOG=1")) >= count + 4,
            30,
        )
        assert daemon.answering()
        assert daemon.history() == []
    finally:
        sink.close()
        hung.close()


def test_the_schedule_is_skipped_while_the_engine_is_younger_than_min_uptime(
    stage: Stage, start_daemon: Any
) -> None:
    llm, port = stage.llm("llm")
    wait_healthy(port)
    # Every minute, a missed run made up at boot: due now, but the engine is seconds old.
    daemon = start_daemon(
        [llm], port, [], schedule={"cron": "* * * * *", "missed_grace": "5m", "min_uptime": "1h"}
    )
    wait_for("the skip", lambda: '"schedule_skipped"' in daemon.text())
    assert "schedule.min_uptime 3600s" in daemon.text()
    assert daemon.status()["daemon"]["pending"] is None
    assert daemon.history() == []


def test_an_operators_successful_restart_clears_gave_up(stage: Stage, start_daemon: Any) -> None:
    from sparkwarden.restart.journal import Journal

    llm, port = stage.llm("llm")
    stt = stage.voice("stt")
    wait_healthy(port)
    daemon = start_daemon([llm], port, [stt])
    journal = Journal(daemon.settings.state.dir)
    journal.put("gave_up", {"reason": "crash", "why": "restart budget spent: test", "at": "x"})
    journal.close()
    daemon.request({"cmd": "release"})  # any admin request makes the daemon read it again
    wait_for("gave up", lambda: daemon.status()["daemon"]["state"] == "gave up")
    result = run_cli(daemon.config, "restart")
    assert result.returncode == 0, result.stderr
    status = wait_for("gave-up cleared", lambda: (s := daemon.status())["gave_up"] is None and s)
    assert status["daemon"]["state"] == "idle"
    assert_sound(stage, daemon.history(), llm=llm, port=port, voice={stt: "running"})


def test_sigterm_mid_run_asks_systemd_for_time_to_resume_voice(
    stage: Stage, start_daemon: Any, control_dir: Path
) -> None:
    llm, port = stage.llm("llm", "--boot-delay", "20")
    stt = stage.voice("stt")
    wait_healthy(port, timeout=60)
    sink = NotifySink(control_dir / "notify.sock")
    try:
        daemon = start_daemon([llm], port, [stt], env={"NOTIFY_SOCKET": str(sink.path)})
        restart = start_cli(daemon.config, "restart")
        wait_for("wait_health", lambda: running_step(daemon.config) == "wait_health")
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(timeout=60) == 0
        restart.wait(timeout=30)
        wait_for("STOPPING=1", lambda: sink.saying("STOPPING=1"))
    finally:
        sink.close()
    stopping = sink.saying("STOPPING=1")
    cfg = daemon.settings
    want = int((cfg.llm.probe_timeout + cfg.docker.timeout * 4 + 60) * 1e6)
    assert f"EXTEND_TIMEOUT_USEC={want}" in stopping[0], stopping
    assert stage.status(stt) == "paused"  # handed over: voice waits for a proven engine
    second = start_daemon([llm], port, [stt], ready=False)
    wait_for("the repair", lambda: second.runs_with("repair"), timeout=120)
    assert_sound(stage, second.history(), llm=llm, port=port, voice={stt: "running"})


@pytest.mark.parametrize("action", ["warn", "restart"])
def test_memory_floor_warn_only_warns_and_restart_restarts(
    stage: Stage, start_daemon: Any, action: str
) -> None:
    llm, port = stage.llm("llm")
    stt = stage.voice("stt")
    wait_healthy(port)
    daemon = start_daemon(
        [llm],
        port,
        [stt],
        memory={"floor_gib": 100000, "floor_for": "0s", "floor_action": action},
        budget={"max_runs": 1, "window": "1h"},
    )
    wait_for("the floor alert", lambda: '"memory_floor"' in daemon.text())
    if action == "warn":
        status = wait_for(
            "below floor", lambda: (s := daemon.status())["memory"]["below_floor"] and s
        )
        assert status["daemon"]["state"] == "idle"
        assert stage.status(stt) == "running" and daemon.history() == []
    else:
        run = wait_for("the memory run", lambda: daemon.runs_with("memory"), timeout=60)[0]
        assert run["result"] == "ok" and "below the floor of 100000 GiB" in daemon.text()
        assert stage.status(stt) == "running"
    assert_sound(stage, daemon.history(), llm=llm, port=port, voice={stt: "running"})


def test_without_stats_a_planned_restart_waits_the_whole_drain(
    stage: Stage, start_daemon: Any
) -> None:
    """--disable-log-stats: no request gauges, so nothing says the engine is quiet."""
    llm, port = stage.llm("llm", "--metrics=no-stats")
    wait_healthy(port)
    daemon = start_daemon(
        [llm], port, [], watch={"max_uptime": "3s"}, drain={"quiet": "0s", "deadline": "8s"}
    )
    status = wait_for("a drain", lambda: (s := daemon.status())["daemon"]["drain"] and s)
    assert "no request gauges, cannot see the engine idle" in status["daemon"]["drain"]
    assert "--disable-log-stats" in status["off"]["stall"]
    assert "--disable-log-stats" in status["off"]["acceptance"]
    assert "waits the whole drain deadline (8s)" in status["off"]["drain"]
    text = run_cli(daemon.config, "status").stdout
    assert "drain:       no request gauges" in text and "off:         stall: " in text
    run = wait_for("the uptime run", lambda: daemon.runs_with("uptime"), timeout=90)[0]
    assert run["result"] == "ok"
    assert "no request gauges: waited the whole drain deadline of 8s" in daemon.text()


STALL = {"interval": "1s", "timeout": "2s", "chat_interval": "0s", "stall_after": "3s"}


def test_a_stuck_gauge_on_a_working_engine_is_reported_not_restarted(
    stage: Stage, start_daemon: Any
) -> None:
    """num_requests_running stuck above 0, no tokens move (vLLM #22545): one chat request
    (sent although the engine looks busy and the canary is off) is answered, so no restart."""
    llm, port = stage.llm("llm", "--stuck-gauge", "--running", "2")
    wait_healthy(port)
    daemon = start_daemon([llm], port, [], health=STALL, llm={"probe_timeout": "5s"})
    status = wait_for(
        "a stuck gauge", lambda: "stuck gauge" in (s := daemon.status())["llm"]["health"] and s
    )
    assert "yet a chat request was answered" in status["llm"]["health"]
    assert '"stall_suspected"' in daemon.text() and '"stuck_gauge"' in daemon.text()
    wait_for("a second confirmation", lambda: daemon.text().count('"stall_suspected"') >= 2)
    assert daemon.runs_with("unhealthy") == []


def test_a_stall_confirmed_by_a_hung_chat_restarts(stage: Stage, start_daemon: Any) -> None:
    llm, port = stage.llm("llm", "--stall", "--running", "2")
    wait_healthy(port)
    daemon = start_daemon([llm], port, [], health=STALL, llm={"probe_timeout": "3s"})
    wait_for("an unhealthy run", lambda: daemon.runs_with("unhealthy", finished=False), timeout=90)
    log = daemon.text()
    assert '"stall_suspected"' in log and "generation and prompt tokens frozen" in log
    assert "a chat request failed too" in log
