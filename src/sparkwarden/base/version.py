"""What version of sparkwarden this is: the installed package's metadata, one source for
``--version``, ``status``, ``/metrics`` and the journal.

The build took it from git (setuptools-scm: a release tag, or commits since one and the commit's
hash), or from pyproject's ``fallback_version`` where there was no git to ask.
"""

from __future__ import annotations

from functools import cache
from importlib import metadata

#: When the code runs from a tree nobody installed (no metadata to read).
UNKNOWN = "unknown"


@cache
def version() -> str:
    try:
        return metadata.version("sparkwarden")
    except metadata.PackageNotFoundError:
        return UNKNOWN
