"""The config: its schema (the one source of defaults), where files live, and secret files."""
