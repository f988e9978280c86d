"""The scheduler process over real TCP, with a scripted worker and client."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

from squall._core import decode_compute, decode_keys, encode_keys
from squall.client.data import holders_of
from squall.protocol import comm, update_graph
from squall.scheduler.server import SchedulerServer


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


# Messages read from a connection but not asked for yet: a batched frame can carry
# the next message a test waits for after the one it asked for.
_unread: dict[int, list[comm.Message]] = {}


async def next_op(c: comm.Comm, op: str) -> comm.Message:
    backlog = _unread.setdefault(id(c), [])
    while True:
        for i, (header, payload) in enumerate(backlog):
            if header["op"] == op:
                del backlog[: i + 1]
                return header, payload
        backlog.clear()
        backlog.extend(await c.read_messages())


def finished(tasks: list[tuple[int, int]]) -> tuple[comm.Header, bytes]:
    n = len(tasks)
    payload = (
        struct.pack(f"<{n}I", *(t for t, _ in tasks))
        + struct.pack(f"<{n}Q", *(r for _, r in tasks))
        + struct.pack(f"<{n}q", *([8] * n))
        + struct.pack(f"<{n}d", *([0.01] * n))
    )
    return {"op": "finished", "n": n}, payload


async def connect_worker(address: str, name: str) -> comm.Comm:
    w = await comm.connect(
        address, role="worker", info={"address": f"tcp://127.0.0.1:{name}", "nthreads": 1}
    )
    assert (await w.read())[0]["op"] == "registered"
    return w


async def scheduler_worker_client() -> tuple[SchedulerServer, comm.Comm, comm.Comm]:
    """A validating scheduler with one registered worker and one registered client."""
    server = SchedulerServer("tcp://127.0.0.1:0", {"validate": True})
    await server.start()
    w = await connect_worker(server.address, "9001")
    c = await comm.connect(server.address, role="client", info={"client": "c1"})
    assert (await c.read())[0]["op"] == "registered"
    return server, w, c


def test_graph_runs_through_worker_and_client_hears_back() -> None:
    async def main() -> None:
        server, w, c = await scheduler_worker_client()
        n, kb, payload, _ = update_graph.encode(["a", ("b", 0)], [b"sa", b"sb"], [[], ["a"]])
        header = {"op": "update-graph", "n": n, "keys_bytes": kb, "id": 1, "wanted": [1]}
        await c.write(header, payload)
        assert (await next_op(c, "graph-accepted"))[0]["id"] == 1
        for expected in ["a", ("b", 0)]:
            h, payload = await next_op(w, "compute")
            [(task, run_id, key, _, spec, *_rest, deps)] = decode_compute(
                bytes(payload), h["addresses"]
            )
            assert key == expected
            if key == ("b", 0):
                assert spec == b"sb" and deps == [("a", 8, ["tcp://127.0.0.1:9001"])]
            await w.write(*finished([(task, run_id)]))
        _, payload = await next_op(c, "key-in-memory")
        assert decode_keys(bytes(payload)) == [("b", 0)]
        await c.write({"op": "release-keys"}, encode_keys([("b", 0)]))
        # a is freed once b is done (maybe before the release arrives); b on release.
        freed: set[int] = set()
        while task not in freed:
            _, payload = await next_op(w, "free-keys")
            freed.update(struct.unpack(f"<{len(payload) // 4}I", payload))  # packed u32 ids
        assert len(freed) == 2
        server.core.validate()
        assert server.core.n_tasks == 0
        await w.close()
        await c.close()
        await asyncio.sleep(0.05)
        assert server.workers == {} and server.clients == {}
        await server.close()

    run(main())


def test_worker_death_reschedules_and_errors_reach_the_client() -> None:
    async def main() -> None:
        server, w1, c = await scheduler_worker_client()
        n, kb, payload, _ = update_graph.encode(["x"], [b"s"], [[]])
        await c.write({"op": "update-graph", "n": n, "keys_bytes": kb}, payload)
        await next_op(w1, "compute")
        w2 = await connect_worker(server.address, "9002")
        await w1.close()  # dies while running x: x moves to w2
        h, payload = await next_op(w2, "compute")
        [(task, run_id, key, *_)] = decode_compute(bytes(payload), h["addresses"])
        assert key == "x"
        await w2.write(
            {
                "op": "erred",
                "task": task,
                "run_id": run_id,
                "exception_text": "ZeroDivisionError",
                "n_exception": 3,
            },
            b"exctb",
        )
        h, payload = await next_op(c, "task-erred")
        assert h["exception_text"] == "ZeroDivisionError"
        key_bytes = bytes(payload[: h["n_key"]])
        assert decode_keys(key_bytes) == ["x"]
        assert bytes(payload[h["n_key"] :][: h["n_exception"]]) == b"exc"
        await w2.close()
        await c.close()
        await server.close()

    run(main())


def test_bad_peers_are_refused_without_harm() -> None:
    async def main() -> None:
        server = SchedulerServer("tcp://127.0.0.1:0")
        await server.start()
        w = await connect_worker(server.address, "9001")
        # A second worker claiming the same address is refused with a clear error.
        dup = await comm.connect(
            server.address,
            role="worker",
            info={"address": "tcp://127.0.0.1:9001", "nthreads": 1},
        )
        h, _ = await dup.read()
        assert h["op"] == "error" and "already registered" in h["message"]
        # A worker sending nonsense is disconnected; the scheduler carries on.
        bad = await connect_worker(server.address, "9003")
        await bad.write({"op": "finished", "n": 5}, b"short")
        with pytest.raises(comm.CommClosedError):
            await bad.read()
        await asyncio.sleep(0.05)
        assert list(server.workers) == [0]
        # A client asking about an unknown key gets an answer, not a crash.
        c = await comm.connect(server.address, role="client", info={"client": "c"})
        await c.read()
        await c.write({"op": "who-has", "id": 7}, encode_keys(["nope"]))
        h, payload = await next_op(c, "who-has")
        assert h["id"] == 7 and holders_of(h["addresses"], bytes(payload), 1) == [[]]
        await c.write({"op": "update-graph", "id": 8, "keys_bytes": 0, "n": "x"})
        h, _ = await next_op(c, "request-failed")
        assert h["id"] == 8
        n, kb, payload, _ = update_graph.encode(["y"], [b"s"], [[]])
        header = {"op": "update-graph", "n": n, "keys_bytes": kb, "id": 9}
        await c.write(header, payload[:-3])  # truncated
        h, _ = await next_op(c, "request-failed")
        assert h["id"] == 9 and "malformed" in h["error"]
        await w.close()
        await c.close()
        await server.close()

    run(main())
