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
import mmap
import os
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import msgspec
import psutil  # type: ignore[import-untyped]

from squall import config, security
from squall.errors import TimeoutError
from squall.protocol import messages as m
from squall.protocol.bounded import within
from squall.protocol.messages import PROTOCOL, Route
from squall.protocol.stream import Stream, open_stream, serve_streams
from squall.security import Security
from squall.security import default as default_security

logger = logging.getLogger("squall.comm")

_LENGTHS = struct.Struct("<II")

#: A message read: its header (a :class:`~squall.protocol.messages.Malformed` where the
#: header did not validate) and its payload.
Received = tuple[m.Message | m.Malformed, memoryview]

Blob = bytes | bytearray | memoryview
#: What a message carries: one buffer, or pieces sent one after another without being
#: joined (a value's pickle and its large buffers, docs/runtime.md#memory).
Payload = Blob | list[Blob]


def payload_size(payload: Payload) -> int:
    return sum(map(len, payload)) if isinstance(payload, list) else len(payload)


#: Per role: the route the connecting side reads, and the route the listener reads.
ROLE_ROUTES: dict[str, tuple[Route, Route]] = {
    "worker": (Route.SCHEDULER_TO_WORKER, Route.WORKER_TO_SCHEDULER),
    "nanny": (Route.SCHEDULER_TO_NANNY, Route.NANNY_TO_SCHEDULER),
    "client": (Route.SCHEDULER_TO_CLIENT, Route.CLIENT_TO_SCHEDULER),
    "peer": (Route.WORKER_TO_PEER, Route.PEER_TO_WORKER),
}


class CommError(Exception):
    """A connection failed or a peer broke the protocol."""


class ConnectError(CommError):
    """No connection was made: nothing listens at the address (yet), or it cannot be
    reached within the timeout. Worth trying again, unlike a refused handshake."""


class CommClosedError(CommError):
    """The peer closed the connection (cleanly, or in the middle of a frame)."""


class ProtocolError(CommError):
    """A peer sent something that is not a squall frame."""


class HandshakeError(CommError):
    """The peers could not agree to talk (another protocol version, a refused role)."""


class MessageTooLarge(ValueError):
    """One message is larger than a message may be (``squall.comm.max-message-bytes``):
    refused before it is sent, so only the call that made it fails."""


#: What a handler raises for a message whose values are out of range (its types were
#: checked when it was read): answered as a malformed request or closing that one
#: connection, never the process.
MALFORMED = (KeyError, IndexError, TypeError, ValueError, OverflowError)

#: Largest frame before the handshake: a hello is a few hundred bytes, and a stranger
#: must not make a process buffer (or parse) more before it has been accepted.
HELLO_MAX_BYTES = 64 * 2**10

#: Frame caps of roles that never send much (a nanny: ``worker-died`` and keep-alives);
#: the others may send graphs, results or scattered data up to ``max-frame-bytes``.
ROLE_MAX_FRAME_BYTES = {"nanny": 2**20}

#: Room left in a frame for the batch's headers (msgpack), beside its payloads.
HEADER_ROOM = 16 * 2**20
#: The payload one batch frame gathers at most (a larger message goes alone): enough to
#: pay a frame's cost off many times over, and what the peer buffers before it parses.
BATCH_FRAME_BYTES = 4 * 2**20
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


def encode_frame(header: m.Message, payload: bytes | memoryview = b"") -> bytes:
    """A frame holding one message alone (the handshake's form)."""
    return _frame(ENCODER.encode(header), payload)


def _frame(head: bytes, payload: Blob = b"") -> bytes:
    return _LENGTHS.pack(len(head), len(payload)) + head + payload


def _one(msg: m.Message, size: int) -> m.Batch[m.Message]:
    return m.Batch(msgs=[msg], spans=[(0, size)])


def _receive_buffer(n: int) -> memoryview:
    """Writable memory for a large payload, taken from the system as it is filled: an
    announced size that never arrives costs no memory (anonymous pages are committed
    when written), and values unpickled over it stay writeable."""
    return memoryview(mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS))


def _writes(head: bytes, size: int, payload: Payload) -> list[Blob]:
    """A frame's writes: small pieces joined to the lengths and header (one send),
    large ones as they are (docs/runtime.md#memory)."""
    pieces = payload if isinstance(payload, list) else [payload]
    out: list[Blob] = []
    small: list[Blob] = [_LENGTHS.pack(len(head), size), head]
    for piece in pieces:
        if len(piece) < SEPARATE_PAYLOAD_BYTES:
            small.append(piece)
            continue
        out.append(b"".join(small))
        out.append(piece)
        small = []
    if small:
        out.append(b"".join(small))
    return out


def _chunks(payload: Payload, step: int) -> list[list[Blob]]:
    """The payload cut into runs of ``step`` bytes (the last shorter), each a list of
    slices of its pieces: nothing is copied."""
    pieces = payload if isinstance(payload, list) else [payload]
    runs: list[list[Blob]] = [[]]
    room = step
    for piece in pieces:
        view = memoryview(piece).cast("B")
        while view:
            if not room:
                runs.append([])
                room = step
            runs[-1].append(view[:room])
            taken = min(room, len(view))
            room -= taken
            view = view[taken:]
    return runs


def _raw_messages(head: bytes) -> list[msgspec.Raw]:
    return _RAW_BATCH.decode(head).msgs


def _union(route: Route) -> Any:
    """The type of one message of ``route``."""
    return Union[tuple(m.messages(route))]  # noqa: UP007


def _decoder(route: Route) -> msgspec.msgpack.Decoder[Any]:
    """Decodes a frame header read on ``route``: a batch of its messages, or a part;
    the handshake's messages come alone."""
    if route is Route.HANDSHAKE:
        return msgspec.msgpack.Decoder(_union(route))
    batch: Any = m.Batch[_union(route)]  # type: ignore[misc]  # a type made at run time
    return msgspec.msgpack.Decoder(Union[batch, m.Part])  # noqa: UP007


#: Frames carry headers encoded by this one encoder.
ENCODER = msgspec.msgpack.Encoder()
_RAW_BATCH = msgspec.msgpack.Decoder(m.Batch[msgspec.Raw])
_ANY = msgspec.msgpack.Decoder()
#: Per route, the decoder of its frames, and of one message (to find which message of
#: a batch is malformed).
DECODERS = {route: _decoder(route) for route in Route}
_ONE_DECODERS = {route: msgspec.msgpack.Decoder(_union(route)) for route in Route}


def _malformed(route: Route, raw: msgspec.Raw, error: Exception) -> m.Malformed:
    """What is known of a message that did not validate: its op and request id, if it
    has them, and what is wrong."""
    try:
        fields = _ANY.decode(raw)
    except msgspec.DecodeError:
        fields = None
    if not isinstance(fields, dict):
        return m.Malformed(op=None, id=None, error=f"not a message: {error}")
    op, rid = fields.get("op"), fields.get("id")
    return m.Malformed(
        op=op if isinstance(op, str) else None,
        id=rid if type(rid) is int else None,
        error=f"malformed {op!r} message ({route.value}): {error}",
    )


class Comm:
    """One framed, bidirectional connection. It reads the messages of one route
    (``expect``), set by the handshake from the peer's role."""

    def __init__(self, stream: Stream, peer: str) -> None:
        self._stream = stream
        self.peer = peer
        #: The peer's hello (on the listening side) once the handshake is done.
        self.hello: m.Hello | None = None
        self.max_frame_bytes = config.nbytes("comm.max-frame-bytes")
        self.max_message_bytes = config.nbytes("comm.max-message-bytes")
        self.route = Route.HANDSHAKE
        # A message in parts must not interleave with another writer's frames.
        self._writing = asyncio.Lock()

    def expect(self, route: Route) -> None:
        self.route = route

    @property
    def closed(self) -> bool:
        return self._stream.is_closing()

    async def read_handshake(self) -> m.Message:
        """The next handshake message (one frame, alone)."""
        head, payload = await self._read_frame()
        if payload:
            raise ProtocolError(f"{self.peer}: a handshake message carries no payload")
        try:
            msg: m.Message = DECODERS[Route.HANDSHAKE].decode(head)
        except msgspec.MsgspecError as e:
            raise ProtocolError(f"{self.peer}: malformed handshake message: {e}") from None
        return msg

    async def read(self) -> Received:
        """The next frame's one message (a reply to a request)."""
        received = await self.read_messages()
        if len(received) != 1:
            raise ProtocolError(f"{self.peer}: expected one message, got {len(received)}")
        return received[0]

    async def read_messages(self) -> list[Received]:
        """The messages of the next frame (a message in parts is put back together).
        Raises CommClosedError at EOF, ProtocolError on garbage; a message whose header
        does not validate comes as :class:`~squall.protocol.messages.Malformed`."""
        head, payload = await self._read_frame()
        frame = self._decode(head)
        if isinstance(frame, m.Part):
            frame, payload = await self._read_parts(frame, payload)
        elif (_RAW_BATCH.decode(head) if frame is None else frame).parts:
            raise ProtocolError(f"{self.peer}: a message's parts do not add up to it")
        return self._unbatch(frame, head, payload)

    def _decode(self, head: bytes) -> m.Batch[m.Message] | m.Part | None:
        """The frame's header; None for a batch with a malformed message (its messages
        are then decoded one by one)."""
        try:
            frame: m.Batch[m.Message] | m.Part = DECODERS[self.route].decode(head)
        except msgspec.ValidationError:
            try:
                _raw_messages(head)
            except msgspec.MsgspecError as e:
                raise ProtocolError(f"{self.peer}: malformed frame header: {e}") from None
            return None
        except msgspec.DecodeError as e:
            raise ProtocolError(f"{self.peer}: malformed frame header: {e}") from None
        return frame

    def _unbatch(
        self, frame: m.Batch[m.Message] | None, head: bytes, payload: memoryview
    ) -> list[Received]:
        if frame is None:
            raws = _raw_messages(head)
            spans = _RAW_BATCH.decode(head).spans
            msgs: list[m.Message | m.Malformed] = []
            for raw in raws:
                try:
                    msgs.append(_ONE_DECODERS[self.route].decode(raw))
                except msgspec.ValidationError as e:
                    msgs.append(_malformed(self.route, raw, e))
        else:
            msgs, spans = list(frame.msgs), frame.spans
        if len(spans) != len(msgs):
            raise ProtocolError(f"{self.peer}: a batch's spans do not match its messages")
        out: list[Received] = []
        for msg, (start, length) in zip(msgs, spans, strict=True):
            if start < 0 or length < 0 or start + length > len(payload):
                raise ProtocolError(f"{self.peer}: batch payload span out of range")
            out.append((msg, payload[start : start + length]))
        return out

    async def _read_parts(
        self, part: m.Part, payload: memoryview
    ) -> tuple[m.Batch[m.Message] | None, memoryview]:
        total = part.total
        if not 0 < total <= self.max_message_bytes:
            raise ProtocolError(
                f"{self.peer}: a message of {total!r} bytes exceeds the "
                f"{self.max_message_bytes}-byte limit (squall.comm.max-message-bytes)"
            )
        # Grown only by bytes that arrived: the announced total is never allocated.
        buf = bytearray()
        frame: m.Batch[m.Message] | m.Part | None = part
        while isinstance(frame, m.Part):
            if frame.total != total or len(buf) + len(payload) > total:
                raise ProtocolError(f"{self.peer}: message parts disagree on its size")
            buf += payload
            head, payload = await self._read_frame()
            frame = self._decode(head)
        parts = _RAW_BATCH.decode(head).parts if frame is None else frame.parts
        if parts != total or len(buf) != total or len(payload):
            raise ProtocolError(f"{self.peer}: a message's parts do not add up to it")
        return frame, memoryview(buf)

    async def _read_frame(self) -> tuple[bytes, memoryview]:
        try:
            lengths = await self._stream.readexactly(_LENGTHS.size)
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
            head = await self._stream.readexactly(n_head)
            if n_payload < SEPARATE_PAYLOAD_BYTES:
                payload = memoryview(await self._stream.readexactly(n_payload))
            else:
                payload = _receive_buffer(n_payload)
                await self._stream.readinto(payload)
        except asyncio.IncompleteReadError:
            raise CommClosedError(f"{self.peer}: connection closed mid-frame") from None
        except (ConnectionError, OSError) as e:
            raise CommClosedError(f"{self.peer}: {e}") from None
        return head, payload

    def check(self, msg: m.Message, payload: Payload) -> None:
        """MessageTooLarge if the peer would refuse the message. Senders that can fail
        one call alone check first; ``write`` raises the same for an unchecked one."""
        size = payload_size(payload)
        if size > self.max_message_bytes:
            raise MessageTooLarge(
                f"a {msg.op()!r} message of {size} bytes exceeds the "
                f"{self.max_message_bytes}-byte limit of squall.comm.max-message-bytes"
            )

    async def write(self, msg: m.Message, payload: Payload = b"") -> None:
        """Send one message now (a batch of one)."""
        self.check(msg, payload)
        await self.write_batch(_one(msg, payload_size(payload)), payload)

    async def write_handshake(self, msg: m.Message) -> None:
        await self._write_head(ENCODER.encode(msg), b"")

    async def write_batch(self, batch: m.Batch[m.Message], payload: Payload) -> None:
        head = ENCODER.encode(batch)
        if len(head) + payload_size(payload) <= self.max_frame_bytes:
            await self._write_head(head, payload)
        else:
            await self._write_parts(batch, payload)

    async def _write_head(self, head: bytes, payload: Payload) -> None:
        try:
            async with self._writing:
                if isinstance(payload, list) or len(payload) >= SEPARATE_PAYLOAD_BYTES:
                    # Large pieces are not copied into a frame first: a worker's memory counts.
                    for data in _writes(head, payload_size(payload), payload):
                        await self._stream.send(data)
                else:
                    self._stream.write(_frame(head, payload))
                await self._stream.drain()
        except (ConnectionError, OSError) as e:
            raise CommClosedError(f"{self.peer}: {e}") from None

    async def _write_parts(self, batch: m.Batch[m.Message], payload: Payload) -> None:
        """One batch in ``part`` frames, then its header with ``parts`` = the payload's
        size (docs/protocol.md#messages-in-parts); no other frame goes between them."""
        total = payload_size(payload)
        part = ENCODER.encode(m.Part(total=total))
        step = min(PART_BYTES, self.max_frame_bytes - len(part))
        last = ENCODER.encode(msgspec.structs.replace(batch, parts=total))
        if len(last) > self.max_frame_bytes:
            raise MessageTooLarge(f"a {batch.msgs[0].op()!r} message's header outgrows a frame")
        try:
            async with self._writing:
                for chunk in _chunks(payload, step):
                    for data in _writes(part, payload_size(chunk), chunk):
                        await self._stream.send(data)
                    await self._stream.drain()
                self._stream.write(_frame(last))
                await self._stream.drain()
        except (ConnectionError, OSError) as e:
            raise CommClosedError(f"{self.peer}: {e}") from None

    async def close(self) -> None:
        if not self._stream.is_closing():
            self._stream.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self._stream.wait_closed()

    def abort(self) -> None:
        """Close at once, dropping unsent data: a graceful close waits for a peer
        that stopped reading (a hung process) forever."""
        self._stream.abort()


async def connect(
    address: str,
    *,
    role: str,
    info: dict[str, Any] | None = None,
    timeout: float | None = None,
    security: Security | None = None,
    server_hostname: str | None = None,
) -> Comm:
    """Open a connection and complete the handshake as ``role`` (``info``: the
    :class:`~squall.protocol.messages.Hello` fields of that role) within ``timeout``
    seconds (default ``squall.comm.timeouts.connect``); ``security`` defaults to the
    process's (docs/security.md). Over TLS, ``server_hostname`` is sent as SNI (names
    are not checked either way)."""
    host, port = parse_address(address)
    sec = security or default_security()
    if timeout is None:
        timeout = config.seconds("comm.timeouts.connect")
    try:
        tls = _transport(address, sec, server=False)
        opening = open_stream(
            host, port, ssl=tls, server_hostname=(server_hostname or "") if tls else None
        )
        stream = await within(opening, timeout)
    except TimeoutError:
        raise ConnectError(f"timed out after {timeout}s connecting to {address}") from None
    except ssl.SSLError as e:
        raise HandshakeError(f"TLS with {address} failed: {e.reason or e}") from None
    except OSError as e:
        raise ConnectError(f"could not connect to {address}: {e.strerror or e}") from None
    bound_silence(stream)
    comm = Comm(stream, address)
    limit, comm.max_frame_bytes = comm.max_frame_bytes, HELLO_MAX_BYTES
    nonce = os.urandom(16)
    try:
        hello = m.Hello(protocol=PROTOCOL, role=role, nonce=nonce, **(info or {}))
        await comm.write_handshake(hello)
        reply = await within(comm.read_handshake(), timeout)
        if isinstance(reply, m.Challenge):
            reply = await within(_answer(comm, sec, nonce, reply), timeout)
        elif isinstance(reply, m.Welcome) and sec.token is not None:
            raise HandshakeError("it holds no token, as this process does")
    except (CommError, TimeoutError) as e:
        await comm.close()
        raise HandshakeError(f"handshake with {address} failed: {e}") from None
    comm.max_frame_bytes = limit
    if isinstance(reply, m.Error):
        await comm.close()
        raise HandshakeError(f"{address} refused the connection: {reply.message}")
    if not isinstance(reply, m.Welcome) or reply.protocol != PROTOCOL:
        await comm.close()
        theirs = reply.protocol if isinstance(reply, m.Welcome) else None
        raise HandshakeError(f"{address} speaks protocol {theirs!r}, this process {PROTOCOL!r}")
    comm.expect(ROLE_ROUTES[role][0])
    return comm


async def _answer(comm: Comm, sec: Security, nonce: bytes, challenge: m.Challenge) -> m.Message:
    """Prove the token against the listener's challenge, then check its own proof."""
    if sec.token is None:
        raise HandshakeError("it requires a token (SQUALL_TOKEN, squall.comm.token, --token-file)")
    theirs = challenge.nonce
    await comm.write_handshake(m.Proof(proof=sec.prove("client", theirs, nonce)))
    reply = await comm.read_handshake()
    if isinstance(reply, m.Welcome) and not sec.check(reply.proof, "server", nonce, theirs):
        raise HandshakeError("it did not prove that it holds the token")
    return reply


def bound_silence(stream: Stream) -> None:
    """End the connection when its peer's host is gone (down, cut off) within
    ``squall.comm.timeouts.tcp``, as distributed does: keep-alive probes while it is
    idle, and a limit on how long sent data may stay unacknowledged (TCP_USER_TIMEOUT),
    so a vanished peer is an error, never a read or write that waits forever. A live
    peer's kernel answers both, even while the peer is busy or stopped."""
    sock = stream.get_extra_info("socket")
    timeout = config.get("comm.timeouts.tcp")
    if sock is None or timeout is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    total = max(2, int(config.seconds("comm.timeouts.tcp")))
    probes = min(10, total - 1)
    interval = max(1, (total - max(1, total // 4)) // probes)
    idle = max(1, total - interval * probes)
    with contextlib.suppress(OSError, AttributeError):  # options Linux has, others may not
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, probes)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, total * 1000)


Handler = Callable[[Comm], Awaitable[None]]


@dataclass
class Listener:
    server: asyncio.Server
    address: str
    #: The connections accepted and not yet closed.
    live: set[Comm] = field(default_factory=set)

    def stop_accepting(self) -> None:
        self.server.close()

    async def close(self) -> None:
        """Stop accepting and end every connection still open: from Python 3.12 on,
        ``wait_closed`` waits for them all (a peer that reconnected as its server was
        closing would hold it forever)."""
        self.server.close()
        for c in list(self.live):
            c.abort()
        await self.server.wait_closed()


async def listen(
    address: str,
    handler: Handler,
    *,
    roles: frozenset[str],
    timeout: float | None = None,
    security: Security | None = None,
) -> Listener:
    """Accept connections on ``address``; each one that completes the handshake with a
    role in ``roles`` within ``timeout`` seconds (default ``squall.comm.timeouts.connect``)
    is handed to ``handler`` (its hello is ``comm.hello``). ``security`` (default:
    the process's) decides TLS and the token check (docs/security.md). The listener's
    ``address`` names the bound host, or for a wildcard bind (``0.0.0.0``) an address of
    this host."""
    host, port = parse_address(address)
    sec = security or default_security()
    tls = _transport(address, sec, server=True)
    handshake_timeout = config.seconds("comm.timeouts.connect") if timeout is None else timeout

    live: set[Comm] = set()

    async def accept(stream: Stream) -> None:
        peer = stream.get_extra_info("peername")
        bound_silence(stream)
        comm = Comm(stream, f"tcp://{peer[0]}:{peer[1]}" if peer else "unknown")
        live.add(comm)
        try:
            await serve(comm)
        finally:
            live.discard(comm)

    async def serve(comm: Comm) -> None:
        limit, comm.max_frame_bytes = comm.max_frame_bytes, HELLO_MAX_BYTES

        async def handshake() -> m.Hello | None:
            """The peer's hello if it passes, else None (refused, and told why)."""
            hello = await comm.read_handshake()
            welcome = m.Welcome(protocol=PROTOCOL)
            problem = None
            if sec.token is not None:  # before anything is told to a stranger
                problem, welcome.proof = await _challenge(comm, sec, hello)
            problem = problem or _check_hello(hello, roles)
            if problem or not isinstance(hello, m.Hello):
                await comm.write_handshake(m.Error(message=problem or "expected a hello"))
                return None
            comm.hello = hello
            await comm.write_handshake(welcome)
            return hello

        try:
            hello = await within(handshake(), handshake_timeout)
        except (CommError, TimeoutError) as e:
            logger.debug("%s: handshake refused: %s", comm.peer, e)
            hello = None
        if hello is None:
            await comm.close()
            return
        comm.max_frame_bytes = min(limit, ROLE_MAX_FRAME_BYTES.get(hello.role, limit))
        comm.expect(ROLE_ROUTES[hello.role][1])
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
        server = await serve_streams(accept, host, port, ssl=tls)
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
    return Listener(server, format_address(contact, sock[1], scheme_of(address)), live)


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


#: Hosts that bind every interface.
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def _local_ips() -> set[str]:
    """The IPv4 addresses of this host's interfaces (in its network namespace)."""
    return {
        str(a.address)
        for addresses in psutil.net_if_addrs().values()
        for a in addresses
        if a.family == socket.AF_INET
    }


def _route_ip(host: str) -> str | None:
    """The address of the interface the kernel routes to ``host`` by: a UDP socket's
    ``connect`` picks it and sends nothing. None where there is no route."""
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(host, 1, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(sockaddr)
            ip = s.getsockname()[0]
    except (OSError, IndexError, UnicodeError):
        return None
    return str(ip)


def _default_route_ip() -> str | None:
    """The IPv4 address of the default route's interface, read from the kernel's
    routing table (Linux's ``/proc/net/route``) rather than found by opening a socket
    toward some outside address; None without one, or elsewhere."""
    try:
        rows = Path("/proc/net/route").read_text().splitlines()[1:]
    except OSError:
        return None
    for row in rows:
        fields = row.split()
        if len(fields) > 1 and fields[1] == "00000000":  # destination 0.0.0.0: default
            for a in psutil.net_if_addrs().get(fields[0], []):
                if a.family == socket.AF_INET:
                    return str(a.address)
    return None


def _host_ip() -> str:
    """An address of this host that others can reach it at: its name's address when
    that is one of its interfaces' and not a loopback one (a network namespace shares
    the name, not the addresses), else the interface of the default route, else the
    first non-loopback interface address."""
    local = _local_ips()
    with contextlib.suppress(OSError):
        ip = socket.gethostbyname(socket.gethostname())
        if ip in local and not ipaddress.ip_address(ip).is_loopback:
            return ip
    routed = _default_route_ip()
    if routed is not None and not ipaddress.ip_address(routed).is_loopback:
        return routed
    for ip in sorted(local):
        if not ipaddress.ip_address(ip).is_loopback:
            return ip
    return "127.0.0.1"


def host_toward(address: str) -> str:
    """The address of this host's interface that reaches ``address``'s host, as a
    worker binds and advertises by default (docs/deploy.md#across-hosts): loopback for
    a loopback peer; where no route is known, :func:`_host_ip`'s choice."""
    host = parse_address(address)[0]
    if is_loopback(host):
        return "127.0.0.1" if ":" not in host else "::1"
    ip = _route_ip(host)
    if ip is None:
        return _host_ip()
    return ip


def worker_host(scheduler_address: str) -> str:
    """Where a worker (or nanny) of ``scheduler_address`` binds when given no address:
    ``squall.worker.host`` if set, else the interface that reaches the scheduler."""
    configured = config.get("worker.host")
    return str(configured) if configured else host_toward(scheduler_address)


def scheduler_host() -> str:
    """Where a scheduler binds when given no host: ``squall.scheduler.host`` if set,
    else every interface (it advertises :func:`_host_ip`), as distributed's."""
    configured = config.get("scheduler.host")
    return str(configured) if configured else "0.0.0.0"


def interface_ip(name: str) -> str:
    """The IPv4 address of network interface ``name`` (``--interface``)."""
    for a in psutil.net_if_addrs().get(name, []):
        if a.family == socket.AF_INET:
            return str(a.address)
    known = ", ".join(sorted(psutil.net_if_addrs()))
    raise ValueError(f"no IPv4 address on interface {name!r} (interfaces: {known})")


async def _challenge(comm: Comm, sec: Security, hello: m.Message) -> tuple[str | None, str]:
    """Have the peer prove the token over fresh nonces: (what is wrong or None, this
    side's proof for the welcome)."""
    ours = os.urandom(16)
    theirs = hello.nonce if isinstance(hello, m.Hello) else b""
    if len(theirs) != len(ours):
        return "a token is required: the hello carries no nonce", ""
    await comm.write_handshake(m.Challenge(nonce=ours))
    answer = await comm.read_handshake()
    if not isinstance(answer, m.Proof) or not sec.check(answer.proof, "client", ours, theirs):
        logger.warning("%s: refused: wrong token", comm.peer)
        return "wrong token", ""
    return None, sec.prove("server", theirs, ours)


def _check_hello(hello: m.Message, roles: frozenset[str]) -> str | None:
    if not isinstance(hello, m.Hello):
        return f"expected a hello, got {hello.op()!r}"
    if hello.protocol != PROTOCOL:
        return f"protocol mismatch: peer speaks {hello.protocol!r}, this process {PROTOCOL!r}"
    if hello.role not in roles or hello.role not in ROLE_ROUTES:
        return f"role {hello.role!r} is not accepted here (expected one of {sorted(roles)})"
    return None


class BatchedSend:
    """Coalesces messages to one peer into batch frames, at most one per ``interval``
    seconds: a message after a quiet spell leaves at once, a burst is batched."""

    def __init__(self, comm: Comm, interval: float) -> None:
        self.comm = comm
        self.interval = interval
        self._batch = _Pending()
        # Earlier batches that are full (a frame each), waiting for the next flush.
        self._full: list[_Pending] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_flush = float("-inf")
        self.frames_sent = 0
        #: Payload bytes queued and not yet written.
        self.backlog = 0
        #: Called on the loop after each frame written (a producer may wait for room).
        self.on_written: Callable[[], None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    @property
    def limit(self) -> int:
        """The payload a batch may gather; a larger message is a batch of its own."""
        return min(self.comm.max_frame_bytes - HEADER_ROOM, BATCH_FRAME_BYTES)

    def send(
        self, msg: m.Message, payload: bytes | memoryview = b"", urgent: bool = False
    ) -> None:
        """Queue one message; a batch that would outgrow a frame goes out as several,
        and a message larger than a frame goes alone, in parts. An ``urgent`` one (a
        request its sender blocks on, back to back: a lock's) does not wait out the
        interval after the last frame when the stream is idle."""
        if self.comm.closed:
            raise CommClosedError(f"{self.comm.peer}: cannot send on a closed connection")
        batch = self._batch
        if batch.size and batch.size + len(payload) > self.limit:
            self._full.append(batch)
            batch = self._batch = _Pending()
        batch.add(msg, payload)
        self.backlog += len(payload)
        if urgent:
            self._last_flush = float("-inf")
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
        if self._batch.msgs:
            batches.append(self._batch)
            self._batch = _Pending()
        for b in batches:
            payload = b.payloads[0] if len(b.payloads) == 1 else b"".join(b.payloads)
            await self.comm.write_batch(m.Batch(msgs=b.msgs, spans=b.spans), payload)
            self.frames_sent += 1
            self.backlog -= b.size
            if self.on_written is not None:
                self.on_written()

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


class _Pending:
    """The messages of one batch frame being gathered, and their payloads."""

    def __init__(self) -> None:
        self.msgs: list[m.Message] = []
        self.spans: list[tuple[int, int]] = []
        self.payloads: list[bytes | memoryview] = []
        self.size = 0

    def add(self, msg: m.Message, payload: bytes | memoryview) -> None:
        self.msgs.append(msg)
        self.spans.append((self.size, len(payload)))
        if payload:
            self.payloads.append(payload)
            self.size += len(payload)
