"""vLLM's command line read as vLLM reads it, so doctor (and anything else) finds a flag in
whatever spelling an operator used.

Spellings, as the released code parses them (``vllm/utils/argparse_utils.py``,
``vllm/engine/arg_utils.py``; the lines per release are in docs/notes-27.md):

- ``--flag value``, ``--flag=value``, underscores for dashes;
- short aliases: ``-sc`` for ``--speculative-config`` (0.27.0 on), ``-cc`` for
  ``--compilation-config``, ``-tp``, ...; ``-O3``, ``-O 3``, ``-O=3`` for ``--optimization-level``
  (0.12.0 on; 0.12.0 also took ``-O.key`` for ``-cc.key``);
- dotted keys merged into a JSON flag: ``--speculative-config.method dflash``, and on the alias
  ``-sc.method dflash``;
- ``--spec-method``, ``--spec-model``, ``--spec-tokens`` merged into the speculative config
  (0.27.0 on), and the old ``--speculative-model X --num-speculative-tokens N``, which no release
  from 0.12.0 to 0.33.0 accepts but forked images (the DFlash report's) still do;
- ``--config file.yaml``, whose keys are flags that the command line overrides;
- the whole command wrapped in a shell string (``bash -c "vllm serve ..."``), which Docker shows
  as three words.

Pure: the YAML file is read by the caller (it lives on the container's mounts) and passed in.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

#: vLLM's short aliases (``vllm/engine/arg_utils.py``: 0.33.0 lines 992-1891, the same in 0.27.0 to
#: 0.29.0; ``-sc`` is absent from 0.12.0)
ALIASES: Mapping[str, str] = {
    "-sc": "speculative-config",
    "-cc": "compilation-config",
    "-ac": "attention-config",
    "-dc": "diffusion-config",
    "-tp": "tensor-parallel-size",
    "-pp": "pipeline-parallel-size",
    "-dp": "data-parallel-size",
    "-ep": "enable-expert-parallel",
    "-q": "quantization",
    "-n": "nnodes",
    "-r": "node-rank",
}
#: vLLM's other long spellings of one flag (``dest``): ``--device-memory-utilization`` is
#: ``--gpu-memory-utilization`` (arg_utils.py 0.33.0:1390, 0.34.0:1405).
SPELLED: Mapping[str, str] = {"device-memory-utilization": "gpu-memory-utilization"}
#: ``-O`` is ``--optimization-level`` (argparse_utils.py 0.33.0:395-409), never a JSON flag.
OPTIMIZATION = "optimization-level"
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
        "enable-sleep-mode",
        "headless",
        # 0.34.0: each --enable-x also reads as --disable-x (argparse_utils.py 0.34.0:120-145)
        "enable-extensible-kv-cache",
        "no-enable-extensible-kv-cache",
        "disable-extensible-kv-cache",
    }
)
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ash"})
#: What ends one command of a shell chain and begins the next.
CHAIN = frozenset({"&&", "||", ";", "|", "&", ";;"})
#: vLLM's default when ``--shutdown-timeout`` is absent (``vllm/config/vllm.py`` 0.33.0:454: 0,
#: abort in-flight requests and kill the engine core at once)
SHUTDOWN_TIMEOUT_DEFAULT = 0.0
#: Flags merged into the speculative config, and the key each sets: vLLM's own
#: (``create_speculative_config``, arg_utils.py 0.33.0:2109, from 0.27.0) and the old V0 spelling
#: (no release 0.12.0 to 0.33.0 accepts it; forked images such as the DFlash report's do).
SPEC_FLAGS: Mapping[str, str] = {
    "spec-method": "method",
    "spec-model": "model",
    "spec-tokens": "num_speculative_tokens",
    "speculative-model": "model",
    "num-speculative-tokens": "num_speculative_tokens",
}
OLD_SPEC_FLAGS = ("speculative-model", "num-speculative-tokens")


def canonical(name: str) -> str:
    """A flag's name as vLLM's help spells it: dashes, no leading ``--``; an alias resolved."""
    name = ALIASES.get(name, name).lstrip("-").replace("_", "-")
    return SPELLED.get(name, name)


def unwrap(argv: Sequence[str]) -> list[str]:
    """The words of the vLLM command: a ``sh -c "..."`` / ``bash -lc '...'`` string is split
    as the shell would, and of a chain (``pip install x && exec vllm serve ...``) the part that
    runs vLLM is kept."""
    script = _script(argv)
    return list(argv) if script is None else unwrap(_vllm_part(_split(script)))


def every_word(argv: Sequence[str]) -> list[str]:
    """Every word of the command, a shell string split as the shell would, each part of a chain
    kept (``ray start --head && exec vllm serve ...``)."""
    script = _script(argv)
    return list(argv) if script is None else every_word(_split(script))


def _split(script: str) -> list[str]:
    """A shell string's words as the shell reads them: quotes kept together, and ``;``,
    ``&&``, ``|``, ``&`` words of their own even when written against a word (``--head;``)."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def _script(words: Sequence[str]) -> str | None:
    """The script of a ``sh -c "..."`` (``bash -lc``, ...) command; None for a bare command."""
    for i, word in enumerate(words[:-1]):
        base = word.rsplit("/", 1)[-1]
        option = words[i + 1]
        if base in SHELLS and option.startswith("-") and "c" in option[1:] and i + 2 < len(words):
            return words[i + 2]
    return None


def chain(words: list[str]) -> list[list[str]]:
    """The commands of a shell chain (``a && b; c``), each its words."""
    parts: list[list[str]] = [[]]
    for word in words:
        if word in CHAIN:
            parts.append([])
        else:
            parts[-1].append(word)
    return [part for part in parts if part]


def _vllm_part(words: list[str]) -> list[str]:
    for part in chain(words):
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
            elif "_" not in str(key):  # vLLM adds --no-KEY as written, so a dashed key only
                flags["no-" + canonical(str(key))] = "true"
        elif isinstance(value, dict | list):
            flags[canonical(str(key))] = json.dumps(value)
        elif value is not None:
            flags[canonical(str(key))] = str(value)
    #: dotted groups by the head as written (vLLM files ``-sc.x`` under ``-sc``, apart from
    #: ``--speculative-config.y``), in the order first seen: vLLM appends them in that order
    dotted: dict[str, dict[str, Any]] = {}
    words = unwrap(argv)
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or word in ("-", "--"):
            continue
        if word.startswith("-O") and not word.startswith("-O."):
            level, i = _optimization(word, words, i)
            if level is not None:
                flags[OPTIMIZATION] = level
            continue
        name, eq, value = word.partition("=")
        if name.startswith("-O."):  # 0.12.0: -O.key is -cc.key (deprecated there, gone after)
            name = "-cc" + name[2:]
        if not eq:  # a dotted key takes the next word, whatever it is (0.33.0:469)
            dotted_key = "." in name
            if i < len(words) and (dotted_key or (_takes_value(name) and not _is_flag(words[i]))):
                value = words[i]
                i += 1
            else:
                value = "true"
        if "." in name:  # --speculative-config.num_speculative_tokens 15: keys kept as written
            head, _, path = name.partition(".")
            head = "--" + canonical(head) if head.startswith("--") else head
            parsed = _json_or_text(value)
            if path.endswith("+"):  # --x.key+ a,b: a list, appended to (argparse_utils 0.33.0:472)
                path, parsed = path[:-1], value.split(",")
            _nest(dotted.setdefault(head, {}), path.split("."), parsed)
        else:
            flags[canonical(name)] = value
    for head, nested in dotted.items():  # vLLM appends them after the command line: they win
        flags[canonical(head)] = json.dumps(nested)
    return flags


def _optimization(word: str, words: list[str], i: int) -> tuple[str | None, int]:
    """``-O3``, ``-O=3``, ``-Odecode``, or ``-O`` followed by 0-3 (argparse_utils.py 0.33.0:395)."""
    if word != "-O":
        return (word[3:] if word[2] == "=" else word[2:]), i
    if i < len(words) and words[i] in ("0", "1", "2", "3"):
        return words[i], i + 1
    return None, i


def _takes_value(name: str) -> bool:
    return canonical(name) not in SWITCHES


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
    if isinstance(value, list) and isinstance(into.get(path[-1]), list):
        into[path[-1]] = into[path[-1]] + value
    else:
        into[path[-1]] = value


def flag(argv: Sequence[str], name: str, config: Mapping[str, Any] | None = None) -> str | None:
    """The value of one flag, in any spelling vLLM accepts (``name`` without dashes)."""
    return read(argv, config).get(canonical(name))


def config_file(argv: Sequence[str]) -> str | None:
    """The path given to ``--config`` (a YAML file inside the container), if any."""
    return read(argv).get("config")


def speculative(flags: Mapping[str, str]) -> dict[str, Any] | None:
    """The speculative config as vLLM builds it: ``--speculative-config`` (any spelling) with
    ``--spec-method/--spec-model/--spec-tokens`` (and the old ``--speculative-model``,
    ``--num-speculative-tokens``) merged in; ``{}`` when given but not JSON; None when absent."""
    text = flags.get("speculative-config")
    spec: dict[str, Any] | None = None
    if text is not None:
        parsed = _json_or_text(text)
        spec = dict(parsed) if isinstance(parsed, dict) else {}
    for name, key in SPEC_FLAGS.items():
        if name in flags:
            spec = {} if spec is None else spec
            spec.setdefault(key, _json_or_text(flags[name]))
    return spec


#: Methods that run no draft model, hence hold no drafter scratch (``SpeculativeMethod``,
#: vllm/config/speculative.py 0.33.0:74).
NO_DRAFTER = frozenset({"ngram", "ngram_gpu", "suffix"})
#: The methods built into vLLM (``SpeculativeMethod``, ``vllm/config/speculative.py``
#: 0.33.0:68-82, 0.34.0:84-98; every ``*_mtp`` model type is ``mtp``): 0.33.0 also infers
#: ``custom_class`` from a proposer's path; 0.34.0 takes a name a plugin registered instead.
BUILT_IN_METHODS = frozenset(
    {
        "ngram",
        "draft_model",
        "suffix",
        "custom_class",
        "eagle",
        "eagle3",
        "extract_hidden_states",
        "mtp",
        "dflash",
        "ngram_gpu",
        "dspark",
    }
)


def method(spec: Mapping[str, Any]) -> str:
    """The method vLLM runs for a speculative config: the one written (an MTP model type such as
    ``qwen3_next_mtp`` is ``mtp``, speculative.py 0.33.0:1246), else what vLLM infers from the
    drafter's name (0.33.0:1236-1244 and 1443-1468: ``ngram``, ``eagle-``, ``eagle3``,
    ``dflash``, ``dspark``), else ``draft_model`` (vLLM then reads the drafter's config, which
    may make it ``mtp``)."""
    written = spec.get("method")
    model = str(spec.get("model") or "")
    lowered = model.lower()
    if written:
        name = str(written)
    elif model in ("ngram", "[ngram]"):
        name = "ngram"
    elif "eagle-" in lowered:
        name = "eagle"
    elif "eagle3" in lowered:
        name = "eagle3"
    elif "dflash" in lowered:
        name = "dflash"
    elif "dspark" in lowered:
        name = "dspark"
    else:
        name = "draft_model"
    if name == "[ngram]":
        return "ngram"
    return "mtp" if name.endswith("_mtp") else name


def spec_conflicts(flags: Mapping[str, str]) -> list[str]:
    """``--spec-*`` flags that repeat a key of ``--speculative-config``: vLLM refuses to start
    ("... are mutually exclusive", arg_utils.py 0.33.0:2109-2121)."""
    parsed = _json_or_text(flags.get("speculative-config") or "null")
    if not isinstance(parsed, dict):
        return []
    return [
        f"--{name} and --speculative-config['{key}']"
        for name, key in SPEC_FLAGS.items()
        if name in flags and key in parsed and name not in OLD_SPEC_FLAGS
    ]


def shutdown_timeout(flags: Mapping[str, str]) -> float:
    """``--shutdown-timeout`` in seconds (0.27.0 on): how long vLLM lets running requests finish
    after SIGTERM; 0 (the default) aborts them and kills the engine core at once."""
    text = flags.get("shutdown-timeout")
    if text is None:
        return SHUTDOWN_TIMEOUT_DEFAULT
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"--shutdown-timeout {text!r} is not a number of seconds") from None
