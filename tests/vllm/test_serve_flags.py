"""The vLLM command-line reader over every spelling vLLM accepts (and operators use)."""

from __future__ import annotations

import json

import pytest

from sparkwarden.vllm.serve_flags import (
    config_file,
    flag,
    method,
    read,
    shutdown_timeout,
    spec_conflicts,
    speculative,
    unwrap,
)
from tests.kits.seed_lines import DFLASH_REPORT, UNSLOTH_RECIPE

SPEC = '{"method": "dflash", "num_speculative_tokens": 15}'


@pytest.mark.parametrize(
    "argv",
    [
        ["vllm", "serve", "m", "--speculative-config", SPEC],
        ["vllm", "serve", "m", f"--speculative-config={SPEC}"],
        ["vllm", "serve", "m", "--speculative_config", SPEC],
        ["vllm", "serve", "m", "-sc", SPEC],
        ["vllm", "serve", "m", f"-sc={SPEC}"],
        [
            "vllm",
            "serve",
            "m",
            "--speculative-config.method",
            "dflash",
            "--speculative-config.num_speculative_tokens=15",
        ],
        ["bash", "-c", f"vllm serve m --speculative-config '{SPEC}'"],
        ["/bin/sh", "-lc", f"pip install -q x && exec vllm serve m -sc '{SPEC}' ; echo done"],
        ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "-sc", SPEC],
    ],
)
def test_every_spelling_of_the_speculative_config(argv: list[str]) -> None:
    assert speculative(read(argv)) == {"method": "dflash", "num_speculative_tokens": 15}


def test_values_switches_and_the_last_one_wins() -> None:
    argv = [
        "vllm",
        "serve",
        "m",
        "--gpu-memory-utilization",
        "0.5",
        "--disable-log-stats",
        "--max-num-seqs",
        "8",
        "--gpu_memory_utilization=0.7",
        "--seed",
        "-1",
        "--enforce-eager",
    ]
    flags = read(argv)
    assert flags["gpu-memory-utilization"] == "0.7"
    assert flags["disable-log-stats"] == "true" and flags["enforce-eager"] == "true"
    assert flags["max-num-seqs"] == "8" and flags["seed"] == "-1"  # a negative number is a value
    assert flag(argv, "gpu_memory_utilization") == "0.7"
    assert flag(argv, "kv-cache-dtype") is None


def test_a_switch_does_not_eat_the_model() -> None:
    flags = read(["vllm", "serve", "--disable-log-stats", "Qwen/Qwen3-27B", "--port", "8000"])
    assert flags == {"disable-log-stats": "true", "port": "8000"}


def test_config_file_is_overridden_by_the_command_line() -> None:
    argv = ["vllm", "serve", "--config", "/cfg/serve.yaml", "--max-num-seqs", "4"]
    yaml_config = {
        "max-num-seqs": 64,
        "gpu_memory_utilization": 0.85,
        "disable-log-stats": True,
        "enable-prefix-caching": False,
        "speculative-config": {"method": "mtp", "num_speculative_tokens": 3},
    }
    flags = read(argv, yaml_config)
    assert config_file(argv) == "/cfg/serve.yaml"
    assert flags["max-num-seqs"] == "4" and flags["gpu-memory-utilization"] == "0.85"
    assert flags["disable-log-stats"] == "true" and "enable-prefix-caching" not in flags
    assert json.loads(flags["speculative-config"]) == {"method": "mtp", "num_speculative_tokens": 3}


def test_dotted_keys_replace_a_json_flag_as_vllm_appends_them() -> None:
    flags = read(["vllm", "serve", "-sc", SPEC, "--speculative-config.method", "mtp"])
    assert speculative(flags) == {"method": "mtp"}


def test_shell_wrappers_are_unwrapped_others_are_not() -> None:
    assert unwrap(["bash", "-c", "vllm serve m --port 8000"]) == [
        "vllm",
        "serve",
        "m",
        "--port",
        "8000",
    ]
    assert unwrap(["vllm", "serve", "m", "-c", "x"]) == ["vllm", "serve", "m", "-c", "x"]
    nested = ["sh", "-c", "bash -c 'vllm serve m --max-model-len 4096'"]
    assert read(nested) == {"max-model-len": "4096"}


def test_shutdown_timeout() -> None:
    assert shutdown_timeout(read(["vllm", "serve", "m"])) == 0.0
    assert shutdown_timeout(read(["vllm", "serve", "m", "--shutdown-timeout=90"])) == 90.0
    with pytest.raises(ValueError, match="--shutdown-timeout 'soon' is not a number"):
        shutdown_timeout(read(["vllm", "serve", "m", "--shutdown-timeout", "soon"]))


def test_speculative_config_that_is_not_json() -> None:
    assert speculative(read(["vllm", "serve", "m", "-sc", "dflash"])) == {}
    assert speculative(read(["vllm", "serve", "m"])) is None


# --- the seeds' own command lines ---------------------------------------------------------------


def test_the_dflash_reports_old_spelling_is_a_speculative_config() -> None:
    spec = speculative(read(DFLASH_REPORT))
    assert spec == {"model": "z-lab/Qwen3.6-35B-A3B-DFlash", "num_speculative_tokens": 5}
    assert method(spec) == "dflash"  # vLLM infers it from the drafter's name
    assert read(DFLASH_REPORT)["gpu-memory-utilization"] == "0.80"


def test_the_recipe_line_is_mtp_with_no_memory_flag() -> None:
    flags = read(UNSLOTH_RECIPE)
    spec = speculative(flags)
    assert spec is not None and method(spec) == "mtp"  # qwen3_next_mtp: deprecated name of mtp
    assert "gpu-memory-utilization" not in flags and flags["tool-call-parser"] == "qwen3_coder"
    assert flags["enable-auto-tool-choice"] == "true"


@pytest.mark.parametrize(
    "argv",
    [
        ["-sc.method", "dflash", "-sc.num_speculative_tokens", "15"],
        ["-sc.method=dflash", "-sc.num_speculative_tokens=15"],
        ["--spec-method", "dflash", "--spec-tokens", "15"],
        ["--spec_method=dflash", "--spec_tokens=15"],
        ["-sc", '{"method": "dflash"}', "--spec-tokens", "15"],
        ["--speculative-model", "z-lab/Qwen3-8B-DFlash-b16", "--num-speculative-tokens", "15"],
    ],
)
def test_the_newer_spellings(argv: list[str]) -> None:
    spec = speculative(read(["vllm", "serve", "m", *argv]))
    assert spec is not None and method(spec) == "dflash"
    assert spec["num_speculative_tokens"] == 15
    assert "sc" not in read(["vllm", "serve", "m", *argv])  # not filed under a key "sc"


def test_dotted_groups_are_appended_in_the_order_first_seen_and_the_last_wins() -> None:
    # vLLM files "-sc.x" and "--speculative-config.y" apart and appends both: the later wins
    flags = read(
        ["vllm", "serve", "m", "-sc.method", "mtp", "--speculative-config.method", "eagle"]
    )
    assert speculative(flags) == {"method": "eagle"}
    flags = read(
        ["vllm", "serve", "m", "--speculative-config.method", "eagle", "-sc.method", "mtp"]
    )
    assert speculative(flags) == {"method": "mtp"}
    # a dotted key takes the next word whatever it looks like; "+" appends to a list
    flags = read(["vllm", "serve", "m", "-cc.level", "-1", "-cc.ops+", "a,b", "-cc.ops+", "c"])
    assert json.loads(flags["compilation-config"]) == {"level": -1, "ops": ["a", "b", "c"]}


@pytest.mark.parametrize(
    ("words", "level"),
    [(["-O3"], "3"), (["-O=2"], "2"), (["-O", "1"], "1"), (["-Odecode"], "decode")],
)
def test_dash_o_is_the_optimization_level_not_the_compilation_config(
    words: list[str], level: str
) -> None:
    flags = read(["vllm", "serve", "m", *words, "--port", "8000"])
    assert flags == {"optimization-level": level, "port": "8000"}


def test_a_spec_flag_repeating_a_json_key_is_refused_by_vllm() -> None:
    flags = read(["vllm", "serve", "m", "-sc", '{"method": "mtp"}', "--spec-method", "eagle"])
    assert spec_conflicts(flags) == ["--spec-method and --speculative-config['method']"]
    assert speculative(flags) == {"method": "mtp"}
    assert spec_conflicts(read(["vllm", "serve", "m", "--spec-method", "eagle"])) == []


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"model": "ngram"}, "ngram"),
        ({"method": "[ngram]"}, "ngram"),
        ({"model": "yuhuili/EAGLE-LLaMA3-Instruct-8B"}, "eagle"),
        ({"model": "AngelSlim/Qwen3-8B_eagle3"}, "eagle3"),
        ({"model": "deepseek-ai/dspark_qwen3_8b_block7"}, "dspark"),
        ({"model": "Qwen/Qwen3-0.6B"}, "draft_model"),
        ({"method": "deepseek_mtp"}, "mtp"),
        ({"method": "suffix"}, "suffix"),
    ],
)
def test_the_method_as_vllm_infers_it(spec: dict[str, str], expected: str) -> None:
    assert method(spec) == expected
