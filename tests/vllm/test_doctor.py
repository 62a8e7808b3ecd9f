"""doctor's checks over every way a vLLM command line is written, on inspect data (pure)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparkwarden.vllm import serve_flags
from sparkwarden.vllm.doctor_rules import (
    check_llm,
    fills_free_memory,
    host_path,
    vllm_config_file,
)
from tests.kits.seed_lines import DFLASH_REPORT, UNSLOTH_RECIPE

SPEC = '{"method": "dflash", "num_speculative_tokens": 15}'


def attrs(
    *cmd: str, stop: int | None = 120, mounts: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    return {
        "Config": {"Cmd": list(cmd), "StopTimeout": stop, "WorkingDir": "/srv"},
        "HostConfig": {"Init": True, "RestartPolicy": {"Name": "no"}},
        "Mounts": mounts or [{"Destination": "/root/.cache/vllm", "Source": "/var/cache/vllm"}],
    }


def checks(
    a: dict[str, Any], stop_timeout: float = 120.0, release: str | None = None
) -> dict[str, Any]:
    argv = a["Config"]["Cmd"]
    loaded, problem = vllm_config_file(a, argv)
    flags = serve_flags.read(argv, loaded)
    found = check_llm("llm", a, 121.0, flags, stop_timeout, problem, release)
    return {f.check: f for f in found}


@pytest.mark.parametrize(
    "cmd",
    [
        ["vllm", "serve", "m", "--gpu-memory-utilization", "0.9", "-sc", SPEC],
        [
            "vllm",
            "serve",
            "m",
            "--gpu-memory-utilization=0.9",
            "--speculative-config.method=dflash",
        ],
        ["bash", "-c", f"vllm serve m --gpu-memory-utilization 0.9 --speculative-config '{SPEC}'"],
        [
            "sh",
            "-c",
            "exec vllm serve m --gpu_memory_utilization 0.9 --speculative-config.method dflash",
        ],
    ],
)
def test_doctor_reads_every_form(cmd: list[str]) -> None:
    found = checks(attrs(*cmd))
    assert found["gpu-memory-utilization"].severity == "error"
    assert "dflash" in found["drafter-scratch"].message


def test_disable_log_stats_is_an_error_with_its_fix() -> None:
    found = checks(attrs("bash", "-c", "vllm serve m --disable-log-stats"))
    assert found["disable-log-stats"].severity == "error"
    assert "remove --disable-log-stats" in found["disable-log-stats"].fix
    assert "disable-log-stats" not in checks(attrs("vllm", "serve", "m"))


def test_config_yaml_is_read_through_the_mounts(tmp_path: Path) -> None:
    (tmp_path / "serve.yaml").write_text(
        "gpu-memory-utilization: 0.9\ndisable-log-stats: true\n"
        "speculative-config:\n  method: mtp\n  num_speculative_tokens: 3\n"
    )
    mounts = [{"Destination": "/etc/vllm", "Source": str(tmp_path)}]
    found = checks(attrs("vllm", "serve", "m", "--config", "/etc/vllm/serve.yaml", mounts=mounts))
    assert found["gpu-memory-utilization"].severity == "error"
    assert "mtp" in found["drafter-scratch"].message
    assert "disable-log-stats" in found and "config-file" not in found
    # relative to the container's working directory
    mounts = [{"Destination": "/srv", "Source": str(tmp_path)}]
    found = checks(attrs("vllm", "serve", "m", "--config=serve.yaml", mounts=mounts))
    assert "disable-log-stats" in found


def test_config_yaml_that_cannot_be_read_is_a_finding(tmp_path: Path) -> None:
    found = checks(attrs("vllm", "serve", "m", "--config", "/etc/vllm/serve.yaml"))
    assert found["config-file"].severity == "warning"
    assert "on no mount" in found["config-file"].message
    mounts = [{"Destination": "/etc/vllm", "Source": str(tmp_path)}]
    found = checks(attrs("vllm", "serve", "m", "--config", "/etc/vllm/gone.yaml", mounts=mounts))
    assert f"at {tmp_path}/gone.yaml" in found["config-file"].message
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    found = checks(attrs("vllm", "serve", "m", "--config", "/etc/vllm/list.yaml", mounts=mounts))
    assert "not a YAML mapping" in found["config-file"].message


def test_host_path_takes_the_longest_mount() -> None:
    a = attrs(
        mounts=[
            {"Destination": "/etc", "Source": "/host/etc"},
            {"Destination": "/etc/vllm", "Source": "/host/vllm"},
        ]
    )
    assert host_path(a, "/etc/vllm/x.yaml") == "/host/vllm/x.yaml"
    assert host_path(a, "/etc/other.yaml") == "/host/etc/other.yaml"
    assert host_path(a, "/etcetera/x.yaml") is None


def test_stop_timeouts_shorter_than_vllms_own_drain() -> None:
    cmd = ("vllm", "serve", "m", "--shutdown-timeout", "120")
    found = checks(attrs(*cmd, stop=60), stop_timeout=120.0)
    assert found["shutdown-timeout"].severity == "info"  # stop_llm waits the longer time itself
    assert found["shutdown-timeout"].fix.startswith('set llm.stop_timeout to "150s" or more')
    assert found["container-shutdown-timeout"].severity == "warning"
    assert found["container-shutdown-timeout"].fix == "recreate it with --stop-timeout 150"
    found = checks(attrs(*cmd, stop=200), stop_timeout=150.0)
    assert "shutdown-timeout" not in found and "container-shutdown-timeout" not in found
    # no --shutdown-timeout (0.33's default 0, and every older vLLM): nothing to align
    assert "shutdown-timeout" not in checks(attrs("vllm", "serve", "m", stop=30), 30.0)
    bad = checks(attrs("vllm", "serve", "m", "--shutdown-timeout", "soon"))
    assert bad["shutdown-timeout"].severity == "error"


@pytest.mark.parametrize(
    "flag",
    [
        ["--per-request-spec-decode-metrics", "summary"],
        ["--per-request-spec-decode-metrics=detailed"],
        ["--per_request_spec_decode_metrics", "summary"],
    ],
)
def test_a_drafter_without_per_request_stats_is_told_how_canaries_count_under_load(
    flag: list[str],
) -> None:
    found = checks(attrs("vllm", "serve", "m", "-sc", SPEC))
    assert found["per-request-spec-decode-metrics"].severity == "info"
    assert (
        "--per-request-spec-decode-metrics summary" in found["per-request-spec-decode-metrics"].fix
    )
    assert "per-request-spec-decode-metrics" not in checks(
        attrs("vllm", "serve", "m", "-sc", SPEC, *flag)
    )
    off = checks(
        attrs("vllm", "serve", "m", "-sc", SPEC, "--per-request-spec-decode-metrics", "none")
    )
    assert "per-request-spec-decode-metrics" in off
    assert "per-request-spec-decode-metrics" not in checks(attrs("vllm", "serve", "m"))


# --- the seeds' own command lines ---------------------------------------------------------------


def test_the_dflash_reports_serve_line_gets_its_drafter_warning() -> None:
    """The stack that locked the box: 0.80 with 4 DFlash sequences, written the old way."""
    found = checks(attrs(*DFLASH_REPORT), release="0.33.0")
    scratch = found["drafter-scratch"]
    assert scratch.severity == "warning"
    assert "dflash, inferred from the drafter 'z-lab/Qwen3.6-35B-A3B-DFlash'" in scratch.message
    assert "0.8 + 4 x 0.0125 = 0.85" in scratch.message
    assert scratch.fix == "lower --max-num-seqs to 3 or less"
    assert found["gpu-memory-utilization"].severity == "info"  # 0.80 itself is the house rule
    assert found["speculative-spelling"].severity == "info"
    assert "--speculative-model --num-speculative-tokens" in found["speculative-spelling"].message
    assert "0.33.0 has it" in found["per-request-spec-decode-metrics"].fix


def test_the_recipe_line_gets_vllms_default_utilisation_judged() -> None:
    found = checks(attrs(*UNSLOTH_RECIPE), release="0.33.0")
    util = found["gpu-memory-utilization"]
    assert util.severity == "error"
    assert "no --gpu-memory-utilization: vLLM 0.33.0's default 0.92 reserves 111" in util.message
    assert "mtp" in found["drafter-scratch"].message
    assert "default (256)" in found["drafter-scratch"].message
    assert found["drafter-scratch"].fix.startswith("lower --gpu-memory-utilization")
    assert found["vllm-release"].message == "vLLM 0.33.0 (from its GET /version)"
    older = checks(attrs(*UNSLOTH_RECIPE), release="0.12.0")
    assert "vLLM 0.12.0's default 0.9 reserves 109" in older["gpu-memory-utilization"].message
    assert "0.12.0 does not" in older["per-request-spec-decode-metrics"].fix


def test_the_release_from_the_image_tag_or_unknown() -> None:
    tagged = attrs("vllm", "serve", "m")
    tagged["Config"]["Image"] = "vllm/vllm-openai:v0.28.0"
    assert checks(tagged)["vllm-release"].message == "vLLM 0.28.0 (from its image tag)"
    assert "0.92" in checks(tagged)["gpu-memory-utilization"].message
    tagged["Config"]["Image"] = "localhost:5000/vllm-openai:cu130-nightly"
    assert "release unknown" in checks(tagged)["vllm-release"].message


def test_a_method_without_a_draft_model_has_no_scratch_and_a_clash_is_an_error() -> None:
    ngram = checks(attrs("vllm", "serve", "m", "--spec-method", "ngram", "--spec-tokens", "4"))
    assert ngram["drafter-scratch"].severity == "info"
    assert "no draft model" in ngram["drafter-scratch"].message
    few = checks(
        attrs(
            "vllm",
            "serve",
            "m",
            "-sc.method",
            "eagle3",
            "--max-num-seqs",
            "4",
            "--gpu-memory-utilization",
            "0.6",
        )
    )
    assert few["drafter-scratch"].severity == "info"  # 0.6 + 4 x 0.0125 = 0.65: room left
    clash = checks(attrs("vllm", "serve", "m", "-sc", SPEC, "--spec-tokens", "3"))
    assert clash["speculative-flags"].severity == "error"


def test_a_drain_says_what_new_requests_get_meanwhile() -> None:
    found = checks(attrs("vllm", "serve", "m", "--shutdown-timeout", "300", stop=400))
    assert found["drain-answers"].severity == "info"
    assert "refused at once with HTTP 500" in found["drain-answers"].message
    assert "cannot schedule new futures after shutdown" in found["drain-answers"].message
    assert "drain-answers" not in checks(attrs("vllm", "serve", "m"))  # 0: nothing answered so


# --- vLLM 0.34: no share written means 1.0 with the extensible KV cache (issue 35) -----------


def test_a_0_34_engine_without_a_share_takes_all_of_it_with_the_extensible_kv_cache() -> None:
    """0.34.0's ``gpu_memory_utilization`` defaults to None, resolved to 1.0 while the extensible
    KV cache is on (on by default on CUDA); doctor said 0.92 there, 0.33's figure."""
    util = checks(attrs("vllm", "serve", "m"), release="0.34.0")["gpu-memory-utilization"]
    assert util.severity == "error"
    assert "vLLM 0.34.0's default 1 with the extensible KV cache" in util.message, util.message
    assert "reserves 121 of 121 GiB (0 GiB left)" in util.message, util.message
    assert util.fix == "use --gpu-memory-utilization 0.8 or less"
    older = checks(attrs("vllm", "serve", "m"), release="0.33.0")["gpu-memory-utilization"]
    assert "vLLM 0.33.0's default 0.92 reserves 111" in older.message, older.message


@pytest.mark.parametrize(
    "off",
    [
        ["--no-enable-extensible-kv-cache"],
        ["--disable-extensible-kv-cache"],  # 0.34's EnableDisableAction pairs them
        ["--enable-extensible-kv-cache=false"],
        ["--kv-cache-memory-bytes", "60G"],  # sizes the cache itself: the extensible one is off
        ["--num-gpu-blocks-override", "4096"],
    ],
)
def test_a_0_34_engine_with_the_extensible_kv_cache_off_keeps_0_92(off: list[str]) -> None:
    found = checks(attrs("vllm", "serve", "m", *off), release="0.34.0")
    util = found["gpu-memory-utilization"]
    assert "vLLM 0.34.0's default 0.92 reserves 111" in util.message, (off, util.message)
    assert "extensible" not in util.message


def test_a_share_written_as_vllms_other_spelling_is_read() -> None:
    """``--device-memory-utilization`` is the same flag (arg_utils.py 0.33.0:1390, 0.34.0:1405):
    doctor took such an engine for one with no share written."""
    found = checks(attrs("vllm", "serve", "m", "--device-memory-utilization", "0.7"))
    util = found["gpu-memory-utilization"]
    assert util.severity == "info" and "--gpu-memory-utilization 0.7" in util.message, util.message


def test_a_false_in_the_config_file_turns_a_switch_off_as_vllm_reads_it(tmp_path: Path) -> None:
    """vLLM turns a YAML ``false`` into ``--no-KEY`` when that flag exists (argparse_utils.py
    0.34.0:654-658): a dashed key, as its docs write them."""
    (tmp_path / "vllm.yaml").write_text("enable-extensible-kv-cache: false\n")
    a = attrs(
        "vllm",
        "serve",
        "m",
        "--config",
        "/etc/vllm/vllm.yaml",
        mounts=[{"Destination": "/etc/vllm", "Source": str(tmp_path)}],
    )
    util = checks(a, release="0.34.0")["gpu-memory-utilization"]
    assert "0.92" in util.message and "extensible" not in util.message, util.message


def test_a_release_newer_than_the_newest_known_is_said_not_guessed() -> None:
    found = checks(attrs("vllm", "serve", "m", "--gpu-memory-utilization", "0.8"), release="0.35.1")
    said = found["vllm-release"]
    assert said.severity == "warning", said
    assert "newer than 0.34.0, the newest release sparkwarden has read" in said.message
    assert "judged as 0.34.0" in said.message


def test_a_shutdown_timeout_that_is_not_whole_seconds_is_refused_by_vllm() -> None:
    """``--shutdown-timeout`` is ``type=int`` (arg_utils.py 0.33.0:1940-1944, 0.34.0:1971-1976):
    vLLM refuses "2.5" at start, so the drain sparkwarden plans for never happens."""
    found = checks(attrs("vllm", "serve", "m", "--shutdown-timeout", "2.5"))
    said = found["shutdown-timeout"]
    assert said.severity == "error" and "whole number of seconds" in said.message, said
    assert said.fix == "--shutdown-timeout 3"
    whole = checks(attrs("vllm", "serve", "m", "--shutdown-timeout", "30"))
    assert "shutdown-timeout" not in whole or whole["shutdown-timeout"].severity != "error"


def test_an_api_server_kept_alive_over_a_dead_engine_is_named() -> None:
    """``VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1``: the API server outlives a dead engine
    (launchers/launcher.py 0.33.0:330-336), so Docker never sees the container exit."""
    a = attrs("vllm", "serve", "m")
    a["Config"]["Env"] = ["PATH=/usr/bin", "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1"]
    said = checks(a)["keep-alive-on-engine-death"]
    assert said.severity == "warning" and "outlives a dead engine" in said.message, said
    assert "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH" in said.fix
    a["Config"]["Env"] = ["VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=0"]
    assert "keep-alive-on-engine-death" not in checks(a)


@pytest.mark.parametrize(
    ("method", "known"),
    [("dflash", True), ("qwen3_next_mtp", True), ("ngram_gpu", True), ("dflsh", False)],
)
def test_a_speculative_method_vllm_does_not_build_in_is_named(method: str, known: bool) -> None:
    spec = json.dumps({"method": method, "model": "some/drafter", "num_speculative_tokens": 4})
    found = checks(attrs("vllm", "serve", "m", "--speculative-config", spec))
    if known:
        assert "speculative-method" not in found
    else:
        said = found["speculative-method"]
        assert said.severity == "warning" and repr(method) in said.message, said
        assert "plugin" in said.message


def test_an_engine_that_takes_the_memory_free_at_its_start_is_known_by_its_flags() -> None:
    """What the daemon reads of the engine it watches (once per start): vLLM 0.34 with no share
    sizes its KV cache to what is free, so a floor breach is its own cache."""
    bare = attrs("vllm", "serve", "m")
    said = fills_free_memory(bare, "0.34.0")
    assert said is not None and "extensible KV cache" in said, said
    assert fills_free_memory(bare, "0.33.0") is None
    assert (
        fills_free_memory(attrs("vllm", "serve", "m", "--gpu-memory-utilization", "0.8"), "0.34.0")
        is None
    )
    assert fills_free_memory(
        attrs("vllm", "serve", "m", "--gpu-memory-utilization", "1.0"), "0.33.0"
    )
