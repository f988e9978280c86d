"""The wire layer: frames, handshake, batching, and bad input from peers."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Awaitable
from typing import Any

import msgpack
import pytest

from squall.protocol import comm
from squall.protocol.comm import Comm


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 20))  # type: ignore[arg-type]


async def echo_server(
    roles: frozenset[str] = frozenset({"client"}),
) -> tuple[comm.Listener, list[Any]]:
    seen: list[Any] = []

    async def handler(c: Comm) -> None:
        try:
            while True:
                for header, payload in await c.read_messages():
                    seen.append((header, bytes(payload)))
                    await c.write({"op": "echo", "of": header["op"]}, payload)
        except comm.CommError as e:
            seen.append(e)

    return await comm.listen("tcp://127.0.0.1:0", handler, roles=roles), seen


async def still_served(good: Comm, listener: comm.Listener) -> None:
    """A well-behaved client is still answered; then both close."""
    await good.write({"op": "ping"})
    assert (await good.read())[0]["of"] == "ping"
    await good.close()
    await listener.close()


def test_parse_address() -> None:
    assert comm.parse_address("tcp://127.0.0.1:8786") == ("127.0.0.1", 8786)
    assert comm.parse_address("localhost:1") == ("localhost", 1)
    assert comm.parse_address("tcp://[::1]:9") == ("::1", 9)
    for bad in ["tcp://host", "udp://h:1", "h:port", "tcp://:1", "h:70000"]:
        with pytest.raises(ValueError, match="address"):
            comm.parse_address(bad)


def test_roundtrip_with_payload() -> None:
    async def main() -> None:
        listener, _ = await echo_server()
        c = await comm.connect(listener.address, role="client")
        await c.write({"op": "ping", "n": 1, "key": ("x", 0)}, b"\x00\xffdata")
        header, payload = await c.read()
        assert header == {"op": "echo", "of": "ping"}
        assert bytes(payload) == b"\x00\xffdata"
        await c.close()
        await listener.close()

    run(main())


def test_protocol_mismatch_is_a_clear_error() -> None:
    async def main() -> None:
        listener, _ = await echo_server()
        host, port = comm.parse_address(listener.address)
        reader, writer = await asyncio.open_connection(host, port)
        raw = Comm(reader, writer, "test")
        await raw.write({"op": "hello", "protocol": "squall/999", "role": "client"})
        reply, _ = await raw.read()
        assert reply["op"] == "error"
        assert "squall/999" in reply["message"] and comm.PROTOCOL in reply["message"]
        await raw.close()
        with pytest.raises(comm.HandshakeError, match="not accepted"):
            await comm.connect(listener.address, role="worker")
        await listener.close()

    run(main())


def test_garbage_and_truncated_frames_close_only_that_connection() -> None:
    async def main() -> None:
        listener, seen = await echo_server()
        host, port = comm.parse_address(listener.address)
        good = await comm.connect(listener.address, role="client")
        # A client that sends a valid handshake, then garbage.
        reader, writer = await asyncio.open_connection(host, port)
        bad = Comm(reader, writer, "test")
        await bad.write({"op": "hello", "protocol": comm.PROTOCOL, "role": "client"})
        await bad.read()
        head = b"\xc1not msgpack"
        writer.write(struct.pack("<II", len(head), 0) + head)
        await writer.drain()
        with pytest.raises(comm.CommClosedError):
            await bad.read()
        # Another one that stops in the middle of a frame.
        reader2, writer2 = await asyncio.open_connection(host, port)
        trunc = Comm(reader2, writer2, "test")
        await trunc.write({"op": "hello", "protocol": comm.PROTOCOL, "role": "client"})
        await trunc.read()
        frame = comm.encode_frame({"op": "ping"}, b"x" * 100)
        writer2.write(frame[:-10])
        await writer2.drain()
        writer2.close()
        # An oversized frame is refused before reading it.
        reader3, writer3 = await asyncio.open_connection(host, port)
        big = Comm(reader3, writer3, "test")
        await big.write({"op": "hello", "protocol": comm.PROTOCOL, "role": "client"})
        await big.read()
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


def test_a_message_larger_than_a_frame_travels_in_parts() -> None:
    async def main() -> None:
        listener, seen = await echo_server()
        c = await comm.connect(listener.address, role="client")
        limit, c.max_frame_bytes = c.max_frame_bytes, 1000  # parts of under 1000 bytes
        big = bytes(range(256)) * 40
        # Two writers at once: the parts of one message never interleave with the other.
        await asyncio.gather(c.write({"op": "big"}, big), c.write({"op": "small"}, b"s"))
        c.max_frame_bytes = limit  # the echoes come back in one frame each
        replies = {h["of"]: bytes(p) for h, p in [await c.read(), await c.read()]}
        assert replies == {"big": big, "small": b"s"}
        assert ({"op": "big"}, big) in seen
        with pytest.raises(comm.MessageTooLarge, match="max-message-bytes"):
            c.max_message_bytes = 5000
            await c.write({"op": "big"}, big)
        await c.write({"op": "ping"})  # the connection lives on
        assert (await c.read())[0]["of"] == "ping"
        await c.close()
        await listener.close()

    run(main())


@pytest.mark.parametrize(
    "frames, problem",
    [
        ([({"op": "part", "total": 2**40}, b"x")], "exceeds"),
        ([({"op": "part", "total": "9"}, b"x")], "exceeds"),
        ([({"op": "part", "total": 3}, b"xx"), ({"op": "part", "total": 4}, b"x")], "disagree"),
        ([({"op": "part", "total": 3}, b"xx"), ({"op": "part", "total": 3}, b"xx")], "disagree"),
        ([({"op": "part", "total": 3}, b"xx"), ({"op": "m", "parts": 3}, b"")], "add up"),
        ([({"op": "part", "total": 2}, b"xx"), ({"op": "m", "parts": 2}, b"y")], "add up"),
        ([({"op": "part", "total": 2}, b"xx"), ({"op": "m"}, b"")], "add up"),
    ],
)
def test_malformed_parts_close_only_that_connection(
    frames: list[tuple[dict[str, Any], bytes]], problem: str
) -> None:
    async def main() -> None:
        listener, seen = await echo_server()
        good = await comm.connect(listener.address, role="client")
        bad = await comm.connect(listener.address, role="client")
        for header, payload in frames:
            bad._writer.write(comm.encode_frame(header, payload))
        await bad._writer.drain()
        with pytest.raises(comm.CommClosedError):
            await bad.read()
        errors = [str(e) for e in seen if isinstance(e, comm.ProtocolError)]
        assert len(errors) == 1 and problem in errors[0], errors
        await still_served(good, listener)

    run(main())


def test_batched_send_coalesces_messages_with_payloads() -> None:
    async def main() -> None:
        got: asyncio.Queue[list[comm.Message]] = asyncio.Queue()

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
        b.send({"op": "a"}, b"one")
        b.send({"op": "b"})
        b.send({"op": "c"}, b"three")
        msgs = await got.get()
        got_msgs = [(h["op"], bytes(p)) for h, p in msgs]
        assert got_msgs == [("a", b"one"), ("b", b""), ("c", b"three")]
        assert b.frames_sent == 1
        b.send({"op": "d"})
        await b.close()
        assert [h["op"] for h, _ in await got.get()] == ["d"]
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
                b.send({"op": "ping"}, b"x" * 1000)
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
    frame = comm.encode_frame({"op": "x"}, b"pp")
    n_head, n_payload = struct.unpack("<II", frame[:8])
    assert msgpack.unpackb(frame[8 : 8 + n_head]) == {"op": "x"}
    assert frame[8 + n_head :] == b"pp" and n_payload == 2
