#!/usr/bin/env python3
"""The stand-in vLLM server's entry point; what it models is the package ``vllm_model`` beside it.

It is run as a script (``/standin/vllm_standin.py`` in a container, ``devtools/standin/...`` on
the host), imported as ``vllm_standin`` by the image's ``vllm`` console script (``/standin`` on
sys.path), and as ``devtools.standin.vllm_standin`` on the host: the import below serves all three.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING or __package__:  # devtools.standin.vllm_standin (mypy reads this branch)
    from .vllm_model.serve import main
else:  # a script, or a top-level module with its folder on sys.path
    from vllm_model.serve import main

__all__ = ["main"]

if __name__ == "__main__":
    main(sys.argv[1:])
