"""Score the acceptance trigger on a synthetic corpus: healthy days and decaying days.

    .venv/bin/python benchmarks/score_acceptance.py [--days 50] [--first-seed 0] [--config FILE]

Generates (seeded) ``--days`` healthy 24 h traces with different mixes and as many with a decay
starting at a random hour (tests/traces.py; seeds from ``--first-seed``: the defaults were tuned
on seeds 0-49, so score other seeds to see them on days they were not tuned on), replays each
through the daemon's own decision code with the config's thresholds, and prints: false fires per
healthy day, the share of decays caught, and the time from decay onset (and from the moment the
decay has taken 20 % of the acceptance) to the fire. Targets (issue 8): 0 false fires; >= 95 %
caught; median <= 45 min after the 20 % mark. A report, not a test: it never fails.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sparkwarden import acceptance  # noqa: E402
from sparkwarden.actions.replay import samples  # noqa: E402
from sparkwarden.config import AcceptanceConfig, load  # noqa: E402
from tests.traces import random_day, write  # noqa: E402


def score_day(job: tuple[int, bool, dict[str, Any]]) -> dict[str, Any]:
    seed, decay, cfg_data = job
    scenario = random_day(seed, decay)
    scenario.interval = 60.0
    cfg = AcceptanceConfig.model_validate(cfg_data)
    with tempfile.TemporaryDirectory() as tmp:
        trace = write(scenario, Path(tmp) / "trace.jsonl")
        fired = [
            (d.t - scenario.start) / 3600 for d in acceptance.replay(samples(trace), cfg) if d.fire
        ]
    onset = scenario.decay_onset
    early = [h for h in fired if onset is None or h < onset]
    late = [h for h in fired if onset is not None and h >= onset]
    mark = scenario.hours_to_drop(0.2)
    return {
        "seed": seed,
        "decay": decay,
        "false_fires": len(early),
        "caught": bool(late),
        "from_onset_h": late[0] - onset if late and onset else None,
        "from_20pct_h": late[0] - mark if late and mark is not None else None,
    }


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--days", type=int, default=50)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--config", help="a sparkwarden config whose [acceptance] to score")
    args = parser.parse_args()
    cfg = load(args.config).acceptance if args.config else AcceptanceConfig()
    data = cfg.model_dump()
    seeds = range(args.first_seed, args.first_seed + args.days)
    jobs = [(seed, False, data) for seed in seeds]
    jobs += [(10_000 + seed, True, data) for seed in seeds]
    with ProcessPoolExecutor() as pool:
        results = list(pool.map(score_day, jobs))
    healthy = [r for r in results if not r["decay"]]
    decaying = [r for r in results if r["decay"]]
    caught = [r for r in decaying if r["caught"]]
    delays = [r["from_20pct_h"] * 60 for r in caught if r["from_20pct_h"] is not None]
    onsets = [r["from_onset_h"] * 60 for r in caught if r["from_onset_h"] is not None]
    summary = {
        "config": data,
        "seeds": f"{seeds.start}-{seeds.stop - 1}",
        "healthy_days": len(healthy),
        "false_fires_per_healthy_day": sum(r["false_fires"] for r in healthy) / len(healthy),
        "healthy_days_with_a_false_fire": sum(r["false_fires"] > 0 for r in healthy),
        "false_fires_before_onset_on_decaying_days": sum(r["false_fires"] for r in decaying),
        "decays_caught": len(caught) / len(decaying),
        "minutes_from_20pct_median": statistics.median(delays) if delays else None,
        "minutes_from_20pct_p90": pct(delays, 0.9) if delays else None,
        "minutes_from_onset_median": statistics.median(onsets) if onsets else None,
        "minutes_from_onset_p90": pct(onsets, 0.9) if onsets else None,
    }
    print(json.dumps(summary, indent=2))
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"acceptance-score-{seeds.start}.json").write_text(
        json.dumps({"summary": summary, "days": results}, indent=2)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
