"""Reading what an engine or a gateway answers without trusting it: a capped body, read within
a deadline, and JSON parsed where nothing it holds can raise past the caller.

The port an engine listens on can be answered by anything (a squatter, a broken proxy): a
100 MB body, a gzip bomb, a drip-fed answer that never ends, or ``[[[[…`` that makes
``json.loads`` raise ``RecursionError``. Each is a failed probe with a short reason here.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import httpx

#: The most of a JSON answer read (``/v1/models``, a chat answer, an error): vLLM's are a few KB.
JSON_CAP = 1 << 20
#: The most of ``/metrics`` read: vLLM's exposition with histograms is a few hundred KB.
METRICS_CAP = 16 << 20
#: The deepest JSON taken: vLLM's answers nest 5 levels; deeper is refused, not walked.
MAX_DEPTH = 64


class Unreadable(Exception):
    """An answer refused before anyone reads it: too large, too slow, compressed, or not JSON."""


@dataclass(frozen=True)
class Reply:
    status_code: int
    text: str


def read(response: httpx.Response, cap: int, deadline: float) -> Reply:
    """The body of a streamed ``response``, at most ``cap`` bytes, all of it by ``deadline``
    (``time.monotonic()``; httpx's read timeout is only the gap between chunks)."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise Unreadable(f"a {encoding[:20]}-compressed answer (identity was asked for)")
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise Unreadable(f"an answer of {int(declared)} bytes (at most {cap} are read)")
    chunks, size = [], 0
    for chunk in response.iter_raw():
        size += len(chunk)
        if size > cap:
            raise Unreadable(f"an answer larger than {cap} bytes (reading stopped there)")
        if time.monotonic() > deadline:
            raise Unreadable(f"an answer still arriving after the deadline ({size} bytes read)")
        chunks.append(chunk)
    return Reply(response.status_code, b"".join(chunks).decode("utf-8", errors="replace"))


def loads(text: str, max_depth: int = MAX_DEPTH) -> object:
    """JSON, or :class:`Unreadable`: malformed, or nested deeper than ``max_depth``."""
    try:
        payload = json.loads(text)
    except RecursionError:
        raise Unreadable("JSON nested too deep to parse") from None
    except ValueError as exc:
        raise Unreadable(f"not JSON ({exc.__class__.__name__})") from None
    if depth_exceeds(payload, max_depth):
        raise Unreadable(f"JSON nested deeper than {max_depth} levels")
    return payload


def depth_exceeds(payload: object, max_depth: int) -> bool:
    """Whether ``payload`` nests deeper than ``max_depth`` (walked without recursion)."""
    stack: list[tuple[object, int]] = [(payload, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            if depth + 1 > max_depth:
                return True
            stack.extend((item, depth + 1) for item in value)
    return False
