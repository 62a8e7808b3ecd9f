"""The evidence that calls for a restart: every trigger, the acceptance estimate, the canary."""
