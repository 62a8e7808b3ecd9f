"""The house's shape as the folders state it: floors imported only downward, no import circle,
and every module opening with what it holds."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "sparkwarden"


def floors() -> list[list[str]]:
    """pyproject's layers contract, top floor first; siblings on a floor split by "|"."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        contracts = tomllib.load(file)["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    return [[m.strip() for m in floor.split("|")] for floor in layers]


def upward_imports(graph: grimp.ImportGraph, layers: list[list[str]]) -> list[str]:
    """Every direct import from a floor to one above it, or between siblings on one floor (an
    indirect chain upward always contains such a direct one)."""

    def place(module: str) -> tuple[int, str] | None:
        for height, floor in enumerate(layers):
            for room in floor:
                if module == room or module.startswith(room + "."):
                    return height, room
        return None

    found = []
    for importer in graph.modules:
        here = place(importer)
        for imported in graph.find_modules_directly_imported_by(importer):
            there = place(imported)
            if here and there and there != here and there[0] <= here[0]:
                found.append(f"{importer} -> {imported}")
    return sorted(found)


def test_each_floor_imports_only_from_below() -> None:
    graph = grimp.build_graph("sparkwarden", cache_dir=None)
    assert upward_imports(graph, floors()) == []


def test_an_import_up_a_floor_is_seen() -> None:
    graph = grimp.build_graph("sparkwarden", cache_dir=None)
    graph.add_import(importer="sparkwarden.base.errors", imported="sparkwarden.daemon.loop")
    assert upward_imports(graph, floors()) == ["sparkwarden.base.errors -> sparkwarden.daemon.loop"]


def test_no_import_circle_between_modules() -> None:
    """Annotation-only imports count too: a circle hidden behind TYPE_CHECKING is still one."""
    graph = grimp.build_graph("sparkwarden", cache_dir=None)
    circles = sorted(
        f"{a} <-> {b}"
        for a in graph.modules
        for b in graph.find_modules_directly_imported_by(a)
        if a < b and graph.chain_exists(importer=b, imported=a)
    )
    assert circles == []


def test_the_checks_see_a_circle_when_there_is_one(tmp_path: Path) -> None:
    """The circle test is not blind: two modules importing each other are found."""
    pkg = tmp_path / "circle_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from circle_pkg import b\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from circle_pkg import a\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        graph = grimp.build_graph("circle_pkg", cache_dir=None)
    finally:
        sys.path.remove(str(tmp_path))
    assert graph.chain_exists(importer="circle_pkg.b", imported="circle_pkg.a")
    assert graph.chain_exists(importer="circle_pkg.a", imported="circle_pkg.b")


def test_every_module_opens_with_what_it_holds() -> None:
    missing = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        if not ast.get_docstring(ast.parse(path.read_text()))
    ]
    assert missing == []
