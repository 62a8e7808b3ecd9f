"""What sparkwarden knows of vLLM: its HTTP server, its metrics, its flags, and doctor's rules."""
