"""Demonstration: the safe restart sequence on stand-in containers on the local Docker engine.

Starts a stand-in vLLM (3 s "boot", real /health, /v1/models, chat and /metrics) and two voice
stand-ins, one of which the "operator" has paused, then runs ``sparkwarden restart`` and
``sparkwarden history`` exactly as an operator would, and removes what it made (unless --keep).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devtools.standin.stage import Stage, wait_healthy, write_config  # noqa: E402

SPARKWARDEN = [sys.executable, "-m", "sparkwarden"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keep", action="store_true", help="leave the containers and state")
    args = parser.parse_args()

    stage = Stage(docker.from_env())
    state = Path(tempfile.mkdtemp(prefix="sparkwarden-demo-"))
    try:
        llm, port = stage.llm("vllm-35b", "--boot-delay", "3", "--stop-delay", "1")
        stt = stage.voice("stt")
        tts = stage.voice("tts")
        stage.client.containers.get(tts).pause()  # the operator paused it: it must stay paused
        print(
            f"demo: stand-in LLM {llm} on 127.0.0.1:{port}, voice {stt} (running), "
            f"{tts} (paused by the operator); booting..."
        )
        wait_healthy(port)
        config = write_config(state / "sparkwarden.toml", state / "state", [llm], port, [stt, tts])
        before = stage.attrs(llm)

        def sparkwarden(*argv: str) -> int:
            command = [*SPARKWARDEN, "--config", str(config), *argv]
            print(f"\n$ sparkwarden {' '.join(argv)}", flush=True)
            return subprocess.run(command, check=False).returncode

        sparkwarden("restart", "--dry-run")
        code = sparkwarden("restart", "--reason", "demo")
        sparkwarden("history", "--limit", "2")

        after = stage.attrs(llm)
        print("\ndemo: what changed on the engine:")
        print(
            f"  {llm}: same id {after['Id'] == before['Id']}, StartedAt "
            f"{before['State']['StartedAt'][:23]} -> {after['State']['StartedAt'][:23]}"
        )
        print(f"  {stt}: {stage.status(stt)}   {tts}: {stage.status(tts)}")
        print(f"\ndemo: sparkwarden restart exited {code} ({'ok' if code == 0 else 'FAILED'})")
        if args.keep:
            print(f"demo: kept containers and config: --config {config}")
        return code
    finally:
        if not args.keep:
            stage.cleanup()
            shutil.rmtree(state, ignore_errors=True)  # the config and journal it made


if __name__ == "__main__":
    raise SystemExit(main())
