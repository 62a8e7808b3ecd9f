"""The manual: README a front door of at most ~200 lines, and every link in it and in the
chapters under docs/ leading somewhere that exists (a file, a folder, or a heading's anchor)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors: each heading lowercased, punctuation dropped, spaces to dashes."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # an outside address: not ours to check here
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in anchors(dest)):
            broken.append(target)
    return broken


def test_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 200, f"README.md has {lines} lines; move detail into a chapter under docs/"


def test_every_chapter_is_linked_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    assert [p.name for p in PAGES[1:] if f"(docs/{p.name}" not in readme] == []


def test_every_link_leads_somewhere() -> None:
    assert {p.name: broken_links(p) for p in PAGES if broken_links(p)} == {}


def test_a_broken_link_is_seen(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title here\n[ok](#title-here) [gone](nowhere.md) [bad](#no-such)\n")
    assert broken_links(page) == ["nowhere.md", "#no-such"]


def test_the_exit_code_table_is_the_codes_own() -> None:
    """Issue 36: one table of exit codes, used by the code and the docs."""
    from sparkwarden.base.exits import MEANINGS

    text = (ROOT / "docs" / "operating.md").read_text().split("### Exit codes", 1)[1]
    rows = [line for line in text.splitlines() if re.match(r"\| \d+ \|", line)]
    shown = {int(c): m for c, m in (r.strip("| ").split(" | ", 1) for r in rows)}
    assert shown == {int(code): meaning for code, meaning in MEANINGS.items()}
    readme = (ROOT / "README.md").read_text()
    assert "docs/operating.md#exit-codes" in readme  # README's status codes point to it


#: What a shown example must be: run by a test (named), compared by one, or illustrative.
EXAMPLE = re.compile(r"<!-- example: (.+) -->")
#: Fences whose text an operator types or reads back: shell, console, plain output.
SHOWN = ("", "sh", "console")


def test_every_shell_and_output_example_is_tested_or_marked_illustrative() -> None:
    """Issue 36: each console or sh example is run by a test, or compared with what the code
    prints, or says it is illustrative; a test it names exists."""
    tests = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
    unmarked, missing = [], []
    for page in PAGES:
        lines = page.read_text().splitlines()
        inside = False
        for i, line in enumerate(lines):
            if not line.startswith("```"):
                continue
            if not inside and line[3:].strip() in SHOWN:
                mark = EXAMPLE.fullmatch(lines[i - 1]) if i else None
                if mark is None:
                    unmarked.append(f"{page.name}:{i + 1}")
                else:
                    for name in re.findall(r"\btest_\w+", mark.group(1)):
                        if f"def {name}(" not in tests:
                            missing.append(f"{page.name}:{i + 1}: {name}")
            inside = not inside
    assert unmarked == [], f"examples with no <!-- example: ... --> line before them: {unmarked}"
    assert missing == [], f"examples naming tests that do not exist: {missing}"
