"""Observe mode on real containers (issue 36, item 1): it looks, decides and tells as in act
mode, touches nothing, notes each restart it would make once, and a reload to act mends what
the box is then."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from devtools.standin.stage import Stage, wait_healthy
from sparkwarden.actions.restart import OBSERVING_TYPED
from sparkwarden.restart.step_names import STEPS
from tests.actions.test_operator_tools import Receiver
from tests.daemon.test_reconcile_docker import edit_config, started_at
from tests.kits.commands import run_cli
from tests.kits.daemonkit import wait_for
from tests.kits.soundness import answers_chat, no_overlap

pytestmark = pytest.mark.docker


def observed(daemon: Any, reason: str) -> list[dict[str, Any]]:
    return [r for r in daemon.runs_with(reason) if r["result"] == "observed"]


def test_observe_mode_notes_what_it_would_do_and_acting_mends_what_is(
    stage: Stage, start_daemon: Any, tmp_path: Path
) -> None:
    llm, port = stage.llm("llm")
    stt = stage.voice("stt")
    wait_healthy(port)
    engine = stage.client.containers.get(llm)
    engine.update(restart_policy={"Name": "unless-stopped"})  # Docker's own, fighting ours
    hook = Receiver()
    url = tmp_path / "hook.url"
    url.write_text(hook.url("/hook"))
    try:
        daemon = start_daemon(
            [llm],
            port,
            [stt],
            watch={"mode": "observe", "max_uptime": "3s"},
            notify=[{"kind": "webhook", "url_file": str(url)}],
        )
        first = started_at(stage, llm)

        # the uptime restart it would make: noted once, with its plan, and nothing touched
        (run,) = wait_for("an observed uptime restart", lambda: observed(daemon, "uptime"))
        status = daemon.after_looks(6)
        assert len(observed(daemon, "uptime")) == 1, daemon.history()
        said = [ln for ln in daemon.text().splitlines() if '"event": "trigger"' in ln]
        assert len(said) == 1, said  # noted once, and said once, not at every check
        assert [s["name"] for s in run["steps"]] == list(STEPS)
        assert {s["result"] for s in run["steps"]} == {"skipped"}
        assert set(run["plan"]["gates"]) == {"hold", "budget", "drain"}  # as a run keeps them
        stop = next(s for s in run["steps"] if s["name"] == "stop_llm")
        assert f"docker stop {llm}" in stop["detail"]["summary"], stop
        assert started_at(stage, llm) == first and stage.status(stt) == "running"
        assert stage.attrs(llm)["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
        assert status["daemon"]["state"] == "observing" and status["daemon"]["mode"] == "observe"
        assert status["observed"]["id"] == run["id"] and status["last_run"] is None
        assert status["budget"]["used"] == 0
        assert llm in status["restart_policy"]["at_risk"]
        text = " ".join(run_cli(daemon.config, "status").stdout.split())  # wrapped at 80
        assert f"would have restarted: #{run['id']} uptime" in text, text
        assert "watch.mode = observe takes none over" in text, text
        sent = wait_for(
            "the would_restart notice",
            lambda: [json.loads(g["body"]) for g in hook.got if '"would_restart"' in g["body"]],
        )
        assert f"run #{run['id']} (uptime)" in sent[0]["summary"], sent

        # an operator's typed restart still acts, and says the daemon only observes
        typed = run_cli(daemon.config, "restart", "--reason", "trying it")
        assert typed.returncode == 0, typed.stdout + typed.stderr
        assert OBSERVING_TYPED in " ".join(typed.stdout.split()), typed.stdout
        assert started_at(stage, llm) != first

        # a crash while it only watches: noted, left down
        engine.update(restart_policy={"Name": "no"})
        engine.kill()
        wait_for("an observed crash restart", lambda: observed(daemon, "crash"))
        daemon.after_looks(6)
        assert len(observed(daemon, "crash")) == 1 and stage.status(llm) == "exited"
        assert "observed" in run_cli(daemon.config, "history").stdout

        # told to act (the documented reload): the next look brings the engine back
        edit_config(daemon, "watch", mode="act", max_uptime="20h")
        daemon.signal(signal.SIGHUP)
        mended = wait_for(
            "the crash mended in act mode",
            lambda: [r for r in daemon.runs_with("crash") if r["result"] == "ok"],
            timeout=60,
        )
        assert mended[0]["container"] == llm and answers_chat(port)
        assert stage.status(stt) == "running"
        assert wait_for("state idle", lambda: daemon.status()["daemon"]["state"] == "idle")
        no_overlap([r for r in daemon.history() if r["result"] != "observed"])
    finally:
        hook.server.shutdown()
