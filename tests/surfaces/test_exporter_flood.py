"""The exporter within the daemon's budget (issue 29): a local user's slow flood of drip-fed
requests is served by the server's few threads, cut at the deadline, and /metrics answers after.

prometheus_client's own server started a thread per connection with no timeout: 400 idle
connections from an outsider took the daemon to its unit's TasksMax=256 in about 45 s.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from devtools.standin.stage import free_port
from sparkwarden.surfaces import exporter
from tests.kits.hostile import Account, account
from tests.surfaces.test_control import FLOOD

#: The unit's TasksMax: every thread of the daemon counts against it.
TASKS_MAX = 256


@pytest.fixture(scope="module")
def outsider() -> Iterator[Account]:
    with account("out") as who:
        yield who


def test_a_slow_flood_from_an_outsider_is_held_to_the_servers_own_threads(
    outsider: Account,
) -> None:
    port = free_port()
    before = {t.ident for t in threading.enumerate()}  # an earlier test's may end meanwhile
    server = exporter.serve(f"127.0.0.1:{port}", lambda: None)
    try:
        own = _new_threads(before)
        flood = subprocess.Popen(
            ["/usr/bin/python3", "-c", FLOOD, f"tcp:{port}", "400", "40"],
            stdout=subprocess.PIPE,
            text=True,
            cwd="/",
            user=outsider.uid,
            group=outsider.gid,
            extra_groups=[],
        )
        peak = 0
        while flood.poll() is None:
            peak = max(peak, _new_threads(before))
            time.sleep(0.05)
        out, _ = flood.communicate(timeout=60)
        ended = json.loads(out)
        answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    finally:
        server.shutdown()
    assert peak == own, f"{peak} threads during the flood, {own} before it"
    assert own == exporter.WORKERS + 1  # the workers and the serve loop, and no more, ever
    assert own < TASKS_MAX // 16
    # Every connection was answered by a close: none was left hanging past the deadline.
    assert len(ended) == 400 and "open" not in ended, ended
    assert answer.status_code == 200


def _new_threads(before: set[int | None]) -> int:
    """Threads of this process alive now that were not before (any name: a thread per
    connection would count)."""
    return sum(t.ident not in before for t in threading.enumerate())
