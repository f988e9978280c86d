"""docs/protocol.md's message tables, rendered from the declarations of
:mod:`squall.protocol.messages` (tests/test_messages.py compares them)."""

from __future__ import annotations

import msgspec

from squall.protocol.messages import Message, Route, messages

_SCALARS = {
    msgspec.inspect.IntType: "int",
    msgspec.inspect.FloatType: "float",
    msgspec.inspect.StrType: "str",
    msgspec.inspect.BoolType: "bool",
    msgspec.inspect.BytesType: "bytes",
    msgspec.inspect.NoneType: "null",
    msgspec.inspect.AnyType: "any",
}


def type_text(t: msgspec.inspect.Type) -> str:
    """A field's type as docs/protocol.md writes it."""
    if isinstance(t, msgspec.inspect.Metadata):
        return type_text(t.type)
    if type(t) in _SCALARS:
        return _SCALARS[type(t)]
    if isinstance(t, msgspec.inspect.UnionType):
        return " or ".join(type_text(x) for x in t.types)
    if isinstance(t, msgspec.inspect.ListType):
        return f"[{type_text(t.item_type)}]"
    if isinstance(t, msgspec.inspect.TupleType):
        return f"[{', '.join(type_text(x) for x in t.item_types)}]"
    if isinstance(t, msgspec.inspect.DictType):
        return f"{{{type_text(t.key_type)}: {type_text(t.value_type)}}}"
    if isinstance(t, msgspec.inspect.StructType):
        return "{" + ", ".join(f"{f.encode_name}: {type_text(f.type)}" for f in t.fields) + "}"
    raise TypeError(f"no text for {t!r}")


def _field_text(info: msgspec.inspect.Field) -> str:
    text = f"`{info.encode_name}`: {type_text(info.type)}"
    if not info.required:
        default = (
            info.default if info.default_factory is msgspec.NODEFAULT else info.default_factory()
        )
        text += f" = {msgspec.json.encode(default).decode()}"
    extra = getattr(info.type, "extra_json_schema", None) or {}
    return f"{text} ({extra['description']})" if "description" in extra else text


def header_text(cls: type[Message]) -> str:
    """A message's header fields as docs/protocol.md lists them."""
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    fields = [_field_text(f) for f in info.fields]
    return ", ".join(fields) or "—"


def _describe(cls: type[Message]) -> str:
    doc = cls.__doc__ if cls.__doc__ and cls.__doc__ is not _base_doc(cls) else ""
    payload = cls.PAYLOAD or "—"
    if doc:
        payload = f"{payload} ({' '.join(doc.split())})"
    return payload


def _base_doc(cls: type[Message]) -> str | None:
    for base in cls.__mro__[1:]:
        if base.__doc__:
            return base.__doc__
    return None


def markdown() -> str:
    """The message tables of docs/protocol.md#messages."""
    out: list[str] = []
    for route in Route:
        if route is Route.HANDSHAKE:
            continue
        out += [f"### {route.value}", "", "| op | header | payload |", "|---|---|---|"]
        for cls in messages(route):
            out.append(f"| `{cls.op()}` | {header_text(cls)} | {_describe(cls)} |")
        out.append("")
    return "\n".join(out)
