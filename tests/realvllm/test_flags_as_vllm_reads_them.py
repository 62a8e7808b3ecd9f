"""Doctor reads flags as vLLM does: for every seed command line and every spelling doctor knows,
the values sparkwarden's reader makes of it equal what vLLM's own argument parser (imported
from the real engine's venv, ``devtools/realvllm/vllm_flags.py``) makes of it; a line vLLM
refuses is one doctor says it refuses."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from devtools.realvllm import engine
from sparkwarden.vllm import releases, serve_flags
from tests.kits.seed_lines import DFLASH_REPORT, UNSLOTH_RECIPE

SPEC = '{"method": "dflash", "num_speculative_tokens": 15}'
SCRIPT = Path(engine.ROOT) / "devtools" / "realvllm" / "vllm_flags.py"

#: Each after ``vllm serve m``: every spelling tests/vllm/test_serve_flags.py reads, and more.
LINES: list[list[str]] = [
    ["--speculative-config", SPEC],
    [f"--speculative-config={SPEC}"],
    ["--speculative_config", SPEC],
    ["-sc", SPEC],
    [f"-sc={SPEC}"],
    ["--speculative-config.method", "dflash", "--speculative-config.num_speculative_tokens=15"],
    ["-sc.method", "dflash", "-sc.num_speculative_tokens", "15"],
    ["-sc.method=dflash", "-sc.num_speculative_tokens=15"],
    ["--spec-method", "dflash", "--spec-tokens", "15"],
    ["--spec_method=dflash", "--spec_tokens=15"],
    ["-sc", '{"method": "dflash"}', "--spec-tokens", "15"],
    ["-sc", SPEC, "--spec-tokens", "4"],  # refused: mutually exclusive
    ["--speculative-model", "z-lab/Qwen3-8B-DFlash-b16", "--num-speculative-tokens", "15"],
    ["--gpu-memory-utilization", "0.8", "--gpu-memory-utilization=0.7"],  # the last one wins
    ["--max-num-seqs", "4", "--max-model-len", "262144", "--shutdown-timeout=30"],
    ["--shutdown-timeout", "0", "--port", "8888", "--kv-cache-dtype", "fp8"],
    ["-tp", "2", "--pipeline-parallel-size=2", "--distributed-executor-backend", "ray"],
    ["--nnodes", "2", "--node-rank", "1", "--headless", "--kv_cache_dtype=fp8_e4m3"],
    ["--disable-log-stats", "--tool-call-parser", "qwen3_coder", "--enable-auto-tool-choice"],
    ["-sc", '{"method": "ngram", "num_speculative_tokens": 3}'],
    ["-sc", SPEC, "--per-request-spec-decode-metrics", "summary"],
    ["--per-request-spec-decode-metrics=detailed", "-sc", SPEC],
    ["-O3", "--max_num_seqs=8"],
    ["-O", "2", "--gpu_memory_utilization", "0.55"],
]
SEEDS = [DFLASH_REPORT, UNSLOTH_RECIPE]


def vllm_readings(lines: list[list[str]]) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(engine.python()), str(SCRIPT)],
        input=json.dumps(lines),
        capture_output=True,
        text=True,
        env={**engine.ENV, "PATH": "/usr/bin:/bin"},
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    readings: list[dict[str, Any]] = json.loads(done.stdout)
    return readings


INTEGERS = {
    "max-num-seqs",
    "shutdown-timeout",
    "tensor-parallel-size",
    "pipeline-parallel-size",
    "nnodes",
    "node-rank",
}


def typed(name: str, text: str) -> Any:
    """A flag's text as vLLM's parser types it (the fields compared)."""
    if name in INTEGERS:
        return int(text)
    if name == "gpu-memory-utilization":
        return float(text)
    if name == "disable-log-stats":
        return text == "true"
    return text


def ours(
    argv: list[str], defaults: dict[str, Any], conf: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What sparkwarden's reader makes of a line (and its ``--config`` YAML), each field vLLM's
    default where not given."""
    flags = serve_flags.read(argv, conf)
    found = {
        name: typed(name, flags[name]) if name in flags else default
        for name, default in defaults.items()
        if name != "speculative"
    }
    found["speculative"] = serve_flags.speculative(flags)
    return found


def test_every_line_reads_as_vllms_own_parser_reads_it(tmp_path: Path) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump({"max-num-seqs": 16, "shutdown-timeout": 20}))
    # the model a local folder: vLLM looks a name up on the hub, which is not reached here
    m = str(engine.model("tiny"))
    lines = [["serve", m]] + [["serve", m, *line] for line in LINES]
    lines += [["serve", m, *seed[3:]] for seed in SEEDS]  # `vllm serve MODEL ...`
    lines.append(["serve", m, "--config", str(config), "--max-num-seqs", "32"])
    readings = vllm_readings(lines)
    defaults = readings[0]
    assert defaults["gpu-memory-utilization"] == releases.default_gpu_memory_utilization(
        releases.parse("0.32.0")
    )

    refused, compared = [], 0
    for argv, theirs in zip(lines, readings, strict=True):
        words = ["vllm", *argv]
        conf = yaml.safe_load(config.read_text()) if "--config" in argv else None
        flags = serve_flags.read(words, conf)
        if "refused" in theirs:
            refused.append(argv)
            said = " ".join(theirs["refused"])
            if "mutually exclusive" in said:
                assert serve_flags.spec_conflicts(flags), (argv, said)
            else:  # the old spelling: doctor says vLLM refuses it
                assert any(f in flags for f in serve_flags.OLD_SPEC_FLAGS), (argv, said)
            continue
        mine = ours(words, defaults, conf)
        assert mine == theirs, (argv, mine, theirs)
        compared += 1
    assert compared >= 20 and len(refused) == 3, refused
