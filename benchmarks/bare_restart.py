"""The same steps as ``sparkwarden restart``, as an operator's bare script would do them.

The baseline for the overhead benchmark: pause voice, docker stop, sync + drop caches,
docker start, poll /health, one chat request, unpause voice. No journal, no checks, no lock.
Usage: bare_restart.py LLM PORT POLL_S [VOICE...]
"""

from __future__ import annotations

import argparse
import os
import time

import docker
import httpx


def main(llm: str, port: int, poll: float, voice: list[str]) -> int:
    client = docker.from_env()
    base = f"http://127.0.0.1:{port}"
    for name in voice:
        client.containers.get(name).pause()
    client.containers.get(llm).stop(timeout=120)
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as handle:
        handle.write("3\n")
    client.containers.get(llm).start()
    while True:
        try:
            if httpx.get(f"{base}/health", timeout=10).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(poll)
    model = httpx.get(f"{base}/v1/models", timeout=30).json()["data"][0]["id"]
    reply = httpx.post(
        f"{base}/v1/chat/completions",
        timeout=180,
        json={"model": model, "messages": [{"role": "user", "content": "ready?"}], "max_tokens": 8},
    )
    for name in voice:
        client.containers.get(name).unpause()
    return 0 if reply.status_code == 200 else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("llm", help="the LLM container's name")
    parser.add_argument("port", type=int, help="its OpenAI port on 127.0.0.1")
    parser.add_argument("poll", type=float, help="seconds between /health polls")
    parser.add_argument("voice", nargs="*", help="voice containers to pause around it")
    args = parser.parse_args()
    raise SystemExit(main(args.llm, args.port, args.poll, args.voice))
