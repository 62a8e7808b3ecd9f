"""The vLLM OpenAI server: ``/health``, ``/v1/models``, ``/v1/chat/completions``, ``/metrics``.

``/health`` reads an error flag, nothing more (vLLM 0.10.2, 0.12.0, 0.33.0): a *hung* engine (a
stuck scheduler, a wedged kernel) still answers an empty 200; a dead EngineCore answers 503 from
0.12 on (an empty 500 on 0.10), and the API server then exits within seconds, so a dead engine
is mostly seen as connection refused. Hence the only proof of life is a real chat request. The
pure functions here say what a response means; the client only moves bytes.
"""

from __future__ import annotations

import functools
import ssl
import time
from dataclasses import dataclass, replace
from typing import Any, Literal

import httpx

from sparkwarden.base.errors import remember_secret, scrub
from sparkwarden.vllm import bodies
from sparkwarden.vllm.keyguard import KeyGuard, KeyWithheld
from sparkwarden.vllm.spec_payload import Answer, OwnStats

HealthStatus = Literal["up", "loading", "dead", "no-answer"]

PROBE_PROMPT = "Reply with the single word: ready"
#: What vLLM answers a request that arrives while it drains after SIGTERM (``--shutdown-timeout``
#: above 0; ``EngineCore._reject_add_in_shutdown``, vllm/v1/engine/core.py 0.33.0:1785, 0.28.0:1539)
ABORTED = "finish_reason is 'abort': the engine is draining after SIGTERM, or aborted it"
#: How vLLM begins the 503 it answers a request its queue limits turn away (vllm/exceptions.py
#: 0.33.0:171, the same in 0.34.0): an engine busy, not dead
QUEUE_FULL = "The engine is currently busy and cannot accept new requests."
#: The same answer through a gateway that maps finish reasons it does not know to ``stop``
#: (LiteLLM 1.108: ``map_finish_reason``): nothing generated, yet no error.
EMPTY = "an empty answer with no token generated (an aborted request, through a gateway)"


@dataclass(frozen=True)
class Health:
    status: HealthStatus
    detail: str


@dataclass(frozen=True)
class ChatOutcome:
    ok: bool
    detail: str
    content: str = ""
    #: no answer within the timeout (neither an answer nor an error): a queue or a wedge
    timed_out: bool = False
    #: refused for the engine's queue limits (``--max-num-queued-reqs``/``-tokens``): busy
    turned_away: bool = False


def chat_body(
    model: str, max_tokens: int = 8, prompt: str = PROBE_PROMPT, seed: int | None = None
) -> dict[str, Any]:
    """A deterministic request (greedy); thinking off so a Qwen3 model answers within the
    tokens. The drafting canary adds a fixed seed: greedy decoding should not need one, but a
    sampler that draws at all then draws the same."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    if seed is not None:
        body["seed"] = seed
    return body


def completion_tokens(text: str) -> int | None:
    """``usage.completion_tokens`` of an answer: what the drafting canary checks the engine's
    generation counter against (None when the answer does not say)."""
    usage = _json_object(text).get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None


def own_stats(text: str) -> OwnStats | str | None:
    """The answer's own ``metrics.speculative_decoding`` (vLLM started with
    ``--per-request-spec-decode-metrics``): the stats, why they are unreadable, or None when the
    answer has none."""
    found = _json_object(text).get("metrics")
    spec = found.get("speculative_decoding") if isinstance(found, dict) else None
    return None if spec is None else OwnStats.parse(spec)


def _json_object(text: str) -> dict[str, Any]:
    """An answer's JSON object ({} when it is not one)."""
    try:
        payload = bodies.loads(text)
    except bodies.Unreadable:
        return {}
    return payload if isinstance(payload, dict) else {}


def error_message(payload: object) -> str | None:
    """The message of either vLLM error shape: nested ``{"error": {...}}`` or flat."""
    if not isinstance(payload, dict):
        return None
    err = payload.get("error")
    if isinstance(err, dict):
        return str(err.get("message") or err.get("type") or "error")
    if isinstance(err, str):
        return err
    if payload.get("object") == "error":
        return str(payload.get("message") or "error")
    return None


def interpret_chat(status_code: int, text: str) -> ChatOutcome:
    """Success only for HTTP 200 carrying a well-formed first choice."""
    unreadable = None
    try:
        payload = bodies.loads(text) if text else None
    except bodies.Unreadable as exc:
        payload, unreadable = None, str(exc)
    message = error_message(payload)
    if status_code != 200:
        reason = message or (text[:200] if text else "empty body")
        busy = status_code == 503 and reason.startswith(QUEUE_FULL)
        return ChatOutcome(False, f"HTTP {status_code}: {reason}", turned_away=busy)
    if message is not None:
        return ChatOutcome(False, f"HTTP 200 carrying an error: {message}")
    if not isinstance(payload, dict):
        why = f" ({unreadable})" if unreadable else ""
        return ChatOutcome(False, f"HTTP 200 but the body is not a JSON object{why}")
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return ChatOutcome(False, "HTTP 200 but no choices in the answer")
    choice = choices[0]
    msg = choice.get("message")
    if not isinstance(msg, dict) or not isinstance(msg.get("content"), str | None):
        return ChatOutcome(False, "HTTP 200 but choices[0].message is malformed")
    finish = choice.get("finish_reason")
    if finish == "abort":
        return ChatOutcome(False, f"HTTP 200 but {ABORTED}")
    if finish not in ("stop", "length"):
        return ChatOutcome(False, f"HTTP 200 but finish_reason is {finish!r}")
    content = msg.get("content") or ""
    if not content and completion_tokens(text) == 0:
        return ChatOutcome(False, f"HTTP 200 but {EMPTY}")
    return ChatOutcome(True, f"answered {content[:40]!r} (finish_reason {finish})", content)


def release_named(payload: object) -> str | None:
    """The release from ``GET /version`` (``{"version": "0.33.0"}`` in every release read,
    0.10.2 to 0.33.0); None when the answer is not that."""
    if isinstance(payload, dict) and isinstance(payload.get("version"), str):
        return str(payload["version"])[:64]
    return None


def first_model(payload: object) -> str | None:
    """The served name from ``/v1/models``."""
    if isinstance(payload, dict) and isinstance(payload.get("data"), list):
        for entry in payload["data"]:
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                return str(entry["id"])
    return None


@functools.cache
def _tls() -> ssl.SSLContext | bool:
    """httpx's own default TLS context (certifi's CAs, or ``$SSL_CERT_FILE``/``$SSL_CERT_DIR``),
    made once in a process: each client made its own, 0.1 to 0.4 s of loading CA certificates
    on a loaded box, and the daemon makes one per ``restart --dry-run`` it is asked. A context
    is safe to share between threads. An httpx older than 0.28 has no public maker: each client
    then makes its own, as before."""
    make = getattr(httpx, "create_ssl_context", None)
    return make() if make is not None else True


class VllmClient:
    """A thin httpx client that trusts nothing it is answered.

    The API key goes only on ``/v1/*`` (the only paths vLLM checks it on; ``/health`` and
    ``/metrics`` are open), and only once the :class:`KeyGuard` has proven the listener is the
    engine's. Every answer is read capped and within its timeout, parsed where no failure can
    escape, and every text taken from it is scrubbed before anyone can record it.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        guard: KeyGuard | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """``headers``: sent with every request (a replica's probe of its own gateway path)."""
        remember_secret(api_key)
        self._key = api_key
        self._guard = guard if guard is not None else KeyGuard(base_url)
        # identity: a compressed answer could inflate past any cap before it is counted
        self._http = httpx.Client(
            base_url=base_url,
            headers={"Accept-Encoding": "identity", **(headers or {})},
            verify=_tls(),
        )
        #: Why the last :meth:`served_model` learnt nothing (for the probe's message).
        self.why_no_model = ""

    def _exchange(
        self, method: str, path: str, timeout: float, cap: int = bodies.JSON_CAP, **kw: Any
    ) -> bodies.Reply:
        """One request, its body read whole within ``timeout`` and ``cap``. Raises
        httpx.HTTPError, :class:`bodies.Unreadable` or :class:`KeyWithheld`."""
        headers = {}
        if self._key and path.startswith("/v1/"):
            if why := self._guard.refusal():
                raise KeyWithheld(why)
            headers["Authorization"] = f"Bearer {self._key}"
        deadline = time.monotonic() + timeout
        limits = httpx.Timeout(timeout, connect=min(timeout, 10.0))
        with self._http.stream(method, path, headers=headers, timeout=limits, **kw) as response:
            return bodies.read(response, cap, deadline)

    def health(self, timeout: float = 10.0) -> Health:
        """200: "up" (which a hung engine also says); refused: "loading" (or the server exited
        after its engine died); any other status (503 from 0.12, an empty 500 on 0.10): "dead".
        The body is never read: the status says it all."""
        try:
            with self._http.stream("GET", "/health", timeout=timeout) as response:
                status = response.status_code
        except httpx.ConnectError:
            return Health("loading", "connection refused (loading or not started)")
        except httpx.TimeoutException:
            return Health("no-answer", f"no answer within {timeout:g}s")
        except httpx.HTTPError as exc:
            return Health("no-answer", self._said(exc))
        if status == 200:
            return Health("up", "HTTP 200")
        return Health("dead", f"HTTP {status}")

    def served_model(self, timeout: float = 30.0) -> str | None:
        try:
            reply = self._exchange("GET", "/v1/models", timeout)
            if reply.status_code != 200:
                self.why_no_model = f"HTTP {reply.status_code}"
                return None
            model = first_model(bodies.loads(reply.text))
            self.why_no_model = "" if model else "no model in the answer"
            return model
        except httpx.HTTPError as exc:
            self.why_no_model = self._said(exc)
        except (bodies.Unreadable, KeyWithheld) as exc:
            self.why_no_model = scrub(str(exc))
        return None

    def version(self, timeout: float = 10.0) -> str | None:
        """Which vLLM release answers (``GET /version``, open like ``/health``): what flags,
        payloads and ``/health`` to expect. None when it does not say."""
        try:
            response = self._http.get("/version", timeout=timeout)
            return release_named(response.json()) if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def key_refused(self, timeout: float = 10.0) -> str | None:
        """Whether the engine refuses sparkwarden's API key: ``HTTP 401``/``403`` from
        ``/v1/models`` (vLLM's ``--api-key`` guards ``/v1``); None when accepted or unknown."""
        try:
            status = self._exchange("GET", "/v1/models", timeout).status_code
        except (httpx.HTTPError, bodies.Unreadable, KeyWithheld):
            return None
        return f"HTTP {status}" if status in (401, 403) else None

    def _ask(self, body: dict[str, Any], timeout: float) -> tuple[ChatOutcome, str]:
        """A chat request's outcome (its words scrubbed) and the answer's raw text."""
        try:
            reply = self._exchange("POST", "/v1/chat/completions", timeout, json=body)
        except httpx.TimeoutException:
            return ChatOutcome(False, f"no answer within {timeout:g}s", timed_out=True), ""
        except httpx.HTTPError as exc:
            return ChatOutcome(False, self._said(exc)), ""
        except KeyWithheld as exc:
            return ChatOutcome(False, scrub(str(exc))), ""
        except bodies.Unreadable as exc:
            return ChatOutcome(False, scrub(f"unreadable answer: {exc}")), ""
        outcome = interpret_chat(reply.status_code, reply.text)
        said = replace(outcome, detail=scrub(outcome.detail), content=scrub(outcome.content))
        return said, reply.text

    def chat(self, model: str, timeout: float) -> ChatOutcome:
        return self._ask(chat_body(model), timeout)[0]

    def canary(self, model: str, prompt: str, max_tokens: int, seed: int, timeout: float) -> Answer:
        """One drafting-canary request: greedy, seeded, thinking off, bounded, timed."""
        body = chat_body(model, max_tokens=max_tokens, prompt=prompt, seed=seed)
        began = time.monotonic()
        outcome, text = self._ask(body, timeout)
        seconds = time.monotonic() - began
        if not outcome.ok:
            return Answer(False, None, seconds, outcome.detail, timed_out=outcome.timed_out)
        return Answer(True, completion_tokens(text), seconds, "", own_stats(text))

    def metrics(self, timeout: float = 10.0) -> str | None:
        try:
            reply = self._exchange("GET", "/metrics", timeout, cap=bodies.METRICS_CAP)
        except (httpx.HTTPError, bodies.Unreadable):
            return None
        return reply.text if reply.status_code == 200 else None

    def _said(self, exc: Exception) -> str:
        """An error fit to record: httpx quotes a refused header, key and all."""
        return scrub(f"{type(exc).__name__}: {exc}", self._key)

    def close(self) -> None:
        self._http.close()
