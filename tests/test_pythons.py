"""What keeps squall alike on every supported Python (docs/install.md#supported-pythons)
beyond the suite itself, which the matrix runs on the oldest and the newest."""

from __future__ import annotations

import ast
import asyncio
import pathlib
import sys

import pytest

import squall
from squall.protocol.bounded import within

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest's own dependency there
    import tomli as tomllib

PACKAGE = pathlib.Path(squall.__file__).parent


def modules() -> list[pathlib.Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "errors.py")


def test_every_module_names_the_one_timeout_error() -> None:
    """On 3.10 the builtin ``TimeoutError`` and asyncio's are two classes: a module that
    raised one and a caller that caught the other would miss a time-out there only."""
    wrong = []
    for path in modules():
        tree = ast.parse(path.read_text())
        imports_it = any(
            isinstance(node, ast.ImportFrom)
            and node.module == "squall.errors"
            and any(alias.name == "TimeoutError" for alias in node.names)
            for node in tree.body
        )
        for node in ast.walk(tree):
            bare = isinstance(node, ast.Name) and node.id == "TimeoutError"
            dotted = isinstance(node, ast.Attribute) and ast.unparse(node) == (
                "asyncio.TimeoutError"
            )
            if dotted or (bare and not imports_it):
                wrong.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not wrong, f"use squall.errors.TimeoutError at {wrong}"


def test_every_bounded_wait_is_within() -> None:
    """``asyncio.wait_for`` can swallow a cancellation that meets its end before 3.12 (a
    worker closed while it reconnects would retry forever); ``within`` never does."""
    wrong = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path in modules()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and ast.unparse(node) == "asyncio.wait_for"
    ]
    assert not wrong, f"use squall.protocol.bounded.within at {wrong}"


def test_the_one_timeout_error_is_asyncios_and_distributeds() -> None:
    distributed = pytest.importorskip("distributed")
    assert squall.TimeoutError is asyncio.TimeoutError is distributed.TimeoutError


def test_a_bounded_wait_raises_it() -> None:
    async def late() -> None:
        await within(asyncio.sleep(5), 0.01)

    with pytest.raises(squall.TimeoutError, match=r"timed out after 0\.01 s"):
        asyncio.run(late())


def test_the_matrix_is_the_pythons_the_package_names() -> None:
    """``.ci/pythons`` tests the wheel on every Python the package metadata names but
    .ci/run's own (3.11)."""
    root = pathlib.Path(__file__).resolve().parents[1]
    script = (root / ".ci" / "pythons").read_text()
    matrix = set()
    for name in ("FULL", "SMOKE"):
        line = next(x for x in script.splitlines() if x.startswith(f"{name}=("))
        matrix |= set(line.split("(", 1)[1].split(")", 1)[0].split())
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    prefix = "Programming Language :: Python :: 3."
    named = {c.rsplit(" ", 1)[1] for c in project["classifiers"] if c.startswith(prefix)}
    assert matrix | {"3.11"} == named
    assert project["requires-python"] == f">={min(named, key=lambda v: int(v[2:]))}"
