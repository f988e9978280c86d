"""``Queue``: values shared by name in arrival order, futures inside them kept alive
(docs/primitives.md)."""

from __future__ import annotations

import uuid
from typing import Any

from squall.client.client import Client
from squall.errors import TimeoutError
from squall.primitives.requests import Bound, Primitive, seconds
from squall.protocol import messages as m


class Queue(Primitive):
    """distributed's ``Queue``: a multi-producer, multi-consumer queue named ``name``
    (random if not given) of at most ``maxsize`` values (0: no bound). Values are
    pickled and kept on the scheduler (keep them small); futures inside them stay alive
    while queued, and a getter receives futures of its own client. Picklable into
    tasks by name and maxsize."""

    def __init__(
        self, name: str | None = None, client: Client | None = None, maxsize: int = 0
    ) -> None:
        self.name = name or f"queue-{uuid.uuid4().hex}"
        self.maxsize = maxsize
        self._bound = Bound(client)

    async def _put(self, payload: bytes, n_data: int, timeout: float | None) -> None:
        msg = m.QueuePut(name=self.name, maxsize=self.maxsize, n_data=n_data, timeout=timeout)
        reply, _ = await self._bound.ask(msg, payload)
        if not reply.ok:
            raise TimeoutError(f"queue {self.name!r} stayed full for {timeout} s")

    def put(self, value: Any, timeout: float | str | None = None, **kwargs: Any) -> Any:
        """Queue ``value``, waiting up to ``timeout`` for room in a bounded queue
        (None: as long as it takes); TimeoutError after that."""
        return self._bound.call(self._put, *self._bound.pack(value), seconds(timeout))

    async def _get(self, timeout: float | None, batch: bool | int) -> Any:
        msg = m.QueueGet(name=self.name, maxsize=self.maxsize, batch=batch, timeout=timeout)
        reply, payload = await self._bound.ask(msg)
        if not reply.ok:
            raise TimeoutError(f"queue {self.name!r} stayed empty for {timeout} s")
        values = self._bound.unpack(reply, payload)
        return values[0] if batch is False else values

    def get(
        self, timeout: float | str | None = None, batch: bool | int = False, **kwargs: Any
    ) -> Any:
        """The next value, waiting up to ``timeout`` (None: as long as it takes);
        TimeoutError after that. ``batch=True``: a list of every value queued now;
        ``batch=n``: a list of the next ``n`` (no timeout then)."""
        wait = seconds(timeout)
        if batch is not False and batch is not True and wait is not None:
            raise NotImplementedError(
                "Dask queues don't support simultaneous use of integer batch sizes and timeouts"
            )
        return self._bound.call(self._get, wait, batch)

    async def _qsize(self) -> int:
        reply, _ = await self._bound.ask(m.QueueSize(name=self.name, maxsize=self.maxsize))
        return reply.count

    def qsize(self, **kwargs: Any) -> Any:
        """How many values are queued."""
        return self._bound.call(self._qsize)

    def close(self) -> None:
        """This client is done with the queue; after the last, the queue is forgotten
        with its values (their futures released)."""
        self._bound.tell(m.QueueClose(name=self.name))

    def __reduce__(self) -> Any:
        return (type(self), (self.name, None, self.maxsize))

    def __repr__(self) -> str:
        return f"<Queue: {self.name}>"
