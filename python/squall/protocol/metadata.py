"""How the scheduler's metadata travels (docs/protocol.md#admin-calls).

Values go as msgpack, so the scheduler stores plain data it reads without unpickling:
dicts, lists, strings, numbers, booleans, None and bytes go as themselves; any other
value (a tuple, a set, an array, an object) goes as its pickle in a msgpack extension
(code :data:`PICKLED`), which the scheduler keeps opaque and the reading client
unpickles. Nested paths then go through dicts as in distributed, and values of any
picklable type come back as they were set. Paths of keys go as msgpack arrays; msgpack
has no tuples, so a key that arrives as an array is made a tuple again (a dask key may
be one)."""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import msgspec

#: The msgpack extension code of a pickled value.
PICKLED = 1

#: Sent as themselves (an extension: a value pickled already).
_PLAIN = (str, int, float, bool, bytes, type(None), msgspec.msgpack.Ext)


def pack(value: Any) -> Any:
    """``value`` with what msgpack does not carry as itself turned into pickles (by a
    client setting it, or by the scheduler sending what code run on it set)."""
    kind = type(value)
    if kind is dict:
        return {k: pack(v) for k, v in value.items()}
    if kind is list:
        return [pack(v) for v in value]
    if kind in _PLAIN:
        return value
    return msgspec.msgpack.Ext(PICKLED, cloudpickle.dumps(value))


def _unpickle(code: int, data: memoryview) -> Any:
    if code != PICKLED:
        raise ValueError(f"unknown msgpack extension {code}")
    return pickle.loads(data)


#: Decodes a value for the client that asked for it, unpickling what was pickled.
unpack = msgspec.msgpack.Decoder(ext_hook=_unpickle).decode


def key(k: Any) -> Any:
    """A key as sent, with the arrays msgpack made of its tuples turned back."""
    return tuple(map(key, k)) if isinstance(k, list) else k


def path(payload: bytes | memoryview) -> list[Any]:
    """A path of keys from its msgpack."""
    return [key(k) for k in msgspec.msgpack.decode(payload)]
