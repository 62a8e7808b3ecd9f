"""doctor, notifications and sparkwarden's own Prometheus metrics."""

from __future__ import annotations

import json
import math
import re
import signal
import threading
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import tomli_w
from prometheus_client.parser import text_string_to_metric_families

from devtools.standin.stage import Stage, free_port, wait_healthy
from sparkwarden.base.version import UNKNOWN, version
from sparkwarden.config.schema import NotifyTarget
from sparkwarden.restart.step_names import STEPS
from sparkwarden.surfaces.webhooks import Event, Webhooks, payload
from tests.kits.commands import ROOT, run_cli
from tests.kits.daemonkit import DaemonProcess, wait_for
from tests.kits.seed_lines import DFLASH_REPORT

ALERTS = ROOT / "packaging" / "prometheus" / "alerts.yml"
#: What only a replica exports (tests/daemon/test_rotation_daemon.py scrapes them).
REPLICA_ONLY = {
    "sparkwarden_replicas_serving",
    "sparkwarden_replicas",
    "sparkwarden_replica_in_rotation",
    "sparkwarden_replicas_turn_taken",
}


# --- doctor --------------------------------------------------------------------------------------


@pytest.mark.docker
def test_doctor_finds_the_traps_on_real_containers(
    stage: Stage, make_config: Any, tmp_path: Path
) -> None:
    risky, port = stage.llm(
        "risky",
        "--gpu-memory-utilization",
        "0.85",
        "--max-num-seqs",
        "64",
        "--speculative-config",
        '{"method": "dflash", "num_speculative_tokens": 15}',
        "--kv-cache-dtype",
        "fp8",
        restart_policy={"Name": "unless-stopped"},
    )
    cache = tmp_path / "vllm-cache"
    cache.mkdir()
    safe, _ = stage.llm(
        "safe",
        "--gpu-memory-utilization",
        "0.55",
        "--max-num-seqs",
        "4",
        "--speculative-config",
        '{"method": "mtp"}',
        start=False,
        stop_timeout=120,
        init=True,
        volumes={str(cache): {"bind": "/root/.cache/vllm", "mode": "rw"}},
    )
    etc = tmp_path / "etc-vllm"
    etc.mkdir()
    (etc / "serve.yaml").write_text(
        "gpu-memory-utilization: 0.9\ndisable-log-stats: true\nspeculative-config:\n  method: mtp\n"
    )
    wrapped, _ = stage.llm(
        "wrapped",
        "--config",
        "/run/vllm/serve.yaml",
        "--shutdown-timeout",
        "120",
        shell=True,
        stop_timeout=60,
        volumes={str(etc): {"bind": "/run/vllm", "mode": "ro"}},
    )
    hidden, _ = stage.llm("hidden", "--config", "/opt/serve.yaml", start=False)
    # the DFlash report's own serve line (its old --speculative-model spelling), not started
    report, _ = stage.llm("report", *DFLASH_REPORT[3:], start=False, stop_timeout=120)
    healer = stage.voice("tts", labels={"autoheal": "true"})
    quiet = stage.voice("stt")
    missing = stage.name("renamed-away")
    config = make_config(
        [risky, safe, missing, wrapped, hidden, report],
        port,
        [healer, quiet],
        memory={"start_min_available_gib": 100000},
    )

    result = run_cli(config, "doctor", "--json")
    assert result.returncode == 1, result.stderr
    found = {(f["subject"], f["check"]): f for f in json.loads(result.stdout)}
    assert found[(risky, "gpu-memory-utilization")]["severity"] == "error"
    assert "--gpu-memory-utilization 0.8" in found[(risky, "gpu-memory-utilization")]["fix"]
    assert found[(risky, "drafter-scratch")]["severity"] == "warning"
    assert "dflash" in found[(risky, "drafter-scratch")]["message"]
    assert found[(risky, "restart-policy")]["fix"] == f"docker update --restart=no {risky}"
    assert (risky, "stop-timeout") in found and (risky, "compile-cache") in found
    assert found[(risky, "fp8-kv-cache")]["severity"] == "info"
    assert found[(healer, "autoheal")]["severity"] == "warning"
    assert found[(missing, "missing")]["severity"] == "error"
    assert found[("config", "start-gate")]["severity"] == "error"
    assert found[("config", "stop-timeout")]["severity"] == "warning"  # the test config's 10s
    assert found[(safe, "gpu-memory-utilization")]["severity"] == "info"
    assert not [k for k, f in found.items() if k[0] in (safe, quiet) and f["severity"] != "info"]
    # sh -c "...": the --config YAML read through the container's mount on the host
    assert stage.attrs(wrapped)["Config"]["Cmd"][:2] == ["sh", "-c"]
    assert found[(wrapped, "gpu-memory-utilization")]["severity"] == "error"
    assert "mtp" in found[(wrapped, "drafter-scratch")]["message"]
    assert found[(wrapped, "disable-log-stats")]["severity"] == "error"
    assert found[(wrapped, "shutdown-timeout")]["severity"] == "info"  # 10s: stop_llm waits 150s
    assert found[(wrapped, "container-shutdown-timeout")]["severity"] == "warning"  # 60 < 150
    assert "on no mount" in found[(hidden, "config-file")]["message"]
    # the running engine names its release at GET /version; a stopped one cannot
    assert found[(risky, "vllm-release")]["message"] == "vLLM 0.33.0 (from its GET /version)"
    assert "release unknown" in found[(report, "vllm-release")]["message"]
    assert found[(report, "drafter-scratch")]["severity"] == "warning"
    assert "dflash, inferred from the drafter" in found[(report, "drafter-scratch")]["message"]

    text = run_cli(config, "doctor")
    assert text.returncode == 1 and "ERROR" in text.stdout and "fix: docker update" in text.stdout


# --- notifications -------------------------------------------------------------------------------


class Receiver:
    """A local webhook endpoint that records what it is sent."""

    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.got.append(
                    {"path": self.path, "body": body.decode(), "headers": dict(self.headers)}
                )
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()


def target(tmp_path: Path, url: str, **fields: Any) -> NotifyTarget:
    path = tmp_path / f"url-{len(list(tmp_path.iterdir()))}"
    path.write_text(url)
    return NotifyTarget(url_file=path, **fields)


def test_payload_shapes(tmp_path: Path) -> None:
    event = Event("gave_up", "vllm-35b", "budget spent", {"run": 3}, 1.0)
    hook = payload(target(tmp_path, "http://x/h"), event, "spark-01")
    assert hook["json"]["event"] == "gave_up" and hook["json"]["detail"] == {"run": 3}
    slack = payload(target(tmp_path, "http://x/s", kind="slack"), event, "spark-01")
    assert "gave up" in slack["json"]["text"] and "spark-01" in slack["json"]["text"]
    ntfy = payload(target(tmp_path, "http://x/n", kind="ntfy"), event, "spark-01")
    assert ntfy["headers"]["Priority"] == "urgent" and b"budget spent" in ntfy["content"]


def test_dedup_and_event_filter_with_a_fake_clock(tmp_path: Path) -> None:
    now = [0.0]
    t = target(tmp_path, "http://x/h", events=["crash_recovered"], min_interval=600)
    notifier = Webhooks([t], clock=lambda: now[0])
    crash = Event("crash_recovered", "vllm-35b", "back", {}, 0.0)
    assert notifier.due(0, t, crash)
    now[0] = 599.0
    assert not notifier.due(0, t, crash)  # the same event for the same subject: too soon
    assert notifier.due(0, t, Event("crash_recovered", "vllm-27b", "back", {}, 0.0))
    assert not notifier.due(0, t, Event("run_failed", "vllm-35b", "x", {}, 0.0))  # not wanted
    now[0] = 601.0
    assert notifier.due(0, t, crash)


@pytest.mark.docker
def test_daemon_notifies_every_kind_of_target_and_a_dead_one_blocks_nothing(
    stage: Stage,
    make_daemon_config: Any,
    tmp_path: Path,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    llm, port = stage.llm("llm")
    wait_healthy(port)
    secret_url = receiver.url("/hook?token=s3cr3t-w3bh00k")
    monkeypatch.setenv("SW_TEST_HOOK", secret_url)
    slack_file, ntfy_file, dead_file = (tmp_path / n for n in ("slack", "ntfy", "dead"))
    slack_file.write_text(receiver.url("/slack"))
    ntfy_file.write_text(receiver.url("/ntfy"))
    dead_file.write_text(f"http://127.0.0.1:{free_port()}/nobody-listens")
    config = make_daemon_config(
        [llm],
        port,
        [],
        notify=[
            {"kind": "webhook", "url_env": "SW_TEST_HOOK"},
            {"kind": "slack", "url_file": str(slack_file)},
            {"kind": "ntfy", "url_file": str(ntfy_file)},
            {"kind": "webhook", "url_file": str(dead_file)},
        ],
    )
    daemon = DaemonProcess(config, tmp_path / "daemon.log").start()
    try:
        stage.client.containers.get(llm).kill()
        wait_for("three deliveries", lambda: len(receiver.got) >= 3, timeout=30)
        run = daemon.runs_with("crash")[0]
        assert run["result"] == "ok"
        stage.client.containers.get(llm).kill()  # again, at once: deduplicated
        wait_for("the second crash run", lambda: len(daemon.runs_with("crash")) == 2)
        wait_for("the failing target to be tried", lambda: "notify_failed" in daemon.text())
        # a reload naming a variable this daemon's environment lacks keeps the running config
        data = tomllib.loads(config.read_text())
        data["notify"].append({"kind": "webhook", "url_env": "SW_NEVER_SET_ANYWHERE"})
        config.write_text(tomli_w.dumps(data))
        daemon.signal(signal.SIGHUP)
        wait_for("the reload refused", lambda: "reload_refused" in daemon.text())
        assert "$SW_NEVER_SET_ANYWHERE is not set" in daemon.text()
        assert daemon.after_looks(2)["daemon"]["running"]
    finally:
        daemon.stop()
    deliveries = list(receiver.got)
    # neither the dry run nor record sends anything: the unset variable is no reason to refuse
    assert run_cli(config, "restart", "--dry-run").returncode == 0
    trace = tmp_path / "trace.jsonl"
    recorded = run_cli(config, "record", "--out", str(trace), "--duration", "1s")
    assert recorded.returncode == 0, recorded.stderr
    # notify --test needs it, and says so before sending anything
    unset = run_cli(config, "notify", "--test")
    assert unset.returncode == 2 and "$SW_NEVER_SET_ANYWHERE is not set" in unset.stderr
    data["notify"].pop()
    config.write_text(tomli_w.dumps(data))
    tested = run_cli(config, "notify", "--test")
    assert tested.returncode == 1, tested.stdout  # the dead target
    assert "notify[0] (webhook): answered" in tested.stdout
    assert "notify[3] (webhook): FAILED: ConnectError" in tested.stdout
    assert "1 of 4 target(s) failed" in tested.stdout and "nobody-listens" not in tested.stdout
    tests = receiver.got[len(deliveries) :]
    assert len(tests) == 3, tests  # every live target, whatever its events and min_interval
    test_by_path = {g["path"].split("?")[0]: g for g in tests}
    assert json.loads(test_by_path["/hook"]["body"])["event"] == "test"
    assert test_by_path["/ntfy"]["headers"]["Priority"] == "low"
    receiver.got[:] = deliveries
    by_path = {g["path"].split("?")[0]: g for g in receiver.got}
    assert len(receiver.got) == 3, [g["path"] for g in receiver.got]
    hook = json.loads(by_path["/hook"]["body"])
    assert hook["event"] == "crash_recovered" and hook["subject"] == llm
    assert "crashed LLM recovered" in json.loads(by_path["/slack"]["body"])["text"]
    assert by_path["/ntfy"]["headers"]["Title"] == "sparkwarden: crashed LLM recovered"
    log = daemon.text()
    assert "s3cr3t-w3bh00k" not in log and "nobody-listens" not in log
    assert '"target": "notify[3] (webhook)"' in log


# --- Prometheus metrics --------------------------------------------------------------------------


@pytest.mark.docker
def test_metrics_endpoint_speaks_prometheus_and_feeds_the_alerts(
    stage: Stage, make_daemon_config: Any, tmp_path: Path
) -> None:
    llm, port = stage.llm("llm")
    wait_healthy(port)
    listen = f"127.0.0.1:{free_port()}"
    config = make_daemon_config(
        [llm],
        port,
        [],
        metrics={"listen": listen},
    )
    daemon = DaemonProcess(config, tmp_path / "daemon.log").start()
    try:
        stage.client.containers.get(llm).kill()
        wait_for("a crash run", lambda: daemon.runs_with("crash"))
        status = daemon.status()

        def scrape() -> dict[str, list[Any]]:
            text = httpx.get(f"http://{listen}/metrics", timeout=5).text
            return {f.name: f.samples for f in text_string_to_metric_families(text)}

        families = wait_for(
            "the run in the metrics", lambda: (f := scrape()).get("sparkwarden_runs") and f
        )
    finally:
        daemon.stop()
    runs = {
        (s.labels["reason"], s.labels["result"]): s.value
        for s in families["sparkwarden_runs"]
        if s.name == "sparkwarden_runs_total"
    }
    assert runs == {("crash", "ok"): 1.0}
    up = families["sparkwarden_llm_up"][0]
    assert up.labels == {"container": llm} and up.value == 1.0
    total = families["sparkwarden_memory_total_bytes"][0].value
    assert abs(total - status["memory"]["total_gib"] * 2**30) < 2**20
    steps = {s.labels["step"] for s in families["sparkwarden_last_run_step_seconds"]}
    assert steps == set(STEPS)
    assert math.isnan(families["sparkwarden_gateway_up"][0].value)  # no [gateway] configured
    assert families["sparkwarden_gave_up"][0].value == 0.0
    assert families["sparkwarden_last_finished_run_ok"][0].value == 1.0  # the crash run's ok
    # what runs, one version everywhere: the package's metadata (git tags through setuptools-scm)
    assert families["sparkwarden_build_info"][0].labels == {"version": version()}
    assert status["daemon"]["version"] == version() != UNKNOWN
    assert daemon.runs_with("crash")[0]["plan"]["version"] == version()
    assert f'"version": "{version()}"' in daemon.text()  # run_started, in the log
    said = run_cli(None, "--version")
    assert said.returncode == 0 and said.stdout == f"sparkwarden {version()}\n", said
    # a cluster's head only: proven on one by tests/cluster/test_cluster_docker.py; a replica's
    # only: proven on one by tests/daemon/test_rotation_daemon.py
    used = set(families) | {"sparkwarden_cluster_node_up"} | REPLICA_ONLY
    manual = "".join(p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
    for name in set(re.findall(r"`(sparkwarden_[a-z_]+)", manual)):  # every metric the docs name
        assert name.removesuffix("_total") in used, name
    for name in set(re.findall(r"\bsparkwarden_[a-z_]+", ALERTS.read_text())):
        assert name in used, f"alerts.yml uses {name}, which sparkwarden does not export"


# --- memory that never comes back ---------------------------------------------------------------


NR_HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")


@pytest.fixture
def vanishing_memory() -> Iterator[Any]:
    """Reserved huge pages that grow between runs: memory no process and no cgroup holds, gone
    from MemAvailable, that drop_caches cannot return, as the unified memory GB10's driver keeps
    across restarts. Small (a few GiB of a shared 24 GiB machine); the reservation is always
    given back."""
    before = NR_HUGEPAGES.read_text()
    page_kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("Hugepagesize:")
    )

    def grow(gib: float) -> None:
        pages = int(NR_HUGEPAGES.read_text()) + int(gib * 1024 * 1024 / page_kib)
        NR_HUGEPAGES.write_text(f"{pages}\n")
        assert int(NR_HUGEPAGES.read_text()) == pages, "the kernel reserved fewer huge pages"

    try:
        yield grow
    finally:
        NR_HUGEPAGES.write_text(before)


@pytest.mark.docker
@pytest.mark.alone  # the huge pages it reserves leave every other test's MemAvailable lower
def test_memory_that_keeps_vanishing_across_runs_means_reboot_required(
    stage: Stage,
    make_daemon_config: Any,
    tmp_path: Path,
    receiver: Receiver,
    vanishing_memory: Any,
) -> None:
    llm, port = stage.llm("llm")
    wait_healthy(port)
    listen = f"127.0.0.1:{free_port()}"
    hook = tmp_path / "hook"
    hook.write_text(receiver.url("/hook"))
    config = make_daemon_config(
        [llm],
        port,
        [],
        memory={"start_min_available_gib": 1, "trend_runs": 3, "trend_fall_gib": 2.0},
        metrics={"listen": listen},
        notify=[{"kind": "webhook", "url_file": str(hook)}],
    )
    daemon = DaemonProcess(config, tmp_path / "daemon.log").start()
    try:
        for run in range(3):
            if run:
                vanishing_memory(1.5)  # 1.5 GiB more gone before each later run
            done = run_cli(config, "restart")
            assert done.returncode == 0, done.stdout + done.stderr
        status = wait_for(
            "reboot required", lambda: (s := daemon.status())["reboot_required"] and s
        )
        after = status["memory_trend"]["available_after_drop_gib"]
        assert len(after) == 3 and after[0] > after[1] > after[2]
        assert status["memory_trend"]["fall_gib"] > 2.0
        assert status["daemon"]["state"] == "reboot required"
        text = run_cli(config, "status")
        assert text.returncode == 1
        assert "REBOOT REQUIRED: memory nobody holds grew" in text.stdout
        as_json = json.loads(run_cli(config, "status", "--json").stdout)
        assert as_json["reboot_required"] is True and as_json["memory_trend"]["fall_gib"] > 2.0
        samples = {
            f.name: f.samples
            for f in text_string_to_metric_families(
                httpx.get(f"http://{listen}/metrics", timeout=5).text
            )
        }
        assert samples["sparkwarden_reboot_required"][0].value == 1.0
        wait_for("the notification", lambda: receiver.got)
        assert json.loads(receiver.got[0]["body"])["event"] == "reboot_required"
        # no automatic restart now: a crash is left alone until an operator acts
        stage.client.containers.get(llm).kill()
        ends = "reboot, then sparkwarden reset"
        wait_for("the wait", lambda: daemon.status()["daemon"]["command"] == ends)
        assert daemon.runs_with("crash", finished=False) == []
        assert run_cli(config, "reset").returncode == 0
        assert wait_for("cleared", lambda: daemon.status()["reboot_required"] is False)
        # the engine is still down: after the reset, the next look recovers it
        wait_for("the crash run", lambda: daemon.runs_with("crash"), timeout=30)
    finally:
        daemon.stop()
