"""The ``/metrics`` page, written as vLLM's ``prometheus_client`` writes it.

Shared by the stand-in server and ``devtools/traces.py`` (which builds replay traces from the same
counters), so a page is the same text whichever made it; a test holds it against pages made by
released vLLM's own metric classes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

LABELS = 'engine="0",model_name="{model}"'


def go_float(value: float) -> str:
    """Numbers as prometheus_client writes them (``floatToGoString``): a faithful text."""
    value = float(value)
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


@dataclass(frozen=True)
class Counters:
    """What a vLLM engine counts, at one instant (``created``: when its counters started)."""

    drafts: float
    draft_tokens: float
    accepted: float
    per_pos: tuple[float, ...]
    generation: float
    running: float
    waiting: float
    created: float
    kv_cache: float = 0.0734
    prompt: float = 0.0
    #: ``vllm:engine_sleep_state``: None leaves it out (the shared fixture has none), -1 awake,
    #: else the sleep level (0: KV cache released, 1: weights offloaded, 2: discarded)
    sleep_level: int | None = None
    #: ``vllm:admission_rejections_total`` by reason (0.33.0); None leaves it out
    rejected: dict[str, int] | None = None


#: 0.33's reasons for turning a request away at admission (vllm/v1/metrics/loggers.py:47)
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")
AWAKE = -1


def exposition(c: Counters, model: str, spec_decode: bool = True) -> str:
    """The /metrics text as vLLM's prometheus_client writes it: ``_total`` counters with a
    ``_created`` gauge each, then the request gauges (shared by the server and trace generator)."""
    labels = LABELS.format(model=model)
    out: list[str] = []

    def counter(
        name: str, help_text: str, series: list[tuple[str, float]], at: str = labels
    ) -> None:
        out.append(f"# HELP vllm:{name}_total {help_text}")
        out.append(f"# TYPE vllm:{name}_total counter")
        for extra, value in series:
            out.append(f"vllm:{name}_total{{{at}{extra}}} {go_float(math.floor(value))}")
        out.append(f"# HELP vllm:{name}_created {help_text}")
        out.append(f"# TYPE vllm:{name}_created gauge")
        for extra, _ in series:
            out.append(f"vllm:{name}_created{{{at}{extra}}} {go_float(c.created)}")

    def gauge(name: str, help_text: str, value: float) -> None:
        out.append(f"# HELP vllm:{name} {help_text}")
        out.append(f"# TYPE vllm:{name} gauge")
        out.append(f"vllm:{name}{{{labels}}} {go_float(value)}")

    if spec_decode:
        counter("spec_decode_num_drafts", "Number of spec decoding drafts.", [("", c.drafts)])
        counter("spec_decode_num_draft_tokens", "Number of draft tokens.", [("", c.draft_tokens)])
        counter("spec_decode_num_accepted_tokens", "Number of accepted tokens.", [("", c.accepted)])
        counter(
            "spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            [(f',position="{i}"', v) for i, v in enumerate(c.per_pos)],
        )
    gauge("num_requests_running", "Number of requests in model execution batches.", c.running)
    gauge("num_requests_waiting", "Number of requests waiting to be processed.", c.waiting)
    gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", c.kv_cache)
    counter("prompt_tokens", "Number of prefill tokens processed.", [("", c.prompt)])
    counter("generation_tokens", "Number of generation tokens processed.", [("", c.generation)])
    if c.sleep_level is not None:
        level = c.sleep_level
        states = {
            "awake": level == AWAKE,
            "weights_offloaded": level == 1,
            "discard_all": level == 2,
        }
        out.append("# HELP vllm:engine_sleep_state Engine sleep state; awake = 0 means sleeping.")
        out.append("# TYPE vllm:engine_sleep_state gauge")
        for state, on in states.items():
            out.append(f'vllm:engine_sleep_state{{{labels},sleep_state="{state}"}} {float(on)}')
    if c.rejected is not None:
        counter(
            "admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            [(f',reason="{r}"', float(n)) for r, n in c.rejected.items()],
            at=f'model_name="{model}"',  # no engine label: the API server counts them
        )
    return "\n".join(out) + "\n"


def tool_parser_series(model: str, created: float) -> str:
    """What ``--tool-call-parser`` registers, stat logger or not (vllm/parser/metrics.py, 0.27.0
    on): ``vllm:tool_call_parser_invocations_total`` for each mode, outcome and request type."""
    name = "vllm:tool_call_parser_invocations"
    about = "Total number of ToolParser invocations."
    keys = [
        f'mode="{mode}",model_name="{model}",outcome="{outcome}",request_type="{kind}"'
        for mode in ("streaming", "non_streaming")
        for outcome in ("tool_call", "no_tool_call")
        for kind in ("chat_completions", "responses", "other")
    ]
    out = [f"# HELP {name}_total {about}", f"# TYPE {name}_total counter"]
    out += [f"{name}_total{{{key}}} 0.0" for key in keys]
    out += [f"# HELP {name}_created {about}", f"# TYPE {name}_created gauge"]
    out += [f"{name}_created{{{key}}} {go_float(created)}" for key in keys]
    return "\n".join(out) + "\n"


#: What vLLM's /metrics answers under --disable-log-stats: process series, no vllm: ones.
NO_STATS = (
    b"# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
    b"# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.5\n"
    b"# HELP process_open_fds Number of open file descriptors.\n"
    b"# TYPE process_open_fds gauge\nprocess_open_fds 61.0\n"
)
