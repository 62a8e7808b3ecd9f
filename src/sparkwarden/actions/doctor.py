"""``sparkwarden doctor``: inspect the host and every configured container for known traps."""

from __future__ import annotations

import json
import os

from sparkwarden import doctor
from sparkwarden.adapters.docker_engine import DockerEngine
from sparkwarden.adapters.host import DROP_CACHES, Host
from sparkwarden.config import Config
from sparkwarden.doctor import Finding
from sparkwarden.errors import NoSuchContainer, SparkwardenError


def gather(config: Config) -> list[Finding]:
    total = Host().memory().total_gib
    findings = doctor.check_config(config, total)
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
                findings += (
                    doctor.check_llm(name, attrs, total)
                    if role == "llm"
                    else doctor.check_voice(name, attrs)
                )
    except SparkwardenError as exc:
        findings.append(
            Finding("error", "docker", "engine", str(exc), "start Docker, or check DOCKER_HOST")
        )
    finally:
        docker.close()
    return findings


def run(config: Config, as_json: bool) -> int:
    findings = gather(config)
    if as_json:
        print(json.dumps([f.to_json() for f in findings], indent=2))
    else:
        print(doctor.format_text(findings))
    return doctor.verdict(findings)
