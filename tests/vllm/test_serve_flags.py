"""The vLLM command-line reader over every spelling vLLM accepts (and operators use)."""

from __future__ import annotations

import json

import pytest

from sparkwarden.vllm.serve_flags import (
    config_file,
    flag,
    read,
    shutdown_timeout,
    speculative,
    unwrap,
)

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
