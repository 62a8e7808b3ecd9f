"""The shipped alert rules, proven by Prometheus itself: promtool per alert, a real server live.

Each alert in packaging/prometheus/alerts.yml has a `promtool test rules` file named after it in
packaging/prometheus/tests/. A new rule without its file, or a file that never shows its alert
both firing (after its `for:`) and silent, fails here: adding a condition means adding both.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from devtools.standin.stage import Stage, free_port, wait_healthy
from sparkwarden.config.schema import parse_duration
from sparkwarden.restart.journal import Journal
from sparkwarden.surfaces.exporter import last_finished_ok
from tests.kits.commands import ROOT, run_cli
from tests.kits.daemonkit import DaemonProcess, end, wait_for

PROMETHEUS = ROOT / "packaging" / "prometheus"
ALERTS = PROMETHEUS / "alerts.yml"
RULE_TESTS = PROMETHEUS / "tests"
#: What docs/operating.md tells an operator to run after editing the rules, run as written.
README_COMMAND = "promtool test rules packaging/prometheus/tests/*.yml"


def rules() -> dict[str, dict[str, Any]]:
    loaded = yaml.safe_load(ALERTS.read_text())
    found = [rule for group in loaded["groups"] for rule in group["rules"]]
    by_name = {rule["alert"]: rule for rule in found}
    assert len(by_name) == len(found), "two alerts share a name"
    return by_name


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    assert shutil.which("promtool"), "promtool missing: bash scripts/setup-host installs it"
    return subprocess.run(
        ["promtool", *map(str, args)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


# --- promtool: each alert's own cases ------------------------------------------------------------


def test_the_rules_and_the_scrape_config_check() -> None:
    for result in (
        promtool("check", "rules", ALERTS),
        promtool("check", "config", PROMETHEUS / "prometheus.yml"),  # and the rules it loads
    ):
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS" in result.stdout


@pytest.mark.parametrize("alert", sorted(rules()))
def test_alert_fires_when_it_should_and_only_then(alert: str) -> None:
    result = promtool("test", "rules", RULE_TESTS / f"{alert}.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize("alert", sorted(rules()))
def test_alert_test_file_shows_it_firing_after_its_for_and_silent(alert: str) -> None:
    path = RULE_TESTS / f"{alert}.yml"
    assert path.exists(), f"{alert} has no test file: add {path.relative_to(ROOT)}"
    spec = yaml.safe_load(path.read_text())
    assert spec["rule_files"] == ["../alerts.yml"], f"{path.name} must test the shipped rules"
    rule = rules()[alert]
    wait = parse_duration(rule.get("for", "0s"))
    annotations = " ".join(rule["annotations"].values())
    needed = set(re.findall(r"\$labels\.(\w+)", annotations))
    optional = set(re.findall(r"\bor \$labels\.(\w+)", annotations))  # has a fallback text
    cases = [case for test in spec["tests"] for case in test["alert_rule_test"]]
    assert {case["alertname"] for case in cases} == {alert}, f"{path.name} tests other alerts"
    firing = [case for case in cases if case["exp_alerts"]]
    assert [c for c in cases if not c["exp_alerts"]], f"{alert}: no case where it stays silent"
    assert [c for c in firing if parse_duration(c["eval_time"]) >= wait], f"{alert} never fires"
    for case in firing:
        for expected in case["exp_alerts"]:
            missing = needed - optional - set(expected["exp_labels"])
            assert not missing, f"{alert} at {case['eval_time']}: annotations use {missing}"
            assert expected.get("exp_annotations"), f"{alert}: say what the operator reads"


def test_every_test_file_is_for_a_shipped_alert() -> None:
    stale = {p.stem for p in RULE_TESTS.glob("*.yml")} - set(rules())
    assert not stale, f"test files for alerts alerts.yml does not have: {stale}"


def operator_runs(command: str) -> subprocess.CompletedProcess[str]:
    """As typed in a shell at the repository root (the glob is the shell's)."""
    return subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=300, cwd=ROOT
    )


def test_readme_command_runs_every_rule_test() -> None:
    assert README_COMMAND in (ROOT / "docs" / "operating.md").read_text()
    result = operator_runs(README_COMMAND)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(rules())


def test_readme_command_fails_on_a_broken_rule(tmp_path: Path) -> None:
    """The operator's command catches an edit that silences an alert (the original LlmDown)."""
    copy = tmp_path / "prometheus"
    shutil.copytree(PROMETHEUS, copy, ignore=shutil.ignore_patterns("prometheus.yml"))
    text = ALERTS.read_text()
    broken = text.replace("and on(job, instance) sparkwarden_state", "and sparkwarden_state")
    assert broken != text
    (copy / "alerts.yml").write_text(broken)
    result = operator_runs(README_COMMAND.replace("packaging/prometheus", str(copy)))
    assert result.returncode != 0
    assert "alertname: LlmDown" in result.stdout + result.stderr


# --- the exporter: what RestartFailed reads ------------------------------------------------------


def test_an_operators_free_text_never_becomes_a_label_value(tmp_path: Path) -> None:
    journal = Journal(tmp_path, clock=lambda: 1000.0)
    try:
        for text in ("manual", "manual:after the driver update", "manual:night of 3 Dec"):
            journal.end_run(journal.begin_run(text), "ok")
        journal.end_run(journal.begin_run("crash"), "failed", "never healthy")
        counts = {(r["reason"], r["result"]): r["count"] for r in journal.run_counts()}
    finally:
        journal.close()
    assert counts == {("manual", "ok"): 3, ("crash", "failed"): 1}


def test_last_finished_run_ignores_running_dry_and_interrupted_runs(tmp_path: Path) -> None:
    now = [1000.0]
    journal = Journal(tmp_path, clock=lambda: now[0])

    def step(seconds: float = 60.0) -> float | None:
        now[0] += seconds
        return last_finished_ok(journal.run_counts())

    try:
        assert step() is None  # nothing ran yet: no metric, no alert
        first = journal.begin_run("schedule")
        assert step() is None  # running: decides nothing
        journal.end_run(first, "ok")
        assert step() == 1.0
        failing = journal.begin_run("crash")
        assert step() == 1.0  # a new run under way leaves the last outcome standing
        journal.end_run(failing, "failed", "never healthy")
        assert step() == 0.0
        journal.end_run(journal.begin_run("manual", result="dry-run"), "dry-run")
        assert step() == 0.0  # a dry run clears nothing
        cut = journal.begin_run("crash")
        journal.mark_interrupted(cut, "sparkwarden stopped during this run")
        assert step() == 0.0  # cut short: its repair run decides
        repair = journal.begin_run("repair")
        journal.end_run(repair, "ok")
        assert step() == 1.0
        journal.end_run(journal.begin_run("manual", result="dry-run"), "dry-run")
        cold_boot = journal.begin_run("schedule")
        assert step(16 * 60) == 1.0  # a dry run and a 16-min cold boot after a good run
        journal.end_run(cold_boot, "failed", "zombie")
        assert step() == 0.0
    finally:
        journal.close()


# --- a real Prometheus server scraping a live daemon ---------------------------------------------


class PrometheusServer:
    """Debian's prometheus on a free loopback port with a temporary data dir, ended by its pid."""

    def __init__(self, config: Path, workdir: Path) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = workdir / "prometheus.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={config}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address={self.url.removeprefix('http://')}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_for("prometheus to be ready", self.ready, timeout=120, every=0.5)

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited {self.proc.returncode}:\n{self.text()}")
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def api(self, path: str, **params: str) -> Any:
        answer = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10).json()
        assert answer["status"] == "success", answer
        return answer["data"]

    def alerts(self, name: str) -> list[dict[str, Any]]:
        return [a for a in self.api("alerts")["alerts"] if a["labels"]["alertname"] == name]

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def shipped_scrape_config(listen: str) -> str:
    """packaging/prometheus/prometheus.yml with this test's target, the shipped rules' absolute
    path and 1 s intervals (the shipped 30 s would make the test wait minutes): each
    substitution must hit exactly once, so an edit of the example shows here."""
    text = (PROMETHEUS / "prometheus.yml").read_text()
    for old, new in (
        ("scrape_interval: 30s", "scrape_interval: 1s"),
        ("evaluation_interval: 30s", "evaluation_interval: 1s"),
        ("- alerts.yml", f"- {ALERTS}"),
        ('targets: ["127.0.0.1:9464"]', f'targets: ["{listen}"]'),
    ):
        assert text.count(old) == 1, f"prometheus.yml no longer has {old!r} once"
        text = text.replace(old, new)
    return text


@pytest.fixture
def prometheus_for(tmp_path: Path) -> Iterator[Any]:
    started: list[PrometheusServer] = []

    def start(listen: str) -> PrometheusServer:
        config = tmp_path / "prometheus.yml"
        config.write_text(shipped_scrape_config(listen))
        checked = promtool("check", "config", config)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        started.append(PrometheusServer(config, tmp_path))
        return started[-1]

    yield start
    for server in started:
        end(server.proc)


@pytest.mark.docker
def test_prometheus_raises_llm_down_for_a_held_daemon_live(
    stage: Stage, make_daemon_config: Any, tmp_path: Path, prometheus_for: Any
) -> None:
    """The shipped example config and rules, unchanged but for target, path and intervals: the
    alert appears (pending; promtool proves its 10 min `for:`) when the engine dies under a hold.
    """
    llm, port = stage.llm("llm")
    wait_healthy(port)
    listen = f"127.0.0.1:{free_port()}"
    config = make_daemon_config([llm], port, [], metrics={"listen": listen})
    daemon = DaemonProcess(config, tmp_path / "daemon.log").start()
    try:
        prometheus = prometheus_for(listen)

        def scraped() -> bool:
            targets = prometheus.api("targets")["activeTargets"]
            return [t["health"] for t in targets] == ["up"]

        wait_for("the daemon scraped", scraped, timeout=120, every=0.5)

        def evaluated() -> list[dict[str, Any]] | None:
            found = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
            return found if all(r["health"] == "ok" for r in found) else None

        assert {r["name"] for r in wait_for("every rule evaluated", evaluated, 120)} == set(rules())
        up = "sparkwarden_llm_up == 1"
        wait_for("the LLM seen up", lambda: prometheus.api("query", query=up)["result"], 60)
        # A scrape before the daemon's first look saw no container: wait for a fresh evaluation.
        wait_for("no LlmDown while it runs", lambda: prometheus.alerts("LlmDown") == [], 60)

        held = run_cli(config, "hold", "1h", "--reason", "alert test")
        assert held.returncode == 0, held.stderr
        wait_for("the daemon held", lambda: daemon.status()["daemon"]["state"] == "held", 60)
        stage.client.containers.get(llm).kill()

        alerts = wait_for("LlmDown in /api/v1/alerts", lambda: prometheus.alerts("LlmDown"), 120)
        assert daemon.runs_with("crash", finished=False) == []  # held: nobody restarts it
    finally:
        daemon.stop()
    assert len(alerts) == 1
    alert = alerts[0]
    assert alert["state"] in ("pending", "firing")
    assert alert["labels"]["container"] == llm and alert["labels"]["spark"] == "spark-01"
    assert alert["labels"]["severity"] == "critical"
    assert alert["annotations"]["summary"] == f"LLM {llm} is down on spark-01"
