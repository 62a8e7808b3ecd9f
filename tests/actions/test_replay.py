"""record and replay, and the acceptance trigger pinned on named synthetic days."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from devtools.standin.stage import Stage, wait_healthy
from devtools.traces import Scenario, day, write
from sparkwarden.actions.replay import samples
from sparkwarden.config.schema import AcceptanceConfig
from sparkwarden.evidence import acceptance
from tests.kits.commands import run_cli

DAY_START = Scenario(seed=0).start

CFG = AcceptanceConfig()  # the shipped defaults


def fires(scenario: Scenario, tmp_path: Path) -> list[float]:
    """Hours after the trace's start at which the trigger fires."""
    trace = write(scenario, tmp_path / f"trace-{scenario.seed}.jsonl")
    return [
        round((d.t - scenario.start) / 3600, 2)
        for d in acceptance.replay(samples(trace), CFG)
        if d.fire
    ]


def test_a_mixed_day_with_an_idle_night_does_not_fire(tmp_path: Path) -> None:
    assert fires(day(1, interval=60.0), tmp_path) == []


def test_a_math_heavy_evening_does_not_fire(tmp_path: Path) -> None:
    assert fires(day(3, evening="math", interval=60.0), tmp_path) == []


def test_a_restart_mid_trace_learns_a_new_baseline(tmp_path: Path) -> None:
    scenario = day(5, interval=60.0, restarts=[12.0])
    trace = write(scenario, tmp_path / "restart.jsonl")
    notes = [d.state.note for d in acceptance.replay(samples(trace), CFG)]
    assert "counters reset: learning a new baseline" in notes
    assert [d for d in acceptance.replay(samples(trace), CFG) if d.fire] == []


def test_a_sudden_collapse_fires_within_half_an_hour(tmp_path: Path) -> None:
    scenario = day(6, interval=60.0, decay_onset=10.0, decay_drop=0.9, decay_hours=0.1)
    fired = fires(scenario, tmp_path)
    assert fired and 10.0 <= fired[0] <= 10.5  # two low windows of 10 min


def test_a_slow_decay_fires_soon_after_it_takes_a_fifth(tmp_path: Path) -> None:
    scenario = day(7, interval=60.0, decay_onset=6.0, decay_drop=0.9, decay_hours=8.0)
    mark = scenario.hours_to_drop(0.2)
    fired = fires(scenario, tmp_path)
    assert mark is not None and fired and scenario.decay_onset
    assert scenario.decay_onset < fired[0] < mark + 1.0


def test_a_prose_evening_does_not_fire(tmp_path: Path) -> None:
    trace = write(day(2, evening="prose", interval=60.0), tmp_path / "prose.jsonl")
    decisions = list(acceptance.replay(samples(trace), CFG))
    assert [d for d in decisions if d.fire] == []
    evening = [  # 19:00 to 23:00; the trace starts at 04:30
        d.state for d in decisions if d.judged and 14.5 <= (d.t - DAY_START) / 3600 <= 18.5
    ]
    assert evening and all(s.health is not None for s in evening)
    day_rate = decisions[-1].state.baseline
    assert day_rate is not None
    # Acceptance fell by a third or more; the healthy share did not move.
    assert min(s.current or 1 for s in evening) < 0.67 * day_rate
    assert min(s.health or 0 for s in evening) > 0.85


def test_a_long_context_afternoon_does_not_fire(tmp_path: Path) -> None:
    scenario = day(8, interval=60.0, long_context=[(9.0, 11.0)])
    trace = write(scenario, tmp_path / "long.jsonl")
    decisions = list(acceptance.replay(samples(trace), CFG))
    assert [d for d in decisions if d.fire] == []
    assert any("long contexts" in d.state.note for d in decisions)


def test_replay_cli_json_and_text(tmp_path: Path, make_config: Any) -> None:
    trace = write(
        day(6, interval=60.0, decay_onset=10.0, decay_drop=0.7, decay_hours=0.1),
        tmp_path / "drop.jsonl",
    )
    confirming = run_cli(make_config(["vllm-a"], 8000, []), "replay", str(trace))
    assert "0 canary(ies), 0 fire(s)" in confirming.stdout  # the default waits for a canary
    assert "replay: no canary in this trace" in confirming.stdout
    config = make_config(["vllm-a"], 8000, [], acceptance={"confirm": "none"})
    result = run_cli(config, "replay", str(trace), "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["windows"] > 50 and out["fires"] and out["fires"][0]["by"] == "passive"
    assert set(out["fires"][0]) >= {"t", "reason", "acceptance", "baseline", "health"}
    assert out["fires"][0]["acceptance"] < out["fires"][0]["baseline"]
    text = run_cli(config, "replay", str(trace)).stdout
    assert "FIRE" in text and "health" in text and "judged window(s)" in text


def test_replay_names_the_bad_line(tmp_path: Path, make_config: Any) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"t": 1, "metrics": ""}\nnot json\n')
    result = run_cli(make_config(["vllm-a"], 8000, []), "replay", str(trace))
    assert result.returncode == 1 and f"{trace}:2: not a scrape" in result.stderr
    trace.write_text('{"t": 1, "canary": {"t": 1}}\n')
    result = run_cli(make_config(["vllm-a"], 8000, []), "replay", str(trace))
    assert result.returncode == 1 and "nor a canary" in result.stderr


@pytest.mark.docker
def test_record_writes_one_flushed_line_per_scrape(
    stage: Stage, make_config: Any, tmp_path: Path
) -> None:
    llm, port = stage.llm("llm")
    wait_healthy(port)
    out = tmp_path / "trace.jsonl"
    result = run_cli(
        make_config([llm], port, []),
        "record",
        "--out",
        str(out),
        "--interval",
        "0.5s",
        "--duration",
        "3s",
    )
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) >= 4
    assert all(set(r) == {"t", "metrics"} for r in rows)
    assert "vllm:spec_decode_num_draft_tokens_total" in rows[-1]["metrics"]
    assert "vllm:kv_cache_usage_perc" in rows[-1]["metrics"]  # long contexts are read from it
    assert rows[-1]["t"] > rows[0]["t"]
    replayed = run_cli(make_config([llm], port, []), "replay", str(out), "--json")
    assert json.loads(replayed.stdout)["fires"] == []
