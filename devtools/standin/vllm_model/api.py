"""The HTTP surface sparkwarden talks to: the routes of vLLM's OpenAI server, with its answers,
stream chunks and error shapes, down to the order of fields.

The handler holds the engine and the parsed flags and answers as vLLM would, faults included
(``--mode``, ``--metrics``, ``--stall``, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from .drafting import Request, per_request_metrics
from .engine import Engine
from .exposition import NO_STATS, tool_parser_series

#: vLLM 0.33's words for a request refused by ``--max-num-queued-reqs`` (vllm/exceptions.py:171)
QUEUE_FULL = (
    "The engine is currently busy and cannot accept new requests. "
    "Please try again later or on a different instance."
)
#: ... and for one arriving while generation is paused (``POST /pause``, core.py 0.33.0:1806)
PAUSED = "Generation is paused. Please retry after it resumes."
#: ... and for one arriving while it drains after SIGTERM (``--shutdown-timeout`` > 0): the API
#: server shuts its renderer's executor before the engine core, so the request is refused in
#: the renderer (vllm/renderers/base.py 0.32.0:94, 0.33.0 and 0.34.0:95), HTTP 500, streamed or
#: not; ``EngineCore._reject_add_in_shutdown``'s "abort" is never reached from the same server
#: (vllm/v1/engine/async_llm.py shutdown: 0.32.0:301-304, 0.33.0:310-313, 0.34.0:311-314)
DRAINING = "cannot schedule new futures after shutdown"


def chat_request(engine: Engine, body: dict[str, object], max_tokens: int) -> Request:
    """A chat body as a drafted request: its last message's class, greedy at temperature 0."""
    assert engine.traffic is not None
    messages = body.get("messages")
    prompt = ""
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        prompt = str(messages[-1].get("content", ""))
    seed = body.get("seed")
    greedy = body.get("temperature") == 0
    return engine.traffic.start(prompt, max_tokens, seed if isinstance(seed, int) else 0, greedy)


def prompt_tokens(body: dict[str, object]) -> int:
    """The prompt's length as the stand-in counts it: a token a word of every message."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return 0
    return sum(len(str(m.get("content", "")).split()) for m in messages if isinstance(m, dict))


def usage_info(completion: int, prompt: int = 12) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
    }


class Handler(BaseHTTPRequestHandler):
    """One connection's requests; made per connection by ``partial(Handler, engine, args)``.
    Each route is a method that asks the engine and answers as vLLM would."""

    protocol_version = "HTTP/1.1"

    def __init__(self, engine: Engine, args: argparse.Namespace, *connection: Any) -> None:
        self.engine, self.args = engine, args
        super().__init__(*connection)  # serves the connection before it returns

    def log_message(self, fmt: str, *params: object) -> None:
        if self.args.verbose:
            super().log_message(fmt, *params)

    def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, payload: object) -> None:
        self._send(code, json.dumps(payload).encode())

    def _error(
        self, code: int, message: str, kind: str = "BadRequestError", param: str | None = None
    ) -> None:
        error = {"message": message, "type": kind, "param": param, "code": code}
        if self.args.error_shape == "flat":
            self._json(code, {"object": "error", **error})
        else:
            self._json(code, {"error": error})

    def _authorised(self) -> bool:
        if not self.args.api_key:
            return True
        if self.headers.get("Authorization") == f"Bearer {self.args.api_key}":
            return True
        self._json(401, {"error": "Unauthorized"})
        return False

    def do_GET(self) -> None:
        routes = {
            "/health": self.get_health,
            "/version": self.get_version,
            "/metrics": self.get_metrics,
            "/v1/models": self.get_models,
        }
        routes.get(self.path, self.not_found)()

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path, _, query = self.path.partition("?")
        if path in ("/sleep", "/wake_up"):  # vLLM's dev endpoints (VLLM_SERVER_DEV_MODE=1)
            self.post_sleep(path, query)
        elif path in ("/pause", "/resume"):  # pause_generation (rl/online/api_router.py)
            self.post_pause(path)
        elif self.path == "/v1/chat/completions":
            self.post_chat(raw)
        else:
            self.not_found()

    def not_found(self) -> None:
        self._json(404, {"detail": "Not Found"})

    def get_health(self) -> None:
        """200 while it drains, asleep or not (the engine is not dead); 503 once its engine
        core died, until the server exits (vllm/entrypoints/serve/instrumentator/health.py)."""
        dead = self.args.mode == "never-healthy" or self.engine.dead
        self._send(503 if dead else 200, b"")

    def get_version(self) -> None:
        self._json(200, {"version": self.args.vllm_version})

    def get_metrics(self) -> None:
        if self.args.metrics == "missing":
            self._send(404, b'{"detail":"Not Found"}')
        elif self.args.metrics == "garbage":
            self._send(200, b"<html>\x00 this is not prometheus {{{\n", "text/html")
        elif self.args.metrics == "no-stats":  # --disable-log-stats: no stat logger at all
            page = NO_STATS
            if self.args.tool_call_parser:  # the API server's own counter is there all the same
                page += tool_parser_series(self.args.model, self.engine.created_at).encode()
            self._send(200, page, "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._send(
                200,
                self.engine.exposition().encode(),
                "text/plain; version=0.0.4; charset=utf-8",
            )

    def get_models(self) -> None:
        if not self._authorised():
            return
        self._json(
            200,
            {
                "object": "list",
                "data": [
                    {
                        "id": self.args.model,
                        "object": "model",
                        "created": int(self.engine.ready_at),
                        "owned_by": "vllm",
                        "root": self.args.model,
                        "parent": None,
                        "max_model_len": 262144,
                    }
                ],
            },
        )

    def post_sleep(self, path: str, query: str) -> None:
        """``POST /sleep?level=N`` and ``POST /wake_up``: asleep, chats queue unanswered."""
        level = query.removeprefix("level=") if query.startswith("level=") else "1"
        with self.engine.cond:
            self.engine.slept = True
            self.engine.sleep_level = int(level) if path == "/sleep" and level.isdigit() else None
            self.engine.cond.notify_all()  # woken: what queued goes on
        self._send(200, b"")

    def post_pause(self, path: str) -> None:
        """``POST /pause`` and ``POST /resume``: paused, chats are refused with 503."""
        self.engine.paused = path == "/pause"
        self._send(200, b"")

    def post_chat(self, raw: bytes) -> None:
        """``POST /v1/chat/completions``: refused, hung, failed or answered, as the engine's state
        and the fault modes say."""
        engine, args = self.engine, self.args
        if not self._authorised():
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._error(400, "invalid JSON body")
            return
        if body.get("model") != args.model:
            # vllm/entrypoints/serve/engine/serving.py 0.32.0 to 0.34.0:77-84
            missing = (
                f"The model `{body.get('model')}` does not exist. Valid aliases: {args.model}."
            )
            self._error(404, missing, "NotFoundError", "model")
            return
        if engine.tearing_down:  # the engine core is gone: no answer until the server exits
            time.sleep(3600)
            return
        limit = args.max_num_queued_reqs
        if limit and len(engine.queue) + 1 > limit:  # vllm/v1/engine/async_llm.py:325
            with engine.lock:
                engine.rejected["max_num_queued_reqs"] += 1
            self._error(503, QUEUE_FULL, "ServiceUnavailableError")
            return
        engine.chats += 1
        if engine.stopping:  # draining after SIGTERM: refused at once, streamed or not
            self._error(500, DRAINING, "InternalServerError")
            return
        if engine.paused:  # pause_generation: new requests refused (asleep, they queue)
            self._error(503, PAUSED, "ServiceUnavailableError")
            return
        if engine.ranks is not None:
            engine.ranks.collective()  # hangs, then dies, while a rank is lost
        if args.mode in ("chat-fails", "zombie"):
            self._error(
                500, "EngineCore encountered an issue. See stack trace.", "InternalServerError"
            )
            if args.mode == "zombie":
                self.wfile.flush()
                os._exit(1)  # the engine dies on its first message
            return
        if args.stall:  # a hung scheduler: the request is taken and never answered
            time.sleep(3600)
            return
        engine.hold_if_wedged()  # taken, never answered
        max_tokens = int(body.get("max_tokens") or 16)
        request = chat_request(engine, body, max_tokens) if engine.traffic else None
        n = body.get("n") or 1
        prompt = prompt_tokens(body)
        if body.get("stream"):
            options = body.get("stream_options")
            usage = isinstance(options, dict) and bool(options.get("include_usage"))
            self._stream(max_tokens, request, usage, n, prompt)
        else:
            self._answer(max_tokens, request, n, prompt)

    def _stream(
        self, max_tokens: int, request: Request | None, usage: bool, n: object, prompt: int = 0
    ) -> None:
        """vLLM's SSE: a role chunk, one chunk per token (per verify step with --traffic), a
        finish chunk, the usage chunk if ``stream_options.include_usage`` (where vLLM 0.33
        puts ``metrics``), ``[DONE]``."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chat_id, created = f"chatcmpl-{self.engine.chats}", int(time.time())

        def send(chunk: dict[str, object]) -> None:
            head = {"id": chat_id, "object": "chat.completion.chunk", "created": created}
            self._chunk(
                f"data: {json.dumps({**head, 'model': self.args.model, **chunk})}\n\n".encode()
            )

        def event(delta: dict[str, object], finish: str | None = None) -> None:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            send({"choices": [choice]})

        event({"role": "assistant", "content": ""})
        made = 0
        if request is not None:

            def emit(tokens: int) -> None:
                event({"content": "ready " * tokens})

            if not self.engine.play(request, emit, prompt):
                self.close_connection = True  # cut mid-generation: no finish, no [DONE]
                return
            made = request.made
        else:
            with self.engine.generating(prompt):
                for i in range(max_tokens):
                    time.sleep(self.args.token_delay)
                    self.engine.hold_if_wedged()
                    if self.engine.aborting:  # cut mid-generation: no finish chunk, no [DONE]
                        self.close_connection = True
                        return
                    with self.engine.lock:
                        self.engine.generation += 1
                    made += 1
                    event({"content": f"tok{i} "})
        event({}, "length")
        if usage:
            final: dict[str, object] = {"choices": [], "usage": usage_info(made)}
            level = self.args.per_request_spec_decode_metrics
            drafting = request.drafting if request is not None else None
            metrics = per_request_metrics(drafting, level, n, stream=True)
            if metrics is not None:
                final["metrics"] = metrics
            send(final)
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _answer(self, max_tokens: int, request: Request | None, n: object, prompt: int = 0) -> None:
        text = "ready"
        made = min(1, max_tokens)
        extra: dict[str, object] = {}
        if request is not None:
            if not self.engine.play(request, prompt_tokens=prompt):
                self.close_connection = True  # aborted: no answer
                return
            made = request.made
            text = "ready " * made
            if self.args.per_request_spec_decode_metrics != "none":
                level = self.args.per_request_spec_decode_metrics
                extra["metrics"] = per_request_metrics(request.drafting, level, n, False)
        else:
            with self.engine.generating(prompt):
                time.sleep(self.args.token_delay)
                self.engine.hold_if_wedged()
            with self.engine.lock:
                self.engine.generation += 1
                self.engine.prompt += 12
        self._json(
            200,
            {
                "id": f"chatcmpl-{self.engine.chats}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.args.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": text,
                            "reasoning_content": None,
                            "tool_calls": [],
                        },
                        "logprobs": None,
                        "finish_reason": "stop" if made < max_tokens else "length",
                        "stop_reason": None,
                    }
                ],
                "usage": usage_info(made),
                **extra,
            },
        )
