"""What the engine's port answers is never trusted (issue 29): the key goes only to a proven
listener and only on /v1/*, bodies are capped and parsed safely, and outside text is scrubbed.

The hostile listeners run as real unprivileged accounts made for the test (useradd).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from devtools.standin.stage import free_port
from sparkwarden.adapters.listeners import Listener, parse_proc_net_tcp, tcp_listeners
from sparkwarden.base.errors import KEEP, remember_secret, scrub
from sparkwarden.vllm import bodies
from sparkwarden.vllm.client import VllmClient
from sparkwarden.vllm.keyguard import Engines, verdict
from tests.kits.hostile import Account, account, hostile

KEY = "sk-transport-test-7c6b5a"


@pytest.fixture(scope="module")
def outsider() -> Iterator[Account]:
    with account("out") as who:
        yield who


# --- pure pieces -----------------------------------------------------------------------------


def test_scrub_removes_every_key_read_anywhere_makes_controls_inert_and_bounds_length() -> None:
    remember_secret("sk-gateway-virtual-1234")
    said = "500 unknown api key sk-gateway-virtual-1234 \x1b]0;pwned\x07\x1b[2J\nforged\u202e"
    clean = scrub(said)
    assert "sk-gateway-virtual-1234" not in clean and "[redacted]" in clean
    assert clean.isprintable() and "\\x1b]0;pwned\\x07" in clean and "\\u202e" in clean
    long = scrub("y" * 10_000)
    assert long == "y" * KEEP + f"… (+{10_000 - KEEP} chars)"
    assert scrub("Authorization: Bearer sk-other") == "Authorization: Bearer [redacted]"


def test_nested_json_is_refused_not_raised() -> None:
    with pytest.raises(bodies.Unreadable, match="too deep"):
        bodies.loads("[" * 200_000)
    with pytest.raises(bodies.Unreadable, match="deeper than 64"):
        bodies.loads("[" * 100 + "]" * 100)  # parses, but deeper than any answer of vLLM's
    assert bodies.loads('{"data": [{"id": "m"}]}') == {"data": [{"id": "m"}]}


def test_proc_net_tcp_is_read_as_the_kernel_writes_it() -> None:
    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
        "timeout inode\n"
        "   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001 "
        "       0 4242 1 0 100 0 0 10 0\n"
        "   1: 0100007F:1F40 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0 "
        "       0 4243 1 0 100 0 0 10 0\n"
    )
    assert parse_proc_net_tcp(table) == [Listener("127.0.0.1", 8000, 1001, 4242)]


def test_the_verdict_trusts_root_a_privileged_port_or_the_engines_own_socket() -> None:
    def engines() -> Engines:
        return Engines(("c0ffee" * 8,), frozenset({9000}))

    mine, theirs = Listener("0.0.0.0", 8000, 0, 1), Listener("127.0.0.1", 8000, 1001, 2)
    assert verdict(8000, [mine], 1024, engines, lambda e: set()) is None
    assert verdict(80, [theirs], 1024, engines, lambda e: set()) is None
    assert verdict(8000, [theirs], 1024, engines, lambda e: {2}) is None
    refused = verdict(8000, [mine, theirs], 1024, engines, lambda e: {1})
    assert refused is not None and "uid 1001" in refused
    assert verdict(9000, [], 1024, engines, lambda e: set()) is None  # Docker forwards it
    assert "nothing listens" in (verdict(8001, [], 1024, engines, lambda e: set()) or "")


# --- real listeners, real accounts -----------------------------------------------------------


def test_a_squatter_never_sees_the_key_and_the_engine_still_gets_it(outsider: Account) -> None:
    port = free_port()
    with hostile(port, "squat", outsider) as squatter:
        assert [entry.uid for entry in tcp_listeners(port)] == [outsider.uid]
        client = VllmClient(f"http://127.0.0.1:{port}", KEY)
        try:
            assert client.health().status == "up"  # /health carries no key
            assert client.served_model() is None
            assert f"held by uid {outsider.uid}" in client.why_no_model
            outcome = client.chat("m", timeout=5)
            assert not outcome.ok and "withheld" in outcome.detail
            assert client.metrics() is not None  # open, and sent without the key
        finally:
            client.close()
        seen = squatter.requests()
    assert [path for _, path, _ in seen] == ["/health", "/metrics"]
    assert all(auth == "-" for _, _, auth in seen)
    # The same listener as root is trusted: the key goes, and only on /v1/*.
    with hostile(port, "squat", None) as engine:
        client = VllmClient(f"http://127.0.0.1:{port}", KEY)
        try:
            assert client.health().status == "up" and client.chat("m", timeout=5).ok
        finally:
            client.close()
        seen = engine.requests()
    assert seen == [
        ["GET", "/health", "-"],
        ["POST", "/v1/chat/completions", f"Bearer {KEY}"],
    ]


def test_nested_json_is_a_failed_probe_with_a_short_reason(outsider: Account) -> None:
    port = free_port()
    with hostile(port, "nested", outsider):
        client = VllmClient(f"http://127.0.0.1:{port}")
        try:
            assert client.served_model() is None
            assert "nested too deep" in client.why_no_model
            outcome = client.chat("m", timeout=5)
            answer = client.canary("m", "hi", 8, 0, timeout=5)
        finally:
            client.close()
    assert not outcome.ok and "nested too deep" in outcome.detail and len(outcome.detail) < 200
    assert not answer.ok and "nested too deep" in answer.detail


def test_a_huge_body_is_not_read_past_the_cap(outsider: Account) -> None:
    port = free_port()
    with hostile(port, "huge", outsider):
        client = VllmClient(f"http://127.0.0.1:{port}")
        try:
            outcome = client.chat("m", timeout=5)
        finally:
            client.close()
    assert not outcome.ok and "5000000 bytes" in outcome.detail, outcome.detail
    assert len(outcome.detail) <= KEEP


def test_a_key_echoed_in_an_error_and_terminal_escapes_are_scrubbed() -> None:
    port = free_port()
    with hostile(port, "echo", None):  # root's: the key is sent, and comes back
        client = VllmClient(f"http://127.0.0.1:{port}", KEY)
        try:
            outcome = client.chat("m", timeout=5)
        finally:
            client.close()
    assert not outcome.ok and "unknown api key [redacted]" in outcome.detail, outcome.detail
    assert KEY not in outcome.detail and outcome.detail.isprintable()


def test_a_drip_fed_answer_is_cut_at_the_requests_timeout(outsider: Account) -> None:
    """httpx's read timeout is the gap between chunks: a byte every 0.2 s never trips it."""
    port = free_port()
    said: list[str] = []
    with hostile(port, "drip", outsider):
        client = VllmClient(f"http://127.0.0.1:{port}")
        try:
            asking = threading.Thread(target=lambda: said.append(client.chat("m", 2).detail))
            asking.start()
            asking.join(timeout=60)
        finally:
            client.close()
    assert said and "still arriving after the deadline" in said[0], said
