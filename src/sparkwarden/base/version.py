"""What version of sparkwarden this is: what the build wrote (``sparkwarden/_version.py``, else
the package's metadata), one source for ``--version``, ``status``, ``/metrics`` and the journal.

The build took it from git (setuptools-scm: a release tag, or commits since one and the commit's
hash), or from pyproject's ``fallback_version`` where there was no git to ask.
"""

from __future__ import annotations

from functools import cache

#: When the code runs from a tree nobody installed (no metadata to read).
UNKNOWN = "unknown"


@cache
def version() -> str:
    """The file the build wrote (quick to import), else the metadata, else unknown."""
    try:
        from sparkwarden._version import version as built

        return str(built)
    except ImportError:
        pass
    from importlib import metadata

    try:
        return metadata.version("sparkwarden")
    except metadata.PackageNotFoundError:
        return UNKNOWN
