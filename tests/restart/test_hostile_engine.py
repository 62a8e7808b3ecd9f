"""Issue 29 end to end, on the local Docker engine: whatever answers on the engine's port (a
squatter who bound it first, or an engine gone hostile) cannot get the key, kill the daemon, or
put the key or terminal escapes into what members read. The outsiders are real accounts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.standin.stage import Stage, free_port, wait_healthy
from tests.kits.commands import run_cli
from tests.kits.daemonkit import DaemonProcess, wait_for
from tests.kits.hostile import Account, account, hostile

pytestmark = pytest.mark.docker

SECRET = "sk-hostile-engine-3e2d1c"


@pytest.fixture(scope="module")
def outsider() -> Iterator[Account]:
    with account("out") as who:
        yield who


def _key(tmp_path: Path) -> str:
    key = tmp_path / "llm.key"
    key.write_text(SECRET)
    key.chmod(0o600)
    return str(key)


def _written(config: Path, state: Path, *outputs: str) -> list[str]:
    """Everything a member can read: the outputs, history and status, then the state files."""
    said = [*outputs]
    for command in (["history", "--json"], ["status", "--json"], ["status"]):
        result = run_cli(config, *command)
        said.append(result.stdout + result.stderr)
    said += [p.read_bytes().decode(errors="replace") for p in state.iterdir() if p.is_file()]
    return said


def test_a_squatter_bound_before_docker_start_is_not_handed_the_key(
    stage: Stage, make_config: Any, tmp_path: Path, outsider: Account
) -> None:
    """The seeds' shape: --net=host on an unprivileged port. The engine has run and is stopped;
    an outsider binds its port; the run starts the engine, which loads while the squatter
    answers /health 200. The run fails at the chat probe, saying who holds the port."""
    port = free_port()
    llm, _ = stage.llm(
        "llm", "--api-key", SECRET, "--boot-delay", "30", port=port, network_mode="host"
    )
    stage.client.containers.get(llm).stop(timeout=1)
    config = make_config([llm], port, [], llm={"api_key_file": _key(tmp_path)})
    with hostile(port, "squat", outsider) as squatter:
        result = run_cli(config, "restart", timeout=180)
        seen = squatter.requests()
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"held by uid {outsider.uid}" in result.stderr, result.stderr
    assert seen and all(path == "/health" and auth == "-" for _, path, auth in seen), seen
    (run,) = json.loads(run_cli(config, "history", "--json").stdout)
    assert run["result"] == "failed" and "the API key is withheld" in run["error"]


def test_nested_json_on_the_engines_port_does_not_kill_the_daemon(
    stage: Stage, make_daemon_config: Any, tmp_path: Path, outsider: Account
) -> None:
    """200 KB of ``[[[[`` used to raise RecursionError out of the canary: the daemon died
    within 25 s, and again at each start. Now each canary is a failed probe."""
    llm, llm_port = stage.llm("llm")
    wait_healthy(llm_port)
    port = free_port()
    with hostile(port, "nested", outsider) as engine:
        config = make_daemon_config(
            [llm],
            port,
            [],
            watch={"interval": "0.5s", "boot_grace": "0s"},
            health={"interval": "1s", "chat_interval": "1s"},
        )
        daemon = DaemonProcess(config, tmp_path / "daemon.log").start()
        try:
            wait_for("a failed canary", lambda: _probe(daemon).startswith("FAILED"), 60)
            wait_for(
                "the run it asked for",
                lambda: (
                    "nested too deep"
                    in ((daemon.status().get("last_run") or {}).get("error") or "")
                ),
                timeout=60,
            )
            asked = len(engine.requests())
            wait_for("more nested answers", lambda: len(engine.requests()) >= asked + 10, 60)
            assert daemon.answering()
        finally:
            daemon.stop()
    assert "RecursionError" not in daemon.text()


def _probe(daemon: DaemonProcess) -> str:
    return str(daemon.status()["llm"]["last_probe"] or "")


def test_a_key_echoed_with_terminal_escapes_reaches_no_member(
    stage: Stage, make_config: Any, tmp_path: Path
) -> None:
    """An engine (or a proxy) that repeats the key in its error, with escapes that retitle and
    clear a terminal and forge a step line: none of it reaches restart's output, the journal,
    history, status or the state files."""
    llm, llm_port = stage.llm("llm")
    wait_healthy(llm_port)
    port = free_port()
    with hostile(port, "echo", None) as engine:  # root's listener: the key is sent to it
        config = make_config([llm], port, [], llm={"api_key_file": _key(tmp_path), "model": "m"})
        result = run_cli(config, "restart", timeout=180)
        sent = engine.requests()
    assert ["POST", "/v1/chat/completions", f"Bearer {SECRET}"] in sent  # it had the key
    assert result.returncode == 1 and "unknown api key [redacted]" in result.stderr
    written = _written(config, tmp_path / "state", result.stdout, result.stderr)
    assert all(SECRET not in text for text in written)
    shown = written[:5]  # restart's output, history, status --json and status
    shown += [p.read_text() for p in (tmp_path / "state").glob("*.json")]
    assert all("\x1b" not in text and "\x07" not in text for text in shown), shown
    assert "\\x1b]0;pwned" in result.stderr


def test_doctor_names_the_unprivileged_port_and_the_stranger_holding_it(
    make_config: Any, tmp_path: Path, outsider: Account
) -> None:
    port = free_port()
    config = make_config(["swt-doctor-none"], port, [], llm={"api_key_file": _key(tmp_path)})
    with hostile(port, "squat", outsider):
        result = run_cli(config, "doctor", "--json")
    found = {(f["subject"], f["check"]): f for f in json.loads(result.stdout)}
    assert result.returncode == 1
    held = found[("llm", "listener")]
    assert held["severity"] == "error" and f"held by uid {outsider.uid}" in held["message"]
    assert found[("llm", "unprivileged-port")]["severity"] == "warning"
    assert "below 1024" in found[("llm", "unprivileged-port")]["fix"]


def test_an_engine_container_run_as_a_user_is_proven_by_its_own_processes(
    stage: Stage, outsider: Account
) -> None:
    """vLLM as a non-root user (``--user``) on an unprivileged host port: its socket is that
    user's, like a squatter's would be. The key goes to it because a process in its container
    (cgroup) holds the socket; the same account outside the container gets nothing."""
    from sparkwarden.adapters.docker_engine import DockerEngine
    from sparkwarden.vllm.client import VllmClient
    from sparkwarden.vllm.keyguard import KeyGuard, docker_engines

    port = free_port()
    as_outsider = f"{outsider.uid}:{outsider.gid}"
    llm, _ = stage.llm("llm", "--api-key", SECRET, port=port, network_mode="host", user=as_outsider)
    wait_healthy(port)
    docker = DockerEngine()
    url = f"http://127.0.0.1:{port}"
    client = VllmClient(url, SECRET, KeyGuard(url, docker_engines(docker, [llm])))
    try:
        model = client.served_model()
        assert model is not None, client.why_no_model
        assert client.chat(model, timeout=10).ok
        stage.client.containers.get(llm).stop(timeout=5)
        with hostile(port, "squat", outsider) as squatter:  # the same uid, in no container
            outcome = client.chat(model, timeout=10)
            seen = squatter.requests()
    finally:
        client.close()
        docker.close()
    assert not outcome.ok and f"held by uid {outsider.uid}" in outcome.detail
    assert seen == []
