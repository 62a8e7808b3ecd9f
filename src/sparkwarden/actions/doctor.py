"""``sparkwarden doctor``: inspect the host and every configured container for known traps."""

from __future__ import annotations

import json
import os
from typing import Any

import yaml

from sparkwarden import doctor, vllmflags
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
                if role == "voice":
                    findings += doctor.check_voice(name, attrs)
                    continue
                argv = doctor.command_line(attrs)
                yaml_config, problem = vllm_config_file(attrs, argv)
                flags = vllmflags.read(argv, yaml_config)
                findings += doctor.check_llm(
                    name, attrs, total, flags, config.llm.stop_timeout, problem
                )
    except SparkwardenError as exc:
        findings.append(
            Finding("error", "docker", "engine", str(exc), "start Docker, or check DOCKER_HOST")
        )
    finally:
        docker.close()
    return findings


def vllm_config_file(
    attrs: dict[str, Any], argv: list[str]
) -> tuple[dict[str, Any] | None, str | None]:
    """The engine's ``--config`` YAML, read on the host through the container's mounts:
    (its mapping, None), or (None, why it could not be read); (None, None) without one."""
    path = vllmflags.config_file(argv)
    if path is None:
        return None, None
    on_host = doctor.host_path(attrs, path)
    if on_host is None:
        return None, "the file is inside the image, on no mount sparkwarden can read"
    try:
        with open(on_host, encoding="utf-8") as file:
            loaded = yaml.safe_load(file)
    except (OSError, yaml.YAMLError) as exc:
        return None, f"could not read it on the host at {on_host}: {exc}"
    if not isinstance(loaded, dict):
        return None, f"{on_host} is not a YAML mapping of flags"
    return loaded, None


def run(config: Config, as_json: bool) -> int:
    findings = gather(config)
    if as_json:
        print(json.dumps([f.to_json() for f in findings], indent=2))
    else:
        print(doctor.format_text(findings))
    return doctor.verdict(findings)
