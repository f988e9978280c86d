"""The scheduler's metadata (docs/runtime.md#admin-calls): one nested dict of the
values clients set (plain data, and pickles kept opaque: squall.protocol.metadata),
set and read by a path of keys, with distributed's rules."""

from __future__ import annotations

from typing import Any

import msgspec
from dask.typing import no_default

from squall.protocol import messages as m
from squall.protocol import metadata as codec

Answer = tuple[m.Message, bytes] | None


class MetadataStore:
    """The metadata of one scheduler, and the handlers of the clients' messages."""

    def __init__(self) -> None:
        self.root: dict[Any, Any] = {}

    def set(self, keys: list[Any], value: Any) -> None:
        """Set the value at the path ``keys``, making the dicts on the way: a step
        that is missing or holds neither a dict nor a list becomes an empty dict (a
        list's items are its indices; distributed looks among its values)."""
        node: Any = self.root
        for key in keys[:-1]:
            if not isinstance(_item(node, key), dict | list):
                node[key] = {}
            node = node[key]
        node[keys[-1]] = value

    def get(self, keys: list[Any], default: Any = no_default) -> Any:
        """The value at the path ``keys``; ``default`` if a key is missing, or
        KeyError (of that key) without one."""
        node: Any = self.root
        try:
            for key in keys:
                node = node[key]
        except KeyError:
            if default is not no_default:
                return default
            raise
        return node

    def get_request(self, cid: int, msg: m.GetMetadata, payload: memoryview) -> Answer:
        try:
            value = self.get(codec.path(payload))
        except KeyError as e:
            return m.Metadata(id=msg.id, found=False), msgspec.msgpack.encode(e.args[0])
        except (IndexError, TypeError) as e:  # a list indexed wrongly, a bad key
            return m.RequestFailed(id=msg.id, error=repr(e)), b""
        return m.Metadata(id=msg.id), msgspec.msgpack.encode(codec.pack(value))

    def set_request(self, cid: int, msg: m.SetMetadata, payload: memoryview) -> Answer:
        keys, value = msgspec.msgpack.decode(payload)
        try:
            self.set([codec.key(k) for k in keys], value)
        except (IndexError, TypeError) as e:
            return m.RequestFailed(id=msg.id, error=repr(e)), b""
        return m.Metadata(id=msg.id), b""


def _item(node: dict[Any, Any] | list[Any], key: Any) -> Any:
    """``node[key]``, or None if it has no such item."""
    if isinstance(node, dict):
        return node.get(key)
    return node[key] if isinstance(key, int) and -len(node) <= key < len(node) else None
