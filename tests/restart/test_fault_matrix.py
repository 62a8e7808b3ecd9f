"""The fault matrix: every way the night can go wrong, on the real engine with the stand-in.

Rows 1-5, 8, 10-12 live beside the behaviour they break (test_restart_docker.py,
test_daemon_docker.py) and assert the same soundness; this file holds the rest. README's "What
sparkwarden guarantees" maps each row to its test.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pty
import random
import select
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devtools.standin.stage import Stage, ensure_image, wait_healthy
from sparkwarden import cli
from sparkwarden.restart.step_names import STEPS
from sparkwarden.vllm.client import VllmClient
from tests.kits.clock import missed_a_minute_ago
from tests.kits.commands import (
    ROOT,
    history,
    killed_at_exit,
    run_cli,
    running_step,
    socket_of,
    start_cli,
)
from tests.kits.daemonkit import DaemonProcess, Daemons, stalling, wait_for
from tests.kits.privatedocker import PrivateDocker
from tests.kits.signals import AS_TYPED
from tests.kits.soundness import answers_chat, assert_sound

pytestmark = pytest.mark.docker


# --- 6. dockerd restarted in the middle of a sequence ----------------------------------------


@pytest.fixture(scope="module")
def private_docker() -> Iterator[PrivateDocker]:
    engine = PrivateDocker()
    try:
        engine.start()
        client = engine.client()
        ensure_image(client)
        client.close()
        yield engine
    finally:
        engine.close()


@pytest.fixture
def private_stage(private_docker: PrivateDocker) -> Iterator[Stage]:
    stage = Stage(private_docker.client())
    yield stage
    stage.client = private_docker.client()  # the engine may have been restarted meanwhile
    stage.cleanup()


def private_sound(
    engine: PrivateDocker, stage: Stage, config: Path, llm: str, port: int, voice: dict[str, str]
) -> None:
    """assert_sound, from inside the engine's network namespace."""
    stage.client = engine.client()
    code = (
        "import json, sys, docker; from pathlib import Path\n"
        "from tests.kits.soundness import assert_sound; from devtools.standin.stage import Stage\n"
        f"runs = json.loads(Path({str(config)!r} + '.history').read_text())\n"
        f"assert_sound(Stage(docker.from_env()), runs, llm={llm!r}, port={port}, "
        f"voice={voice!r}); print('sound')\n"
    )
    Path(str(config) + ".history").write_text(json.dumps(history(config)))
    result = engine.python(code)
    assert result.stdout.strip() == "sound", result.stderr


@pytest.mark.parametrize(
    ("step", "standin"),
    [
        ("stop_llm", ["--stop-delay", "4"]),
        ("wait_health", ["--boot-delay", "6"]),
    ],
)
def test_dockerd_restarted_mid_sequence(
    private_docker: PrivateDocker,
    private_stage: Stage,
    tmp_path: Path,
    make_config: Any,
    step: str,
    standin: list[str],
) -> None:
    from devtools.standin.stage import free_port

    port = free_port()
    llm, _ = private_stage.llm("llm", *standin, port=port, network_mode="host")
    stt = private_stage.voice("stt")
    config = make_config([llm], port, [stt], docker={"timeout": "10s", "retry_for": "40s"})
    private_docker.python(f"from devtools.standin.stage import wait_healthy; wait_healthy({port})")
    restart = private_docker.run(
        sys.executable, "-m", "sparkwarden", "--config", str(config), "restart", background=True
    )
    assert isinstance(restart, subprocess.Popen)
    with killed_at_exit(restart):
        wait_for(f"step {step}", lambda: running_step(config) == step, timeout=30)
        private_docker.restart()
        out, err = restart.communicate(timeout=120)
    (run,) = history(config)
    assert run["result"] == "ok", out + err
    assert restart.returncode == 0
    private_sound(private_docker, private_stage, config, llm, port, {stt: "running"})


def test_events_stream_reconnects_after_dockerd_restarts(
    private_docker: PrivateDocker,
    private_stage: Stage,
    tmp_path: Path,
    make_daemon_config: Any,
) -> None:
    from devtools.standin.stage import free_port

    port = free_port()
    llm, _ = private_stage.llm("llm", port=port, network_mode="host")
    config = make_daemon_config(
        [llm],
        port,
        [],
        watch={"interval": "0.5s", "boot_grace": "0s"},
        health={"chat_interval": "0s"},
        docker={"timeout": "10s", "retry_for": "40s"},
    )
    private_docker.python(f"from devtools.standin.stage import wait_healthy; wait_healthy({port})")
    daemon = private_docker.run(
        sys.executable, "-m", "sparkwarden", "--config", str(config), "run", background=True
    )
    assert isinstance(daemon, subprocess.Popen)
    try:
        wait_for("the daemon", lambda: socket_of(config).exists(), timeout=30)
        private_docker.restart()
        time.sleep(3)  # the stream notices, backs off and reconnects
        private_docker.client().containers.get(llm).kill()
        run = wait_for(
            "a crash run",
            lambda: [r for r in history(config) if r["reason"] == "crash" and r["ended_at"]],
            timeout=60,
        )[0]
        assert run["result"] == "ok"
    finally:
        daemon.send_signal(signal.SIGTERM)
        out, err = daemon.communicate(timeout=30)
    assert "docker_events_lost" in out + err and "docker_events_reconnected" in out + err
    private_sound(private_docker, private_stage, config, llm, port, {})


# --- 7. kill -9 of sparkwarden at each step, then a new daemon --------------------------------


@pytest.mark.parametrize("step", STEPS)
def test_kill_9_at_every_step_is_repaired(
    stage: Stage, make_daemon_config: Any, tmp_path: Path, step: str
) -> None:
    llm, port = stage.llm("llm", "--boot-delay", "1")
    stt = stage.voice("stt")
    wait_healthy(port)
    config = make_daemon_config(
        [llm],
        port,
        [stt],
    )
    stalled = DaemonProcess(config, tmp_path / "stalled.log", stalling(step, tmp_path)).start()
    client = start_cli(config, "restart")
    try:
        wait_for(f"a run stalled in {step}", lambda: running_step(config) == step)
        stalled.held(step)
        stalled.signal(signal.SIGKILL)
        stalled.wait()
    finally:
        client.kill()
        client.wait()

    repairer = DaemonProcess(config, tmp_path / "repair.log").start()
    try:
        runs = wait_for(
            "the repair",
            lambda: [r for r in history(config) if r["reason"] == "repair" and r["ended_at"]],
        )
        assert runs[0]["result"] == "ok", runs[0]
        old = next(r for r in history(config) if r["reason"] == "manual")
        assert old["result"] == "interrupted"
        assert {s["name"]: s["result"] for s in old["steps"]}[step] == "failed"
        assert_sound(stage, history(config), llm=llm, port=port, voice={stt: "running"})
    finally:
        repairer.stop()


# --- 9. two restarts and the schedule at the same moment: one sequence ------------------------


def test_two_restarts_and_a_schedule_at_once_make_one_sequence(
    stage: Stage, make_daemon_config: Any, tmp_path: Path
) -> None:
    # A teardown of some seconds keeps whichever sequence wins running while the others
    # arrive, and leaves the engine fresh (under min_uptime) when it ends.
    llm, port = stage.llm("llm", "--stop-delay", "5")
    stt = stage.voice("stt")
    wait_healthy(port)
    time.sleep(4)  # old enough for the nightly restart (min_uptime 3s below)
    config = make_daemon_config(
        [llm],
        port,
        [stt],
        # the nightly run missed a minute ago, made up at boot; "* * * * *" fired again at the
        # next minute, after the engine had outgrown min_uptime: a second run, by the clock
        schedule=missed_a_minute_ago(min_uptime="3s"),
        drain={"quiet": "0s"},
        watch={"interval": "0.5s"},
    )
    daemon = DaemonProcess(config, tmp_path / "daemon.log").start(ready=False)
    try:
        wait_for("the socket", lambda: socket_of(config).exists(), timeout=30)
        clients = [start_cli(config, "restart") for _ in range(2)]
        outputs = [c.communicate(timeout=60) for c in clients]
        results = [(c.returncode, out, err) for c, (out, err) in zip(clients, outputs, strict=True)]
        wait_for("the run to end", lambda: (h := history(config)) and h[0]["ended_at"], 60)
        wait_for(
            "nothing pending",
            lambda: (s := daemon.status()["daemon"])["pending"] is None and s["state"] == "idle",
        )
    finally:
        daemon.stop()
    runs = [r for r in history(config) if r["result"] != "dry-run"]
    assert len(runs) == 1, [(r["reason"], r["result"]) for r in runs]
    (run,) = runs
    assert run["result"] == "ok" and run["reason"] in ("manual", "schedule"), run
    log = daemon.text()
    assert '"reason": "schedule"' in log  # the nightly trigger did fire...
    if run["reason"] == "manual":  # ...and, the LLM being fresh from that run, was skipped
        assert '"schedule_skipped"' in log and "schedule.min_uptime" in log
    # The clients that did not get the run were refused, each naming the one that did.
    refused = [err for code, _, err in results if code == 1]
    assert len(refused) == (1 if run["reason"] == "manual" else 2), results
    for err in refused:
        assert "another sequence is running" in err, err
        assert f"run #{run['id']}" in err, err
    served = [out for code, out, _ in results if code == 0]
    assert all(f"run #{run['id']} by the daemon" in out for out in served), served
    assert_sound(stage, runs, llm=llm, port=port, voice={stt: "running"})


# --- 13. /metrics missing, garbage, or without spec-decode ------------------------------------


@pytest.mark.parametrize("flag", ["--metrics=missing", "--metrics=garbage", "--no-spec-decode"])
def test_unusable_metrics_turn_the_acceptance_trigger_off_not_the_daemon(
    stage: Stage, make_daemon_config: Any, tmp_path: Path, flag: str
) -> None:
    llm, port = stage.llm("llm", flag)
    wait_healthy(port)
    config = make_daemon_config(
        [llm],
        port,
        [],
        health={"interval": "1s"},
    )
    daemon = DaemonProcess(config, tmp_path / "daemon.log").start()
    try:
        status = wait_for(
            "acceptance off",
            lambda: (s := daemon.status())["acceptance"]["available"] is False and s,
            timeout=20,
        )
        time.sleep(2)
        assert daemon.answering()
        assert status["acceptance"]["note"] == "no spec-decode metrics: trigger off"
        assert "no spec-decode metrics: trigger off" in run_cli(config, "status").stdout
        assert '"acceptance_trigger_off"' in daemon.text()
        if flag != "--no-spec-decode":
            assert '"metrics_unusable"' in daemon.text()
        assert history(config) == []
        assert_sound(stage, [], llm=llm, port=port, voice={})
    finally:
        daemon.stop()


# --- 14. malformed config: exit 2 naming the key, nothing touched, no traceback ---------------

BAD_FILES: list[tuple[str, str]] = [
    ("", "llm: required key is missing"),
    ("[llm]\n", "llm.containers: required key is missing"),
    ('[llm]\ncontainers = ["a"]\n', "llm.base_url: required key is missing"),
    ('[llm]\ncontainers = "a"\nbase_url = "http://x:1"\n', "llm.containers"),
    ('[llm]\ncontainers = []\nbase_url = "http://x:1"\n', "llm.containers"),
    ('[llm]\ncontainers = ["a", "a"]\nbase_url = "http://x:1"\n', "listed more than once"),
    ('[llm]\ncontainers = ["bad name!"]\nbase_url = "http://x:1"\n', "llm.containers.0"),
    ('[llm]\ncontainers = ["a"]\nbase_url = "ftp://x"\n', "llm.base_url"),
    (
        '[llm]\ncontainers = ["a"]\nbase_url = "http://x:1"\nstop_timeout = "soon"\n',
        "llm.stop_timeout: invalid duration",
    ),
    ('[llm]\ncontainers = ["a"]\nbase_url = "http://x:1"\nstop_timeout = -5\n', "llm.stop_timeout"),
    (
        '[llm]\ncontainers = ["a"]\nbase_url = "http://x:1"\nhealth_timeout = "0s"\n',
        "llm.health_timeout",
    ),
    (
        '[llm]\ncontainers = ["a"]\nbase_url = "http://x:1"\nstop_timout = "1s"\n',
        "llm.stop_timout: unknown key",
    ),
    (
        '[llm]\ncontainers = ["a"]\nbase_url = "http://x:1"\n[voice]\nmode = "freeze"\n',
        "voice.mode",
    ),
    (
        '[llm]\ncontainers = ["a"]\nbase_url = "http://x:1"\n[voice]\ncontainers = ["a"]\n',
        "both llm and voice",
    ),
    (
        '[llm]\ncontainers = ["a"]\nbase_url = "http://x:1"\n[memory]\nstart_min_available_gib '
        '= "lots"\n',
        "memory.start_min_available_gib",
    ),
    (
        '[llm]\ncontainers = ["a"]\nbase_url = "http://x:1"\n[memory]\nfloor_action = "panic"\n',
        "memory.floor_action",
    ),
    (
        '[llm]\ncontainers = ["a"]\nbase_url = "http://x:1"\n[schedule]\ncron = "30 4 * *"\n',
        "schedule.cron",
    ),
    (
        '[llm]\ncontainers = ["a"]\nbase_url = "http://x:1"\n[schedule]\ntimezone = "Mars/Base"\n',
        "schedule.timezone",
    ),
    (
        '[llm]\ncontainers = ["a"]\nbase_url = "http://x:1"\n[acceptance]\nfraction = 1.5\n',
        "acceptance.fraction",
    ),
    (
        '[llm]\ncontainers = ["a"]\nbase_url = "http://x:1"\n[acceptance]\nfraction = 0.7\n'
        "recover_fraction = 0.6\n",
        "fraction must be at most recover_fraction",
    ),
    (
        '[llm]\ncontainers = ["a"]\nbase_url = "http://x:1"\n[budget]\nmax_runs = 0\n',
        "budget.max_runs",
    ),
    (
        '[llm]\ncontainers = ["a"]\nbase_url = "http://x:1"\n[widgets]\nx = 1\n',
        "widgets: unknown key",
    ),
    (
        '[llm]\ncontainers = ["a"]\nbase_url = "http://x:1"\n[health]\nfailures = "three"\n',
        "health.failures",
    ),
    ('[llm\ncontainers = ["a"]\n', "not valid TOML"),
    ("\xff\xfe not text", "not UTF-8"),
]


def test_bad_config_table_exits_2_naming_the_key_and_touches_nothing(
    stage: Stage, tmp_path: Path
) -> None:
    assert len(BAD_FILES) >= 20
    llm, port = stage.llm("llm")
    wait_healthy(port)
    before = stage.attrs(llm)["State"]["StartedAt"]
    for index, (text, names) in enumerate(BAD_FILES):
        path = tmp_path / f"bad-{index}.toml"
        path.write_bytes(text.encode("latin-1") if text.startswith("\xff") else text.encode())
        for command in (["check-config"], ["restart"], ["run"]):
            result = run_cli(path, *command, timeout=30)
            assert result.returncode == 2, (text, command, result.stdout, result.stderr)
            assert names in result.stderr, (text, result.stderr)
            assert "Traceback" not in result.stderr
    assert stage.attrs(llm)["State"]["StartedAt"] == before  # no container was touched


def test_a_missing_secret_stops_run_and_restart_but_not_the_readers(
    make_config: Any, tmp_path: Path
) -> None:
    """The API key and notify URLs are the daemon's: status, history and check-config (a
    warning) answer without them; run and restart refuse with exit 2 naming the key."""
    path = make_config(
        ["a"], 1, llm={"api_key_file": "/nope"}, notify=[{"url_env": "SW_NEVER_SET"}]
    )
    for command, code in (["run"], 2), (["restart"], 2), (["check-config"], 0):
        result = run_cli(path, *command, timeout=30)
        assert result.returncode == code, (command, result.stdout, result.stderr)
        assert "llm.api_key_file: '/nope' cannot be read" in result.stderr
        # restart sends no notification: the URL it never uses is no reason to refuse (#36)
        unset = "notify.0.url_env: $SW_NEVER_SET is not set"
        assert (unset in result.stderr) == (command != ["restart"]), (command, result.stderr)
        assert "Traceback" not in result.stderr
    for command in (["status"], ["history"]):
        result = run_cli(path, *command, timeout=30)
        assert result.returncode != 2 and result.stderr == "", (command, result.stderr)


#: Keys of the schema the generator mangles, by section, and what kind of value each takes.
_KNOWN: dict[str, dict[str, str]] = {
    "llm": {"containers": "list", "base_url": "text", "stop_timeout": "number"},
    "voice": {"containers": "list", "mode": "text", "stop_timeout": "number"},
    "memory": {"start_min_available_gib": "number", "floor_gib": "number"},
    "schedule": {"cron": "text", "missed_grace": "number"},
    "acceptance": {"window": "number", "fraction": "number"},
    "budget": {"max_runs": "number", "window": "number"},
    "control": {"socket": "text"},
    "docker": {"timeout": "number", "retry_for": "number"},
}
_tables = st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), st.integers(), min_size=1)


@st.composite
def _mangled(draw: st.DrawFn) -> tuple[str, str, Any, str]:
    """(section, key, value, what the error must name): never a valid config. Either a key the
    schema does not know, or a known key given a value of a kind it can never take."""
    section = draw(st.sampled_from([*_KNOWN, "nonsense"]))
    known = _KNOWN.get(section, {})
    if section == "nonsense" or draw(st.booleans()):
        key = draw(st.from_regex(r"x_[a-z]{1,8}", fullmatch=True))
        value = draw(st.one_of(st.integers(), st.text(max_size=5), st.booleans()))
        return (
            section,
            key,
            value,
            f"{section}: unknown key"
            if section == "nonsense"
            else (f"{section}.{key}: unknown key"),
        )
    key = draw(st.sampled_from(sorted(known)))
    kind = known[key]
    wrong = [_tables]
    if kind != "list":
        wrong.append(st.lists(st.integers(), min_size=1, max_size=3))
    if kind == "number":
        wrong.append(st.integers(-(10**6), -1))
    if kind == "list":
        wrong.append(st.integers())
    value = draw(st.one_of(*wrong))
    return section, key, value, f"{section}.{key}"


@pytest.fixture(scope="module")
def idle_llm(docker_client: Any) -> Iterator[str]:
    """One stand-in that no mangled config may touch (module-wide: hypothesis runs many)."""
    stage = Stage(docker_client)
    name, _ = stage.llm("idle")
    try:
        yield name
    finally:
        stage.cleanup()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mangled=_mangled())
def test_any_mangled_config_is_refused_cleanly(
    mangled: tuple[str, str, Any, str],
    idle_llm: str,
    docker_client: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    section, key, value, named = mangled
    data: dict[str, Any] = {"llm": {"containers": [idle_llm], "base_url": "http://127.0.0.1:9"}}
    data.setdefault(section, {})[key] = value
    path = tmp_path_factory.mktemp("cfg") / "c.toml"
    path.write_text(tomli_w.dumps(data))
    before = docker_client.containers.get(idle_llm).attrs["State"]
    for command in ("check-config", "restart"):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = cli.main(["--config", str(path), command])
        said = err.getvalue()
        assert code == 2, (data, command, said)
        assert named in said and "Traceback" not in said, (data, said)
    after = docker_client.containers.get(idle_llm).attrs["State"]
    assert (after["Status"], after["StartedAt"]) == (before["Status"], before["StartedAt"])


# --- helpers for the rows below ---------------------------------------------------------------


def wait_event(stage: Stage, name: str, action: str, since: float, timeout: float = 60.0) -> float:
    """Block until Docker reports ``action`` for container ``name`` (replayed from ``since``);
    returns the event's time. The kill timing of these rows comes from here, never a sleep."""
    until = time.time() + timeout
    for event in stage.client.events(
        since=int(since), until=int(until) + 1, decode=True, filters={"container": name}
    ):
        if event.get("Action") == action and event.get("time", 0) >= int(since):
            return float(event["timeNano"]) / 1e9
    raise AssertionError(f"no {action} event for {name} within {timeout}s")


def events_since(stage: Stage, name: str, action: str, since: float) -> list[dict[str, Any]]:
    """Docker's ``action`` events for ``name`` from ``since`` until now."""
    now = time.time()
    return [
        e
        for e in stage.client.events(
            since=since, until=now, decode=True, filters={"container": name, "event": action}
        )
    ]


def serving(stage: Stage, *standin: str) -> tuple[str, int, str]:
    """A stand-in LLM answering on its port, and a running voice container: (llm, port, stt)."""
    llm, port = stage.llm("llm", *standin)
    stt = stage.voice("stt")
    wait_healthy(port)
    return llm, port, stt


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Any]:
    """Start daemons on a config; every one is stopped (by its own pid) at the end."""
    pool = Daemons(tmp_path)

    def start(config: Path, stall_at: str | None = None, ready: bool = True) -> DaemonProcess:
        stall = stalling(stall_at, tmp_path) if stall_at else None
        return pool.start(config, stall, ready)

    yield start
    pool.stop_all()


def kill_mid_run(
    daemon: DaemonProcess, config: Path, step: str, held: Callable[[], None] = lambda: None
) -> None:
    """An operator's restart through ``daemon``, which is killed (-9) once the run is in ``step``
    (``daemon`` was started stalling there); ``held``: what the test checks of the box then."""
    client = start_cli(config, "restart")
    try:
        wait_for(f"a run stalled in {step}", lambda: running_step(config) == step, timeout=60)
        daemon.held(step)
        held()
        daemon.signal(signal.SIGKILL)
        daemon.wait()
    finally:
        client.kill()
        client.wait()


def repairs(config: Path, count: int = 1, timeout: float = 90.0) -> list[dict[str, Any]]:
    return wait_for(  # type: ignore[no-any-return]
        f"{count} finished repair run(s)",
        lambda: (
            (r := [x for x in history(config) if x["reason"] == "repair" and x["ended_at"]])
            and len(r) >= count
            and r
        ),
        timeout=timeout,
    )


# --- 15. killed while `docker stop` is still tearing the LLM down ----------------------------


def test_killed_mid_docker_stop_the_repair_finishes_the_stop_and_starts_it(
    stage: Stage, make_daemon_config: Any, daemons: Any
) -> None:
    llm, port, stt = serving(stage, "--stop-delay", "4")
    config = make_daemon_config([llm], port, [stt])
    first = daemons(config)
    since = time.time()
    client = start_cli(config, "restart")
    try:
        wait_event(stage, llm, "kill", since)  # docker stop has sent SIGTERM: vLLM tears down
        first.signal(signal.SIGKILL)
        first.wait()
        assert stage.status(llm) == "running"  # still on its way down
    finally:
        client.kill()
        client.wait()
    daemons(config, ready=False)  # systemd starts it again at once
    (repair,) = repairs(config)
    assert repair["result"] == "ok", repair
    steps = {s["name"]: s["result"] for s in repair["steps"]}
    assert steps["stop_llm"] in ("ok", "skipped") and steps["start_llm"] == "ok", steps
    assert stage.status(llm) == "running"
    assert_sound(stage, history(config), llm=llm, port=port, voice={stt: "running"})


# --- 16. a second kill during the repair's own detect ----------------------------------------


def test_killed_again_in_the_repair_the_next_repair_still_resumes_voice(
    stage: Stage, make_daemon_config: Any, daemons: Any
) -> None:
    llm, port, stt = serving(stage)
    config = make_daemon_config([llm], port, [stt])
    kill_mid_run(daemons(config, stall_at="stop_llm"), config, "stop_llm")
    assert stage.status(stt) == "paused"

    second = daemons(config, stall_at="detect", ready=False)
    wait_for(
        "the repair stalled in detect",
        lambda: history(config)[0]["reason"] == "repair" and running_step(config) == "detect",
    )
    second.signal(signal.SIGKILL)
    second.wait()

    daemons(config, ready=False)
    runs = repairs(config, 2)
    assert runs[0]["result"] == "ok", runs[0]
    assert runs[0]["plan"]["voice_paused"] == [stt]
    assert [r["result"] for r in history(config)[1:]] == ["interrupted", "interrupted"]
    assert_sound(stage, history(config), llm=llm, port=port, voice={stt: "running"})


# --- 17. a voice container removed while sparkwarden was down --------------------------------


def test_voice_container_removed_while_down_the_others_are_still_resumed(
    stage: Stage, make_daemon_config: Any, daemons: Any
) -> None:
    llm, port = stage.llm("llm")
    stt, tts = stage.voice("stt"), stage.voice("tts")
    wait_healthy(port)
    config = make_daemon_config([llm], port, [stt, tts])
    kill_mid_run(daemons(config, stall_at="stop_llm"), config, "stop_llm")
    assert stage.status(stt) == stage.status(tts) == "paused"
    stage.client.containers.get(tts).remove(force=True)

    daemons(config, ready=False)
    (repair,) = repairs(config)
    assert repair["result"] == "failed" and tts in repair["error"], repair
    steps = {s["name"]: s for s in repair["steps"]}
    assert steps["resume_voice"]["detail"]["resumed"] == [stt]
    assert steps["resume_voice"]["detail"]["already"] == {tts: "gone"}
    assert_sound(stage, history(config), llm=llm, port=port, voice={stt: "running"})


# --- 18. the operator started another candidate while sparkwarden was down -------------------


def test_repair_never_starts_a_second_llm_beside_one_the_operator_started(
    stage: Stage, make_daemon_config: Any, daemons: Any
) -> None:
    from devtools.standin.stage import free_port

    port = free_port()
    llm_a, _ = stage.llm("a", "--boot-delay", "2", port=port, network_mode="host")
    llm_b, _ = stage.llm("b", port=port, network_mode="host", start=False)
    stt = stage.voice("stt")
    wait_healthy(port)
    config = make_daemon_config([llm_a, llm_b], port, [stt])
    kill_mid_run(daemons(config, stall_at="stop_llm"), config, "stop_llm")
    assert stage.status(llm_a) == "exited"
    stage.client.containers.get(llm_b).start()  # the operator, while sparkwarden is down
    wait_healthy(port)
    since = time.time()

    daemons(config, ready=False)
    (repair,) = repairs(config)
    assert events_since(stage, llm_a, "start", since) == []
    assert repair["result"] == "ok" and repair["container"] == llm_b, repair
    assert stage.status(llm_a) == "exited" and stage.status(llm_b) == "running"
    assert_sound(stage, history(config), llm=llm_b, port=port, voice={stt: "running"})


# --- 19. voice paused by the memory floor, then sparkwarden restarted ------------------------


def test_memory_floor_pause_is_resumed_by_a_restarted_daemon(
    stage: Stage, make_daemon_config: Any, daemons: Any
) -> None:
    llm, port, stt = serving(stage)
    floor = {"floor_for": "0s", "floor_action": "pause_voice"}
    config = make_daemon_config([llm], port, [stt], memory={"floor_gib": 100000, **floor})
    first = daemons(config)
    wait_for("voice paused for memory", lambda: stage.status(stt) == "paused")
    first.signal(signal.SIGKILL)
    first.wait()

    config = make_daemon_config([llm], port, [stt], memory={"floor_gib": 0.5, **floor})
    second = daemons(config)
    wait_for("voice resumed", lambda: stage.status(stt) == "running")
    assert '"voice_resumed_after_memory"' in second.text()
    assert history(config) == []
    assert_sound(stage, history(config), llm=llm, port=port, voice={stt: "running"})


# --- 20. the journal cannot be written mid-run (state dir full) ------------------------------


@pytest.fixture
def small_state_dir(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs for the state dir, to fill at will."""
    path = tmp_path / "state"
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path) -> None:
    """Write zeros until the file system says it is full."""
    with (directory / "filler").open("wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass


def test_a_journal_that_cannot_be_written_still_resumes_voice(
    stage: Stage, make_config: Any, small_state_dir: Path
) -> None:
    llm, port, stt = serving(stage, "--boot-delay", "3")
    config = make_config([llm], port, [stt], state={"dir": str(small_state_dir)})
    with killed_at_exit(start_cli(config, "restart")) as restart:
        wait_for("wait_health", lambda: running_step(config) == "wait_health")
        fill(small_state_dir)
        out, err = restart.communicate(timeout=120)
    assert stage.status(stt) == "running", out + err
    assert restart.returncode == 1 and "Traceback" not in err, err
    assert "FAILED: the journal could not be written: database or disk is full" in out + err
    assert '"voice_resumed_unrecorded"' in err
    (small_state_dir / "filler").unlink()
    assert_sound(stage, history(config), llm=llm, port=port, voice={stt: "running"})


# --- 21. SIGHUP mid-run -------------------------------------------------------------------------


def test_sighup_mid_run_finishes_the_run_then_rereads_the_config(
    stage: Stage, make_daemon_config: Any, daemons: Any
) -> None:
    llm, port, stt = serving(stage, "--boot-delay", "3")
    config = make_daemon_config([llm], port, [stt])
    daemon = daemons(config)
    client = start_cli(config, "restart")
    wait_for("wait_health", lambda: running_step(config) == "wait_health")
    daemon.signal(signal.SIGHUP)
    out, err = client.communicate(timeout=120)
    assert client.returncode == 0, out + err
    (run,) = history(config)
    assert run["result"] == "ok"
    text = wait_for("the reload", lambda: '"reloading"' in daemon.text() and daemon.text())
    assert text.index('"run_ended"') < text.index('"reloading"')  # between runs, never mid-run
    wait_for("the daemon back on the new config", daemon.answering)

    good = config.read_text()
    config.write_text(good.replace("[llm]", "[llm]\nstop_timout = 1", 1))
    daemon.signal(signal.SIGHUP)
    wait_for("the refusal", lambda: '"reload_refused"' in daemon.text())
    assert "llm.stop_timout: unknown key" in daemon.text()
    assert daemon.answering() and daemon.proc is not None and daemon.proc.poll() is None
    config.write_text(good)
    assert_sound(stage, history(config), llm=llm, port=port, voice={stt: "running"})


# --- 22. a Docker socket blink after a pause reached dockerd ----------------------------------


def test_a_retried_pause_that_had_landed_is_recorded_and_resumed(
    stage: Stage, make_config: Any
) -> None:
    from tests.kits.dockersockets import BlinkProxy

    llm, port, stt = serving(stage)
    config = make_config([llm], port, [stt])
    proxy = BlinkProxy(f"/containers/{stage.attrs(stt)['Id']}/pause".encode())
    try:
        result = run_cli(config, "restart", env={"DOCKER_HOST": proxy.url})
    finally:
        proxy.close()
    assert proxy.blinked == 1
    assert result.returncode == 0, result.stdout + result.stderr
    (run,) = history(config)
    steps = {s["name"]: s for s in run["steps"]}
    assert steps["pause_voice"]["detail"]["paused"] == [stt]
    assert steps["resume_voice"]["detail"]["resumed"] == [stt]
    assert_sound(stage, history(config), llm=llm, port=port, voice={stt: "running"})


# --- 23. an API key file with a second line ---------------------------------------------------

SECRET = "sk-sparkwarden-test-4f2a9c"


def test_a_malformed_api_key_is_refused_at_load_and_never_printed(
    stage: Stage, make_config: Any, tmp_path: Path
) -> None:
    llm, port, stt = serving(stage)
    key = tmp_path / "api-key"
    key.write_text(f"{SECRET}\n# the key for the spark\n")
    config = make_config([llm], port, [stt], llm={"api_key_file": str(key)})
    before = stage.attrs(llm)["State"]["StartedAt"]
    for command in (["check-config"], ["restart"], ["run"]):
        result = run_cli(config, *command, timeout=60)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert "llm.api_key_file" in result.stderr and "one token" in result.stderr
        assert SECRET not in result.stdout + result.stderr
    assert stage.attrs(llm)["State"]["StartedAt"] == before  # nothing stopped or started
    assert not (tmp_path / "state" / "journal.sqlite3").exists()  # no run was begun
    leaked = [
        p
        for p in (tmp_path / "state").rglob("*")
        if p.is_file() and SECRET.encode() in p.read_bytes()
    ]
    assert leaked == []
    # Whatever key reaches the client, its errors are recorded without it.
    vllm = VllmClient(f"http://127.0.0.1:{port}", key.read_text())
    try:
        said = [vllm.health(timeout=5).detail, vllm.chat("standin", timeout=5).detail]
    finally:
        vllm.close()
    assert all(SECRET not in d for d in said), said
    assert "Bearer [redacted]" in said[1], said  # only /v1 carries the key; its error is scrubbed
    key.write_text(SECRET + "\n")
    assert_sound(stage, history(config), llm=llm, port=port, voice={stt: "running"})


# --- 25. a well-formed key the engine refuses -------------------------------------------------


def test_a_key_the_engine_refuses_fails_detect_and_stops_nothing(
    stage: Stage, make_config: Any, tmp_path: Path
) -> None:
    llm, port, stt = serving(stage, "--api-key", SECRET)
    key = tmp_path / "api-key"
    key.write_text("sk-sparkwarden-an-old-key\n")
    config = make_config([llm], port, [stt], llm={"api_key_file": str(key)})
    before = stage.attrs(llm)["State"]["StartedAt"]
    result = run_cli(config, "restart", timeout=120)
    assert result.returncode != 0
    (run,) = history(config)
    assert run["result"] == "failed" and "refuses sparkwarden's API key (HTTP 401)" in run["error"]
    steps = {s["name"]: s["result"] for s in run["steps"]}
    assert steps["detect"] == "failed" and steps.get("stop_llm") in (None, "skipped"), steps
    assert stage.attrs(llm)["State"]["StartedAt"] == before  # the engine was never stopped
    key.write_text(SECRET + "\n")
    assert_sound(stage, history(config), llm=llm, port=port, voice={stt: "running"})


# --- 24. the wall clock stepped back after runs were recorded ---------------------------------


def test_runs_dated_in_the_future_do_not_stop_reset_from_clearing_gave_up(
    stage: Stage, make_daemon_config: Any, daemons: Any, tmp_path: Path
) -> None:
    from sparkwarden.restart.journal import Journal

    llm, port, stt = serving(stage)
    config = make_daemon_config(
        [llm],
        port,
        [stt],
        budget={"max_runs": 2, "window": "1h", "backoff": "0s"},
        watch={"interval": "0.5s", "boot_grace": "0s"},
    )
    # Recorded while the RTC was an hour fast; NTP has since stepped the clock back.
    ahead = Journal(tmp_path / "state", clock=lambda: time.time() + 3600)
    for _ in range(2):
        run = ahead.begin_run("crash")
        ahead.end_run(run, "failed", "died at once")
    ahead.put("gave_up", {"reason": "crash", "why": "restart budget spent", "at": "later"})
    ahead.close()

    daemon = daemons(config)
    assert daemon.status()["daemon"]["state"] == "gave up"
    assert run_cli(config, "reset").returncode == 0
    wait_for("gave-up cleared", lambda: daemon.status()["gave_up"] is None)
    since = time.time()
    stage.client.containers.get(llm).kill()
    crash = wait_for(
        "the crash run",
        lambda: [
            r for r in history(config) if r["reason"] == "crash" and r["id"] > 2 and r["ended_at"]
        ],
        timeout=60,
    )[0]
    assert crash["result"] == "ok", crash
    assert events_since(stage, llm, "start", since)
    assert_sound(stage, history(config), llm=llm, port=port, voice={stt: "running"})


# --- the kill point, fuzzed: anywhere in the sequence, and again anywhere in the repair -------

FUZZ_RUNS = 24


@pytest.mark.timeout(900)  # 24 attempts, each a whole kill, repair and check
def test_kill_anywhere_in_the_sequence_and_the_repair_leaves_the_box_sound(
    stage: Stage, make_daemon_config: Any, tmp_path: Path
) -> None:
    """``kill -9`` after a random delay into an operator's run (anywhere from before ``detect``
    to after ``resume_voice``), half the time again a random delay into the repair, then a
    daemon left alone: every time, the box ends sound and nothing is left ``running``."""
    llm, port, stt = serving(stage, "--boot-delay", "1", "--stop-delay", "1")
    config = make_daemon_config([llm], port, [stt])
    seed = int(time.time())
    rng = random.Random(seed)
    for attempt in range(FUZZ_RUNS):
        where = f"seed {seed}, attempt {attempt}"
        first = DaemonProcess(config, tmp_path / f"fuzz-{attempt}-a.log").start()
        client = start_cli(config, "restart")
        time.sleep(rng.uniform(0.0, 6.0))  # the fuzzed kill point, not a wait for anything
        first.signal(signal.SIGKILL)
        first.wait()
        client.kill()
        client.wait()
        if rng.random() < 0.5:
            second = DaemonProcess(config, tmp_path / f"fuzz-{attempt}-b.log").start(ready=False)
            time.sleep(rng.uniform(0.3, 4.0))  # somewhere in its start-up or its repair
            second.signal(signal.SIGKILL)
            second.wait()
        last = DaemonProcess(config, tmp_path / f"fuzz-{attempt}-c.log").start()
        try:
            # left alone, it ends sound: at READY the repair is done, and an engine down for a
            # reason no record explains (a kill between Docker's act and the journal's word) is
            # the next check's crash to mend; wait for that, not a number of seconds
            runs, up = wait_for(
                f"the box sound ({where})", lambda: settled(stage, config, llm, port), timeout=90
            )
            assert_sound(stage, runs, llm=llm, port=port, voice={stt: "running"}, serving=up)
            assert up, (where, runs[:3])
        finally:
            last.stop()


def settled(
    stage: Stage, config: Path, llm: str, port: int
) -> tuple[list[dict[str, Any]], bool] | None:
    """The box judged in one piece once no run is under way: (history, the LLM serving), when
    it serves or the newest run failed; None while a run is under way, one began or ended
    while the box was read, or the engine is down and nothing said so yet (its exit settling
    before the daemon's next look). A history read apart from the engine's state judged a
    serving engine against a run begun after it, or a down one against the run before it."""
    before = history(config)
    if any(r["result"] == "running" for r in before):
        return None
    serving = stage.status(llm) == "running" and answers_chat(port)
    if history(config) != before:
        return None
    if serving or (before and before[0]["result"] == "failed"):
        return before, serving
    return None


_CLOCK_AHEAD = """\
import os, time
_real, _flag = time.time, os.environ["SWT_CLOCK_STEPPED"]
time.time = lambda: _real() + (0.0 if os.path.exists(_flag) else 3600.0)
"""


def test_a_daemon_whose_clock_steps_back_still_sees_a_real_crash(
    stage: Stage, make_daemon_config: Any, daemons: Any, tmp_path: Path
) -> None:
    """The daemon's wall clock runs an hour fast (a bad RTC), a run ends, then NTP steps it
    back: Docker's ``die`` events, dated by the real clock, are no longer "before the end of
    our own run" and ignored; the next crash is restarted."""
    llm, port, stt = serving(stage)
    config = make_daemon_config([llm], port, [stt])
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_CLOCK_AHEAD)
    stepped = tmp_path / "stepped"
    env = {"PYTHONPATH": str(site), "SWT_CLOCK_STEPPED": str(stepped)}
    daemon = DaemonProcess(config, tmp_path / "ahead.log", env).start()
    try:
        assert run_cli(config, "restart").returncode == 0  # dated an hour ahead
        stepped.touch()  # NTP steps the clock back
        wait_for("the step to be seen", lambda: '"clock_stepped_back"' in daemon.text())
        stage.client.containers.get(llm).kill()
        crash = wait_for(
            "the crash run", lambda: [r for r in history(config) if r["reason"] == "crash"], 60
        )[0]
        wait_for("it to end", lambda: history(config)[0]["ended_at"], 60)
        assert history(config)[0]["result"] == "ok", crash
    finally:
        daemon.stop()
    assert_sound(stage, history(config), llm=llm, port=port, voice={stt: "running"})


# --- 26. the operator's terminal goes mid-run: Ctrl-C, then the SSH session drops -------------


def test_a_foreground_run_goes_on_through_every_key_and_a_dropped_terminal(
    stage: Stage, make_daemon_config: Any
) -> None:
    """No daemon: ``sparkwarden restart`` typed in a real terminal (an interactive bash on a
    pty, as sshd gives one) runs the sequence itself. Ctrl-C, Ctrl-\\ and Ctrl-Z while ``docker
    stop`` tears the engine down, then the terminal hangs up (the SSH session dropped): the run
    goes on to its end, the engine started again and voice resumed, not left paused for the next
    daemon's repair."""
    llm, port, stt = serving(stage, "--stop-delay", "4")
    config = make_daemon_config([llm], port, [stt])  # its socket: nobody listens
    shell, terminal = pty.fork()
    if shell == 0:  # the child: the operator's shell on the terminal
        os.chdir(ROOT)
        shell_argv = [*AS_TYPED, "bash", "--norc", "--noprofile", "-i"]
        os.execvpe(shell_argv[0], shell_argv, {**os.environ, "PS1": "$ "})
    restart = None
    try:
        since = time.time()
        typed = [sys.executable, "-m", "sparkwarden", "--config", str(config), "restart"]
        os.write(terminal, f"{shlex.join(typed)}\n".encode())
        wait_event(stage, llm, "kill", since)  # in stop_llm: voice paused, the engine going down
        assert stage.status(stt) == "paused"
        restart = _child_of(shell)
        for key in (b"\x03", b"\x1c", b"\x1a"):  # Ctrl-C, Ctrl-\, Ctrl-Z
            os.write(terminal, key)
            time.sleep(0.3)
        said = _read_until(terminal, b"SIGQUIT: the restart goes on to its end")
        time.sleep(0.5)  # Ctrl-Z's moment: a stopped run would show as state T
        assert _state(restart) != "T" and "Stopped" not in said, said
    finally:
        os.close(terminal)  # hung up: SIGHUP to the shell and to the restart it runs
        _reap(shell)
    run = wait_for(
        "the run to end", lambda: (h := history(config)) and h[0]["ended_at"] and h[0], 120
    )
    if restart is not None:
        _reap(restart, timeout=30)
    assert "SIGINT: the restart goes on to its end" in said, said
    assert run["result"] == "ok", run
    assert_sound(stage, history(config), llm=llm, port=port, voice={stt: "running"})


def _child_of(pid: int) -> int:
    """The one process ``pid`` started (the shell's command)."""
    found = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    (child,) = found.stdout.split()
    return int(child)


def _state(pid: int) -> str:
    """A process's state letter (``T``: stopped), from /proc."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _read_until(fd: int, text: bytes, timeout: float = 10.0) -> str:
    """What the terminal showed, until ``text`` (or the timeout)."""
    seen, deadline = b"", time.monotonic() + timeout
    while text not in seen and time.monotonic() < deadline:
        if select.select([fd], [], [], 0.2)[0]:
            seen += os.read(fd, 4096)
    return seen.decode(errors="replace")


def _reap(pid: int, timeout: float = 10.0) -> None:
    """Wait for a process the test started; SIGKILL it, by its PID, if it outlives ``timeout``
    (``waitpid`` for the shell, our child; a poll of /proc for its command, the shell's)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


@pytest.mark.parametrize("quits", ["mid-run, info logs on", "after the first line"])
def test_a_reader_that_quits_never_fails_the_run(
    stage: Stage, make_daemon_config: Any, quits: str
) -> None:
    """``sparkwarden --log-level info restart 2>&1 | tee log``, tee ended by the Ctrl-C meant
    for both, or ``sparkwarden restart | head -1``: a write into the pipe fails (EPIPE), no
    signal comes. The run goes on to its end; what is printed then goes nowhere."""
    llm, port, stt = serving(stage, "--stop-delay", "2")
    config = make_daemon_config([llm], port, [stt])  # its socket: nobody listens
    logs = ["--log-level", "info"] if quits.startswith("mid-run") else []
    read, write = os.pipe()
    since = time.time()
    command = [sys.executable, "-m", "sparkwarden", "--config", str(config), *logs, "restart"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=write, stderr=write)
    os.close(write)
    with killed_at_exit(proc):
        if quits.startswith("mid-run"):
            wait_event(stage, llm, "kill", since)  # in stop_llm
        os.read(read, 1)
        os.close(read)  # the reader is gone
        assert proc.wait(timeout=120) == 0
    (run,) = history(config)
    assert run["result"] == "ok", run
    assert_sound(stage, history(config), llm=llm, port=port, voice={stt: "running"})


def test_a_failure_still_reaches_stderr_when_stdout_s_reader_quit(
    stage: Stage, make_daemon_config: Any
) -> None:
    """``sparkwarden restart | head -1`` on a terminal: stdout's reader is gone after a line,
    stderr still read. The run that then fails says so on stderr."""
    llm, port, stt = serving(stage, "--mode", "chat-fails")
    config = make_daemon_config([llm], port, [stt])  # its socket: nobody listens
    read, write = os.pipe()
    command = [sys.executable, "-m", "sparkwarden", "--config", str(config), "restart"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=write, stderr=subprocess.PIPE, text=True)
    os.close(write)
    with killed_at_exit(proc):
        os.read(read, 1)
        os.close(read)  # head -1 has its line
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert "FAILED: /health said 200 but the chat request failed" in err, err
    assert_sound(stage, history(config), llm=llm, port=port, voice={stt: "running"})


def test_ctrl_c_on_a_restart_the_daemon_runs_ends_only_the_view(
    stage: Stage, make_daemon_config: Any, daemons: Any
) -> None:
    llm, port, stt = serving(stage, "--stop-delay", "2")
    config = make_daemon_config([llm], port, [stt])
    daemons(config)
    with killed_at_exit(start_cli(config, "restart")) as client:
        wait_for("the run in stop_llm", lambda: running_step(config) == "stop_llm", timeout=60)
        client.send_signal(signal.SIGINT)
        out, err = client.communicate(timeout=30)
    assert client.returncode == 130 and "Traceback" not in err, out + err
    assert "run #1 goes on in the daemon: see 'sparkwarden history'" in out, out
    run = wait_for(
        "the run to end", lambda: (h := history(config)) and h[0]["ended_at"] and h[0], 120
    )
    assert run["result"] == "ok", run
    assert_sound(stage, history(config), llm=llm, port=port, voice={stt: "running"})
