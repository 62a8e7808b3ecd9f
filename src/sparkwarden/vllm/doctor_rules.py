"""What ``sparkwarden doctor`` knows about this machine's traps: pure checks of Docker's inspect
data, the config and the host's memory, each finding with a severity and a one-line fix.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

import yaml

from sparkwarden.base.columns import fit
from sparkwarden.base.containers import FIGHTING
from sparkwarden.config.schema import Config
from sparkwarden.vllm import serve_flags

Severity = Literal["error", "warning", "info"]
ORDER: dict[str, int] = {"error": 0, "warning": 1, "info": 2}

#: Above this, the OS (in the same unified memory) starves: SSH hangs, the box may lock up.
MAX_GPU_UTIL = 0.80
RISKY_SEQS = 8
#: After ``--shutdown-timeout``, vLLM still tears its engine down (it kills it after ~5 s).
SHUTDOWN_MARGIN = 30.0
AUTOHEAL_LABELS = ("autoheal", "autoheal.stop.timeout", "com.centurylinklabs.watchtower.enable")


@dataclass(frozen=True)
class Finding:
    severity: Severity
    subject: str
    check: str
    message: str
    fix: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def command_line(attrs: dict[str, Any]) -> list[str]:
    config = attrs.get("Config") or {}
    return [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])]


def host_path(attrs: dict[str, Any], path: str) -> str | None:
    """Where a file inside the container lives on the host, through its bind mounts and
    volumes (the longest matching destination wins); None when no mount holds it."""
    config = attrs.get("Config") or {}
    if not path.startswith("/"):
        path = posixpath.join(config.get("WorkingDir") or "/", path)
    path = posixpath.normpath(path)
    best: tuple[int, str] | None = None
    for mount in attrs.get("Mounts") or []:
        dest, source = mount.get("Destination") or "", mount.get("Source") or ""
        inside = path == dest or path.startswith(dest.rstrip("/") + "/")
        if source and inside and (best is None or len(dest) > best[0]):
            best = (len(dest), source + path[len(dest.rstrip("/")) :])
    return best[1] if best else None


def shutdown_timeout(flags: Mapping[str, str]) -> float | None:
    """vLLM's ``--shutdown-timeout`` (0.33+): how long it lets running requests finish after
    SIGTERM (0, its default, aborts them). None when not given, or given as no number."""
    if "shutdown-timeout" not in flags:
        return None
    try:
        return serve_flags.shutdown_timeout(flags)
    except ValueError:
        return None


def check_llm(
    name: str,
    attrs: dict[str, Any],
    mem_total_gib: float,
    flags: Mapping[str, str],
    stop_timeout: float | None = None,
    config_problem: str | None = None,
) -> list[Finding]:
    """``flags``: the engine's command line and ``--config`` file read by :mod:`vllmflags`;
    ``stop_timeout``: sparkwarden's ``llm.stop_timeout``; ``config_problem``: why the
    ``--config`` file could not be read, if it could not."""
    host = attrs.get("HostConfig") or {}
    config = attrs.get("Config") or {}
    found: list[Finding] = []

    def add(severity: Severity, check: str, message: str, fix: str) -> None:
        found.append(Finding(severity, name, check, message, fix))

    if config_problem is not None:
        add(
            "warning",
            "config-file",
            f"--config {flags.get('config')}: {config_problem}; the flags set there "
            "(speculative config, --disable-log-stats, memory) were not checked",
            "mount the file from the host (e.g. -v /etc/vllm:/etc/vllm:ro), "
            "or pass the flags on the command line",
        )
    if flags.get("disable-log-stats") == "true":
        add(
            "error",
            "disable-log-stats",
            "--disable-log-stats: /metrics answers with no vllm: series, so sparkwarden cannot "
            "see running requests (a planned restart waits the whole drain deadline), nor a "
            "stalled engine, nor drafting health",
            "remove --disable-log-stats (the stat logger costs little)",
        )
    util_text = flags.get("gpu-memory-utilization")
    if util_text is not None:
        try:
            util = float(util_text)
        except ValueError:
            util = None
        if util is not None:
            reserved = util * mem_total_gib
            left = mem_total_gib - reserved
            if util > MAX_GPU_UTIL:
                add(
                    "error",
                    "gpu-memory-utilization",
                    f"--gpu-memory-utilization {util:g} reserves {reserved:.0f} of "
                    f"{mem_total_gib:.0f} GiB, leaving {left:.0f} GiB for the OS and drafter "
                    "scratch: past ~0.85 in use the box stops spawning processes",
                    f"use --gpu-memory-utilization {MAX_GPU_UTIL:g} or less",
                )
            else:
                add(
                    "info",
                    "gpu-memory-utilization",
                    f"--gpu-memory-utilization {util:g} reserves {reserved:.0f} of "
                    f"{mem_total_gib:.0f} GiB ({left:.0f} GiB left)",
                    "none needed",
                )
    method = speculative_method(serve_flags.speculative(flags))
    seqs_text = flags.get("max-num-seqs")
    seqs = int(seqs_text) if seqs_text and seqs_text.isdigit() else None
    if method and (seqs is None or seqs > RISKY_SEQS):
        add(
            "warning",
            "drafter-scratch",
            f"speculative decoding ({method}) with --max-num-seqs {seqs or 'default (256)'}: the "
            "drafter's per-sequence scratch is allocated outside --gpu-memory-utilization",
            f"lower --max-num-seqs (e.g. {RISKY_SEQS}) or leave room for seqs x drafter scratch",
        )
    if method and flags.get("per-request-spec-decode-metrics", "none") == "none":
        add(
            "info",
            "per-request-spec-decode-metrics",
            "the drafting canary reads vLLM's counters, which count only while the engine is "
            "idle: on a busy box it waits for idle spells (hours), and a user arriving spoils it",
            "add --per-request-spec-decode-metrics summary (vLLM 0.33.0 has it, 0.28.0 does "
            "not): each answer then carries its own acceptance, and a canary counts under load",
        )
    policy = (host.get("RestartPolicy") or {}).get("Name") or "no"
    if policy in FIGHTING:
        add(
            "warning",
            "restart-policy",
            f"restart policy {policy!r} makes Docker restart it at once, into ghost memory, "
            "fighting sparkwarden's own safe restart",
            f"docker update --restart=no {name}",
        )
    stop = config.get("StopTimeout")
    found += _shutdown(name, flags, stop, stop_timeout)
    if stop is None or stop <= 10:
        add(
            "warning",
            "stop-timeout",
            f"stop timeout {stop if stop is not None else 'default (10 s)'}: a plain docker stop "
            "or a host shutdown SIGKILLs vLLM mid-teardown (sparkwarden uses its own)",
            "recreate it with --stop-timeout 120",
        )
    mounts = [m.get("Destination", "") for m in attrs.get("Mounts") or []]
    if not any(d in ("/root/.cache/vllm", "/root/.cache", "/root") for d in mounts):
        add(
            "warning",
            "compile-cache",
            "no persistent mount for /root/.cache/vllm: every start recompiles (13-16 min "
            "cold boots instead of ~2)",
            "mount a volume at /root/.cache/vllm (e.g. -v vllm-cache:/root/.cache/vllm)",
        )
    if (flags.get("kv-cache-dtype") or "").startswith("fp8"):
        add(
            "info",
            "fp8-kv-cache",
            "--kv-cache-dtype fp8: a checkpoint without fp8 calibration scales can boot healthy "
            "and die on the first message (the zombie boot)",
            "none needed: sparkwarden's chat probe catches it; prefer calibrated checkpoints",
        )
    if not host.get("Init"):
        add(
            "info",
            "init",
            "no --init: vLLM runs as PID 1 and must reap its own children",
            "recreate it with --init",
        )
    return found


def speculative_method(spec: dict[str, Any] | None) -> str | None:
    if spec is None:
        return None
    if not spec:
        return "unparsed --speculative-config"
    return str(spec.get("method") or "speculative decoding")


def _shutdown(
    name: str, flags: Mapping[str, str], container_stop: float | None, stop_timeout: float | None
) -> list[Finding]:
    """A stop timeout shorter than vLLM's own drain (``--shutdown-timeout``, 0.33+) plus its
    teardown SIGKILLs the engine while running requests finish."""
    try:
        drain = serve_flags.shutdown_timeout(flags)
    except ValueError as exc:
        return [Finding("error", name, "shutdown-timeout", str(exc), "give it a number of seconds")]
    if drain <= 0:
        return []
    need = drain + SHUTDOWN_MARGIN
    why = (
        f"is shorter than --shutdown-timeout {drain:g}s plus {SHUTDOWN_MARGIN:g}s of teardown: "
        "the stop SIGKILLs vLLM while it lets running requests finish"
    )
    found = []
    if stop_timeout is not None and stop_timeout < need:
        found.append(  # the sequence stops with the longer timeout itself: only said
            Finding(
                "info",
                name,
                "shutdown-timeout",
                f"sparkwarden's llm.stop_timeout {stop_timeout:g}s {why}; its stop_llm waits "
                f"{need:g}s instead",
                f'set llm.stop_timeout to "{need:g}s" or more to say so in the config',
            )
        )
    container = container_stop if container_stop is not None else 10.0
    if container < need:
        found.append(
            Finding(
                "warning",
                name,
                "container-shutdown-timeout",
                f"the container's stop timeout {container:g}s {why} (a plain docker stop, or "
                "a host shutdown)",
                f"recreate it with --stop-timeout {need:g}",
            )
        )
    return found


def check_voice(name: str, attrs: dict[str, Any]) -> list[Finding]:
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    healers = [key for key in labels if key in AUTOHEAL_LABELS or key.startswith("autoheal")]
    if not healers:
        return []
    return [
        Finding(
            "warning",
            name,
            "autoheal",
            f"auto-heal labels {', '.join(sorted(healers))}: an auto-healer would "
            "restart it while sparkwarden holds it paused",
            f"remove the labels from {name} (or exclude it from the healer)",
        )
    ]


def check_config(config: Config, mem_total_gib: float) -> list[Finding]:
    found: list[Finding] = []
    gate = config.memory.start_min_available_gib
    if gate >= mem_total_gib:
        found.append(
            Finding(
                "error",
                "config",
                "start-gate",
                f"memory.start_min_available_gib {gate:g} GiB can never be met: "
                f"the host has {mem_total_gib:.0f} GiB in all",
                "set it below MemTotal, to what the engine needs to start",
            )
        )
    if config.llm.health_timeout < 900:
        found.append(
            Finding(
                "warning",
                "config",
                "health-timeout",
                f"llm.health_timeout {config.llm.health_timeout:g}s is shorter "
                "than a cold boot (13-16 min)",
                'set it to "20m"',
            )
        )
    if config.llm.stop_timeout < 30:
        found.append(
            Finding(
                "warning",
                "config",
                "stop-timeout",
                f"llm.stop_timeout {config.llm.stop_timeout:g}s may SIGKILL vLLM mid-teardown",
                'set it to "120s"',
            )
        )
    if config.watch.max_uptime > 22 * 3600 or config.watch.max_uptime == 0:
        found.append(
            Finding(
                "warning",
                "config",
                "max-uptime",
                "watch.max_uptime is past hour 22: DFlash engines crash around hour 23",
                'set it to "20h"',
            )
        )
    return found


def verdict(findings: list[Finding]) -> int:
    return 1 if any(f.severity == "error" for f in findings) else 0


def format_text(findings: list[Finding]) -> str:
    if not findings:
        return "sparkwarden doctor: no findings"
    lines = []
    for f in sorted(findings, key=lambda f: (ORDER[f.severity], f.subject, f.check)):
        lines += fit(f"{f.severity.upper():<8}{f.subject}: {f.message}", indent=" " * 8)
        lines += fit(f"{'':<8}fix: {f.fix}", indent=" " * 13)
    errors = sum(f.severity == "error" for f in findings)
    warnings = sum(f.severity == "warning" for f in findings)
    lines.append(f"sparkwarden doctor: {errors} error(s), {warnings} warning(s)")
    return "\n".join(lines)


def vllm_config_file(
    attrs: dict[str, Any], argv: list[str]
) -> tuple[dict[str, Any] | None, str | None]:
    """The engine's ``--config`` YAML, read on the host through the container's mounts:
    (its mapping, None), or (None, why it could not be read); (None, None) without one."""
    path = serve_flags.config_file(argv)
    if path is None:
        return None, None
    on_host = host_path(attrs, path)
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


def check_listener(
    subject: str, url: str, keyed: bool, port: int, privileged_below: int, refusal: str | None
) -> list[Finding]:
    """The port the engine (or the gateway) is reached on, when it is on this host: any local
    user may bind an unprivileged one while the engine is down or loading, and answer for it.
    sparkwarden then withholds the key (see :mod:`sparkwarden.vllm.keyguard`): no leak, but the
    run's probe fails."""
    found = []
    if refusal is not None and not refusal.startswith("nothing listens"):
        found.append(
            Finding(
                "error",
                subject,
                "listener",
                f"{url}: {refusal}",
                f"see who holds it: ss -ltnpe 'sport = :{port}'",
            )
        )
    if port >= privileged_below:
        found.append(
            Finding(
                "warning" if keyed else "info",
                subject,
                "unprivileged-port",
                f"{url} is on an unprivileged port: any local user who binds it first (while "
                "the engine is down or loading, with --net=host) answers for the engine; "
                + (
                    "sparkwarden sends the API key only to a listener owned by root or held "
                    "by the engine container, so such a squatter fails the run, not gets the key"
                    if keyed
                    else "no key is configured, so none can leak"
                ),
                f"use a port below {privileged_below} (e.g. vLLM --port 800 with --net=host), "
                "or publish the port from a bridge network (Docker's root-owned proxy holds it)",
            )
        )
    return found
