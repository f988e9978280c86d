"""Published datasets, the client's side (docs/runtime.md#datasets): ``publish_dataset``,
``get_dataset``, ``list_datasets``, ``unpublish_dataset`` and ``Client.datasets``.

A value is pickled here, its futures by key, and kept by the scheduler as bytes, with
those keys, which the scheduler keeps alive while the dataset is published. A client
getting it is handed the futures as a primitive's getter is
(docs/protocol.md#futures-handed-over): the scheduler makes it hold their keys as it
answers, so that they stay alive for it after an unpublish, and it unpickles the value
with futures of its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from squall._core import decode_keys, encode_keys
from squall.client.connection import ClientConnection
from squall.client.futures import Key
from squall.client.handover import pickle_value, unpickle_values
from squall.protocol import messages as m

if TYPE_CHECKING:
    from squall.client.client import Client

#: ``get_dataset``'s default when none is given: raise KeyError.
NO_DEFAULT: Any = object()


def named_values(
    args: tuple[Any, ...], name: Key | None, kwargs: dict[str, Any]
) -> list[tuple[Key, Any]]:
    """The datasets ``publish_dataset`` is given: its keyword arguments, and ``args``
    under ``name`` (one value, or the tuple of several) or, without a name, a single
    ``{name: value}`` mapping."""
    items: list[tuple[Key, Any]] = list(kwargs.items())
    if name:
        if not args:
            raise ValueError(
                "with name=, publish_dataset takes the value as its argument: "
                "publish_dataset(df, name='ds')"
            )
        items.append((name, args[0] if len(args) == 1 else args))
    elif args:
        if len(args) != 1 or not isinstance(args[0], Mapping):
            raise ValueError("without name=, publish_dataset's argument is a {name: value} dict")
        items.extend(args[0].items())
    return items


class DatasetOps:
    """The dataset methods of :class:`~squall.client.client.Client` (documented there)."""

    def __init__(self, client: Client, connection: ClientConnection) -> None:
        self.client = client
        self.connection = connection

    async def publish(
        self, args: tuple[Any, ...], name: Key | None, override: bool, kwargs: dict[str, Any]
    ) -> None:
        items = named_values(args, name, kwargs)
        names = encode_keys([n for n, _ in items])
        pickled = [pickle_value(value) for _, value in items]
        values = [data for data, _ in pickled]
        keys = encode_keys([k for _, ks in pickled for k in ks])
        msg = m.PublishDatasets(
            names_bytes=len(names),
            keys_bytes=len(keys),
            counts=[len(ks) for _, ks in pickled],
            sizes=list(map(len, values)),
            override=override,
        )
        # The graphs that made these futures were queued for the loop (``send_soon``)
        # before this ran; one turn of the loop sends them, so that on the stream the
        # request follows them and the scheduler knows their keys when it reads it.
        await asyncio.sleep(0)
        reply, _ = await self.connection.request(
            msg, m.PublishDatasetsReply, b"".join([names, keys, *values])
        )
        if reply.error is not None:
            raise KeyError(reply.error)

    async def get(self, name: Key | list[Key], default: Any) -> Any:
        names = name if isinstance(name, list) else [name]
        reply, payload = await self.connection.request(
            m.GetDatasets(), m.GetDatasetsReply, encode_keys(names)
        )
        if len(reply.sizes) != len(names):
            raise ValueError("get-datasets answered for other names than asked")
        values = iter(unpickle_values(self.client, reply.id or 0, reply.sizes, payload))
        out: list[Any] = []
        for size in reply.sizes:
            if size >= 0:
                out.append(next(values))
            elif default is NO_DEFAULT:
                raise KeyError(f"Dataset '{name}' not found")
            else:
                out.append(default)
        return out if isinstance(name, list) else out[0]

    async def unpublish(self, name: Key | list[Key]) -> None:
        names = name if isinstance(name, list) else [name]
        await self.connection.request(
            m.UnpublishDatasets(), m.UnpublishDatasetsReply, encode_keys(names)
        )

    async def names(self) -> list[Key]:
        _, payload = await self.connection.request(m.ListDatasets(), m.ListDatasetsReply)
        return decode_keys(bytes(payload))


class Datasets(MutableMapping[Key, Any]):
    """``Client.datasets``: the published datasets as a mapping, as distributed's. On
    an asynchronous client ``datasets[name]`` is awaitable and iteration is ``async
    for``; setting, deleting and ``len`` raise TypeError there (use the methods)."""

    __slots__ = ("_client",)

    def __init__(self, client: Client) -> None:
        self._client = client

    def _refuse_async(self, what: str, instead: str) -> None:
        if self._client.asynchronous:
            raise TypeError(f"{what} is not possible on an asynchronous client; use {instead}")

    def __getitem__(self, key: Key) -> Any:
        return self._client.get_dataset(key)

    def __setitem__(self, key: Key, value: Any) -> None:
        self._refuse_async("client.datasets[name] = value", "client.publish_dataset(name=value)")
        self._client.publish_dataset(value, name=key)

    def __delitem__(self, key: Key) -> None:
        self._refuse_async("del client.datasets[name]", "client.unpublish_dataset(name)")
        self._client.unpublish_dataset(key)

    def __iter__(self) -> Iterator[Key]:
        self._refuse_async("iterating client.datasets", "async for")
        yield from self._client.list_datasets()

    def __aiter__(self) -> AsyncIterator[Key]:
        if not self._client.asynchronous:
            raise TypeError("async for on client.datasets needs an asynchronous client")

        async def names() -> AsyncIterator[Key]:
            for key in await self._client.list_datasets():
                yield key

        return names()

    def __len__(self) -> int:
        self._refuse_async("len(client.datasets)", "len(await client.list_datasets())")
        return len(self._client.list_datasets())

    def __contains__(self, key: object) -> bool:
        # One round trip for the names, not a fetch of the value.
        self._refuse_async("name in client.datasets", "await client.list_datasets()")
        return key in self._client.list_datasets()
