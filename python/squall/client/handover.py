"""Values with futures inside, handed from client to client through the scheduler —
a primitive's (``Variable``, ``Queue``) or a published dataset
(docs/protocol.md#futures-handed-over).

The sender pickles a value with its futures by key (:func:`pickle_value`); the
scheduler keeps the bytes and holds the keys. When it answers a getter, it makes the
getter's client hold the keys in the same step, and the reply lists them; the client
holds their states as the reply arrives (``ClientConnection.take_handed``), so that no
release or notice can come between, and :func:`unpickle_values` then makes the
futures this client's."""

from __future__ import annotations

import io
import pickle
from typing import TYPE_CHECKING, Any

import cloudpickle  # type: ignore[import-untyped]

from squall.client.futures import Future, Key

if TYPE_CHECKING:
    from squall.client.client import Client


def pickle_value(value: Any) -> tuple[bytes, list[Key]]:
    """``value`` pickled, the futures inside it by key; and those keys, once each."""
    keys: list[Key] = []
    buf = io.BytesIO()
    _Pickler(buf, keys).dump(value)
    return buf.getvalue(), list(dict.fromkeys(keys))


def unpickle_values(client: Client, rid: int, sizes: list[int], payload: memoryview) -> list[Any]:
    """The values the reply to request ``rid`` carries: pickles of ``sizes`` bytes one
    after the other (a negative size stands for no value, and is skipped); their
    futures are ``client``'s."""
    connection = client.connection
    handed = connection.take_handed(rid)
    try:
        out = []
        offset = 0
        for size in sizes:
            if size >= 0:
                data = payload[offset : offset + size]
                out.append(_Unpickler(io.BytesIO(data), client).load())
                offset += size
        return out
    finally:
        for key, st in handed:
            connection.release_soon(st, key)


class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]  # untyped base
    def __init__(self, file: io.BytesIO, keys: list[Key]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._keys = keys

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, Future):
            self._keys.append(obj.key)
            return ("future", obj.key)
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, client: Client) -> None:
        super().__init__(file)
        self._client = client

    def persistent_load(self, pid: Any) -> Any:
        return Future(pid[1], self._client)
