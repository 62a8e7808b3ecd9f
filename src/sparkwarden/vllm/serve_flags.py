"""vLLM's command line read as vLLM reads it, so doctor (and anything else) finds a flag in
whatever spelling an operator used.

vLLM 0.10 to 0.33 accept: ``--flag value``, ``--flag=value``, underscores for dashes, short
aliases (``-sc`` for ``--speculative-config`` from 0.33, ``-tp``, ...), dotted keys merged into a
JSON flag (``--speculative-config.method dflash``), and ``--config file.yaml`` whose keys are
flags that the command line overrides. Operators also wrap the whole command in a shell string
(``bash -c "vllm serve ..."``), which Docker then shows as three words. Pure: the YAML file is
read by the caller (it lives on the container's mounts) and passed in as a mapping.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

#: vLLM's short aliases (``vllm/engine/arg_utils.py``, 0.33)
ALIASES: Mapping[str, str] = {
    "-sc": "speculative-config",
    "-tp": "tensor-parallel-size",
    "-pp": "pipeline-parallel-size",
    "-dp": "data-parallel-size",
    "-ep": "enable-expert-parallel",
    "-q": "quantization",
    "-O": "compilation-config",
}
#: Flags that take no value: the next word is not theirs.
SWITCHES = frozenset(
    {
        "disable-log-stats",
        "disable-log-requests",
        "enable-log-requests",
        "enable-prefix-caching",
        "no-enable-prefix-caching",
        "enable-chunked-prefill",
        "enforce-eager",
        "trust-remote-code",
        "enable-expert-parallel",
        "enable-auto-tool-choice",
        "headless",
    }
)
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ash"})
#: vLLM's default when ``--shutdown-timeout`` is absent (0.33: abort in-flight requests at once)
SHUTDOWN_TIMEOUT_DEFAULT = 0.0


def canonical(name: str) -> str:
    """A flag's name as vLLM's help spells it: dashes, no leading ``--``."""
    return name.lstrip("-").replace("_", "-")


def unwrap(argv: Sequence[str]) -> list[str]:
    """The words of the vLLM command: a ``sh -c "..."`` / ``bash -lc '...'`` string is split
    as the shell would, and of a chain (``pip install x && exec vllm serve ...``) the part that
    runs vLLM is kept."""
    words = list(argv)
    for i, word in enumerate(words[:-1]):
        base = word.rsplit("/", 1)[-1]
        option = words[i + 1]
        if base in SHELLS and option.startswith("-") and "c" in option[1:] and i + 2 < len(words):
            return unwrap(_vllm_part(shlex.split(words[i + 2])))
    return words


def _vllm_part(words: list[str]) -> list[str]:
    parts: list[list[str]] = [[]]
    for word in words:
        if word in ("&&", "||", ";", "|"):
            parts.append([])
        else:
            parts[-1].append(word)
    for part in parts:
        if any("vllm" in word for word in part):
            return part
    return words


def read(argv: Sequence[str], config: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Every flag of a vLLM command line, by canonical name, last one wins; a bare switch reads
    ``"true"``; dotted keys are merged into their flag's JSON; ``config`` (the ``--config``
    YAML, loaded) comes first and the command line overrides it, as in vLLM."""
    flags: dict[str, str] = {}
    for key, value in (config or {}).items():
        if isinstance(value, bool):
            if value:
                flags[canonical(str(key))] = "true"
        elif isinstance(value, dict | list):
            flags[canonical(str(key))] = json.dumps(value)
        elif value is not None:
            flags[canonical(str(key))] = str(value)
    dotted: dict[str, dict[str, Any]] = {}
    words = unwrap(argv)
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or word in ("-", "--"):
            continue
        name, eq, value = word.partition("=")
        name = ALIASES.get(name, name)
        if not eq:
            if canonical(name) not in SWITCHES and i < len(words) and not _is_flag(words[i]):
                value = words[i]
                i += 1
            else:
                value = "true"
        if "." in name:  # --speculative-config.num_speculative_tokens 15: keys kept as written
            head, _, path = name.partition(".")
            _nest(dotted.setdefault(canonical(head), {}), path.split("."), _json_or_text(value))
        else:
            flags[canonical(name)] = value
    for key, nested in dotted.items():  # vLLM appends them after the command line: they win
        flags[key] = json.dumps(nested)
    return flags


def _is_flag(word: str) -> bool:
    return word.startswith("-") and not _number(word)


def _number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _nest(into: dict[str, Any], path: list[str], value: Any) -> None:
    for key in path[:-1]:
        into = into.setdefault(key, {})
    into[path[-1]] = value


def flag(argv: Sequence[str], name: str, config: Mapping[str, Any] | None = None) -> str | None:
    """The value of one flag, in any spelling vLLM accepts (``name`` without dashes)."""
    return read(argv, config).get(canonical(name))


def config_file(argv: Sequence[str]) -> str | None:
    """The path given to ``--config`` (a YAML file inside the container), if any."""
    return read(argv).get("config")


def speculative(flags: Mapping[str, str]) -> dict[str, Any] | None:
    """The speculative config as a mapping; ``{}`` when given but not JSON; None when absent."""
    text = flags.get("speculative-config")
    if text is None:
        return None
    spec = _json_or_text(text)
    return spec if isinstance(spec, dict) else {}


def shutdown_timeout(flags: Mapping[str, str]) -> float:
    """``--shutdown-timeout`` in seconds (0.33+): how long vLLM lets running requests finish
    after SIGTERM; 0 (the default) aborts them."""
    text = flags.get("shutdown-timeout")
    if text is None:
        return SHUTDOWN_TIMEOUT_DEFAULT
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"--shutdown-timeout {text!r} is not a number of seconds") from None
