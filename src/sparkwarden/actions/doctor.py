"""``sparkwarden doctor``: inspect the host and every configured container for known traps."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from sparkwarden.adapters.docker_engine import DockerEngine
from sparkwarden.adapters.host import DROP_CACHES, Host
from sparkwarden.adapters.listeners import unprivileged_port_start
from sparkwarden.base.containers import command_line
from sparkwarden.base.errors import NoSuchContainer, SparkwardenError
from sparkwarden.config.schema import API_KEY_ENV, GATEWAY_KEY_ENV, Config
from sparkwarden.vllm import doctor_rules, serve_flags
from sparkwarden.vllm.client import VllmClient
from sparkwarden.vllm.doctor_rules import Finding, vllm_config_file
from sparkwarden.vllm.keyguard import Engines, KeyGuard, docker_engines

#: Where the Docker engine listens (a member of group docker may use it; others may not).
DOCKER_SOCKET = "/var/run/docker.sock"


def gather(config: Config) -> list[Finding]:
    total = Host().memory().total_gib
    findings = doctor_rules.check_config(config, total)
    root = os.geteuid() == 0
    if not root:  # a member over SSH: what needs root is said, not reported broken
        findings.append(
            Finding(
                "info",
                "host",
                "drop-caches",
                f"not checked without root: whether {DROP_CACHES} is writable (the daemon, "
                "root, drops the caches)",
                "run 'sudo sparkwarden doctor' for the whole check",
            )
        )
    elif not os.access(DROP_CACHES, os.W_OK):
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
                running = bool((attrs.get("State") or {}).get("Running"))
                findings += doctor_rules.check_llm(
                    name,
                    attrs,
                    total,
                    flags,
                    config.llm.stop_timeout,
                    problem,
                    release(config) if running else None,
                )
        engines = docker_engines(docker, config.llm.containers)
        findings += _listener("llm", config.llm.base_url, config.llm.api_key_file, engines)
    except SparkwardenError as exc:
        theirs = not os.access(DOCKER_SOCKET, os.R_OK | os.W_OK)
        if not root and theirs and not os.environ.get("DOCKER_HOST"):
            findings.append(
                Finding(
                    "info",
                    "docker",
                    "engine",
                    f"containers not checked without root: {DOCKER_SOCKET} is root's",
                    "run 'sudo sparkwarden doctor' for the whole check",
                )
            )
        else:
            findings.append(
                Finding("error", "docker", "engine", str(exc), "start Docker, or check DOCKER_HOST")
            )
    finally:
        docker.close()
    if config.gateway is not None:
        gateway = config.gateway
        findings += _listener("gateway", gateway.url, gateway.api_key_file, lambda: Engines())
    if config.cluster is not None:  # the head: which set-up every node shows, what it lacks
        from sparkwarden.cluster import looks, setup

        findings += setup.check(looks.look(config), config.cluster.setup)
    return findings


def _listener(
    subject: str, url: str, key_file: object, engines: Callable[[], Engines]
) -> list[Finding]:
    """Whether the URL's port is on this host, unprivileged, or held by a stranger now."""
    guard = KeyGuard(url, engines)
    if guard.addresses() is None:
        return []  # another host's port: no local user can sit on it
    env = API_KEY_ENV if subject == "llm" else GATEWAY_KEY_ENV
    keyed = key_file is not None or bool(os.environ.get(env))
    return doctor_rules.check_listener(
        subject, url, keyed, guard.port, unprivileged_port_start(), guard.refusal()
    )


def release(config: Config) -> str | None:
    """What the engine at ``llm.base_url`` says it is (``GET /version``; open, no key)."""
    client = VllmClient(config.llm.base_url)
    try:
        return client.version(timeout=5.0)
    finally:
        client.close()


def run(config: Config, as_json: bool) -> int:
    findings = gather(config)
    if as_json:
        print(json.dumps([f.to_json() for f in findings], indent=2))
    else:
        print(doctor_rules.format_text(findings))
    return doctor_rules.verdict(findings)
