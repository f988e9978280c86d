"""Requests to workers' peer listeners, from clients and other workers.

``get-data``, ``update-data`` and ``run`` go over one cached connection per worker,
one request at a time, the reply matched by its ``id``.
"""

from __future__ import annotations

import asyncio
import itertools
import pickle
from collections.abc import Hashable
from typing import Any, NamedTuple, TypeVar

import msgspec

from squall._core import encode_keys
from squall.errors import TimeoutError
from squall.protocol import comm
from squall.protocol import messages as m
from squall.protocol.bounded import within
from squall.protocol.remote_errors import unpack_error
from squall.security import Security

#: ``get-data`` sizes: the holder lacks the key; its value cannot be pickled.
MISSING, UNPICKLABLE = -1, -2

R = TypeVar("R", bound=m.Message)


class Pickled:
    """One value as received: its pickle and its out-of-band buffers, slices of the
    received payload (writeable: arrays loaded over them are too)."""

    __slots__ = ("buffers", "head", "nbytes")

    def __init__(self, head: memoryview, buffers: list[memoryview]) -> None:
        self.head = head
        self.buffers = buffers
        self.nbytes = len(head) + sum(map(len, buffers))

    def load(self) -> Any:
        """The value; its arrays are views of the received memory, not copies."""
        return pickle.loads(self.head, buffers=self.buffers)


class Loaded:
    """One value of a ``whole`` reply, unpickled with the others: a :class:`Pickled`
    already loaded (its size: its share of the payload)."""

    __slots__ = ("nbytes", "value")

    def __init__(self, value: Any, nbytes: int) -> None:
        self.value = value
        self.nbytes = nbytes

    def load(self) -> Any:
        return self.value


class DataReply(NamedTuple):
    """A ``get-data`` answer: sizes per key, the payload, the sizes of each value's
    out-of-band buffers, and per index of an unpicklable value its error as
    ``(repr, pickled exception)``; or, if ``whole``, one pickle of all the values."""

    sizes: list[int]
    payload: memoryview
    buffers: dict[int, list[int]]
    failed: dict[int, tuple[str, bytes]]
    whole: bool = False
    n: int = 0  # keys asked for

    def loaded(self) -> list[Any]:
        """A ``whole`` reply's values, in key order."""
        values = pickle.loads(self.payload)
        if type(values) is not list or len(values) != self.n:
            raise comm.ProtocolError(f"a whole get-data reply does not hold {self.n} values")
        return values

    def values(self) -> list[Pickled | Loaded | tuple[str, bytes] | None]:
        """Per key: its pickle (or value), its error, or None (the holder lacks it)."""
        if self.whole:
            share = len(self.payload) // max(self.n, 1)
            return [Loaded(v, share) for v in self.loaded()]
        out: list[Pickled | Loaded | tuple[str, bytes] | None] = []
        pos = 0
        for i, size in enumerate(self.sizes):
            if size == UNPICKLABLE:
                out.append(self.failed.get(i, ("the value cannot be pickled", b"")))
            elif size < 0:
                out.append(None)
            else:
                head = self.payload[pos : pos + size]
                pos += size
                buffers = []
                for n in self.buffers.get(i, ()):
                    buffers.append(self.payload[pos : pos + n])
                    pos += n
                out.append(Pickled(head, buffers))
        return out

    def consistent(self) -> bool:
        """Whether the sizes add up to the payload, and buffers belong to values."""
        if self.whole:
            return not (self.sizes or self.buffers or self.failed)
        sizes, n = self.sizes, len(self.sizes)
        if any(not 0 <= i < n or sizes[i] < 0 for i in self.buffers):
            return False
        if any(b < 0 for bs in self.buffers.values() for b in bs):
            return False
        total = sum(s for s in sizes if s > 0) + sum(map(sum, self.buffers.values()))
        return total == len(self.payload)


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
        self,
        address: str,
        msg: m.Request,
        payload: bytes = b"",
        *,
        reply: type[R],
        again: bool = False,
    ) -> tuple[R, memoryview]:
        """Send one request to ``address`` and wait for its reply, of type ``reply``
        (anything else is a ProtocolError, and drops the connection). With ``again`` (for
        a request that may be repeated), a cached connection found closed by the worker
        (idle too long: ``squall.comm.timeouts.idle``) is replaced once."""
        async with self._locks.setdefault(address, asyncio.Lock()):
            c = self._conns.get(address)
            cached = c is not None and not c.closed
            try:
                answer, data = await self._send(address, c, msg, payload)
            except comm.CommClosedError:
                if not (again and cached):
                    raise
                answer, data = await self._send(address, None, msg, payload)
        if not isinstance(answer, reply):
            await self.drop(address)
            raise comm.ProtocolError(
                f"{address}: unexpected reply {answer.op()!r} to {msg.op()!r}"
            )
        return answer, data

    async def _send(
        self, address: str, c: comm.Comm | None, msg: m.Request, payload: bytes
    ) -> tuple[m.Message, memoryview]:
        """One request over ``c`` (a new connection if None or closed); a connection
        that fails (or whose reply times out) is dropped."""
        if c is None or c.closed:
            c = await comm.connect(
                address, role="peer", timeout=self._connect_timeout, security=self._security
            )
            self._conns[address] = c
        rid = next(self._ids)
        try:
            await c.write(msgspec.structs.replace(msg, id=rid), payload)
            return await within(_reply(c, rid), self._reply_timeout)
        except (comm.CommError, TimeoutError):
            await self.drop(address)
            raise

    async def get_data(self, address: str, keys: list[Hashable]) -> DataReply:
        """``get-data``: each key's size in the payload (-1: the worker lacks it; -2: its
        value cannot be pickled, ``failed`` says why), and the payload of the pickles."""
        h, payload = await self.request(
            address, m.GetData(n=len(keys)), encode_keys(keys), reply=m.Data, again=True
        )
        reply = DataReply(h.sizes, payload, h.buffers, h.failed, h.whole, len(keys))
        if (len(h.sizes) != len(keys) and not h.whole) or not reply.consistent():
            await self.drop(address)
            raise comm.ProtocolError(f"{address}: get-data reply sizes do not match")
        return reply

    async def run(self, address: str, blob: bytes, *, wait: bool = True) -> Any:
        """``run``: call a function on a worker's (or nanny's) event loop. ``blob`` is
        ``cloudpickle.dumps((function, args, kwargs))``; returns its result, or raises
        its exception."""
        h, payload = await self.request(address, m.Run(wait=wait), blob, reply=m.RunResult)
        if h.status == "OK":
            return pickle.loads(payload)
        exc, tb = unpack_error(h, payload, f"run on {address}")
        raise exc.with_traceback(tb)

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


async def _reply(c: comm.Comm, rid: int) -> tuple[m.Message, memoryview]:
    """The answer to request ``rid``; a refusal (``error``, which a worker or nanny
    sends before it closes) or a reply that does not validate is a CommError."""
    while True:
        for msg, payload in await c.read_messages():
            if isinstance(msg, m.Error):
                raise comm.CommError(f"{c.peer} refused the request: {msg.message}")
            if isinstance(msg, m.Malformed):  # one request at a time: it is the answer
                raise comm.ProtocolError(f"{c.peer}: {msg.error}")
            if getattr(msg, "id", None) == rid:
                return msg, payload
