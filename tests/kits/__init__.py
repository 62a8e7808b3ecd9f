"""Shared test kits: commands, daemons, the gateway, private Docker engines, soundness."""
