"""Developer tooling, never installed: used by the tests, the benchmarks and the demo.

``standin/`` is the stand-in vLLM (``vllm_standin.py`` running the package ``vllm_model``, standard
library only: it runs inside a bare container on the host's ``/usr``, so it must not import
sparkwarden) and the stage that runs it in containers (``stage.py``); ``traces.py`` builds the
synthetic ``/metrics`` traces that the replay tests and ``benchmarks/score_acceptance.py`` score.
"""
