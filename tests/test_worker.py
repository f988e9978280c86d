"""Real workers against an in-process scheduler, driven by a scripted client."""

from __future__ import annotations

import asyncio
import operator
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Hashable
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import dask.config
import pytest

from squall._core import decode_keys, encode_keys
from squall.client.data import holders_of
from squall.protocol import comm, update_graph
from squall.protocol import messages as m
from squall.protocol.peers import DataReply, Loaded, Pickled
from squall.protocol.specs import call_prefix, make_spec
from squall.scheduler.server import SchedulerServer
from squall.worker.worker import Worker

Key = Hashable


class F:
    """Marks an argument as the value of task ``key``."""

    def __init__(self, key: Key) -> None:
        self.key = key


def to_dep(o: Any) -> Key | None:
    return o.key if isinstance(o, F) else None


def run(coro: Any, timeout: float = 15) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


class Client:
    """Just enough client: submit graphs, await keys, fetch results from holders."""

    def __init__(self, c: comm.Comm) -> None:
        self.c = c
        self.in_memory: set[Key] = set()
        self.erred: dict[Key, tuple[m.TaskErred, bytes]] = {}
        self.replies: dict[tuple[type[m.Message], int | None], tuple[Any, bytes]] = {}
        self.changed = asyncio.Event()
        self._next_id = 0
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def connect(cls, address: str) -> Client:
        c = await comm.connect(address, role="client", info={"client": "test"})
        assert isinstance((await c.read())[0], m.ClientRegistered)
        return cls(c)

    async def _read(self) -> None:
        while True:
            for msg, payload in await self.c.read_messages():
                data = bytes(payload)
                if isinstance(msg, m.KeyInMemory):
                    self.in_memory.update(decode_keys(data))
                elif isinstance(msg, m.LostData):
                    self.in_memory.difference_update(decode_keys(data))
                elif isinstance(msg, m.TaskErred):
                    [key] = decode_keys(data[: msg.n_key])
                    self.erred[key] = (msg, data[msg.n_key :])
                elif isinstance(msg, m.Reply):
                    self.replies[type(msg), msg.id] = (msg, data)
                self.changed.set()

    async def wait_for(self, cond: Callable[[], Any]) -> Any:
        while not (result := cond()):
            self.changed.clear()
            await self.changed.wait()
        return result

    async def submit(
        self,
        tasks: dict[Key, tuple[Callable[..., Any], tuple[Any, ...]]],
        *,
        priority: int = 0,
        workers: list[str] | None = None,
        wanted: list[Key] | None = None,
        loose: bool = False,
    ) -> None:
        keys = list(tasks)
        made = [
            make_spec(call_prefix(cloudpickle.dumps(f)), args, {}, to_dep)
            for f, args in tasks.values()
        ]
        n, keys_bytes, payload, index = update_graph.encode(
            keys, [s for s, _ in made], [d for _, d in made]
        )
        self._next_id += 1
        graph = m.UpdateGraph(
            id=self._next_id,
            n=n,
            keys_bytes=keys_bytes,
            priority=priority,
            workers=workers,
            allow_other_workers=loose,
            wanted=[index[k] for k in wanted] if wanted is not None else None,
        )
        await self.c.write(graph, payload)
        h, _ = await self.wait_for(
            lambda: (
                self.replies.get((m.GraphAccepted, self._next_id))
                or self.replies.get((m.RequestFailed, self._next_id))
            )
        )
        assert isinstance(h, m.GraphAccepted), h

    async def who_has(self, keys: list[Key]) -> list[list[str]]:
        self._next_id += 1
        rid = self._next_id
        await self.c.write(m.WhoHas(id=rid), encode_keys(keys))
        h, payload = await self.wait_for(lambda: self.replies.get((m.WhoHasReply, rid)))
        return holders_of(h.addresses, bytes(payload), len(keys))

    async def gather(self, keys: list[Key]) -> list[Any]:
        await self.wait_for(lambda: self.in_memory.issuperset(keys) or self.erred)
        assert not self.erred, self.erred
        out = []
        for key, holders in zip(keys, await self.who_has(keys), strict=True):
            assert holders, key
            [value] = await get_data(holders[0], [key])
            out.append(value)
        return out

    async def close(self) -> None:
        self._reader.cancel()
        await self.c.close()


async def until(cond: Callable[[], Any], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.005)


async def get_data(address: str, keys: list[Key]) -> list[Any]:
    """Values from a worker's data store (None where the worker answers size -1)."""
    c = await comm.connect(address, role="peer")
    try:
        await c.write(m.GetData(id=1, n=len(keys)), encode_keys(keys))
        h, payload = await c.read()
    finally:
        await c.close()
    assert isinstance(h, m.Data) and h.id == 1
    reply = DataReply(h.sizes, payload, h.buffers, h.failed, h.whole, len(keys))
    assert reply.consistent()
    return [v.load() if isinstance(v, Pickled | Loaded) else None for v in reply.values()]


async def cluster(
    n: int, nthreads: int = 1, **config: Any
) -> tuple[SchedulerServer, list[Worker], Client]:
    server = SchedulerServer("tcp://127.0.0.1:0", {"validate": True, **config})
    await server.start()
    workers = [
        await Worker(server.address, nthreads=nthreads, name=f"w{i}").start() for i in range(n)
    ]
    return server, workers, await Client.connect(server.address)


async def shutdown(server: SchedulerServer, workers: list[Worker], client: Client) -> None:
    await client.close()
    for w in workers:
        await w.close()
    await server.close()


def inc(x: int) -> int:
    return x + 1


def slow_inc(x: int, delay: float = 0.05) -> int:
    time.sleep(delay)
    return x + 1


def add_all(*xs: int) -> int:
    return sum(xs)


def fails(x: int) -> int:
    raise ZeroDivisionError(f"no luck with {x}")


def test_chain_and_fan_in_across_two_workers() -> None:
    async def main() -> None:
        server, (w1, w2), client = await cluster(2)
        # Roots pinned to each worker, then a chain and a fan-in over both.
        await client.submit({"a": (slow_inc, (1,))}, workers=[w1.address])
        await client.submit({"b": (slow_inc, (10,))}, workers=[w2.address])
        chain: dict[Key, tuple[Callable[..., Any], tuple[Any, ...]]] = {
            ("c", 0): (add_all, (F("a"), F("b")))
        }
        for i in range(1, 30):
            chain["c", i] = (inc, (F(("c", i - 1)),))
        fan = {("x", i): (inc, (F("a") if i % 2 else F("b"),)) for i in range(8)}
        await client.submit({**chain, **fan, "total": (add_all, tuple(F(k) for k in fan))})
        got = await client.gather([("c", 29), "total", "a", "b"])
        assert got == [2 + 11 + 29, 4 * 3 + 4 * 12, 2, 11]
        holders = await client.who_has(["a", "b"])
        assert holders == [[w1.address], [w2.address]]
        # Both workers ran part of the fan-in, so data moved between them.
        ran = [{k for k in w.data if isinstance(k, tuple) and k[0] == "x"} for w in (w1, w2)]
        assert all(ran), ran
        server.core.validate()
        await shutdown(server, [w1, w2], client)

    run(main())


def test_exception_reaches_client_with_remote_traceback() -> None:
    async def main() -> None:
        server, workers, client = await cluster(1)
        await client.submit({"ok": (inc, (1,)), "bad": (fails, (F("ok"),))})
        h, payload = await client.wait_for(lambda: client.erred.get("bad"))
        assert "ZeroDivisionError" in h.exception_text
        assert "no luck with 2" in h.exception_text
        assert "in fails" in h.traceback_text
        assert 'raise ZeroDivisionError(f"no luck with {x}")' in h.traceback_text
        exc = pickle.loads(payload[: h.n_exception])
        tb = pickle.loads(payload[h.n_exception :])
        assert isinstance(exc, ZeroDivisionError)
        with pytest.raises(ZeroDivisionError) as info:
            raise exc.with_traceback(tb)
        frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
        assert "fails" in frames  # the remote frame is part of the re-raised traceback
        await shutdown(server, workers, client)

    run(main())


def test_free_keys_drops_data() -> None:
    async def main() -> None:
        server, [w], client = await cluster(1)
        await client.submit({"a": (inc, (1,)), "b": (inc, (F("a"),))}, wanted=["b"])
        assert await client.gather(["b"]) == [3]
        # "a" was only needed by "b": freed already; "b" is held until released.
        await until(lambda: "a" not in w.data)
        assert w.data == {"b": 3}
        await client.c.write(m.ReleaseKeys(), encode_keys(["b"]))
        await until(lambda: not w.data and not w.tasks)
        assert w.data == {} and w.tasks == {} and w.nbytes == {}
        assert await get_data(w.address, ["b"]) == [None]
        await shutdown(server, [w], client)

    run(main())


def test_the_scheduler_paces_heartbeats() -> None:
    """Workers beat at the period the scheduler asks for its cluster size (0.5 s up to
    10 workers), whatever they started with: the scheduler answers every heartbeat
    with it (which is also how the worker knows the scheduler is alive)."""

    async def main() -> None:
        with dask.config.set({"squall.worker.heartbeat-interval": "20ms"}):
            server, [w], client = await cluster(1)
        await until(lambda: w._heartbeat_interval == 0.5)
        await shutdown(server, [w], client)

    run(main())


GATE = threading.Event()
ORDER: list[str] = []


def blocker() -> None:
    GATE.wait(10)


def record(name: str) -> str:
    ORDER.append(name)
    return name


def test_priorities_on_one_thread() -> None:
    async def main() -> None:
        GATE.clear()
        ORDER.clear()
        server, [w], client = await cluster(1, **{"worker-saturation": "inf"})
        await client.submit({"block": (blocker, ())})
        await until(lambda: any(t.state == "executing" for t in w.tasks.values()))
        # Queued behind the blocker: low priority first, then high, then low again.
        await client.submit({f"low-{i}": (record, (f"low-{i}",)) for i in range(3)})
        await client.submit({f"high-{i}": (record, (f"high-{i}",)) for i in range(3)}, priority=5)
        await client.submit({f"low2-{i}": (record, (f"low2-{i}",)) for i in range(2)})
        keys = [f"low-{i}" for i in range(3)] + [f"high-{i}" for i in range(3)]
        keys += [f"low2-{i}" for i in range(2)]
        await until(lambda: sum(t.state == "ready" for t in w.tasks.values()) == len(keys))
        GATE.set()
        await client.gather(keys)
        # User priority first; then (same user priority) earlier graphs first.
        assert sorted(ORDER[:3]) == keys[3:6]
        assert sorted(ORDER[3:6]) == keys[:3]
        assert sorted(ORDER[6:]) == keys[6:]
        await shutdown(server, [w], client)

    run(main())


def test_worker_killed_mid_graph() -> None:
    async def main() -> None:
        server, (w1, w2), client = await cluster(2)
        tasks: dict[Key, tuple[Callable[..., Any], tuple[Any, ...]]] = {
            ("r", i): (slow_inc, (i, 0.02)) for i in range(20)
        }
        for i in range(20):
            tasks["s", i] = (slow_inc, (F(("r", i)), 0.01))
        tasks["total"] = (add_all, tuple(F(("s", i)) for i in range(20)))
        await client.submit(tasks, wanted=["total"])
        await until(lambda: len(w2.data) >= 2)
        assert "total" not in client.in_memory
        await w2.close(abort=True)  # no goodbye, no pending reports
        [total] = await client.gather(["total"])
        assert total == sum(i + 2 for i in range(20))
        assert (await client.who_has(["total"])) == [[w1.address]]
        await shutdown(server, [w1], client)

    run(main())


def test_unreachable_holder_then_holder_dies() -> None:
    async def main() -> None:
        server, (w1, w2), client = await cluster(2)
        await client.submit({"a": (inc, (1,))}, workers=[w2.address], loose=True)
        await client.wait_for(lambda: "a" in client.in_memory)
        # w2 stops serving peers but stays registered: w1 cannot fetch "a" from it.
        assert w2._listener is not None
        await w2._listener.close()
        await client.submit({"b": (inc, (F("a"),))}, workers=[w1.address])
        await asyncio.sleep(0.4)  # w1 tried, failed, and gave "b" back at least once
        assert "b" not in client.in_memory
        await w2.close(abort=True)  # now "a" is lost and recomputed on w1
        assert await client.gather(["b"]) == [3]
        assert (await client.who_has(["a", "b"])) == [[w1.address], [w1.address]]
        server.core.validate()
        await shutdown(server, [w1], client)

    run(main())


def test_worker_subprocess() -> None:
    async def main() -> None:
        server = SchedulerServer("tcp://127.0.0.1:0")
        await server.start()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "squall.worker",
            server.address,
            "--nthreads",
            "2",
            "--name",
            "sub",
            "--resources",
            "GPU=1",
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        try:
            await until(lambda: server.workers, timeout=10)
            [peer] = server.workers.values()
            assert peer.name == "sub"
            client = await Client.connect(server.address)
            await client.submit(
                {"x": (operator.add, (1, 2)), "y": (operator.mul, (F("x"), 7))}, wanted=["y"]
            )
            assert await client.gather(["y"]) == [21]
            await client.close()
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 10) == 0
            assert proc.stderr is not None
            log = (await proc.stderr.read()).decode()
            assert "registered" in log and "SIGTERM" in log, log
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            await server.close()

    run(main())
