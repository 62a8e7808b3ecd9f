"""Make ``/metrics`` test pages with the metric classes of released vLLM versions.

    .venv/bin/python scripts/vllm_pages.py [--versions 0.28.0 0.29.0 ...] [--out DIR] [--cache DIR]

For each version: ``pip download vllm==X --no-deps`` (the wheel, ~400 MB, kept in a cache
directory), extract only the metric-logger modules (``vllm/v1/metrics/{loggers,stats,prometheus,
utils,buckets,cache_hit_source}.py``, ``vllm/v1/spec_decode/metrics.py`` and, from 0.27,
``vllm/parser/metrics.py``), then, in a fresh
process per page, build vLLM's own ``PrometheusStatLogger``, feed it ``SchedulerStats``,
``IterationStats`` and ``SpecDecodingStats`` (vLLM's classes: ``observe_draft`` counts per
position exactly as the scheduler does) and write what ``prometheus_client`` exposes.

What is stubbed, and why: every other ``vllm.*`` module (``vllm.config``, ``vllm.logger``,
``vllm.envs``, ``vllm.v1.engine``, ``vllm.plugins``, the KV/EC connector metrics, and 0.33's
``vllm/v1/metrics/perf.py``) because they import torch, CUDA kernels or the whole engine, none of
which adds a series sparkwarden reads (perf's MFU series are off unless asked for); ``VllmConfig``
is a plain object answering only what the loggers read; ``FinishReason`` is rebuilt from the
wheel's ``FINISH_REASON_STRINGS`` (read, not imported); ``numpy`` (used only by the log-line
formatter) when absent; ``regex`` (0.29's protocol module imports it; ``re`` serves) when absent.

Pages (``tests/fixtures/vllm/<version>/``): ``k1``, ``k5``, ``k15`` (one engine),
``two-engines`` (K=5; 0.10.2 refuses spec decoding with two engines, so its page has none),
``multiproc`` (``PROMETHEUS_MULTIPROC_DIR`` set, as with ``api_server_count > 1``: no
``_created``), ``no-stats`` (``--disable-log-stats``: no logger, only process series),
``trimmed`` (K=5, the drafter of ``k5``, but half the drafts are cut to 2 tokens,
as the scheduler does under a token budget or near ``max_model_len``), ``trimmed-light`` (8 %
of the drafts cut to 2), and both again with half the drafts spoilt (``...-decayed``).
Where a release has them: ``tool-parser`` (``--disable-log-stats`` with ``--tool-call-parser``:
the API server's ``vllm:tool_call_parser_invocations_total`` and nothing of the stat logger; 0.27
on), ``sleeping`` (``k5`` after ``/sleep?level=1``: ``vllm:engine_sleep_state`` awake 0; 0.12 on)
and ``queue-limits`` (``k5`` with 2 requests deferred, ``num_requests_waiting_by_reason``, 0.27
on, and 3 + 1 requests refused by ``--max-num-queued-reqs`` / ``--max-num-queued-tokens``,
``admission_rejections_total``, 0.33).
Deterministic: a seeded RNG, and process figures, pids and creation times pinned.

Per-request spec-decode metrics (``--per-request-spec-decode-metrics``, 0.29.0 on; 0.28.0, 0.12.0
and 0.10.2 have neither the flag nor the classes): ``spec-decode-metrics.json`` holds, for a known
sequence of verify steps (``STEPS``: K=5, some drafts trimmed to 2), what vLLM's own
``RequestSpecDecodeMetrics`` (``vllm/v1/metrics/stats.py``; ``observe`` once per step, as the
scheduler does) gives through its own ``SpeculativeDecodingMetrics`` and ``PerRequestMetrics``
pydantic models (``vllm/entrypoints/generate/base/protocol.py``, imported for real, its other
imports stubbed as above), serialised as the chat server does: ``answer`` as the response's
``model_dump()``, ``stream`` as the final usage chunk's ``exclude_unset, exclude_none``; at the
``summary`` and ``detailed`` levels.
"""

from __future__ import annotations

import argparse
import ast
import enum
import importlib.abc
import importlib.machinery
import json
import logging
import os
import random
import re
import subprocess
import sys
import tempfile
import types
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ("0.10.2", "0.12.0", "0.28.0", "0.29.0", "0.33.0", "0.34.0")
REAL = (
    "vllm/v1/metrics/loggers.py",
    "vllm/v1/metrics/stats.py",
    "vllm/v1/metrics/prometheus.py",
    "vllm/v1/metrics/utils.py",
    "vllm/v1/metrics/buckets.py",
    "vllm/v1/metrics/cache_hit_source.py",
    "vllm/v1/spec_decode/metrics.py",
    "vllm/entrypoints/generate/base/protocol.py",  # 0.33: the per-request metrics' models
    "vllm/entrypoints/serve/engine/protocol.py",
    "vllm/parser/metrics.py",  # 0.27 on: the tool-call parser's counter (--tool-call-parser)
)
#: page name -> (K, engines, multiprocess, trimmed share, spoilt share); K=0: no spec decoding
PAGES: dict[str, tuple[int, int, bool, float, float]] = {
    "k1": (1, 1, False, 0.0, 0.0),
    "k5": (5, 1, False, 0.0, 0.0),
    "k15": (15, 1, False, 0.0, 0.0),
    "two-engines": (5, 2, False, 0.0, 0.0),
    "multiproc": (5, 2, True, 0.0, 0.0),
    "no-stats": (0, 0, False, 0.0, 0.0),
    "trimmed": (5, 1, False, 0.5, 0.0),
    "trimmed-decayed": (5, 1, False, 0.5, 0.5),
    "trimmed-light": (5, 1, False, 0.08, 0.0),
    "trimmed-light-decayed": (5, 1, False, 0.08, 0.5),
    "tool-parser": (0, 0, False, 0.0, 0.0),
    "sleeping": (5, 1, False, 0.0, 0.0),
    "queue-limits": (5, 1, False, 0.0, 0.0),
}
#: pages only some releases can make: page -> a text its release's files must hold
NEEDS = {
    "tool-parser": ("vllm/parser/metrics.py", "def init_parser_metrics"),
    "sleeping": ("vllm/v1/metrics/loggers.py", "def record_sleep_state"),
    "queue-limits": ("vllm/v1/metrics/stats.py", "num_skipped_waiting_reqs"),
}
#: queue-limits: requests refused at admission, by reason (0.33's ``ADMISSION_REASONS``)
REFUSED = {"max_num_queued_reqs": 3, "max_num_queued_tokens": 1}
DRAFTS = 4000
TRIM_TO = 2
#: the drafter: position-0 acceptance and the per-position fall (draftshape's model)
ACCEPT = 0.7
DEPTH = 0.8
#: verify steps of one request for the per-request payload: (draft tokens proposed, accepted)
STEPS = ((5, 3), (5, 0), (5, 5), (2, 2), (2, 1), (5, 1), (5, 4), (2, 0), (5, 2), (5, 3))
PAYLOAD = "spec-decode-metrics.json"


def fetch(version: str, cache: Path) -> Path:
    """The metric modules of ``vllm==version``, extracted from its wheel."""
    dest = cache / version
    wheels = cache / "wheels"
    if not list(wheels.glob(f"vllm-{version}-*.whl")):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                f"vllm=={version}",
                "--no-deps",
                "-d",
                wheels,
            ],
            check=True,
        )
    (wheel,) = wheels.glob(f"vllm-{version}-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        for name in REAL:
            if name in archive.namelist():
                archive.extract(name, dest)
        (dest / "engine-init.py").write_bytes(archive.read(ENGINE))
    return dest


# --- inside one page's process --------------------------------------------------------------


ENGINE = "vllm/v1/engine/__init__.py"


def finish_reasons(root: Path) -> type[enum.IntEnum]:
    """vLLM's ``FinishReason``, its members read from the wheel's ``FINISH_REASON_STRINGS``
    (0.10 and 0.12 have three, 0.33 five) without importing the module (msgspec, torch)."""
    tree = ast.parse((root / "engine-init.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "FINISH_REASON_STRINGS" for t in node.targets
        ):
            names: tuple[str, ...] = ast.literal_eval(node.value)
            members = {n.upper(): i for i, n in enumerate(names)}
            reason = enum.IntEnum("FinishReason", members)  # type: ignore[misc]
            reason.__str__ = lambda self, names=names: names[self.value]  # type: ignore[method-assign]
            return reason
    raise SystemExit(f"no FINISH_REASON_STRINGS in {root / 'engine-init.py'}")


class Anything:
    """A stand-in for a stubbed class: takes any arguments, every method does nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return Anything()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return None

    def __iter__(self) -> Any:
        return iter(())


class Config:
    """``VllmConfig`` as far as the loggers read it; anything else is None (off)."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __getattr__(self, name: str) -> Any:
        return None


class Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves every ``vllm.*`` module not extracted from the wheel as a stub."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "vllm" and not fullname.startswith("vllm."):
            return None
        relative = Path(*fullname.split("."))
        if (self.root / relative).is_dir() or (self.root / relative).with_suffix(".py").exists():
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []
        if spec.name == "vllm.envs":
            module.__getattr__ = lambda name: False  # type: ignore[method-assign]
        elif spec.name == "vllm.logger":
            module.init_logger = logging.getLogger  # type: ignore[attr-defined]
        elif spec.name == "vllm.v1.engine":
            module.FinishReason = finish_reasons(self.root)  # type: ignore[attr-defined]
        else:
            module.__getattr__ = lambda name: (  # type: ignore[method-assign]
                _raise(name) if name.startswith("__") else type(name, (Anything,), {})
            )
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def _raise(name: str) -> Any:
    raise AttributeError(name)


def _import_real(root: Path) -> None:
    sys.meta_path.insert(0, Stubs(root))
    sys.path.insert(0, str(root))
    try:
        import numpy  # noqa: F401
    except ImportError:
        sys.modules["numpy"] = types.ModuleType("numpy")
    try:
        import regex  # noqa: F401
    except ImportError:
        sys.modules["regex"] = re


def make_payload(root: Path) -> str:
    """``metrics`` of one request's answer and stream, by vLLM's own classes (0.33 on)."""
    _import_real(root)
    from vllm.entrypoints.generate.base.protocol import (
        PerRequestMetrics,
        SpeculativeDecodingMetrics,
    )
    from vllm.v1.metrics.stats import RequestSpecDecodeMetrics

    out: dict[str, Any] = {"num_spec_tokens": 5, "steps": [list(step) for step in STEPS]}
    for level in ("summary", "detailed"):
        stats = RequestSpecDecodeMetrics.new(5)
        for drafted, accepted in STEPS:
            stats.observe(drafted, accepted, detailed=level == "detailed")
        # as chat_completion/serving.py builds it: timing off, the spec stats set after
        metrics = PerRequestMetrics()
        metrics.speculative_decoding = SpeculativeDecodingMetrics(**stats.to_dict())
        out[level] = {
            "to_dict": stats.to_dict(),
            "answer": metrics.model_dump(mode="json"),
            "stream": metrics.model_dump(mode="json", exclude_unset=True, exclude_none=True),
        }
    return json.dumps(out, indent=1) + "\n"


def make_page(root: Path, version: str, page: str) -> str:
    """One page: run in a fresh process (prometheus_client's registry is global)."""
    k, engines, multiproc, trimmed, spoilt = PAGES[page]
    if multiproc:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="vllm-pages-")
    _import_real(root)
    import prometheus_client
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess

    if page == "tool-parser":
        from vllm.parser.metrics import init_parser_metrics

        init_parser_metrics(model_name="qwen3-27b")  # registered by the API server, no logger
    elif page != "no-stats":
        from vllm.v1.metrics import loggers, stats
        from vllm.v1.spec_decode.metrics import SpecDecodingStats

        if hasattr(loggers, "PerfMetricsProm"):
            loggers.PerfMetricsProm = Anything  # torch-only MFU series: off unless asked for
        speculative = Config(num_speculative_tokens=k, method="eagle") if k else None
        if version == "0.10.2" and engines > 1:
            speculative = None  # 0.10.2: "Prometheus metrics with Spec Decoding with >1 EngineCore"
        config = Config(
            model_config=Config(
                served_model_name="qwen3-27b", max_model_len=262144, is_diffusion=False
            ),
            observability_config=Config(show_hidden_metrics=False, kv_cache_metrics=False),
            cache_config=Config(num_gpu_blocks=4096),
            speculative_config=speculative,
        )
        logger = loggers.PrometheusStatLogger(config, engine_indexes=list(range(engines)))
        rng = random.Random(f"{version}/{page}")  # noqa: S311 (reproducible pages, not secrets)
        for engine in range(engines):
            running, waiting = 3 + engine, engine
            kv_cache = 0.25 + engine / 10
            scheduler = stats.SchedulerStats(
                num_running_reqs=running, num_waiting_reqs=waiting, kv_cache_usage=kv_cache
            )
            if page == "queue-limits":
                scheduler.num_skipped_waiting_reqs = 2  # deferred (LoRA budget, KV transfer)
            if speculative is not None:
                spec = SpecDecodingStats.new(k)
                for _ in range(DRAFTS):
                    length = TRIM_TO if k > TRIM_TO and rng.random() < trimmed else k
                    spec.observe_draft(length, _accepted(rng, length, rng.random() < spoilt))
                scheduler.spec_decoding_stats = spec
            iteration = stats.IterationStats()
            iteration.num_generation_tokens = 5000 + 100 * engine
            prompt = 20000 + 100 * engine
            if hasattr(stats, "PromptTokenStats"):  # 0.33: prompt tokens by source
                iteration.prompt_token_stats.total = prompt
                iteration.prompt_token_stats.computed = prompt
            else:
                iteration.num_prompt_tokens = prompt
            logger.record(scheduler, iteration, engine_idx=engine)
        if page == "sleeping":
            logger.record_sleep_state(1, 1)  # /sleep?level=1: weights offloaded
        if page == "queue-limits" and hasattr(logger, "record_admission_rejection"):
            for reason, times in REFUSED.items():
                for _ in range(times):
                    logger.record_admission_rejection(reason)
    if multiproc:
        collector = multiprocess.MultiProcessCollector(None)
        registry = CollectorRegistry()  # files are read in directory order: sort for a steady page
        registry.register(Sorted(collector))
    else:
        registry = prometheus_client.REGISTRY
    return _steady(generate_latest(registry).decode())


def makes(root: Path, page: str) -> bool:
    """Whether this release can make ``page`` (its code has what the page shows)."""
    if page not in NEEDS:
        return True
    path, text = NEEDS[page]
    return (root / path).exists() and text in (root / path).read_text()


class Sorted:
    """A collector's families in name order, each family's samples in order."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def collect(self) -> Any:
        for family in sorted(self.inner.collect(), key=lambda f: f.name):
            family.samples.sort(key=lambda s: (s.name, sorted(s.labels.items())))
            yield family


def _accepted(rng: random.Random, length: int, spoilt: bool) -> int:
    """Tokens accepted of one draft: position 0 passes with ACCEPT, each later one with
    DEPTH * ACCEPT given the ones before (a rate of ACCEPT * (DEPTH*ACCEPT)**i at position i,
    draftshape's curve); a spoilt draft fails at 0."""
    if spoilt:
        return 0
    n = 0
    while n < length and rng.random() < (ACCEPT if n == 0 else DEPTH * ACCEPT):
        n += 1
    return n


def _steady(text: str) -> str:
    """Committed pages must not change on every run: process figures and creation times vary."""
    lines = []
    for line in text.splitlines():
        if line.startswith(("process_", "python_gc_")) and not line.startswith("# "):
            name, _, _ = line.rpartition(" ")
            line = f"{name} 0.0"
        elif 'pid="' in line:  # the multiprocess registry labels some gauges with the writer's pid
            line = re.sub(r'pid="\d+"', 'pid="1"', line)
        elif "_created{" in line and not line.startswith("# "):
            name, _, _ = line.rpartition(" ")
            line = f"{name} 1.7643456e+09"
        lines.append(line)
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", nargs="+", default=list(VERSIONS))
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "vllm")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "vllm-pages")
    one = ("ROOT", "VERSION", "PAGE")
    parser.add_argument("--one", nargs=3, metavar=one, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        root, version, page = Path(args.one[0]), args.one[1], args.one[2]
        sys.stdout.write(make_payload(root) if page == PAYLOAD else make_page(root, version, page))
        return 0
    made = {}
    for version in args.versions:
        root = fetch(version, args.cache)
        (args.out / version).mkdir(parents=True, exist_ok=True)
        files = [(page, f"{page}.prom") for page in PAGES if makes(root, page)]
        if "class RequestSpecDecodeMetrics" in (root / "vllm/v1/metrics/stats.py").read_text():
            files.append((PAYLOAD, PAYLOAD))
        else:
            print(f"{version}: no per-request spec-decode metrics", file=sys.stderr)
        for page, name in files:
            text = subprocess.run(  # a fresh process each: prometheus_client's registry is global
                [sys.executable, __file__, "--one", str(root), version, page],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            (args.out / version / name).write_text(text)
            made[f"{version}/{name}"] = len(text.splitlines())
    print(json.dumps(made, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
