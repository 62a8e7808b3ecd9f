"""README's first ``sparkwarden status`` is what the code prints (issue 36, item 5.3: it lacked
the acceptance line and could not occur): a real daemon over a stand-in engine, its status text
compared with README's line by line, figures, names and times normalised."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from devtools.standin.stage import Stage, wait_healthy
from tests.daemon.test_daemon_docker import CANARY_FAST
from tests.kits.clock import nightly_far_from_now
from tests.kits.commands import run_cli
from tests.kits.daemonkit import DaemonProcess, wait_for

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.docker


def readme_status() -> list[str]:
    """The plain block right after README's "The first `sparkwarden status`"."""
    text = (ROOT / "README.md").read_text().split("The first `sparkwarden status`", 1)[1]
    return text.split("```\n", 2)[1].rstrip("\n").splitlines()


def shape(line: str, llm: str) -> str:
    """A line with what varies between boxes made a placeholder: names, figures, times, the
    probe's answer, where the canary's figures come from."""
    line = line.replace(llm, "NAME").replace("vllm-35b", "NAME")
    # a zone with no abbreviation prints its offset ("+14" in Pacific/Kiritimati)
    line = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d (\w+|[+-]\d+)", "TIME", line)
    line = re.sub(r"\b\d+[dhm]\d\d[hms]\b", "DUR", line)
    line = re.sub(r"answered '[^']*'? \(finish_reason \w+\)", "answered TEXT", line)
    line = re.sub(r"own stats|idle only", "SOURCE", line)
    line = re.sub(r"\d+(\.\d+)?", "N", line)
    line = re.sub(r"version: +\S+", "version: V", line)
    return " ".join(line.split())


def entries(lines: list[str], llm: str) -> list[tuple[str, str]]:
    """Each labelled line with its continuations (wrapped, or a note under it) joined: (label,
    the labelled line's own shape). The labels say which lines status prints, in order."""
    joined: list[str] = []
    for line in lines:
        if line.startswith(" " * 13) and joined:
            joined[-1] += " " + line.strip()
        else:
            joined.append(line)
    out = []
    for line in joined:
        label = line.partition(":")[0]
        out.append((label, shape(line, llm) if label in EXACT else ""))
    return out


#: The lines compared whole (shapes); the others by their label only (health, the probe, the
#: notes: states a loaded machine's timing may change, which a stand-in's times do not pin).
EXACT = {"version", "llm", "engine", "next", "budget", "hold"}


def test_readmes_first_status_is_what_a_daemon_prints(
    stage: Stage, make_daemon_config: Any, tmp_path: Path
) -> None:
    # an idle engine: the health chat and a drafting canary go at once, even on a loaded box
    # (under the stand-in's swinging traffic they waited for idle spells CI did not give)
    llm, port = stage.llm("llm")
    wait_healthy(port)
    config = make_daemon_config(
        [llm],
        port,
        [],
        schedule=nightly_far_from_now(),  # README's 04:30 fired in a run at 04:30
        watch={"interval": "0.5s", "boot_grace": "0s", "max_uptime": "30h"},
        health={"chat_interval": "2s"},
        acceptance=CANARY_FAST,
    )
    daemon = DaemonProcess(config, tmp_path / "daemon.log").start()
    try:
        wait_for(
            "a health chat and the engine's acceptance read",
            lambda: (
                (s := daemon.status())["llm"]["last_probe"]
                and s["acceptance"].get("available") is not False
                and s["acceptance"]["canary"].get("valid", 0)
                + s["acceptance"]["canary"].get("discarded", 0)
                >= 1
            ),  # a canary tried: its lines are there, valid or not (a loaded CI box)
            timeout=120,
        )
        printed = run_cli(config, "status").stdout.splitlines()
    finally:
        daemon.stop()
    shown, got = entries(readme_status(), llm), entries(printed, llm)
    assert shown == got, "\n".join(["README:", *map(str, shown), "printed:", *printed])
