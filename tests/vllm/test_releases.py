"""Every release fact in ``releases.py`` cites the wheel it was read in, and is bounded by the
wheel just before that lacks it, or says it is there "by" that release: a fact said "from X"
with unread releases behind it is a guess."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from sparkwarden.vllm import releases

SOURCE = Path(releases.__file__).read_text()
#: the wheels the module says were read
READ = re.findall(r"\d+\.\d+\.\d+", SOURCE.split("Only releases that were read")[0])


def facts() -> dict[str, tuple[tuple[int, int, int], str]]:
    """Each ``NAME: Release = (x, y, z)`` but NEWEST, with the comment lines just above it."""
    lines = SOURCE.splitlines()
    found = {}
    for node in ast.parse(SOURCE).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
            if ast.unparse(node.annotation) != "Release" or name == "NEWEST":
                continue
            above = []
            i = node.lineno - 2
            while i >= 0 and lines[i].startswith("#:"):
                above.insert(0, lines[i].removeprefix("#:").strip())
                i -= 1
            found[name] = (ast.literal_eval(node.value), " ".join(above))
    return found


def test_the_wheels_read_are_named() -> None:
    assert {"0.12.0", "0.33.0", "0.34.0"} <= set(READ), READ
    assert releases.name(releases.NEWEST) == max(READ, key=releases.parse)


def test_every_fact_cites_its_wheel_and_an_earlier_one_that_lacks_it() -> None:
    found = facts()
    assert len(found) >= 4, found
    for name, (since, said) in found.items():
        version = releases.name(since)
        assert version in READ, (name, version, READ)
        assert re.search(rf"\b{re.escape(version)}:\d+", said), (
            f"{name}: no line cited in {version}"
        )
        bound = re.search(r"(?:absent from|not in) (\d+\.\d+\.\d+)", said, re.IGNORECASE)
        known_by = re.search(r"\bby \d+\.\d+\.\d+", said)  # only known to be there by X
        assert bound or known_by, f"{name}: no earlier wheel that lacks it: {said!r}"
        if bound:
            earlier = releases.parse(bound.group(1))
            assert bound.group(1) in READ and earlier is not None and earlier < since, name
            # "from X" needs the release just before X read without it; else it is "by X"
            adjacent = earlier[:2] == (since[0], since[1] - 1)
            assert adjacent or known_by, f"{name}: a gap behind it, say 'by {version}': {said!r}"
