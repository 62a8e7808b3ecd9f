"""sparkwarden: keeps a vLLM container on a DGX Spark alive through the night."""

__version__ = "0.1.0"
