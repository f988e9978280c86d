"""The wire layer: frames, handshake, batching, and bad input from peers."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Awaitable
from typing import Any

import dask
import msgpack
import pytest

from squall.protocol import comm
from squall.protocol import messages as m
from squall.protocol.bounded import within
from squall.protocol.comm import Comm
from squall.protocol.stream import Stream, open_stream


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 20))  # type: ignore[arg-type]


def echo(msg: m.Message | m.Malformed) -> m.RequestFailed:
    """The echo server's answer: names the op it answers in ``error``."""
    op = msg.op if isinstance(msg, m.Malformed) else msg.op()
    return m.RequestFailed(id=getattr(msg, "id", None), error=str(op))


async def echo_server(
    roles: frozenset[str] = frozenset({"client"}),
) -> tuple[comm.Listener, list[Any]]:
    seen: list[Any] = []

    async def handler(c: Comm) -> None:
        seen.append(c.hello)
        try:
            while True:
                for msg, payload in await c.read_messages():
                    seen.append((msg, bytes(payload)))
                    await c.write(echo(msg), payload)
        except comm.CommError as e:
            seen.append(e)

    return await comm.listen("tcp://127.0.0.1:0", handler, roles=roles), seen


async def answer_of(c: Comm) -> tuple[str, bytes]:
    reply, payload = await c.read()
    assert isinstance(reply, m.RequestFailed)
    return reply.error, bytes(payload)


async def still_served(good: Comm, listener: comm.Listener) -> None:
    """A well-behaved client is still answered; then both close."""
    await good.write(m.HeartbeatClient())
    assert (await answer_of(good))[0] == "heartbeat-client"
    await good.close()
    await listener.close()


def raw_frame(header: dict[str, Any], payload: bytes = b"") -> bytes:
    """A frame with any header, as a hostile or broken peer may send it."""
    head = msgpack.packb(header)
    return struct.pack("<II", len(head), len(payload)) + head + payload


async def raw_client(listener: comm.Listener) -> tuple[Comm, Stream]:
    """A connection that completed the handshake as a client, to write frames by hand."""
    host, port = comm.parse_address(listener.address)
    writer = await open_stream(host, port)
    c = Comm(writer, "test")
    await c.write_handshake(m.Hello(protocol=m.PROTOCOL, role="client"))
    assert isinstance(await c.read_handshake(), m.Welcome)
    c.expect(m.Route.SCHEDULER_TO_CLIENT)
    return c, writer


def test_parse_address() -> None:
    assert comm.parse_address("tcp://127.0.0.1:8786") == ("127.0.0.1", 8786)
    assert comm.parse_address("localhost:1") == ("localhost", 1)
    assert comm.parse_address("tcp://[::1]:9") == ("::1", 9)
    for bad in ["tcp://host", "udp://h:1", "h:port", "tcp://:1", "h:70000"]:
        with pytest.raises(ValueError, match="address"):
            comm.parse_address(bad)


def test_default_hosts() -> None:
    """Workers bind the interface that reaches the scheduler (loopback for a loopback
    one), schedulers every interface; config wins (docs/deploy.md#across-hosts)."""
    assert comm.host_toward("tcp://127.0.0.1:8786") == "127.0.0.1"
    assert comm.host_toward("tls://localhost:8786") == "127.0.0.1"
    assert comm.worker_host("tcp://127.0.0.1:8786") == "127.0.0.1"
    assert comm.scheduler_host() == "0.0.0.0"
    with dask.config.set({"squall.worker.host": "10.0.0.7", "squall.scheduler.host": "::1"}):
        assert comm.worker_host("tcp://127.0.0.1:8786") == "10.0.0.7"
        assert comm.scheduler_host() == "::1"


def test_a_peer_without_a_route_gets_an_address_of_this_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the kernel knows no route to the peer, an address of one of this host's
    interfaces (no socket toward the peer: the route lookup is stubbed; the routed
    case runs across namespaces in test_multihost.py)."""
    monkeypatch.setattr(comm, "_route_ip", lambda host: None)
    assert comm.host_toward("tcp://peer.invalid:8786") in {*comm._local_ips(), "127.0.0.1"}


def test_connections_probe_a_vanished_peer() -> None:
    """Keep-alive and TCP_USER_TIMEOUT from squall.comm.timeouts.tcp on both ends."""

    async def main() -> list[int]:
        async def hold(c: Comm) -> None:
            await asyncio.sleep(0.1)

        listener = await comm.listen("tcp://127.0.0.1:0", hold, roles=frozenset({"client"}))
        c = await comm.connect(listener.address, role="client", info={"client": "me"})
        sock = c._stream.get_extra_info("socket")
        options = [
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        ]
        await c.close()
        await listener.close()
        return options

    with dask.config.set({"squall.comm.timeouts.tcp": "20s"}):
        assert asyncio.run(main()) == [1, 20_000]


def test_a_listener_closes_with_its_connections_open() -> None:
    """From Python 3.12 on, a server's ``wait_closed`` waits for every connection it
    accepted: closing ends those still open (a peer that reconnected as its server
    was closing), and the peer sees the connection end."""

    async def main() -> None:
        async def hold(c: Comm) -> None:
            await c.read()  # until the connection ends

        listener = await comm.listen("tcp://127.0.0.1:0", hold, roles=frozenset({"client"}))
        c = await comm.connect(listener.address, role="client", info={"client": "me"})
        await asyncio.sleep(0.05)
        assert len(listener.live) == 1
        await within(listener.close(), 5)
        assert not listener.live
        with pytest.raises(comm.CommClosedError):
            await within(c.read(), 5)

    run(main())


def test_roundtrip_with_payload_and_hello() -> None:
    async def main() -> None:
        listener, seen = await echo_server()
        c = await comm.connect(listener.address, role="client", info={"client": "me"})
        await c.write(m.Cancel(force=True), b"\x00\xffdata")
        assert await answer_of(c) == ("cancel", b"\x00\xffdata")
        hello, (msg, payload) = seen[:2]
        assert isinstance(hello, m.Hello) and (hello.role, hello.client) == ("client", "me")
        assert msg == m.Cancel(force=True) and payload == b"\x00\xffdata"
        await c.close()
        await listener.close()

    run(main())


def test_protocol_mismatch_is_a_clear_error() -> None:
    async def main() -> None:
        listener, _ = await echo_server()
        host, port = comm.parse_address(listener.address)
        raw = Comm(await open_stream(host, port), "test")
        await raw.write_handshake(m.Hello(protocol="squall/999", role="client"))
        reply = await raw.read_handshake()
        assert isinstance(reply, m.Error)
        assert "squall/999" in reply.message and m.PROTOCOL in reply.message
        await raw.close()
        with pytest.raises(comm.HandshakeError, match="not accepted"):
            await comm.connect(listener.address, role="worker")
        await listener.close()

    run(main())


def test_garbage_and_truncated_frames_close_only_that_connection() -> None:
    async def main() -> None:
        listener, seen = await echo_server()
        good = await comm.connect(listener.address, role="client")
        # A client that completes the handshake, then sends garbage.
        bad, writer = await raw_client(listener)
        head = b"\xc1not msgpack"
        writer.write(struct.pack("<II", len(head), 0) + head)
        await writer.drain()
        with pytest.raises(comm.CommClosedError):
            await bad.read()
        # Another one that stops in the middle of a frame.
        _, writer2 = await raw_client(listener)
        frame = comm.encode_frame(
            m.Batch(msgs=[m.HeartbeatClient()], spans=[(0, 100)]), b"x" * 100
        )
        writer2.write(frame[:-10])
        await writer2.drain()
        writer2.close()
        # An oversized frame is refused before reading it.
        big, writer3 = await raw_client(listener)
        writer3.write(struct.pack("<II", 10, big.max_frame_bytes))
        await writer3.drain()
        with pytest.raises(comm.CommClosedError):
            await big.read()
        await asyncio.sleep(0.05)
        errors = [s for s in seen if isinstance(s, comm.CommError)]
        assert any(isinstance(e, comm.ProtocolError) and "malformed" in str(e) for e in errors)
        assert any("mid-frame" in str(e) for e in errors)
        assert any("exceeds" in str(e) for e in errors)
        # The server and the well-behaved client are unaffected.
        await still_served(good, listener)

    run(main())


def test_a_malformed_message_comes_alone_and_the_batch_is_read() -> None:
    """A message that does not validate (a wrong field, an op its route does not carry)
    reaches the handler as Malformed, with its op and id; its neighbours arrive."""

    async def main() -> None:
        listener, seen = await echo_server()
        c, writer = await raw_client(listener)
        msgs = [
            {"op": "cancel", "force": True},
            {"op": "who-has", "id": 7, "bogus": 1},  # unknown fields are ignored
            {"op": "scatter", "id": 8, "holders": "no", "nbytes": []},
            {"op": "compute", "addresses": [], "n": 0},  # not a client's message
            [1, 2],
        ]
        spans = [[0, 1], [1, 0], [1, 2], [3, 0], [3, 0]]
        writer.write(raw_frame({"op": "batch", "msgs": msgs, "spans": spans}, b"abcd"))
        await writer.drain()
        answers = [await answer_of(c) for _ in msgs]
        assert answers == [
            ("cancel", b"a"),
            ("who-has", b""),
            ("scatter", b"bc"),
            ("compute", b""),
            ("None", b""),
        ]
        got = [msg for msg, _ in seen[1:]]
        assert got[0] == m.Cancel(force=True) and got[1] == m.WhoHas(id=7)
        assert isinstance(got[2], m.Malformed) and got[2].id == 8 and "holders" in got[2].error
        assert isinstance(got[3], m.Malformed) and got[3].op == "compute"
        assert isinstance(got[4], m.Malformed) and got[4].op is None
        await still_served(c, listener)

    run(main())


def test_a_message_larger_than_a_frame_travels_in_parts() -> None:
    async def main() -> None:
        listener, seen = await echo_server()
        c = await comm.connect(listener.address, role="client")
        limit, c.max_frame_bytes = c.max_frame_bytes, 1000  # parts of under 1000 bytes
        big = bytes(range(256)) * 40
        # Two writers at once: the parts of one message never interleave with the other.
        await asyncio.gather(c.write(m.ReleaseKeys(), big), c.write(m.Retry(), b"s"))
        c.max_frame_bytes = limit  # the echoes come back in one frame each
        assert dict([await answer_of(c), await answer_of(c)]) == {
            "release-keys": big,
            "retry": b"s",
        }
        assert (m.ReleaseKeys(), big) in seen
        with pytest.raises(comm.MessageTooLarge, match="max-message-bytes"):
            c.max_message_bytes = 5000
            await c.write(m.ReleaseKeys(), big)
        await still_served(c, listener)  # the connection lives on

    run(main())


def test_payload_pieces_and_large_payloads_arrive_whole() -> None:
    """A payload given in pieces arrives as one buffer, also in parts whose cuts fall
    inside pieces; one of 1 MiB or more is received into writable memory."""

    async def main() -> None:
        listener, _ = await echo_server()
        c = await comm.connect(listener.address, role="client")
        big = bytes(range(256)) * (3 * 2**12)  # 3 MiB
        await c.write(m.ReleaseKeys(), [b"head", memoryview(big), b"tail"])
        reply, payload = await c.read()
        assert isinstance(reply, m.RequestFailed) and reply.error == "release-keys"
        assert payload == b"head" + big + b"tail" and not payload.readonly
        pieces: list[comm.Blob] = [b"ab" * 300, memoryview(b"c" * 1500), b"d"]
        limit, c.max_frame_bytes = c.max_frame_bytes, 1000
        await c.write(m.Retry(), pieces)
        c.max_frame_bytes = limit
        assert await answer_of(c) == ("retry", b"".join(pieces))
        await still_served(c, listener)

    run(main())


def test_a_large_payload_cut_short_is_a_closed_connection() -> None:
    async def main() -> None:
        listener, seen = await echo_server()
        c, writer = await raw_client(listener)
        head = msgpack.packb({"op": "batch", "msgs": [{"op": "retry"}], "spans": [[0, 2**21]]})
        writer.write(struct.pack("<II", len(head), 2**21) + head + b"x" * 2**20)
        await writer.drain()
        await c.close()
        for _ in range(200):
            if isinstance(seen[-1], comm.CommError):
                break
            await asyncio.sleep(0.01)
        assert isinstance(seen[-1], comm.CommClosedError) and "mid-frame" in str(seen[-1])
        await listener.close()

    run(main())


def batch(parts: int = 0) -> dict[str, Any]:
    return {"op": "batch", "msgs": [], "spans": [], "parts": parts}


@pytest.mark.parametrize(
    "frames, problem",
    [
        ([({"op": "part", "total": 2**40}, b"x")], "exceeds"),
        ([({"op": "part", "total": "9"}, b"x")], "malformed"),
        ([({"op": "part", "total": 3}, b"xx"), ({"op": "part", "total": 4}, b"x")], "disagree"),
        ([({"op": "part", "total": 3}, b"xx"), ({"op": "part", "total": 3}, b"xx")], "disagree"),
        ([({"op": "part", "total": 3}, b"xx"), (batch(3), b"")], "add up"),
        ([({"op": "part", "total": 2}, b"xx"), (batch(2), b"y")], "add up"),
        ([({"op": "part", "total": 2}, b"xx"), (batch(), b"")], "add up"),
        ([(batch(5), b"")], "add up"),
        ([({"op": "batch", "msgs": [{"op": "retry"}], "spans": [[0, 2]]}, b"x")], "span"),
        ([({"op": "batch", "msgs": [{"op": "retry"}], "spans": []}, b"")], "spans"),
        ([({"op": "retry"}, b"")], "malformed"),
    ],
)
def test_malformed_frames_close_only_that_connection(
    frames: list[tuple[dict[str, Any], bytes]], problem: str
) -> None:
    async def main() -> None:
        listener, seen = await echo_server()
        good = await comm.connect(listener.address, role="client")
        bad, writer = await raw_client(listener)
        for header, payload in frames:
            writer.write(raw_frame(header, payload))
        await writer.drain()
        with pytest.raises(comm.CommClosedError):
            await bad.read()
        errors = [str(e) for e in seen if isinstance(e, comm.ProtocolError)]
        assert len(errors) == 1 and problem in errors[0], errors
        await still_served(good, listener)

    run(main())


def test_batched_send_coalesces_messages_with_payloads() -> None:
    async def main() -> None:
        got: asyncio.Queue[list[comm.Received]] = asyncio.Queue()

        async def handler(c: Comm) -> None:
            while True:
                try:
                    await got.put(await c.read_messages())
                except comm.CommError:
                    return

        listener = await comm.listen("tcp://127.0.0.1:0", handler, roles=frozenset({"worker"}))
        c = await comm.connect(listener.address, role="worker")
        b = comm.BatchedSend(c, interval=0.01)
        b.start()
        b.send(m.Finished(n=1), b"one")
        b.send(m.Reschedule(task=2))
        b.send(m.AddReplicas(), b"three")
        msgs = [(msg, bytes(p)) for msg, p in await got.get()]
        assert msgs == [
            (m.Finished(n=1), b"one"),
            (m.Reschedule(task=2), b""),
            (m.AddReplicas(), b"three"),
        ]
        assert b.frames_sent == 1
        b.send(m.Retire())
        await b.close()
        assert [msg for msg, _ in await got.get()] == [m.Retire()]
        await c.close()
        await listener.close()

    run(main())


def test_batched_send_closes_cleanly_after_the_peer_went_away() -> None:
    async def main() -> None:
        async def hang_up(c: Comm) -> None:
            return None  # the listener closes the connection

        listener = await comm.listen("tcp://127.0.0.1:0", hang_up, roles=frozenset({"worker"}))
        c = await comm.connect(listener.address, role="worker")
        b = comm.BatchedSend(c, interval=0.001)
        b.start()
        assert b._task is not None
        while not b._task.done():  # writes fail once the peer's reset arrives
            with contextlib.suppress(comm.CommClosedError):
                b.send(m.AddReplicas(), b"x" * 1000)
            await asyncio.sleep(0.01)
        assert isinstance(b._task.exception(), comm.CommClosedError)
        await b.close()  # its owner (a worker closing, the scheduler forgetting a
        await c.close()  # worker) must get past this
        await listener.close()

    run(main())


def test_connection_errors_are_clear() -> None:
    async def main() -> None:
        listener, _ = await echo_server()
        with pytest.raises(comm.CommError, match="cannot listen"):
            await comm.listen(listener.address, _noop, roles=frozenset({"client"}))
        port = comm.parse_address(listener.address)[1]
        await listener.close()
        with pytest.raises(comm.CommError, match="could not connect"):
            await comm.connect(f"tcp://127.0.0.1:{port}", role="client", timeout=2)

    run(main())


async def _noop(c: Comm) -> None:
    return None


def test_encode_frame_layout() -> None:
    frame = comm.encode_frame(m.Retire(restart=True), b"pp")
    n_head, n_payload = struct.unpack("<II", frame[:8])
    assert msgpack.unpackb(frame[8 : 8 + n_head]) == {"op": "retire", "restart": True}
    assert frame[8 + n_head :] == b"pp" and n_payload == 2
