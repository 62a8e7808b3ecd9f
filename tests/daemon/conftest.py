"""The daemon-as-a-process fixture for every test in this folder (defined beside its tests)."""

from tests.daemon.test_daemon_docker import start_daemon  # noqa: F401
