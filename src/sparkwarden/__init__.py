"""sparkwarden: keeps a vLLM container on a DGX Spark alive through the night."""
