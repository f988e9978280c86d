"""Connections for actor calls (docs/actors.md), from clients and from tasks on
workers: one per worker address and event loop, on which requests overlap — each goes
out as made and its answer comes back when the actor's method returns, matched by id
(``actor-call`` and ``actor-attribute``, docs/protocol.md#actors)."""

from __future__ import annotations

import asyncio
import itertools
import weakref

import msgspec

from squall.protocol import comm
from squall.protocol import messages as m
from squall.security import Security

__all__ = ["close_links", "link"]


class _Link:
    """One connection to a worker's peer listener for actor requests: each goes out as
    made, and its answer comes back when its method returns, matched by id."""

    def __init__(self, c: comm.Comm) -> None:
        self._c = c
        self._pending: dict[int, asyncio.Future[tuple[m.ActorAnswer, memoryview]]] = {}
        self._reader = asyncio.ensure_future(self._read())
        self.closed = False

    async def request(self, msg: m.Request, payload: bytes) -> tuple[m.ActorAnswer, memoryview]:
        rid = next(_ids)
        answer: asyncio.Future[tuple[m.ActorAnswer, memoryview]]
        answer = asyncio.get_running_loop().create_future()
        self._pending[rid] = answer
        try:
            await self._c.write(msgspec.structs.replace(msg, id=rid), payload)
            return await answer
        finally:
            self._pending.pop(rid, None)

    async def _read(self) -> None:
        try:
            while True:
                for msg, payload in await self._c.read_messages():
                    if not isinstance(msg, m.ActorAnswer):
                        raise comm.ProtocolError(f"{self._c.peer}: unexpected {msg!r}")
                    waiter = self._pending.get(msg.id) if msg.id is not None else None
                    if waiter is not None and not waiter.done():
                        waiter.set_result((msg, payload))
        except Exception as e:
            self.closed = True
            for waiter in self._pending.values():
                if not waiter.done():
                    waiter.set_exception(comm.CommError(f"actor connection lost: {e}"))
            await self._c.close()

    async def close(self) -> None:
        self.closed = True
        self._reader.cancel()
        await self._c.close()


_ids = itertools.count(1)
#: Per event loop, per worker address.
_links: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Connecting]] = (
    weakref.WeakKeyDictionary()
)


class _Connecting:
    """A link to one worker, connected on first use (and again once it closed)."""

    def __init__(self, address: str, security: Security | None) -> None:
        self._address = address
        self._security = security
        self._link: _Link | None = None
        self._lock = asyncio.Lock()

    async def request(self, msg: m.Request, payload: bytes) -> tuple[m.ActorAnswer, memoryview]:
        async with self._lock:
            if self._link is None or self._link.closed:
                c = await comm.connect(self._address, role="peer", security=self._security)
                self._link = _Link(c)
            link = self._link
        return await link.request(msg, payload)

    async def close(self) -> None:
        if self._link is not None:
            await self._link.close()


def link(address: str, security: Security | None) -> _Connecting:
    per_loop = _links.setdefault(asyncio.get_running_loop(), {})
    if address not in per_loop:
        per_loop[address] = _Connecting(address, security)
    return per_loop[address]


async def close_links() -> None:
    """Close the actor connections of the running loop (its client or worker closes)."""
    for link in _links.pop(asyncio.get_running_loop(), {}).values():
        await link.close()
