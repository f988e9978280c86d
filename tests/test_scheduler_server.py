"""The scheduler process over real TCP, with a scripted worker and client."""

from __future__ import annotations

import asyncio
import struct
from typing import Any, TypeVar

import pytest

from squall._core import decode_compute, decode_keys, encode_keys
from squall.client.data import holders_of
from squall.deploy.requests import ask
from squall.protocol import comm, update_graph
from squall.protocol import messages as m
from squall.scheduler.server import SchedulerServer

M = TypeVar("M", bound=m.Message)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


# Messages read from a connection but not asked for yet: a batched frame can carry
# the next message a test waits for after the one it asked for.
_unread: dict[int, list[comm.Received]] = {}


async def next_op(c: comm.Comm, kind: type[M]) -> tuple[M, memoryview]:
    backlog = _unread.setdefault(id(c), [])
    while True:
        for i, (msg, payload) in enumerate(backlog):
            if isinstance(msg, kind):
                del backlog[: i + 1]
                return msg, payload
        backlog.clear()
        backlog.extend(await c.read_messages())


def finished(tasks: list[tuple[int, int]]) -> tuple[m.Finished, bytes]:
    n = len(tasks)
    payload = (
        struct.pack(f"<{n}I", *(t for t, _ in tasks))
        + struct.pack(f"<{n}Q", *(r for _, r in tasks))
        + struct.pack(f"<{n}q", *([8] * n))
        + struct.pack(f"<{n}d", *([0.01] * n))
    )
    return m.Finished(n=n), payload


async def connect_worker(address: str, name: str) -> comm.Comm:
    w = await comm.connect(
        address, role="worker", info={"address": f"tcp://127.0.0.1:{name}", "nthreads": 1}
    )
    assert isinstance((await w.read())[0], m.WorkerRegistered)
    return w


async def scheduler_worker_client() -> tuple[SchedulerServer, comm.Comm, comm.Comm]:
    """A validating scheduler with one registered worker and one registered client."""
    server = SchedulerServer("tcp://127.0.0.1:0", {"validate": True})
    await server.start()
    w = await connect_worker(server.address, "9001")
    c = await comm.connect(server.address, role="client", info={"client": "c1"})
    assert isinstance((await c.read())[0], m.ClientRegistered)
    return server, w, c


def test_graph_runs_through_worker_and_client_hears_back() -> None:
    async def main() -> None:
        server, w, c = await scheduler_worker_client()
        n, keys_bytes, payload, _ = update_graph.encode(
            ["a", ("b", 0)], [b"sa", b"sb"], [[], ["a"]]
        )
        await c.write(m.UpdateGraph(id=1, n=n, keys_bytes=keys_bytes, wanted=[1]), payload)
        assert (await next_op(c, m.GraphAccepted))[0].id == 1
        for expected in ["a", ("b", 0)]:
            h, payload = await next_op(w, m.Compute)
            [(task, run_id, key, _, spec, *_rest, deps)] = decode_compute(
                bytes(payload), h.addresses
            )
            assert key == expected
            if key == ("b", 0):
                assert spec == b"sb" and deps == [("a", 8, ["tcp://127.0.0.1:9001"])]
            await w.write(*finished([(task, run_id)]))
        _, payload = await next_op(c, m.KeyInMemory)
        assert decode_keys(bytes(payload)) == [("b", 0)]
        await c.write(m.ReleaseKeys(), encode_keys([("b", 0)]))
        # a is freed once b is done (maybe before the release arrives); b on release.
        freed: set[int] = set()
        while task not in freed:
            _, payload = await next_op(w, m.FreeKeys)
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
        n, keys_bytes, payload, _ = update_graph.encode(["x"], [b"s"], [[]])
        await c.write(m.UpdateGraph(n=n, keys_bytes=keys_bytes), payload)
        await next_op(w1, m.Compute)
        w2 = await connect_worker(server.address, "9002")
        await w1.close()  # dies while running x: x moves to w2
        h, payload = await next_op(w2, m.Compute)
        [(task, run_id, key, *_)] = decode_compute(bytes(payload), h.addresses)
        assert key == "x"
        await w2.write(
            m.Erred(task=task, run_id=run_id, exception_text="ZeroDivisionError", n_exception=3),
            b"exctb",
        )
        erred, payload = await next_op(c, m.TaskErred)
        assert erred.exception_text == "ZeroDivisionError"
        key_bytes = bytes(payload[: erred.n_key])
        assert decode_keys(key_bytes) == ["x"]
        assert bytes(payload[erred.n_key :][: erred.n_exception]) == b"exc"
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
        refused, _ = await dup.read()
        assert isinstance(refused, m.Error) and "already registered" in refused.message
        # A worker sending nonsense is disconnected; the scheduler carries on.
        bad = await connect_worker(server.address, "9003")
        await bad.write(m.Finished(n=5), b"short")
        with pytest.raises(comm.CommClosedError):
            await bad.read()
        await asyncio.sleep(0.05)
        assert list(server.workers) == [0]
        # A client asking about an unknown key gets an answer, not a crash.
        c = await comm.connect(server.address, role="client", info={"client": "c"})
        await c.read()
        await c.write(m.WhoHas(id=7), encode_keys(["nope"]))
        who, payload = await next_op(c, m.WhoHasReply)
        assert who.id == 7 and holders_of(who.addresses, bytes(payload), 1) == [[]]
        # A struct is not checked when made: this header goes out with n a str.
        await c.write(m.UpdateGraph(id=8, keys_bytes=0, n="x"))  # type: ignore[arg-type]
        failed, _ = await next_op(c, m.RequestFailed)
        assert failed.id == 8 and "malformed" in failed.error
        n, keys_bytes, payload, _ = update_graph.encode(["y"], [b"s"], [[]])
        await c.write(m.UpdateGraph(id=9, n=n, keys_bytes=keys_bytes), payload[:-3])  # truncated
        failed, _ = await next_op(c, m.RequestFailed)
        assert failed.id == 9 and "malformed" in failed.error
        await w.close()
        await c.close()
        await server.close()

    run(main())


def test_concurrent_one_request_connections_are_each_answered() -> None:
    """Two one-request connections asking the same thing at once (a nanny and a cluster
    object, say) each get their answer: they share a name, not an id."""

    async def main() -> None:
        server = SchedulerServer("tcp://127.0.0.1:0", {"validate": True})
        await server.start()
        try:
            waits = [
                asyncio.ensure_future(
                    ask(server.address, m.WaitForWorkers(n_workers=1), m.WaitForWorkersReply)
                )
                for _ in range(2)
            ]
            while sum(p.name.startswith("wait-for-workers") for p in server.clients.values()) < 2:
                await asyncio.sleep(0.01)
            w = await connect_worker(server.address, "9001")
            await asyncio.wait_for(asyncio.gather(*waits), 10)
            await w.close()
        finally:
            await server.close()

    run(main())
