"""A stand-in for vLLM's OpenAI server, faithful to the surface sparkwarden reads.

Runs on the host's Python with the standard library only, so it works inside a bare test
container that bind-mounts ``/usr``. Endpoints and exposition follow a real server:

- ``GET /health``: empty 200; 503 when the engine is dead; the port is closed while "loading".
- ``GET /version``: ``{"version": "0.33.0"}`` (``--vllm-version``).
- ``GET /v1/models``: ``{"object": "list", "data": [{"id": MODEL, ...}]}``.
- ``POST /v1/chat/completions``: a chat completion, or vLLM's error shapes.
- ``GET /metrics``: Prometheus text as ``prometheus_client`` writes it, with the spec-decode
  counters (``_total`` + ``_created``), request gauges, ``prompt_tokens`` and ``generation_tokens``.

Fault modes (flags): slow boot, never healthy, chat fails, zombie (healthy, dies on the first
chat), crash after N seconds (on every start, or once), acceptance decay, stalled engine (chats
hang), stuck request gauge (chats answered), ignore SIGTERM, broken metrics, --disable-log-stats,
and a wedge (``--wedge-after``, or SIGUSR1): vLLM 0.32 with its worker SIGSTOPped, ``/health`` and
``/v1/models`` 200, every chat hanging, every counter and gauge frozen at its last value.
``--prefill-tokens-per-s`` prefills each prompt (a token a word) at that pace before its first
token, counting nothing until it ends (1092: a 27B dense's 30 s at 32k on a Spark).

Several nodes as one engine (``--nnodes``, vLLM's own multi-node mode): rank 0 keeps its port
closed until every other rank joined; a rank lost later makes requests hang, then the engine
die, while ``/health`` stays 200; a ``--headless`` rank outlives its head and never rejoins.

With ``--distributed-executor-backend ray`` (a Ray cluster, see ``ray_standin.py``) the engine
finds its cluster as ``ray.init()`` does and keeps its port closed until the cluster has one GPU
(one Spark) per rank of ``--tensor-parallel-size`` x ``--pipeline-parallel-size``, logging vLLM's
"Waiting for creating a placement group" (and failing after 1800 s, ``PG_WAIT_TIMEOUT``); a node
of its placement group dying ends the engine at once ("RayWorkerProc rank=... died unexpectedly,
shutting down executor.", vllm/v1/executor/ray_executor_v2.py 0.33.0), and so does its GCS going.

Answers take ``--token-delay`` per token and stream (``"stream": true``) as vLLM's SSE chunks, so
requests are really in flight and counted in ``num_requests_running``.

SIGTERM is vLLM 0.33's ``--shutdown-timeout`` (0.27.0 on; vllm/entrypoints/launchers/launcher.py
``handle_shutdown``, vllm/v1/engine/core.py ``_handle_shutdown``): with 0, its default, the running
requests are cut mid-stream and the engine core killed at once (vllm/v1/utils.py ``shutdown``:
terminate, then kill when the timeout is 0). With more, the running requests may finish for up to
that long, and a request arriving meanwhile is refused at once, HTTP 500 "cannot schedule new
futures after shutdown" (the renderer's executor is shut first: vllm/renderers/base.py
0.32.0:94, measured on the real 0.32.0; the same order in 0.33.0 and 0.34.0), while ``/health``
still says 200: the HTTP server serves until the engine client has stopped. Then the
teardown (``--stop-delay``), during which a new request gets no answer until the process exits.

``--sleep-level N`` starts it asleep as after vLLM's ``POST /sleep?level=N`` (``POST /sleep`` and
``POST /wake_up`` work too): ``vllm:engine_sleep_state`` awake 0, ``/health`` 200, and a chat is
taken and queued, unanswered, until the engine wakes (core.py 0.33.0:993-1029, ``sleep`` pauses
the scheduler: "Requests are still accepted but not processed"; 0.34.0 the same). Only the
dev-mode ``POST /pause`` (``pause_generation``, ``POST /resume`` ends it) refuses chats with 503
(core.py 0.33.0 ``_reject_add_while_paused``; 0.34.0:2456-2461: "Other pauses (e.g. sleep) leave
this policy unchanged"). ``--max-num-queued-reqs N``
turns away a request that finds N unfinished with 503, counted in
``vllm:admission_rejections_total`` (0.33.0). ``--tool-call-parser`` adds the parser's
``vllm:tool_call_parser_invocations_total`` to the page, also under ``--metrics no-stats``.

With ``--traffic`` each chat is drafted step by step at ``--steps-per-s``, and three options
make concurrent requests behave like a loaded engine:

- ``--per-request-spec-decode-metrics {none,summary,detailed}`` (vLLM 0.29.0 on; not in 0.28.0):
  the request's own spec-decode stats in ``metrics.speculative_decoding`` of the answer,
  or of the final usage chunk of a stream that asks ``stream_options.include_usage``; null for
  ``n > 1``. The same steps the /metrics counters count.
- ``--trim-above N --trim-to M``: while more than N requests run, each verify step drafts M
  tokens: vLLM 0.33's scheduler cuts a request's spec tokens to what is left of its token budget
  (``max_num_batched_tokens``, spent in order over the running requests, prefill chunks too)
  and to ``max_model_len``, and its dynamic speculative decoding
  (``num_speculative_tokens_per_batch_size``: K by batch-size range) does exactly this (0.12
  and 0.10 accept ``disable_by_batch_size`` but nothing reads it). A step drafting 0 counts no
  draft.
- ``--contention none|serial|batched:SLOPE``: ``none`` each request at its own pace whatever
  else runs; ``serial`` one request generates at a time, first come first served, the rest
  show in ``num_requests_waiting``; ``batched:SLOPE`` every decode step takes (1 + SLOPE (n-1))
  times as long with n requests running (continuous batching).
"""

# The package is the stand-in's model of vLLM, one module a part of what it models: drafting
# (acceptance laws), traffic (users, decay, contention), engine (the counters and the pace),
# exposition (/metrics), api (the HTTP surface), nodes (ranks, Ray), flags, serve (the process).
# Standard library only, relative imports only: it is imported as ``vllm_model`` in a container
# (``/standin`` on sys.path) and as ``devtools.standin.vllm_model`` on the host.
