"""Admin calls (docs/runtime.md#admin-calls): ``run_on_scheduler`` and the scheduler's
metadata, ``get_metadata``/``set_metadata``."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import msgspec
from dask.typing import no_default

from squall.client.connection import ClientConnection
from squall.protocol import messages as m
from squall.protocol import metadata
from squall.protocol.remote_errors import unpack_error


class AdminOps:
    """The admin methods of :class:`~squall.client.client.Client` (documented there)."""

    def __init__(self, connection: ClientConnection) -> None:
        self.connection = connection

    async def run_on_scheduler(
        self, function: Callable[..., Any], *args: Any, wait: bool = True, **kwargs: Any
    ) -> Any:
        blob = cloudpickle.dumps((function, args, kwargs))
        h, payload = await self.connection.request(m.Run(wait=wait), m.RunResult, blob)
        if h.status == "OK":
            return pickle.loads(payload)
        exc, tb = unpack_error(h, payload, "run_on_scheduler")
        raise exc.with_traceback(tb)

    async def get_metadata(self, keys: Any, default: Any = no_default) -> Any:
        path = list(keys) if isinstance(keys, list | tuple) else [keys]
        body = msgspec.msgpack.encode(path)
        h, payload = await self.connection.request(m.GetMetadata(), m.Metadata, body)
        if h.found:
            return metadata.unpack(payload)
        if default is not no_default:
            return default
        raise KeyError(metadata.key(msgspec.msgpack.decode(payload)))

    async def set_metadata(self, key: Any, value: Any) -> None:
        # A tuple is one key here and a path to get_metadata, as in distributed.
        path = key if isinstance(key, list) else [key]
        body = msgspec.msgpack.encode([path, metadata.pack(value)])
        await self.connection.request(m.SetMetadata(), m.Metadata, body)
