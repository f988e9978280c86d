"""One source for the message ops: ``squall.protocol.ops`` names every message the
protocol documents, the Rust core's commands go by those names, and no Python side
spells an op itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from squall import _core
from squall.protocol import ops

ROOT = Path(__file__).resolve().parents[1]
OPS = {v for k, v in vars(ops).items() if k.isupper() and isinstance(v, str)}


def documented_ops() -> set[str]:
    """The ops of docs/protocol.md: the first cell of each table of the Messages
    section, and every ``{"op": ...}`` written out."""
    doc = (ROOT / "docs" / "protocol.md").read_text()
    found = set(re.findall(r'"op": "([a-z-]+)"', doc))
    section = doc.split("\n## Messages\n", 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        cells = line.split("|")
        if line.startswith("| `") and len(cells) > 2:
            found |= set(re.findall(r"`([a-z-]+)`", cells[1]))
    return found


def test_the_documented_messages_are_the_ops() -> None:
    assert documented_ops() == OPS - ops.NOT_MESSAGES


def test_the_core_commands_go_by_these_names() -> None:
    assert ops.COMPUTE_TASK in _core.COMMAND_OPS
    assert set(_core.COMMAND_OPS) <= OPS
    assert len(set(_core.COMMAND_OPS)) == len(_core.COMMAND_OPS)


def spelled_ops(tree: ast.AST) -> list[str]:
    """String constants used as an op: ``{"op": "x"}``, ``op == "x"``,
    ``h["op"] != "x"``, ``op in ("x", ...)``."""

    def is_op(e: ast.expr) -> bool:
        return (isinstance(e, ast.Name) and e.id == "op") or (
            isinstance(e, ast.Subscript)
            and isinstance(e.slice, ast.Constant)
            and e.slice.value == "op"
        )

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if isinstance(k, ast.Constant) and k.value == "op" and isinstance(v, ast.Constant):
                    found.append(str(v.value))
        elif isinstance(node, ast.Compare) and is_op(node.left):
            for c in node.comparators:
                elts = c.elts if isinstance(c, ast.Tuple | ast.Set | ast.List) else [c]
                found += [str(e.value) for e in elts if isinstance(e, ast.Constant)]
    return found


def test_no_python_side_spells_an_op() -> None:
    assert spelled_ops(ast.parse('d = {"op": "x"}; op == "y"; h["op"] in ("z",)')) == [
        "x",
        "y",
        "z",
    ]
    for path in sorted((ROOT / "python" / "squall").rglob("*.py")):
        spelled = spelled_ops(ast.parse(path.read_text()))
        assert not spelled, f"{path.relative_to(ROOT)} spells {spelled}: use squall.protocol.ops"
