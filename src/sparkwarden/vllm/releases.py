"""What changed between vLLM releases that sparkwarden relies on, each fact cited to the file of
the released wheel it was read from (``pip download vllm==X --no-deps``; the wheels read: 0.12.0,
0.27.0, 0.28.0, 0.29.0, 0.33.0, 0.34.0). The engine names its release at ``GET /version``.

Only releases that were read are named. A fact is "from X" only when the release just before X
was read and lacks it; otherwise it is there "by X", and the releases between the last one read
without it and X are unknown (none between 0.12.0 and 0.27.0, nor 0.30.0 to 0.32.0, was read).
"""

from __future__ import annotations

import re

Release = tuple[int, int, int]

#: The newest release read: what is assumed when the engine does not say.
NEWEST: Release = (0, 34, 0)


def parse(text: str | None) -> Release | None:
    """``"0.33.0"``, ``"0.19.1rc1.dev3+g1234.cu130"``, ``"v0.12.0"``: (major, minor, patch)."""
    if not text:
        return None
    found = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if found is None:
        return None
    major, minor, patch = found.groups()
    return int(major), int(minor), int(patch or 0)


def name(release: Release) -> str:
    return ".".join(map(str, release))


#: The extensible KV cache (``--enable-extensible-kv-cache``, arg_utils.py 0.34.0:1412-1415):
#: on by default on CUDA when the flag is not given (``vllm/config/vllm.py`` 0.34.0:3180-3263),
#: off when the cache is sized another way (``--kv-cache-memory-bytes``,
#: ``--num-gpu-blocks-override``); the cache is then sized after warm-up from the memory
#: measured free. Absent from 0.33.0.
EXTENSIBLE_KV_CACHE: Release = (0, 34, 0)


def default_gpu_memory_utilization(release: Release | None, extensible: bool = False) -> float:
    """vLLM's ``gpu_memory_utilization`` when the flag is not given (``vllm/config/cache.py``):
    0.9 in 0.12.0 (line 49), 0.92 in 0.27.0 (68), 0.28.0 (69), 0.29.0 (111) and 0.33.0 (215);
    in 0.34.0 None (216), resolved to 1.0 while the extensible KV cache is on, else 0.92
    (``resolved_gpu_memory_utilization``, 495-501; ``DEFAULT_GPU_MEMORY_UTILIZATION``, 186).
    A release between 0.12 and 0.27, or an unknown one, gets the riskier figure."""
    if release is not None and release <= (0, 12, 99):
        return 0.9
    if extensible and (release is None or release >= EXTENSIBLE_KV_CACHE):
        return 1.0
    return 0.92


#: ``--per-request-spec-decode-metrics``: ``vllm/config/observability.py`` 0.29.0:48,
#: 0.33.0:50; absent from 0.28.0.
PER_REQUEST_SPEC_DECODE: Release = (0, 29, 0)
#: ``--shutdown-timeout``, ``-sc`` and ``--spec-method/--spec-model/--spec-tokens``: there by 0.27.0
#: (``vllm/engine/arg_utils.py`` 0.27.0:1578-1643); absent from 0.12.0, 0.13-0.26 unread.
SHUTDOWN_TIMEOUT: Release = (0, 27, 0)
#: ``vllm:admission_rejections_total``: there by 0.33.0 (``vllm/v1/metrics/loggers.py``
#: 0.33.0:847); not in 0.29.0, 0.30-0.32 unread.
ADMISSION_REJECTIONS: Release = (0, 33, 0)


def has(release: Release | None, since: Release) -> bool | None:
    """Whether ``release`` has a feature added in ``since``; None when the release is unknown."""
    return None if release is None else release >= since
