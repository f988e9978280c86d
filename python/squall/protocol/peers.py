"""Requests to workers' peer listeners, from clients and other workers.

``get-data``, ``update-data`` and ``run`` go over one cached connection per worker,
one request at a time, the reply matched by its ``id``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Hashable

from squall._core import encode_keys
from squall.protocol import comm, ops
from squall.security import Security


class Peers:
    """Connections to workers' peer listeners, made on first use. A connection that
    fails (or whose reply takes longer than ``reply_timeout`` seconds) is dropped, so
    the next request to that worker connects again."""

    def __init__(
        self,
        *,
        connect_timeout: float | None = None,
        reply_timeout: float | None = None,
        security: Security | None = None,
    ) -> None:
        self._connect_timeout = connect_timeout  # None: squall.comm.timeouts.connect
        self._reply_timeout = reply_timeout
        self._security = security  # None: the process's
        self._conns: dict[str, comm.Comm] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._ids = itertools.count(1)

    def addresses(self) -> list[str]:
        """The workers this holds a connection to."""
        return list(self._conns)

    async def request(
        self, address: str, header: comm.Header, payload: bytes = b""
    ) -> comm.Message:
        """Send one request to ``address`` and wait for its reply."""
        async with self._locks.setdefault(address, asyncio.Lock()):
            c = self._conns.get(address)
            if c is None or c.closed:
                c = await comm.connect(
                    address, role="peer", timeout=self._connect_timeout, security=self._security
                )
                self._conns[address] = c
            rid = next(self._ids)
            try:
                await c.write({**header, "id": rid}, payload)
                return await asyncio.wait_for(_reply(c, rid), self._reply_timeout)
            except (comm.CommError, asyncio.TimeoutError):
                await self.drop(address)
                raise

    async def get_data(self, address: str, keys: list[Hashable]) -> tuple[list[int], memoryview]:
        """``get-data``: each key's size in the payload (-1: the worker lacks it), and
        the payload of their pickles."""
        h, payload = await self.request(
            address, {"op": ops.GET_DATA, "n": len(keys)}, encode_keys(keys)
        )
        sizes = h.get("sizes")
        if h["op"] != ops.DATA or not isinstance(sizes, list):
            await self.drop(address)
            raise comm.ProtocolError(f"{address}: unexpected reply {h['op']!r} to get-data")
        if len(sizes) != len(keys) or sum(s for s in sizes if s > 0) != len(payload):
            await self.drop(address)
            raise comm.ProtocolError(f"{address}: get-data reply sizes do not match")
        return [int(s) for s in sizes], payload

    async def drop(self, address: str) -> None:
        """Close the connection to ``address``, if any."""
        c = self._conns.pop(address, None)
        if c is not None:
            await c.close()

    def forget(self, gone: str | None) -> None:
        """Forget the connections that have closed and the one to ``gone`` (a worker
        that left)."""
        for address, c in list(self._conns.items()):
            if c.closed or address == gone:
                del self._conns[address]

    async def close(self) -> None:
        conns = list(self._conns.values())
        self._conns.clear()
        for c in conns:
            await c.close()


async def _reply(c: comm.Comm, rid: int) -> comm.Message:
    while True:
        for m in await c.read_messages():
            if m[0].get("id") == rid:
                return m
