"""One file per command an operator types: each a short script over the rooms below."""
