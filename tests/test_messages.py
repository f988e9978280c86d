"""The message table (squall.protocol.messages): docs/protocol.md shows it, every room
handles every message of the routes it reads, and headers are validated when read."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import msgspec
import pytest

from squall import _core
from squall.protocol import comm, message_docs
from squall.protocol import messages as m
from squall.scheduler import outbox

ROOT = Path(__file__).resolve().parents[1]


def test_the_protocol_doc_shows_the_table() -> None:
    doc = (ROOT / "docs" / "protocol.md").read_text()
    found = re.search(r"<!-- messages: generated[^\n]*-->\n(.*)<!-- messages: end -->", doc, re.S)
    assert found is not None, "docs/protocol.md lost its generated message tables"
    assert found.group(1) == message_docs.markdown(), (
        "docs/protocol.md's message tables differ from squall.protocol.messages: "
        "paste squall.protocol.message_docs.markdown() between the markers"
    )


def test_ops_are_unique_on_each_route() -> None:
    for route in m.Route:
        ops = [cls.op() for cls in m.messages(route)]
        assert len(ops) == len(set(ops)), route


def test_the_core_commands_are_messages_or_say_they_are_not() -> None:
    sent = {cls.op() for r in m.Route for cls in m.messages(r)}
    assert set(_core.COMMAND_OPS) - sent == {outbox.COMPUTE_TASK, outbox.CLOSE_WORKER}
    assert set(outbox.NOTICES) <= set(_core.COMMAND_OPS)


def hand_written(tree: ast.AST) -> list[str]:
    """Headers written or read by hand: ``{"op": ...}`` literals and ``x["op"]``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict) and any(
            isinstance(k, ast.Constant) and k.value == "op" for k in node.keys
        ):
            found.append(ast.unparse(node)[:60])
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and node.slice.value in ("op", "id")
        ):
            found.append(ast.unparse(node))
    return found


def test_no_python_side_writes_or_reads_a_header_by_hand() -> None:
    assert hand_written(ast.parse('d = {"op": "x"}; h["op"]; h["id"]')) == [
        "{'op': 'x'}",
        "h['op']",
        "h['id']",
    ]
    for path in sorted((ROOT / "python" / "squall").rglob("*.py")):
        found = hand_written(ast.parse(path.read_text()))
        assert not found, f"{path.relative_to(ROOT)}: {found}: use squall.protocol.messages"


@pytest.mark.parametrize("route", [r for r in m.Route if r is not m.Route.HANDSHAKE])
def test_every_message_round_trips(route: m.Route) -> None:
    decoder = comm.DECODERS[route]
    for cls in m.messages(route):
        msg = msgspec.convert(_example(cls), cls)
        batch = decoder.decode(comm.ENCODER.encode(m.Batch(msgs=[msg], spans=[(0, 0)])))
        assert batch.msgs == [msg]


def _example(cls: type[m.Message]) -> dict[str, object]:
    """Required fields filled with a value of their type."""
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    return {f.name: _value(f.type) for f in info.fields if f.required}


def _value(t: msgspec.inspect.Type) -> object:
    t = t.type if isinstance(t, msgspec.inspect.Metadata) else t
    if isinstance(t, msgspec.inspect.UnionType):
        return _value(t.types[0])
    return {
        msgspec.inspect.IntType: 1,
        msgspec.inspect.FloatType: 1.5,
        msgspec.inspect.StrType: "x",
        msgspec.inspect.BoolType: True,
        msgspec.inspect.BytesType: b"x",
        msgspec.inspect.NoneType: None,
        msgspec.inspect.AnyType: None,
    }.get(type(t), [] if isinstance(t, msgspec.inspect.ListType) else {})


def test_a_message_of_another_route_does_not_decode() -> None:
    frame = comm.ENCODER.encode(m.Batch(msgs=[m.Compute(addresses=[], n=1)], spans=[(0, 0)]))
    with pytest.raises(msgspec.ValidationError, match="op"):
        comm.DECODERS[m.Route.CLIENT_TO_SCHEDULER].decode(frame)


def test_a_field_of_the_wrong_type_names_it() -> None:
    bad = msgspec.msgpack.encode(
        {"op": "batch", "msgs": [{"op": "finished", "n": "3"}], "spans": [[0, 0]]}
    )
    with pytest.raises(msgspec.ValidationError, match=r"\$\.msgs\[0\]\.n"):
        comm.DECODERS[m.Route.WORKER_TO_SCHEDULER].decode(bad)
