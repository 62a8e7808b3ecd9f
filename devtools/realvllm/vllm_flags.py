"""What vLLM's own argument parser makes of command lines: run with the real engine's venv
(``devtools.realvllm.engine.python()``), a JSON list of argv (each the words after ``vllm``)
on stdin, a JSON list of readings on stdout.

A reading holds the values doctor reads, as vLLM has them once parsed: the speculative config
after vLLM merges ``--spec-*`` into it (``EngineArgs.create_speculative_config``, run with the
config class swapped for a dict so no model is needed), or the error vLLM refuses the line with.
Nothing here is sparkwarden's: the test compares this with sparkwarden's reader.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from typing import Any

#: EngineArgs fields doctor reads, by the flag name sparkwarden files them under.
FIELDS = {
    "gpu-memory-utilization": "gpu_memory_utilization",
    "max-num-seqs": "max_num_seqs",
    "shutdown-timeout": "shutdown_timeout",
    "tool-call-parser": "tool_call_parser",
    "disable-log-stats": "disable_log_stats",
    "per-request-spec-decode-metrics": "per_request_spec_decode_metrics",
    "kv-cache-dtype": "kv_cache_dtype",
    "tensor-parallel-size": "tensor_parallel_size",
    "pipeline-parallel-size": "pipeline_parallel_size",
    "nnodes": "nnodes",
    "node-rank": "node_rank",
    "distributed-executor-backend": "distributed_executor_backend",
}


def reading(argv: list[str]) -> dict[str, Any]:
    from vllm.engine import arg_utils
    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            args = parser.parse_args(argv)
    except SystemExit:
        return {"refused": said.getvalue().strip().splitlines()[-1:]}
    if getattr(args, "model_tag", None) is not None:  # as `vllm serve` does (cli/serve.py:56)
        args.model = args.model_tag
    found: dict[str, Any] = {}
    for name, field in FIELDS.items():
        found[name] = getattr(args, field, None)
    engine_args = EngineArgs.from_cli_args(args)
    made = arg_utils.SpeculativeConfig
    arg_utils.SpeculativeConfig = lambda **kw: kw
    try:
        spec = engine_args.create_speculative_config(None, None)
    except ValueError as exc:
        return {"refused": [str(exc)]}
    finally:
        arg_utils.SpeculativeConfig = made
    if spec is not None:
        spec = {k: v for k, v in dict(spec).items() if not k.startswith("target_")}
    found["speculative"] = spec
    return found


if __name__ == "__main__":
    json.dump([reading(argv) for argv in json.load(sys.stdin)], sys.stdout, default=str)
