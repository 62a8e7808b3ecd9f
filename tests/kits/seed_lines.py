"""The seeds' own vLLM command lines, as fixtures for the flag reader, doctor and its tests on
real containers."""

from __future__ import annotations

#: The DFlash report's serve line, as its image runs it: the speculative part is the report's
#: own (``--speculative-model z-lab/Qwen3.6-35B-A3B-DFlash --num-speculative-tokens 5``), the
#: rest is the FIELD-NOTES' lock-up (``--gpu-memory-utilization 0.80``, 4 parallel sequences).
DFLASH_REPORT = [
    *("vllm", "serve", "AEON-7/Qwen3.6-35B-A3B-heretic-NVFP4"),
    *("--gpu-memory-utilization", "0.80", "--max-num-seqs", "4", "--max-model-len", "262144"),
    *("--speculative-model", "z-lab/Qwen3.6-35B-A3B-DFlash", "--num-speculative-tokens", "5"),
]
#: An unsloth-style recipe line for the same model family: no --gpu-memory-utilization (vLLM's
#: default then), a tool-call parser, and MTP under its model-type name. Reconstructed: the
#: recipe page's exact text is not in the repository.
UNSLOTH_RECIPE = [
    *("vllm", "serve", "unsloth/Qwen3.6-35B-A3B-NVFP4", "--max-model-len", "262144"),
    *("--reasoning-parser", "qwen3", "--enable-auto-tool-choice", "--tool-call-parser"),
    *("qwen3_coder", "--speculative-config"),
    '{"method": "qwen3_next_mtp", "num_speculative_tokens": 2}',
]
