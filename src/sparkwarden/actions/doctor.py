"""``sparkwarden doctor``: inspect the host and every configured container for known traps."""

from __future__ import annotations

import json
import os

from sparkwarden.adapters.docker_engine import DockerEngine
from sparkwarden.adapters.host import DROP_CACHES, Host
from sparkwarden.base.containers import command_line
from sparkwarden.base.errors import NoSuchContainer, SparkwardenError
from sparkwarden.config.schema import Config
from sparkwarden.vllm import doctor_rules, serve_flags
from sparkwarden.vllm.doctor_rules import Finding, vllm_config_file


def gather(config: Config) -> list[Finding]:
    total = Host().memory().total_gib
    findings = doctor_rules.check_config(config, total)
    if not os.access(DROP_CACHES, os.W_OK):
        findings.append(
            Finding(
                "error",
                "host",
                "drop-caches",
                f"{DROP_CACHES} is not writable: the ghost memory cannot be freed",
                "run sparkwarden as root (the systemd unit does)",
            )
        )
    docker = DockerEngine(timeout=min(config.docker.timeout, 10.0), retry_for=0.0)
    try:
        for role, names in (("llm", config.llm.containers), ("voice", config.voice.containers)):
            for name in names:
                try:
                    attrs = docker.attrs(name)
                except NoSuchContainer:
                    findings.append(
                        Finding(
                            "error",
                            name,
                            "missing",
                            f"configured {role} container {name} does not exist",
                            f"create it, or remove it from {role}.containers",
                        )
                    )
                    continue
                if role == "voice":
                    findings += doctor_rules.check_voice(name, attrs)
                    continue
                argv = command_line(attrs)
                yaml_config, problem = vllm_config_file(attrs, argv)
                flags = serve_flags.read(argv, yaml_config)
                findings += doctor_rules.check_llm(
                    name, attrs, total, flags, config.llm.stop_timeout, problem
                )
    except SparkwardenError as exc:
        findings.append(
            Finding("error", "docker", "engine", str(exc), "start Docker, or check DOCKER_HOST")
        )
    finally:
        docker.close()
    if config.cluster is not None:  # the head: which set-up every node shows, what it lacks
        from sparkwarden.cluster import sequence, setup

        findings += setup.check(sequence.look(config), config.cluster.setup)
    return findings


def run(config: Config, as_json: bool) -> int:
    findings = gather(config)
    if as_json:
        print(json.dumps([f.to_json() for f in findings], indent=2))
    else:
        print(doctor_rules.format_text(findings))
    return doctor_rules.verdict(findings)
