"""The fault matrix: every way the night can go wrong, on the real engine with the stand-in.

Rows 1-5, 8, 10-12 live beside the behaviour they break (test_restart_docker.py,
test_daemon_docker.py) and assert the same soundness; this file holds the rest. README's "What
sparkwarden guarantees" maps each row to its test.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkwarden import cli
from sparkwarden.sequence import STEPS
from tests.commands import history, run_cli, running_step, socket_of, start_cli
from tests.daemonkit import DaemonProcess, wait_for
from tests.privatedocker import PrivateDocker
from tests.soundness import assert_sound
from tests.standin.stage import Stage, ensure_image, wait_healthy

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
        "from tests.soundness import assert_sound; from tests.standin.stage import Stage\n"
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
    from tests.standin.stage import free_port

    port = free_port()
    llm, _ = private_stage.llm("llm", *standin, port=port, network_mode="host")
    stt = private_stage.voice("stt")
    config = make_config([llm], port, [stt], docker={"timeout": "10s", "retry_for": "40s"})
    private_docker.python(f"from tests.standin.stage import wait_healthy; wait_healthy({port})")
    restart = private_docker.run(
        sys.executable, "-m", "sparkwarden", "--config", str(config), "restart", background=True
    )
    assert isinstance(restart, subprocess.Popen)
    try:
        wait_for(f"step {step}", lambda: running_step(config) == step, timeout=30)
        private_docker.restart()
        out, err = restart.communicate(timeout=120)
    finally:
        if restart.poll() is None:
            restart.kill()
            restart.wait()
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
    from tests.standin.stage import free_port

    port = free_port()
    llm, _ = private_stage.llm("llm", port=port, network_mode="host")
    config = make_daemon_config(
        [llm],
        port,
        [],
        watch={"interval": "0.5s", "boot_grace": "0s"},
        health={"canary_interval": "0s"},
        docker={"timeout": "10s", "retry_for": "40s"},
    )
    private_docker.python(f"from tests.standin.stage import wait_healthy; wait_healthy({port})")
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
    stalled = DaemonProcess(
        config,
        tmp_path / "stalled.log",
        {"SPARKWARDEN_ENABLE_FAULTS": "1", "SPARKWARDEN_FAULT_STALL_AT": step},
    ).start()
    client = start_cli(config, "restart")
    try:
        wait_for(f"a run stalled in {step}", lambda: running_step(config) == step)
        time.sleep(0.3)
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
    llm, port = stage.llm("llm")
    stt = stage.voice("stt")
    wait_healthy(port)
    time.sleep(4)  # old enough for the nightly restart (min_uptime 3s below)
    config = make_daemon_config(
        [llm],
        port,
        [stt],
        schedule={"cron": "* * * * *", "missed_grace": "5m", "min_uptime": "3s"},
        drain={"quiet": "0s"},
        watch={"interval": "0.5s"},
    )
    daemon = DaemonProcess(config, tmp_path / "daemon.log").start(ready=False)
    try:
        wait_for("the socket", lambda: socket_of(config).exists(), timeout=30)
        clients = [start_cli(config, "restart") for _ in range(2)]
        outputs = [c.communicate(timeout=60) for c in clients]
        results = [(c.returncode, out, err) for c, (out, err) in zip(clients, outputs, strict=True)]
        time.sleep(3)  # anything still pending would have started by now
    finally:
        daemon.stop()
    runs = [r for r in history(config) if r["result"] != "dry-run"]
    assert len(runs) == 1, [(r["reason"], r["result"]) for r in runs]
    refused = [r for r in results if r[0] == 1]
    assert all("another sequence is running" in err for _, _, err in refused)
    assert runs[0]["result"] == "ok"
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
    finally:
        daemon.stop()


# --- 14. malformed config: exit 2 naming the key, nothing touched, no traceback ---------------

GOOD = {"llm": {"containers": ["vllm-a"], "base_url": "http://127.0.0.1:8000"}}
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
        '[llm]\ncontainers = ["a"]\nbase_url = "http://x:1"\napi_key_file = "/nope"\n',
        "llm.api_key_file",
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
        "recover_fraction must be at least fraction",
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


_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.lists(st.text(max_size=5), max_size=3),
)
_keys = st.sampled_from(
    [
        "containers",
        "base_url",
        "stop_timeout",
        "health_timeout",
        "mode",
        "start_min_available_gib",
        "cron",
        "window",
        "fraction",
        "max_runs",
        "socket",
        "timeout",
        "unknown_key",
    ]
)
_sections = st.sampled_from(
    ["llm", "voice", "memory", "schedule", "acceptance", "budget", "control", "docker", "nonsense"]
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(section=_sections, key=_keys, value=_values)
def test_any_mangled_config_is_refused_cleanly(
    section: str, key: str, value: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    data = json.loads(json.dumps(GOOD))
    data.setdefault(section, {})[key] = value
    data = {s: {k: v for k, v in d.items() if v is not None} for s, d in data.items()}
    path = tmp_path_factory.mktemp("cfg") / "c.toml"
    path.write_text(tomli_w.dumps(data))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["--config", str(path), "check-config"])
    said = err.getvalue()
    assert code in (0, 2), said
    if code == 2:
        assert "Traceback" not in said
        named = (f"{section}.{key}", f"{section}: unknown key", "both llm and voice")
        assert any(n in said for n in named), said
