"""Score the acceptance decision on a synthetic corpus: healthy days and decaying days, per law
of depth and per decay model, with the drafting canary confirming (the default) and without.

    .venv/bin/python benchmarks/score_acceptance.py [--days 12] [--first-seed 0] [--config FILE]
        [--laws geometric,deeper-easier] [--decays whole,per-token,hot] [--no-kv-signal]
        [--own-stats] [--nondeterministic [--idle-baseline]]

Generates (seeded) ``--days`` healthy 24 h traces per law and as many decaying ones per law and
decay model (devtools/traces.py: mixes and loads change by the hour, long-context phases, idle
moments at a rate set by the load), then runs each, scrape by scrape every 30 s as the daemon
does, through the daemon's own decisions (``canary.on_scrape`` / ``on_canary``); when a canary
is due it is taken from the day's model at that moment (``traces.canary_round``). It prints,
per law and decay model: restarts per healthy day, the share of decays caught, minutes from the
moment the decay has taken 20 % of the acceptance to the restart, and the canary's cost
(canaries and GPU-seconds per healthy day, at the field's single-request pace per class, and
the user requests expected to arrive while one runs). The same days scored with ``confirm =
"none"`` (the passive estimate alone) are printed next to them. Targets (issue 13): 0 restarts
per healthy day under every law; >= 95 % of whole-draft and per-token decays caught; median
<= 45 min. A report, not a test: it never fails.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devtools.traces import DECAYS, LAWS, REQUEST_S, canary_round, lines, random_day  # noqa: E402
from sparkwarden.config.schema import AcceptanceConfig, load  # noqa: E402
from sparkwarden.evidence import canary  # noqa: E402
from sparkwarden.evidence.acceptance import AcceptanceState  # noqa: E402
from sparkwarden.vllm import metrics  # noqa: E402

#: the daemon scrapes /metrics this often (min(health.interval, 30 s))
SCRAPE_S = 30.0

Job = tuple[int, str, str | None, bool, bool, bool, bool, dict[str, Any]]


def score_day(job: Job) -> dict[str, Any]:
    """One day through both decisions: the canary's (``fires``) and the passive estimate's
    alone (``passive_fires``), in hours after the trace's start."""
    seed, law, decay_kind, kv_signal, own, fresh, idle_baseline, cfg_data = job
    cfg = AcceptanceConfig.model_validate(cfg_data)
    scenario = random_day(
        seed, decay_kind is not None, law, decay_kind or "whole", kv_signal=kv_signal
    )
    scenario.interval = SCRAPE_S
    scenario.idle_spell = cfg.canary_idle + 5.0  # and a tick of the loop to see it
    passive, state = AcceptanceState(), canary.CanaryState()
    fires: list[float] = []
    passive_fires: list[float] = []
    canaries = discarded = 0
    gpu_s = users_during = 0.0
    for line in lines(scenario):
        t = float(line["t"])  # type: ignore[arg-type]
        try:
            engine: metrics.EngineMetrics | None = metrics.parse(str(line["metrics"]))
        except metrics.MetricsError:
            engine = None
        decided = canary.on_scrape(passive, state, engine, t, cfg)
        passive, state = decided.passive, decided.canary
        hours = (t - scenario.start) / 3600
        if decided.suspect:
            passive_fires.append(hours)
        if decided.due:
            created = engine.spec.created if engine is not None and engine.spec else None
            taken = canary_round(
                scenario,
                t,
                created,
                cfg.canary_prompts,
                cfg.canary_max_tokens,
                own,
                # --idle-baseline: the baseline's canaries reproduce (learnt while idle), the
                # later ones vary (under load): every later sample judged against one draw
                fresh and not (idle_baseline and not state.baseline),
            )
            canaries += 1
            discarded += not taken.valid
            seconds = sum(r.seconds for r in taken.readings)
            gpu_s += seconds
            hour = int((t % 86400) / 3600) % 24
            users_during += scenario.load.get(hour, 0.0) / REQUEST_S * seconds
            decided = canary.on_canary(passive, state, taken, cfg)
            state = decided.canary
        if decided.fire:
            fires.append(hours)
    onset = scenario.decay_onset
    mark = scenario.hours_to_drop(0.2)

    def outcome(fired: list[float]) -> dict[str, Any]:
        early = [h for h in fired if onset is None or h < onset]
        late = [h for h in fired if onset is not None and h >= onset]
        return {
            "false_fires": len(early),
            "caught": bool(late),
            "from_20pct_h": late[0] - mark if late and mark is not None else None,
        }

    return {
        "seed": seed,
        "law": law,
        "decay": decay_kind,
        "canary": outcome(fires),
        "passive": outcome(passive_fires),
        "canaries": canaries,
        "discarded": discarded,
        "canary_gpu_s": gpu_s,
        "users_during_canaries": users_during,
    }


def summarise(days: list[dict[str, Any]], key: str) -> dict[str, Any]:
    healthy = [d[key] for d in days if d["decay"] is None]
    decaying = [d[key] for d in days if d["decay"] is not None]
    delays = [d["from_20pct_h"] * 60 for d in decaying if d["from_20pct_h"] is not None]
    out: dict[str, Any] = {}
    if healthy:
        out["restarts_per_healthy_day"] = sum(d["false_fires"] for d in healthy) / len(healthy)
    if decaying:
        out["decays_caught"] = sum(d["caught"] for d in decaying) / len(decaying)
        out["false_fires_before_onset"] = sum(d["false_fires"] for d in decaying)
        out["minutes_from_20pct_median"] = round(statistics.median(delays), 1) if delays else None
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--days", type=int, default=12)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--config", help="a sparkwarden config whose [acceptance] to score")
    parser.add_argument("--laws", default=",".join(LAWS))
    parser.add_argument("--decays", default=",".join(DECAYS))
    parser.add_argument(
        "--no-kv-signal", action="store_true", help="long-context phases leave the KV gauge alone"
    )
    parser.add_argument(
        "--own-stats",
        action="store_true",
        help="the engine reports each request's own spec-decode stats "
        "(--per-request-spec-decode-metrics): a canary counts under load",
    )
    parser.add_argument(
        "--nondeterministic",
        action="store_true",
        help="greedy is not reproducible: every canary drafts a new sample of its class",
    )
    parser.add_argument(
        "--idle-baseline",
        action="store_true",
        help="with --nondeterministic: the baseline's canaries all draft the same sample",
    )
    args = parser.parse_args()
    cfg = load(args.config).acceptance if args.config else AcceptanceConfig()
    data = cfg.model_dump()
    seeds = range(args.first_seed, args.first_seed + args.days)
    laws, decays = args.laws.split(","), args.decays.split(",")
    kv, own, fresh = not args.no_kv_signal, args.own_stats, args.nondeterministic
    idle = fresh and args.idle_baseline
    jobs: list[Job] = []
    for law in laws:
        jobs += [(seed, law, None, kv, own, fresh, idle, data) for seed in seeds]
        for decay in decays:
            jobs += [(10_000 + seed, law, decay, kv, own, fresh, idle, data) for seed in seeds]
    with ProcessPoolExecutor() as pool:
        results = list(pool.map(score_day, jobs))
    table: dict[str, Any] = {}
    for law in laws:
        mine = [r for r in results if r["law"] == law]
        healthy = [r for r in mine if r["decay"] is None]
        row: dict[str, Any] = {
            "healthy": {
                "canary": summarise(healthy, "canary"),
                "passive_alone": summarise(healthy, "passive"),
                "canaries_per_day": statistics.mean(r["canaries"] for r in healthy),
                "discarded_per_day": statistics.mean(r["discarded"] for r in healthy),
                "canary_gpu_s_per_day": round(statistics.mean(r["canary_gpu_s"] for r in healthy)),
                "users_arriving_during_a_canary_per_day": round(
                    statistics.mean(r["users_during_canaries"] for r in healthy), 2
                ),
                "canary_s_each": round(
                    sum(r["canary_gpu_s"] for r in healthy)
                    / max(1, sum(r["canaries"] for r in healthy)),
                    1,
                ),
            }
        }
        for decay in decays:
            days = [r for r in mine if r["decay"] == decay]
            row[decay] = {
                "canary": summarise(days, "canary"),
                "passive_alone": summarise(days, "passive"),
            }
        table[law] = row
    summary = {
        "seeds": f"{seeds.start}-{seeds.stop - 1}",
        "kv_signal": kv,
        "own_stats": own,
        "nondeterministic": fresh,
        "idle_baseline": idle,
        "scores": table,
    }
    print(json.dumps(summary, indent=2))
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    flags = ("" if kv else "-nokv") + ("-own" if own else "") + ("-fresh" if fresh else "")
    flags += "-idlebase" if idle else ""
    name = f"acceptance-score-{seeds.start}{flags}.json"
    (out / name).write_text(json.dumps({"summary": summary, "days": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
