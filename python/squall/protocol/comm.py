"""The wire protocol every squall process speaks (see docs/runtime.md).

Frames are ``u32 header_len | u32 payload_len | msgpack header | payload`` on a TCP
stream; a message larger than a frame travels as ``part`` frames; connections start with
a versioned handshake; small messages to one peer are coalesced by :class:`BatchedSend`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgpack  # type: ignore[import-untyped]
import psutil  # type: ignore[import-untyped]

from squall import config, security
from squall.protocol import ops
from squall.security import Security
from squall.security import default as default_security

logger = logging.getLogger("squall.comm")

#: Changes whenever a message changes in a way the other side cannot read (2: task
#: stream samples carry the result's size and type name), so that processes of two
#: versions refuse each other at the handshake instead of failing on a later message.
PROTOCOL = "squall/2"
_LENGTHS = struct.Struct("<II")

Header = dict[str, Any]
Message = tuple[Header, memoryview]


class CommError(Exception):
    """A connection failed or a peer broke the protocol."""


class CommClosedError(CommError):
    """The peer closed the connection (cleanly, or in the middle of a frame)."""


class ProtocolError(CommError):
    """A peer sent something that is not a squall frame."""


class HandshakeError(CommError):
    """The peers could not agree to talk (another protocol version, a refused role)."""


class MessageTooLarge(ValueError):
    """One message is larger than a message may be (``squall.comm.max-message-bytes``):
    refused before it is sent, so only the call that made it fails."""


#: What reading the fields of a malformed message raises (a missing field, a value of
#: the wrong type or out of range): handlers answer these as a malformed request or
#: close that one connection, never the process.
MALFORMED = (KeyError, IndexError, TypeError, ValueError, OverflowError)

#: Largest frame before the handshake: a hello is a few hundred bytes, and a stranger
#: must not make a process buffer (or parse) more before it has been accepted.
HELLO_MAX_BYTES = 64 * 2**10

#: Frame caps of roles that never send much (a nanny: ``worker-died`` and keep-alives);
#: the others may send graphs, results or scattered data up to ``max-frame-bytes``.
ROLE_MAX_FRAME_BYTES = {"nanny": 2**20}

#: Room left in a frame for the batch's headers (msgpack), beside its payloads.
HEADER_ROOM = 16 * 2**20
#: A payload that does not fit one frame is sent in parts of at most this many bytes,
#: so that neither side holds a second copy of the whole message in a frame buffer.
PART_BYTES = 64 * 2**20


SCHEMES = ("tcp", "tls")


def scheme_of(address: str) -> str:
    return address.split("://", 1)[0] if "://" in address else "tcp"


def parse_address(address: str) -> tuple[str, int]:
    """``tcp://host:port``, ``tls://host:port`` (or ``host:port``) → (host, port), with
    a clear error."""
    rest = address
    if "://" in address:
        scheme, rest = address.split("://", 1)
        if scheme not in SCHEMES:
            raise ValueError(f"unsupported address {address!r}: use tcp:// or tls://")
    host, sep, port = rest.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"invalid address {address!r}: expected tcp://HOST:PORT")
    return host, int(port)


def format_address(host: str, port: int, scheme: str | None = None) -> str:
    """An address; the scheme defaults to tls when this process's security has TLS."""
    if scheme is None:
        scheme = "tls" if security.default().tls else "tcp"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def _transport(address: str, sec: Security, server: bool) -> ssl.SSLContext | None:
    """The TLS context an address needs (None for tcp://), or a clear refusal."""
    if scheme_of(address) == "tls":
        return sec.ssl_context(server)
    if sec.require_encryption:
        raise CommError(f"refusing unencrypted {address}: encryption is required (use tls://)")
    return None


#: Payloads this large are handed to the transport as they are, after their frame's
#: lengths and header, rather than copied into one frame first (docs/runtime.md#memory).
SEPARATE_PAYLOAD_BYTES = 1 << 20


def encode_frame(header: Header, payload: bytes | memoryview = b"") -> bytes:
    return _frame(msgpack.packb(header, use_bin_type=True), payload)


def _frame(head: bytes, payload: bytes | memoryview = b"") -> bytes:
    return _LENGTHS.pack(len(head), len(payload)) + head + payload


def _decode_header(raw: bytes) -> Header:
    try:
        header = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except Exception as e:
        raise ProtocolError(f"malformed frame header: {e}") from None
    if not isinstance(header, dict) or not isinstance(header.get("op"), str):
        raise ProtocolError("malformed frame header: expected a map with a string 'op'")
    return header


class Comm:
    """One framed, bidirectional connection."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.peer = peer
        self.peer_info: Header = {}
        self.max_frame_bytes = config.nbytes("comm.max-frame-bytes")
        self.max_message_bytes = config.nbytes("comm.max-message-bytes")
        # A message in parts must not interleave with another writer's frames.
        self._writing = asyncio.Lock()

    @property
    def closed(self) -> bool:
        return self._writer.is_closing()

    async def read(self) -> Message:
        """The next message: one frame, or a message's parts put back together. Raises
        CommClosedError at EOF, ProtocolError on garbage."""
        header, payload = await self._read_frame()
        if header["op"] != ops.PART:
            return header, payload
        total = header.get("total")
        if type(total) is not int or not 0 < total <= self.max_message_bytes:
            raise ProtocolError(
                f"{self.peer}: a message of {total!r} bytes exceeds the "
                f"{self.max_message_bytes}-byte limit (squall.comm.max-message-bytes)"
            )
        # Grown only by bytes that arrived: the announced total is never allocated.
        buf = bytearray()
        while header["op"] == ops.PART:
            if header.get("total") != total or len(buf) + len(payload) > total:
                raise ProtocolError(f"{self.peer}: message parts disagree on its size")
            buf += payload
            header, payload = await self._read_frame()
        if header.pop("parts", None) != total or len(buf) != total or len(payload):
            raise ProtocolError(f"{self.peer}: a message's parts do not add up to it")
        return header, memoryview(buf)

    async def _read_frame(self) -> Message:
        try:
            lengths = await self._reader.readexactly(_LENGTHS.size)
        except asyncio.IncompleteReadError as e:
            if e.partial:
                raise CommClosedError(f"{self.peer}: connection closed mid-frame") from None
            raise CommClosedError(f"{self.peer}: connection closed") from None
        except (ConnectionError, OSError) as e:
            raise CommClosedError(f"{self.peer}: {e}") from None
        n_head, n_payload = _LENGTHS.unpack(lengths)
        if n_head + n_payload > self.max_frame_bytes:
            raise ProtocolError(
                f"{self.peer}: frame of {n_head + n_payload} bytes exceeds the "
                f"{self.max_frame_bytes}-byte limit"
            )
        try:
            head = await self._reader.readexactly(n_head)
            payload = await self._reader.readexactly(n_payload) if n_payload else b""
        except asyncio.IncompleteReadError:
            raise CommClosedError(f"{self.peer}: connection closed mid-frame") from None
        except (ConnectionError, OSError) as e:
            raise CommClosedError(f"{self.peer}: {e}") from None
        return _decode_header(head), memoryview(payload)

    async def read_messages(self) -> list[Message]:
        """The messages of the next frame: one, or all of a batch."""
        header, payload = await self.read()
        if header["op"] != ops.BATCH:
            return [(header, payload)]
        msgs = header.get("msgs")
        if not isinstance(msgs, list):
            raise ProtocolError(f"{self.peer}: batch frame without a message list")
        out: list[Message] = []
        for m in msgs:
            if not isinstance(m, dict) or not isinstance(m.get("op"), str):
                raise ProtocolError(f"{self.peer}: batch holds a message without an 'op'")
            span = m.pop("payload", None)
            if span is None:
                out.append((m, memoryview(b"")))
                continue
            start, length = span
            if start < 0 or length < 0 or start + length > len(payload):
                raise ProtocolError(f"{self.peer}: batch payload span out of range")
            out.append((m, payload[start : start + length]))
        return out

    def check(self, header: Header, payload: bytes | memoryview) -> None:
        """MessageTooLarge if the peer would refuse the message. Senders that can fail
        one call alone check first; ``write`` raises the same for an unchecked one."""
        if len(payload) > self.max_message_bytes:
            raise MessageTooLarge(
                f"a {header.get('op')!r} message of {len(payload)} bytes exceeds the "
                f"{self.max_message_bytes}-byte limit of squall.comm.max-message-bytes"
            )

    async def write(self, header: Header, payload: bytes | memoryview = b"") -> None:
        self.check(header, payload)
        head: bytes = msgpack.packb(header, use_bin_type=True)
        try:
            if len(head) + len(payload) <= self.max_frame_bytes:
                async with self._writing:
                    if len(payload) < SEPARATE_PAYLOAD_BYTES:
                        self._writer.write(_frame(head, payload))
                    else:  # not copied into a frame first: a worker's memory counts
                        self._writer.write(_LENGTHS.pack(len(head), len(payload)) + head)
                        self._writer.write(payload)
                    await self._writer.drain()
            else:
                await self._write_parts(header, memoryview(payload))
        except (ConnectionError, OSError) as e:
            raise CommClosedError(f"{self.peer}: {e}") from None

    async def _write_parts(self, header: Header, payload: memoryview) -> None:
        """One message in ``part`` frames, then its own header with ``parts`` = its
        size (docs/runtime.md); no other frame goes between them."""
        total = len(payload)
        part = msgpack.packb({"op": ops.PART, "total": total}, use_bin_type=True)
        step = min(PART_BYTES, self.max_frame_bytes - len(part))
        last: bytes = msgpack.packb({**header, "parts": total}, use_bin_type=True)
        if len(last) > self.max_frame_bytes:
            raise MessageTooLarge(f"a {header.get('op')!r} message's header outgrows a frame")
        async with self._writing:
            for start in range(0, total, step):
                chunk = payload[start : start + step]
                self._writer.write(_LENGTHS.pack(len(part), len(chunk)) + part)
                self._writer.write(chunk)  # not copied into a frame first
                await self._writer.drain()
            self._writer.write(_frame(last))
            await self._writer.drain()

    async def close(self) -> None:
        if not self._writer.is_closing():
            self._writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()

    def abort(self) -> None:
        """Close at once, dropping unsent data: a graceful close waits for a peer
        that stopped reading (a hung process) forever."""
        self._writer.transport.abort()


async def connect(
    address: str,
    *,
    role: str,
    info: Header | None = None,
    timeout: float | None = None,
    security: Security | None = None,
) -> Comm:
    """Open a connection and complete the handshake as ``role`` within ``timeout``
    seconds (default ``squall.comm.timeouts.connect``); ``security`` defaults to the
    process's (docs/security.md)."""
    host, port = parse_address(address)
    sec = security or default_security()
    if timeout is None:
        timeout = config.seconds("comm.timeouts.connect")
    try:
        tls = _transport(address, sec, server=False)
        opening = asyncio.open_connection(host, port, ssl=tls, server_hostname="" if tls else None)
        reader, writer = await asyncio.wait_for(opening, timeout)
    except asyncio.TimeoutError:
        raise CommError(f"timed out after {timeout}s connecting to {address}") from None
    except ssl.SSLError as e:
        raise HandshakeError(f"TLS with {address} failed: {e.reason or e}") from None
    except OSError as e:
        raise CommError(f"could not connect to {address}: {e.strerror or e}") from None
    comm = Comm(reader, writer, address)
    limit, comm.max_frame_bytes = comm.max_frame_bytes, HELLO_MAX_BYTES
    nonce = os.urandom(16)
    try:
        hello = {"op": ops.HELLO, "protocol": PROTOCOL, "role": role, **(info or {})}
        await comm.write({**hello, "nonce": nonce})
        reply, _ = await asyncio.wait_for(comm.read(), timeout)
        if reply["op"] == ops.CHALLENGE:
            reply = await asyncio.wait_for(_answer(comm, sec, nonce, reply), timeout)
        elif reply["op"] == ops.WELCOME and sec.token is not None:
            raise HandshakeError("it holds no token, as this process does")
    except (CommError, asyncio.TimeoutError) as e:
        await comm.close()
        raise HandshakeError(f"handshake with {address} failed: {e}") from None
    comm.max_frame_bytes = limit
    if reply["op"] == ops.ERROR:
        await comm.close()
        raise HandshakeError(f"{address} refused the connection: {reply.get('message')}")
    if reply["op"] != ops.WELCOME or reply.get("protocol") != PROTOCOL:
        await comm.close()
        raise HandshakeError(
            f"{address} speaks protocol {reply.get('protocol')!r}, this process {PROTOCOL!r}"
        )
    comm.peer_info = reply
    return comm


async def _answer(comm: Comm, sec: Security, nonce: bytes, challenge: Header) -> Header:
    """Prove the token against the listener's challenge, then check its own proof."""
    theirs = challenge.get("nonce")
    if sec.token is None:
        raise HandshakeError("it requires a token (SQUALL_TOKEN, squall.comm.token, --token-file)")
    if not isinstance(theirs, bytes):
        raise ProtocolError("malformed challenge")
    await comm.write({"op": ops.PROOF, "proof": sec.prove("client", theirs, nonce)})
    reply, _ = await comm.read()
    if reply["op"] == ops.WELCOME and not sec.check(reply.get("proof"), "server", nonce, theirs):
        raise HandshakeError("it did not prove that it holds the token")
    return reply


Handler = Callable[[Comm], Awaitable[None]]


@dataclass
class Listener:
    server: asyncio.Server
    address: str

    async def close(self) -> None:
        self.server.close()
        await self.server.wait_closed()


async def listen(
    address: str,
    handler: Handler,
    *,
    roles: frozenset[str],
    info: Header | None = None,
    timeout: float | None = None,
    security: Security | None = None,
) -> Listener:
    """Accept connections on ``address``; each one that completes the handshake with a
    role in ``roles`` within ``timeout`` seconds (default ``squall.comm.timeouts.connect``)
    is handed to ``handler`` (its hello is ``comm.peer_info``). ``security`` (default:
    the process's) decides TLS and the token check (docs/security.md). The listener's
    ``address`` names the bound host, or for a wildcard bind (``0.0.0.0``) an address of
    this host."""
    host, port = parse_address(address)
    sec = security or default_security()
    tls = _transport(address, sec, server=True)
    handshake_timeout = config.seconds("comm.timeouts.connect") if timeout is None else timeout

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        comm = Comm(reader, writer, f"tcp://{peer[0]}:{peer[1]}" if peer else "unknown")
        limit, comm.max_frame_bytes = comm.max_frame_bytes, HELLO_MAX_BYTES
        try:
            async with asyncio.timeout(handshake_timeout):
                hello, _ = await comm.read()
                welcome = {"op": ops.WELCOME, "protocol": PROTOCOL, **(info or {})}
                problem = None
                if sec.token is not None:  # before anything is told to a stranger
                    problem, welcome["proof"] = await _challenge(comm, sec, hello)
                problem = problem or _check_hello(hello, roles)
                if problem:
                    await comm.write({"op": ops.ERROR, "message": problem})
                    await comm.close()
                    return
                comm.peer_info = hello
                await comm.write(welcome)
        except (CommError, asyncio.TimeoutError) as e:
            logger.debug("%s: handshake refused: %s", comm.peer, e)
            await comm.close()
            return
        comm.max_frame_bytes = min(limit, ROLE_MAX_FRAME_BYTES.get(hello["role"], limit))
        try:
            await handler(comm)
        except CommError as e:
            logger.info("%s: %s", comm.peer, e)
        except Exception:
            # A bug on this side, not the peer's: said once, and only this connection ends.
            logger.exception("%s: connection closed after an unexpected error", comm.peer)
        finally:
            await comm.close()

    try:
        server = await asyncio.start_server(accept, host, port, ssl=tls)
    except OSError as e:
        raise CommError(f"cannot listen on {address}: {e.strerror or e}") from None
    sock = server.sockets[0].getsockname()
    bound = format_address(sock[0], sock[1], scheme_of(address))
    if not is_loopback(host) and tls is None and sec.token is None:
        logger.warning(
            "listening on %s without TLS or a token: anyone who can reach it can join "
            "and run code here (docs/security.md)",
            bound,
        )
    # The address others are told: never the wildcard, which names no host to reach.
    contact = _host_ip() if host in ("0.0.0.0", "::", "") else sock[0]
    return Listener(server, format_address(contact, sock[1], scheme_of(address)))


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _host_ip() -> str:
    """An address of this host that others can reach it at (its name's address when it
    is not a loopback one, else the first non-loopback interface address)."""
    with contextlib.suppress(OSError):
        ip = socket.gethostbyname(socket.gethostname())
        if not ipaddress.ip_address(ip).is_loopback:
            return ip
    for addresses in psutil.net_if_addrs().values():
        for a in addresses:
            if a.family == socket.AF_INET and not ipaddress.ip_address(a.address).is_loopback:
                return str(a.address)
    return "127.0.0.1"


def interface_ip(name: str) -> str:
    """The IPv4 address of network interface ``name`` (``--interface``)."""
    for a in psutil.net_if_addrs().get(name, []):
        if a.family == socket.AF_INET:
            return str(a.address)
    known = ", ".join(sorted(psutil.net_if_addrs()))
    raise ValueError(f"no IPv4 address on interface {name!r} (interfaces: {known})")


async def _challenge(comm: Comm, sec: Security, hello: Header) -> tuple[str | None, str]:
    """Have the peer prove the token over fresh nonces: (what is wrong or None, this
    side's proof for the welcome)."""
    theirs, ours = hello.get("nonce"), os.urandom(16)
    if not isinstance(theirs, bytes) or len(theirs) != len(ours):
        return "a token is required: the hello carries no nonce", ""
    await comm.write({"op": ops.CHALLENGE, "nonce": ours})
    answer, _ = await comm.read()
    if answer["op"] != ops.PROOF or not sec.check(answer.get("proof"), "client", ours, theirs):
        logger.warning("%s: refused: wrong token", comm.peer)
        return "wrong token", ""
    return None, sec.prove("server", theirs, ours)


def _check_hello(hello: Header, roles: frozenset[str]) -> str | None:
    if hello["op"] != ops.HELLO:
        return f"expected a hello, got {hello['op']!r}"
    if hello.get("protocol") != PROTOCOL:
        theirs = hello.get("protocol")
        return f"protocol mismatch: peer speaks {theirs!r}, this process {PROTOCOL!r}"
    if hello.get("role") not in roles:
        return f"role {hello.get('role')!r} is not accepted here (expected one of {sorted(roles)})"
    return None


class BatchedSend:
    """Coalesces messages to one peer into batch frames, at most one per ``interval``
    seconds: a message after a quiet spell leaves at once, a burst is batched."""

    def __init__(self, comm: Comm, interval: float) -> None:
        self.comm = comm
        self.interval = interval
        self._headers: list[Header] = []
        self._payloads: list[bytes | memoryview] = []
        self._size = 0
        # Earlier batches that are full (a frame each), waiting for the next flush.
        self._full: list[tuple[list[Header], list[bytes | memoryview]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_flush = float("-inf")
        self.frames_sent = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    @property
    def limit(self) -> int:
        """The payload a batch may gather; a larger message is a batch of its own."""
        return self.comm.max_frame_bytes - HEADER_ROOM

    def send(self, header: Header, payload: bytes | memoryview = b"") -> None:
        """Queue one message; a batch that would outgrow a frame goes out as several,
        and a message larger than a frame goes alone, in parts."""
        if self.comm.closed:
            raise CommClosedError(f"{self.comm.peer}: cannot send on a closed connection")
        if self._size and self._size + len(payload) > self.limit:
            self._full.append((self._headers, self._payloads))
            self._headers, self._payloads, self._size = [], [], 0
        if payload:
            header = {**header, "payload": [self._size, len(payload)]}
            self._payloads.append(payload)
            self._size += len(payload)
        self._headers.append(header)
        self._wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            wait = self._last_flush + self.interval - loop.time()
            # Yield once even when no wait is due, so messages sent together coalesce.
            await asyncio.sleep(max(wait, 0.0))
            self._wake.clear()
            self._last_flush = loop.time()
            await self._flush()

    async def _flush(self) -> None:
        batches, self._full = self._full, []
        if self._headers:
            batches.append((self._headers, self._payloads))
            self._headers, self._payloads, self._size = [], [], 0
        for headers, payloads in batches:
            payload = payloads[0] if len(payloads) == 1 else b"".join(payloads)
            await self.comm.write({"op": ops.BATCH, "msgs": headers}, payload)
            self.frames_sent += 1

    async def close(self) -> None:
        """Send what is pending, then stop. Never raises for a broken connection: a
        flush that already failed when the peer went away ended the sending task with
        that error, and its owner closing the stream must still finish closing."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, CommError):
                await self._task
        if not self.comm.closed:
            with contextlib.suppress(CommError):
                await self._flush()
