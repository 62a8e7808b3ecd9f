"""What a drafting canary sent under load costs the users it overlaps, per contention law.

    .venv/bin/python benchmarks/canary_latency.py [--laws none,batched:0.05,batched:0.3,serial]
        [--period 640] [--speedup 8] [--users 3] [--canary-every 80] [--seed 0]

For each law, two runs of the stand-in vLLM as a local process on 127.0.0.1 (``--traffic``,
no background users, ``--contention LAW``), with the same simulated users: Poisson arrivals at
the rate that keeps ``--users`` requests in the engine on average under that law
(``arrival_rate``), prompts of the four field classes (mostly mixed), a few hundred tokens
each, greedy and seeded so a request drafts the same steps in both runs. Run A also sends a
drafting canary every ``--canary-every`` seconds whatever is running, exactly as the daemon
sends one (``VllmClient.canary``: the shipped prompts of ``AcceptanceConfig``,
``canary_max_tokens``, greedy, ``canary_seed``, one prompt after the other); run B sends none.
A user request's added latency is its latency in A minus in B; it is counted for the requests
whose time in A overlapped a canary. One canary's duration is measured on the idle engine
before run A.

The stand-in drafts at the field's single-request pace (``devtools/traces.py`` CLASSES: the
classes' tokens/s over their tokens per verify step, about 20 verify steps/s) times
``--speedup``; every figure is in field seconds (wall seconds x speedup). Contention laws
(``vllm_standin.py --contention``): ``none`` each request at its own pace; ``batched:SLOPE``
each decode step (1 + SLOPE (n-1)) times as long with n running (continuous batching);
``serial`` one at a time, first come first served (the worst plausible case). How much a batch
slows a step on a DGX Spark is not in the field notes: the laws bracket it.

Target (issue 13): the overlapped users' median added latency <= 1 canary's duration.
A report, not a test: it never fails. About 3 minutes per law at the defaults.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Bench, Line, main_one, spread
from devtools.standin.stage import local
from devtools.traces import CLASSES, profile
from sparkwarden.config.schema import AcceptanceConfig
from sparkwarden.vllm.client import VllmClient, chat_body

MODEL = "standin/Qwen3.6-35B-A3B-NVFP4"
LAWS = "none,batched:0.05,batched:0.3,serial"
#: the users' prompts by class (the stand-in tells a class by a word in it) and their share
USER_PROMPTS = {
    "mixed": ("Summarise this support ticket and suggest a reply to the customer.", 0.5),
    "code": ("Write a Python function that parses a log line into its fields.", 0.2),
    "math": ("Compute the monthly payment of a loan step by step.", 0.15),
    "prose": ("Describe the view from a mountain hut in one paragraph.", 0.15),
}
#: a user request's length: a few hundred tokens
USER_TOKENS = (200, 600)


def field_steps_per_s() -> float:
    """A single request's verify steps per second at the field's pace: each class's tokens/s
    over its tokens per step (1 + the accepted positions), averaged over the classes."""
    return statistics.mean(tps / (1 + sum(profile(a))) for a, tps in CLASSES.values())


def gain(klass: str) -> float:
    """Tokens per verify step of a class (the stand-in's geometric law)."""
    return 1 + sum(profile(CLASSES[klass][0]))


@dataclass(frozen=True)
class UserRequest:
    at: float  # field seconds after the run starts
    klass: str
    max_tokens: int
    seed: int


def schedule(args: argparse.Namespace, law: str) -> list[UserRequest]:
    """Poisson arrivals at the rate that keeps ``--users`` requests in the engine on average
    under ``law`` (``arrival_rate``); the same seed gives the same requests under every law."""
    rng = random.Random(args.seed)  # noqa: S311 (a reproducible schedule, not a secret)
    names = list(USER_PROMPTS)
    weights = [USER_PROMPTS[n][1] for n in names]
    pace = field_steps_per_s()
    alone = [statistics.mean(USER_TOKENS) / gain(n) / pace for n in names]
    mean = sum(w * a for w, a in zip(weights, alone, strict=True))
    second = sum(w * a * a for w, a in zip(weights, alone, strict=True))
    spread2 = (USER_TOKENS[1] - USER_TOKENS[0]) ** 2 / 12 / statistics.mean(USER_TOKENS) ** 2
    cv2 = (second / mean**2) * (1 + spread2) - 1  # class and length both vary
    rate = arrival_rate(law, args.users, mean, cv2)
    out, t = [], rng.expovariate(rate)
    while t < args.period:
        klass = rng.choices(names, weights)[0]
        out.append(UserRequest(t, klass, rng.randint(*USER_TOKENS), len(out)))
        t += rng.expovariate(rate)
    return out


def arrival_rate(law: str, users: float, alone: float, cv2: float) -> float:
    """Arrivals per second that leave ``users`` requests in the engine on average, requests
    taking ``alone`` seconds by themselves (squared coefficient of variation ``cv2``):
    ``none`` Little's law; ``batched:S`` its mean field, each request slowed by the others
    (L = rate x alone x (1 + S (L - 1))); ``serial`` one server (Pollaczek-Khinchine:
    L = rho + rho^2 (1 + cv2) / (2 (1 - rho)), rho = rate x alone)."""
    kind, _, slope = law.partition(":")
    if kind == "none":
        return users / alone
    if kind == "batched":
        return users / (alone * (1 + float(slope) * (users - 1)))
    lo, hi = 0.0, 1.0
    for _ in range(60):
        rho = (lo + hi) / 2
        queued = rho + rho * rho * (1 + cv2) / (2 * (1 - rho))
        lo, hi = (rho, hi) if queued < users else (lo, rho)
    return lo / alone


class Run:
    """One run: the users' requests (and canaries) against one fresh stand-in."""

    def __init__(self, url: str, args: argparse.Namespace) -> None:
        self.url, self.args = url, args
        self.began = time.monotonic()
        self.users: dict[int, tuple[float, float]] = {}  # seed -> (start, end) field seconds
        self.canaries: list[tuple[float, float]] = []
        self.load: list[float] = []
        self.lock = threading.Lock()

    def field(self, wall: float) -> float:
        return (wall - self.began) * self.args.speedup

    def wait_until(self, field_t: float) -> None:
        time.sleep(max(0.0, self.began + field_t / self.args.speedup - time.monotonic()))

    def user(self, http: httpx.Client, req: UserRequest) -> None:
        body = chat_body(MODEL, req.max_tokens, USER_PROMPTS[req.klass][0], seed=req.seed)
        start = time.monotonic()
        response = http.post("/v1/chat/completions", json=body, timeout=600)
        end = time.monotonic()
        if response.status_code != 200:
            raise RuntimeError(f"user request {req.seed}: HTTP {response.status_code}")
        with self.lock:
            self.users[req.seed] = (self.field(start), self.field(end))

    def canary_loop(self, client: VllmClient, cfg: AcceptanceConfig) -> None:
        t = self.args.canary_every / 2
        while t < self.args.period:
            self.wait_until(t)
            start = time.monotonic()
            canary(client, cfg)
            self.canaries.append((self.field(start), self.field(time.monotonic())))
            t += self.args.canary_every

    def sample_load(self, http: httpx.Client, until: threading.Event) -> None:
        from sparkwarden.vllm.metrics import parse

        while not until.wait(1.0 / self.args.speedup):
            m = parse(http.get("/metrics", timeout=10).text)
            if self.field(time.monotonic()) < self.args.period:  # not the drain after it
                self.load.append(m.running + m.waiting)

    def go(self, requests: list[UserRequest], canaries: bool) -> Run:
        cfg = AcceptanceConfig()
        client = VllmClient(self.url)
        done = threading.Event()
        with httpx.Client(base_url=self.url, limits=httpx.Limits(max_connections=200)) as http:
            sampler = threading.Thread(target=self.sample_load, args=(http, done), daemon=True)
            sampler.start()
            threads = []
            if canaries:
                threads.append(threading.Thread(target=self.canary_loop, args=(client, cfg)))
                threads[-1].start()
            for req in requests:
                self.wait_until(req.at)
                threads.append(threading.Thread(target=self.user, args=(http, req)))
                threads[-1].start()
            for thread in threads:
                thread.join()
            done.set()
            sampler.join()
        client.close()
        return self


def canary(client: VllmClient, cfg: AcceptanceConfig) -> float:
    """One drafting canary as the daemon sends it; its wall seconds."""
    began = time.monotonic()
    for prompt in cfg.canary_prompts.values():
        answer = client.canary(MODEL, prompt, cfg.canary_max_tokens, cfg.canary_seed, 600)
        if not answer.ok:
            raise RuntimeError(f"canary failed: {answer.detail}")
    return time.monotonic() - began


def overlaps(span: tuple[float, float], others: list[tuple[float, float]]) -> bool:
    return any(span[0] < end and start < span[1] for start, end in others)


def one_law(law: str, args: argparse.Namespace) -> dict[str, Any]:
    requests = schedule(args, law)
    pace = field_steps_per_s() * args.speedup
    standin = ("--traffic", "mixed", "--users", "0", "--drafts-per-s", "0")
    standin += ("--steps-per-s", f"{pace:.3f}", "--contention", law)
    with local(*standin) as url:
        client = VllmClient(url)
        alone = canary(client, AcceptanceConfig()) * args.speedup  # on the idle engine
        client.close()
        with_canaries = Run(url, args).go(requests, canaries=True)
    with local(*standin) as url:
        without = Run(url, args).go(requests, canaries=False)
    added, added_all = [], []
    for seed, span in with_canaries.users.items():
        base = without.users[seed]
        extra = (span[1] - span[0]) - (base[1] - base[0])
        added_all.append(extra)
        if overlaps(span, with_canaries.canaries):
            added.append(extra)
    canary_s = [end - start for start, end in with_canaries.canaries]
    return {
        "canary_alone_s": alone,
        "canary_under_load_s": spread(canary_s),
        "overlapped": spread(added) if added else None,
        "all_users": spread(added_all),
        "users": len(added_all),
        "arrivals_per_min": len(requests) / args.period * 60,
        "mean_load": statistics.mean(without.load) if without.load else math.nan,
        "mean_load_with_canaries": statistics.mean(with_canaries.load),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--laws", default=LAWS, help=f"contention laws ({LAWS})")
    parser.add_argument("--period", type=float, default=640.0, help="field seconds a run (640)")
    parser.add_argument("--speedup", type=float, default=8.0, help="stand-in x field pace (8)")
    parser.add_argument("--users", type=float, default=3.0, help="in the engine on average (3)")
    parser.add_argument("--canary-every", type=float, default=80.0, help="field seconds (80)")
    parser.add_argument("--seed", type=int, default=0)


def measure(_bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    pace = field_steps_per_s()
    print(
        f"stand-in at {args.speedup:g}x the field's pace ({pace:.1f} verify steps/s a request "
        f"alone, {pace * args.speedup:.1f} here); {args.period:g} field s a run, a canary every "
        f"{args.canary_every:g} s in run A; figures in field seconds",
        flush=True,
    )
    result: dict[str, Any] = {"speedup": args.speedup, "steps_per_s": pace}
    for law in args.laws.split(","):
        print(f"law {law} ...", file=sys.stderr, flush=True)
        result[law] = one_law(law, args)
    print(detail(result), flush=True)
    return result


def detail(result: dict[str, Any]) -> str:
    rows = [
        (
            "law",
            "arrivals/min",
            "load (with canaries)",
            "canary alone s",
            "canary under load s",
            "overlapped n",
            "added median s",
            "added p90 s",
            "median / canary",
            "all users' added median s",
        )
    ]
    for law, r in result.items():
        if not isinstance(r, dict):
            continue
        o = r["overlapped"] or {"n": 0, "median": math.nan, "p90": math.nan}
        rows.append(
            (
                law,
                f"{r['arrivals_per_min']:.1f}",
                f"{r['mean_load']:.1f} ({r['mean_load_with_canaries']:.1f})",
                f"{r['canary_alone_s']:.1f}",
                f"{r['canary_under_load_s']['median']:.1f}",
                str(o["n"]),
                f"{o['median']:.2f}",
                f"{o['p90']:.2f}",
                f"{o['median'] / r['canary_alone_s']:.2f}",
                f"{r['all_users']['median']:.2f}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows
    )


def lines(result: dict[str, Any]) -> list[Line]:
    out = []
    for law, r in result.items():
        if not isinstance(r, dict):
            continue
        o, alone = r["overlapped"], r["canary_alone_s"]
        ratio = o["median"] / alone if o else math.nan
        out.append(
            Line(
                f"users overlapping a canary, {law}: median added latency / one canary",
                ratio,
                f"p90 {o['p90'] / alone:.2f}; n={o['n']}; canary {alone:.1f}s" if o else "n=0",
                "<= 1",
                bool(o) and ratio <= 1,
            )
        )
    return out


if __name__ == "__main__":
    raise SystemExit(main_one(sys.modules[__name__]))
