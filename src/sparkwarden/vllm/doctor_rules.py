"""What ``sparkwarden doctor`` knows about this machine's traps: pure checks of Docker's inspect
data, the config and the host's memory, each finding with a severity and a one-line fix.
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

import yaml

from sparkwarden.base.columns import fit
from sparkwarden.base.containers import FIGHTING, command_line
from sparkwarden.config.schema import Config
from sparkwarden.vllm import releases, serve_flags

Severity = Literal["error", "warning", "info"]
ORDER: dict[str, int] = {"error": 0, "warning": 1, "info": 2}

#: The field's house rule: never reserve more; the OS lives in the same unified memory.
MAX_GPU_UTIL = 0.80
#: Past this share of memory in use the box stops spawning processes (SSH hangs, ports never open).
LOCKUP_SHARE = 0.85
#: The least share of memory one sequence's drafter scratch takes, outside what
#: ``--gpu-memory-utilization`` reserves: the field's hard lock-up at 0.80 with 4 parallel DFlash
#: sequences puts 0.80 + 4 x share at the 0.85 line, so share >= 0.05 / 4 (1.5 GiB of 121).
DRAFTER_SHARE = (LOCKUP_SHARE - MAX_GPU_UTIL) / 4
#: vLLM's ``max_num_seqs`` when not given (the OpenAI server's default on a GPU)
DEFAULT_SEQS = 256
#: After ``--shutdown-timeout`` vLLM still tears its engine down (with 0 it kills the engine core
#: at once, vllm/v1/utils.py ``shutdown``); the stop must leave room for that teardown.
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
    """vLLM's ``--shutdown-timeout`` (0.27.0 on): how long it lets running requests finish after
    SIGTERM (0, its default, aborts them). None when not given, or given as no number."""
    if "shutdown-timeout" not in flags:
        return None
    try:
        return serve_flags.shutdown_timeout(flags)
    except ValueError:
        return None


def keeps_api_server_alive(env: list[str]) -> bool:
    """``VLLM_KEEP_ALIVE_ON_ENGINE_DEATH`` as vLLM reads it: ``bool(int(value))`` (envs.py
    0.33.0:1108-1110)."""
    for entry in env:
        key, _, value = str(entry).partition("=")
        if key == "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH":
            try:
                return bool(int(value or "0"))
            except ValueError:
                return False  # vLLM itself fails to start on it
    return False


def image_release(attrs: dict[str, Any]) -> str | None:
    """The release an image's tag names (``vllm/vllm-openai:v0.33.0``), if it names one."""
    image = str((attrs.get("Config") or {}).get("Image") or "")
    tag = image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else ""
    return tag.lstrip("v") if releases.parse(tag) else None


def check_llm(
    name: str,
    attrs: dict[str, Any],
    mem_total_gib: float,
    flags: Mapping[str, str],
    stop_timeout: float | None = None,
    config_problem: str | None = None,
    release: str | None = None,
) -> list[Finding]:
    """``flags``: the engine's command line and ``--config`` file read by :mod:`serve_flags`;
    ``stop_timeout``: sparkwarden's ``llm.stop_timeout``; ``config_problem``: why the
    ``--config`` file could not be read, if it could not; ``release``: what the engine's
    ``GET /version`` said (None: it did not answer; the image's tag is tried instead)."""
    host = attrs.get("HostConfig") or {}
    config = attrs.get("Config") or {}
    found: list[Finding] = []

    def add(severity: Severity, check: str, message: str, fix: str) -> None:
        found.append(Finding(severity, name, check, message, fix))

    said, source = (release, "GET /version") if release else (image_release(attrs), "image tag")
    version = releases.parse(said)
    newest = releases.name(releases.NEWEST)
    if version is not None and version > releases.NEWEST:
        add(
            "warning",
            "vllm-release",
            f"vLLM {said} (from its {source}) is newer than {newest}, the newest release "
            f"sparkwarden has read: its defaults are judged as {newest}'s, unread",
            "upgrade sparkwarden, or check this release's defaults against docs/vllm.md",
        )
    elif version is not None:
        add("info", "vllm-release", f"vLLM {said} (from its {source})", "none needed")
    else:
        add(
            "info",
            "vllm-release",
            f"vLLM release unknown (no answer at GET /version, no release in the image tag): "
            f"judged as {releases.name(releases.NEWEST)}, the newest release sparkwarden knows",
            "start the engine, then run doctor again",
        )

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
    found += _memory(name, flags, mem_total_gib, version)
    spec = serve_flags.speculative(flags)
    if spec is not None:
        found += _speculative(name, flags, spec, version)
    if keeps_api_server_alive(config.get("Env") or []):
        add(
            "warning",
            "keep-alive-on-engine-death",
            "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH is set: the API server outlives a dead engine "
            "(launchers/launcher.py 0.33.0:330-336), so the container stays up and Docker "
            "never tells its exit; sparkwarden then learns of the death only from /health and "
            "its chat checks, a check or more later",
            "remove VLLM_KEEP_ALIVE_ON_ENGINE_DEATH from the container's environment",
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


def gpu_utilization(
    flags: Mapping[str, str], version: releases.Release | None
) -> tuple[float | None, str]:
    """The share vLLM reserves, and how it was set: written, or the release's default."""
    text = flags.get("gpu-memory-utilization")
    if text is None:
        extensible = extensible_kv_cache(flags, version)
        default = releases.default_gpu_memory_utilization(version, extensible)
        which = releases.name(version or releases.NEWEST)
        said = f"no --gpu-memory-utilization: vLLM {which}'s default {default:g}"
        if extensible:
            said += " with the extensible KV cache (on by default on CUDA: sized at start-up from "
            said += "the memory then free)"
        return default, said
    try:
        return float(text), f"--gpu-memory-utilization {text}"
    except ValueError:
        return None, f"--gpu-memory-utilization {text!r}"


def fills_free_memory(attrs: dict[str, Any], release: str | None) -> str | None:
    """Why this engine takes the memory that is free when it starts, if it does (vLLM 0.34
    with no ``--gpu-memory-utilization``: its extensible KV cache is sized to what is free):
    a floor breach, or a fall of ``MemAvailable`` while it serves, is its own cache then, and a
    restart would only take it again. Read from its command line and ``--config`` file."""
    argv = command_line(attrs)
    loaded, _ = vllm_config_file(attrs, argv)
    flags = serve_flags.read(argv, loaded)
    version = releases.parse(release) or releases.parse(image_release(attrs))
    util, said = gpu_utilization(flags, version)
    if util is None or util < 1.0:
        return None
    return said


def extensible_kv_cache(flags: Mapping[str, str], version: releases.Release | None) -> bool:
    """Whether the engine sizes its KV cache from the memory free at start-up (0.34.0's
    extensible KV cache): on unless turned off, or the cache is sized another way."""
    if version is not None and version < releases.EXTENSIBLE_KV_CACHE:
        return False
    asked = flags.get("enable-extensible-kv-cache", "").lower()
    off = (
        asked in ("false", "0", "no")
        or "no-enable-extensible-kv-cache" in flags
        or "disable-extensible-kv-cache" in flags
    )
    sized = "kv-cache-memory-bytes" in flags or "num-gpu-blocks-override" in flags
    return not off and not sized


def _memory(
    name: str, flags: Mapping[str, str], total: float, version: releases.Release | None
) -> list[Finding]:
    """What the engine reserves of the unified memory, written or vLLM's default."""
    util, said = gpu_utilization(flags, version)
    if util is None:
        return [Finding("error", name, "gpu-memory-utilization", f"{said} is not a number", "")]
    reserved, left = util * total, total - util * total
    figures = f"{said} reserves {reserved:.0f} of {total:.0f} GiB ({left:.0f} GiB left)"
    if util > MAX_GPU_UTIL:
        return [
            Finding(
                "error",
                name,
                "gpu-memory-utilization",
                f"{figures}, for the OS and drafter scratch: past ~{LOCKUP_SHARE:g} in use "
                "the box stops spawning processes",
                f"use --gpu-memory-utilization {MAX_GPU_UTIL:g} or less",
            )
        ]
    return [Finding("info", name, "gpu-memory-utilization", figures, "none needed")]


def _speculative(
    name: str,
    flags: Mapping[str, str],
    spec: dict[str, Any],
    version: releases.Release | None,
) -> list[Finding]:
    """The drafter's scratch against what is left under the lock-up line, for every method and
    spelling; the spellings and merges vLLM refuses or that only forks accept."""
    found: list[Finding] = []
    if not spec:
        found.append(
            Finding(
                "warning",
                name,
                "speculative-config",
                f"--speculative-config {flags.get('speculative-config')!r} is not JSON: its "
                "method and drafter are unknown (vLLM refuses it at start)",
                "write it as JSON, or as dotted keys (-sc.method mtp)",
            )
        )
        return found
    for clash in serve_flags.spec_conflicts(flags):
        found.append(
            Finding(
                "error",
                name,
                "speculative-flags",
                f"{clash} are mutually exclusive: vLLM refuses to start",
                "give each key once",
            )
        )
    old = [f"--{f}" for f in serve_flags.OLD_SPEC_FLAGS if f in flags]
    if old:
        found.append(
            Finding(
                "info",
                name,
                "speculative-spelling",
                f"{' '.join(old)}: the old spelling, which released vLLM 0.12.0 to 0.33.0 "
                "refuse (this image's build accepts it); read as the speculative config's "
                "model and num_speculative_tokens",
                "on released vLLM write --spec-model X --spec-tokens N (0.27.0 on) or "
                "--speculative-config",
            )
        )
    method = serve_flags.method(spec)
    if method not in serve_flags.BUILT_IN_METHODS:
        found.append(
            Finding(
                "warning",
                name,
                "speculative-method",
                f"speculative method {method!r} is not one vLLM builds in (0.33.0, 0.34.0): "
                "vLLM starts only if a plugin in the image registered it (0.34.0), else it "
                "refuses the config",
                "check the spelling (dflash, eagle3, mtp, ngram, ...), or that the plugin "
                "registering it is installed",
            )
        )
    how = "" if spec.get("method") else f", inferred from the drafter {spec.get('model')!r}"
    what = f"speculative decoding ({method}{how})"
    if method in serve_flags.NO_DRAFTER:
        found.append(
            Finding("info", name, "drafter-scratch", f"{what}: no draft model, no scratch", "none")
        )
    else:
        found += _drafter_scratch(name, flags, what, version)
    if flags.get("per-request-spec-decode-metrics", "none") == "none":
        since = releases.name(releases.PER_REQUEST_SPEC_DECODE)
        has = releases.has(version, releases.PER_REQUEST_SPEC_DECODE)
        which = (
            ""
            if version is None
            else f"; {releases.name(version)} " + ("has it" if has else "does not")
        )
        found.append(
            Finding(
                "info",
                name,
                "per-request-spec-decode-metrics",
                "the drafting canary reads vLLM's counters, which count only while the engine "
                "is idle: on a busy box it waits for idle spells (hours), and a user arriving "
                "spoils it",
                f"add --per-request-spec-decode-metrics summary (vLLM {since} on{which}): each "
                "answer then carries its own acceptance, and a canary counts under load",
            )
        )
    return found


def _drafter_scratch(
    name: str, flags: Mapping[str, str], what: str, version: releases.Release | None
) -> list[Finding]:
    util, _ = gpu_utilization(flags, version)
    seqs_text = flags.get("max-num-seqs")
    seqs = int(seqs_text) if seqs_text and seqs_text.isdigit() else DEFAULT_SEQS
    seqs_said = seqs_text if seqs_text and seqs_text.isdigit() else f"default ({DEFAULT_SEQS})"
    if util is None:
        return []
    need = util + seqs * DRAFTER_SHARE
    if need < LOCKUP_SHARE:
        return [
            Finding(
                "info",
                name,
                "drafter-scratch",
                f"{what}: {util:g} reserved + {seqs} sequences x {DRAFTER_SHARE:.4g} of drafter "
                f"scratch = {need:.2f}, under the {LOCKUP_SHARE:g} line",
                "none needed",
            )
        ]
    fits = math.ceil((LOCKUP_SHARE - util) / DRAFTER_SHARE) - 1
    lower = round(LOCKUP_SHARE - (seqs + 1) * DRAFTER_SHARE, 2)
    fix = (
        f"lower --max-num-seqs to {fits} or less"
        if fits >= 1
        else f"lower --gpu-memory-utilization to {max(lower, 0.0):g}"
    )
    return [
        Finding(
            "warning",
            name,
            "drafter-scratch",
            f"{what} with --max-num-seqs {seqs_said}: the drafter's per-sequence scratch (at "
            f"least {DRAFTER_SHARE:.4g} of memory each: the field's lock-up at 0.80 with 4 "
            f"DFlash sequences) lies outside --gpu-memory-utilization: {util:g} + {seqs} x "
            f"{DRAFTER_SHARE:.4g} = {need:.2f}, at or past the {LOCKUP_SHARE:g} line",
            fix,
        )
    ]


def _shutdown(
    name: str, flags: Mapping[str, str], container_stop: float | None, stop_timeout: float | None
) -> list[Finding]:
    """A stop timeout shorter than vLLM's own drain (``--shutdown-timeout``, 0.27.0 on) plus its
    teardown SIGKILLs the engine while running requests finish."""
    try:
        drain = serve_flags.shutdown_timeout(flags)
    except ValueError as exc:
        return [Finding("error", name, "shutdown-timeout", str(exc), "give it a number of seconds")]
    if drain != int(drain):  # type=int: arg_utils.py 0.33.0:1940-1944, 0.34.0:1971-1976
        return [
            Finding(
                "error",
                name,
                "shutdown-timeout",
                f"--shutdown-timeout {flags['shutdown-timeout']} is not a whole number of "
                "seconds: vLLM refuses it at start (it takes an int)",
                f"--shutdown-timeout {math.ceil(drain)}",
            )
        ]
    if drain <= 0:
        return []
    need = drain + SHUTDOWN_MARGIN
    found = [
        Finding(
            "info",
            name,
            "drain-answers",
            f"--shutdown-timeout {drain:g}: while vLLM lets running requests finish after "
            "SIGTERM, a new request is refused at once with HTTP 500 'cannot schedule new "
            "futures after shutdown' (vllm/renderers/base.py 0.32.0:94; 0.33 and 0.34 the "
            "same); a gateway with another replica retries it there (LiteLLM retries a 500)",
            "none: the price of not cutting running requests; sparkwarden's drain waits for "
            "quiet first, and vLLM's lasts only as long as the longest running request",
        )
    ]
    why = (
        f"is shorter than --shutdown-timeout {drain:g}s plus {SHUTDOWN_MARGIN:g}s of teardown: "
        "the stop SIGKILLs vLLM while it lets running requests finish"
    )
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
    if config.replicas is not None and config.rotation is None:
        found.append(
            Finding(
                "warning",
                "config",
                "replica-rotation",
                "[replicas] without [replicas.rotation]: while this Spark restarts, the gateway "
                "still sends it users, who get empty answers while vLLM drains",
                "set [replicas.rotation] and use the Nginx and LiteLLM examples (docs/replicas.md)",
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
