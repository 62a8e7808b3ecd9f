"""Thin adapters to the outside: the Docker engine and its events, the host, systemd."""
