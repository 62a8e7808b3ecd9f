"""The daemons fixture for every test in this folder (defined beside the fault matrix)."""

from tests.restart.test_fault_matrix import daemons  # noqa: F401
