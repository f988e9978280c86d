"""One TCP (or TLS) connection's byte stream, under :class:`~squall.protocol.comm.Comm`.

asyncio's ``StreamReader`` copies every byte twice after the kernel's copy (into its
buffer, then out of it), which a large value pays on every transfer. This stream is a
buffered protocol instead: small reads (frame lengths and headers) go through a small
buffer, and a large payload is read by the kernel straight into the memory the caller
gives (:meth:`Stream.readinto`), with no copy in Python (docs/runtime.md#memory).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

#: What a server runs for each connection, in a task of its own.
OnConnect = Callable[["Stream"], Coroutine[Any, Any, None]]

#: What one receive may take into the small buffer while no large read is under way.
_SCRATCH_BYTES = 256 * 2**10
#: Reading pauses while this much that nobody asked for yet is buffered.
_BUFFERED_LIMIT = 2**20
#: Large writes go to the transport in slices of this size (:meth:`Stream.send`).
_SLICE_BYTES = 2**20


class Stream(asyncio.BufferedProtocol):
    """Reads (``readexactly``, ``readinto``) and writes (``write``, ``send``,
    ``drain``) on one connection; end of stream raises ``asyncio.IncompleteReadError``, a broken
    connection its ``OSError``. One reader at a time."""

    def __init__(self, on_connect: OnConnect | None = None) -> None:
        self._on_connect = on_connect
        self._task: asyncio.Task[None] | None = None
        self.transport: asyncio.Transport | None = None
        self._scratch = memoryview(bytearray(_SCRATCH_BYTES))
        self._buffer = bytearray()
        #: The caller's memory a large read fills, and how much of it is filled.
        self._target: memoryview | None = None
        self._filled = 0
        self._waiter: asyncio.Future[None] | None = None
        self._eof = False
        self._error: BaseException | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._drained: asyncio.Future[None] | None = None
        self._closed = asyncio.get_running_loop().create_future()

    # asyncio's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self._on_connect is not None:
            self._task = asyncio.get_running_loop().create_task(self._on_connect(self))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._target is not None:
            return self._target[self._filled :]
        return self._scratch

    def buffer_updated(self, nbytes: int) -> None:
        if self._target is not None:
            self._filled += nbytes
            if self._filled == len(self._target):
                self._target = None  # filled: what follows goes to the small buffer
                self._wake()
            return
        self._buffer += self._scratch[:nbytes]
        self._wake()
        if len(self._buffer) > _BUFFERED_LIMIT and not self._reading_paused:
            self._reading_paused = True
            assert self.transport is not None
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        # As asyncio's streams: a TCP connection stays open for writing (writes fail
        # once the peer's reset arrives); TLS cannot be half-closed.
        assert self.transport is not None
        return self.transport.get_extra_info("sslcontext") is None

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._error = exc
        self._wake()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        if not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _wait(self) -> None:
        if self._error is not None:
            raise self._error
        if self._eof:
            raise asyncio.IncompleteReadError(b"", None)
        if self._reading_paused:
            self._reading_paused = False
            assert self.transport is not None
            self.transport.resume_reading()
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    # Reading

    async def readexactly(self, n: int) -> bytes:
        """The next ``n`` bytes (meant for small reads: they pass the small buffer)."""
        try:
            while len(self._buffer) < n:
                await self._wait()
        except asyncio.IncompleteReadError:
            raise asyncio.IncompleteReadError(bytes(self._buffer), n) from None
        data = bytes(memoryview(self._buffer)[:n])
        del self._buffer[:n]
        return data

    async def readinto(self, target: memoryview) -> None:
        """Fill ``target`` with the next bytes: what is buffered is copied, the rest is
        received into it directly."""
        have = min(len(self._buffer), len(target))
        target[:have] = memoryview(self._buffer)[:have]
        del self._buffer[:have]
        if have == len(target):
            return
        self._target, self._filled = target, have
        try:
            while self._filled < len(target):
                await self._wait()
        except asyncio.IncompleteReadError:
            raise asyncio.IncompleteReadError(bytes(target[: self._filled]), len(target)) from None
        finally:
            self._target = None

    # Writing

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert self.transport is not None
        self.transport.write(data)

    async def send(self, data: bytes | bytearray | memoryview) -> None:
        """Write ``data``, a large buffer in slices, each once the transport has room:
        it copies what the socket does not take at once into a buffer of its own, so
        that copy stays within a slice rather than most of the buffer."""
        if len(data) <= _SLICE_BYTES:
            self.write(data)
            return
        view = memoryview(data)
        for start in range(0, len(view), _SLICE_BYTES):
            self.write(view[start : start + _SLICE_BYTES])
            await self.drain()

    async def drain(self) -> None:
        """Wait until the transport takes more; ConnectionResetError once it is gone."""
        assert self.transport is not None
        if self.transport.is_closing():
            await asyncio.sleep(0)  # lets a pending connection_lost arrive
        if self._closed.done():
            raise ConnectionResetError("connection lost")
        if self._writing_paused:
            if self._drained is None or self._drained.done():
                self._drained = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._drained)  # writers may wait together
            if self._closed.done():
                raise ConnectionResetError("connection lost")

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        assert self.transport is not None
        return self.transport.get_extra_info(name, default)

    def is_closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    async def wait_closed(self) -> None:
        await self._closed


async def open_stream(host: str, port: int, **kwargs: Any) -> Stream:
    """A connected stream (``kwargs``: ``loop.create_connection``'s ``ssl`` and
    ``server_hostname``)."""
    loop = asyncio.get_running_loop()
    _, stream = await loop.create_connection(Stream, host, port, **kwargs)
    return stream


async def serve_streams(
    on_connect: OnConnect, host: str, port: int, **kwargs: Any
) -> asyncio.Server:
    """A server calling ``on_connect`` with each connection's stream, in a task of its
    own (``kwargs``: ``loop.create_server``'s ``ssl``)."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: Stream(on_connect), host, port, **kwargs)
