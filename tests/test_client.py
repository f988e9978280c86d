"""squall.client against an in-process SchedulerServer and a scripted worker."""

from __future__ import annotations

import asyncio
import gc
import pickle
import re
import struct
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import msgspec
import pytest
import tblib  # type: ignore[import-untyped]

import squall
import squall.client.submission
from squall import Client, Future, as_completed, wait
from squall._core import decode_compute, decode_keys, encode_keys
from squall.client import data
from squall.errors import CancelledError, KilledWorker
from squall.protocol import comm
from squall.protocol import messages as m
from squall.protocol.remote_errors import parse_task_erred
from squall.protocol.specs import run_spec
from squall.scheduler.server import SchedulerServer


class FakeWorker:
    """Runs compute messages with run_spec in threads; serves get-data to peers."""

    def __init__(self, scheduler: str, nthreads: int = 32) -> None:
        self.scheduler = scheduler
        self.nthreads = nthreads
        self.data: dict[Any, Any] = {}
        self.keys: dict[int, Any] = {}
        self.priorities: dict[Any, tuple[int, float, int]] = {}
        self.address = ""
        self.get_data_requests = 0
        self.blobs: dict[int, bytes] = {}  # as a worker's blob cache (docs/protocol.md)

    async def start(self) -> None:
        self.listener = await comm.listen(
            "tcp://127.0.0.1:0", self._serve_peer, roles=frozenset({"peer"})
        )
        self.address = self.listener.address
        self.conn = await comm.connect(
            self.scheduler,
            role="worker",
            info={"address": self.address, "nthreads": self.nthreads, "name": "fake"},
        )
        assert isinstance((await self.conn.read())[0], m.WorkerRegistered)
        self.stream = comm.BatchedSend(self.conn, 0.005)
        self.stream.start()
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        self.task.cancel()
        await self.stream.close()
        await self.conn.close()
        await self.listener.close()

    async def _run(self) -> None:
        try:
            while True:
                for h, payload in await self.conn.read_messages():
                    if isinstance(h, m.Compute):
                        for task, run_id, key, priority, spec, _, _, deps in decode_compute(
                            bytes(payload), h.addresses, self.blobs
                        ):
                            self.keys[task] = key
                            self.priorities[key] = priority
                            args = {k: self.data[k] for k, _, _ in deps}
                            asyncio.get_running_loop().create_task(
                                self._execute(task, run_id, key, spec, args)
                            )
                    elif isinstance(h, m.FreeKeys):
                        for t in struct.unpack(f"<{len(payload) // 4}I", payload):
                            self.data.pop(self.keys.pop(t, None), None)
        except comm.CommError:
            pass

    async def _execute(self, task: int, run_id: int, key: Any, spec: bytes, args: Any) -> None:
        t0 = time.perf_counter()
        try:
            value = await asyncio.to_thread(run_spec, spec, args)
        except Exception as e:
            exc = cloudpickle.dumps(e)
            tb = pickle.dumps(tblib.Traceback(e.__traceback__))
            erred = m.Erred(
                task=task,
                run_id=run_id,
                exception_text=repr(e),
                traceback_text="".join(traceback.format_tb(e.__traceback__)),
                n_exception=len(exc),
            )
            self.stream.send(erred, exc + tb)
            return
        self.data[key] = value
        payload = (
            struct.pack("<I", task)
            + struct.pack("<Q", run_id)
            + struct.pack("<q", len(pickle.dumps(value)))
            + struct.pack("<d", time.perf_counter() - t0)
        )
        self.stream.send(m.Finished(n=1), payload)

    async def _serve_peer(self, c: comm.Comm) -> None:
        try:
            while True:
                h, payload = await c.read()
                assert isinstance(h, m.GetData)
                self.get_data_requests += 1
                blobs = [
                    cloudpickle.dumps(self.data[k]) if k in self.data else b""
                    for k in decode_keys(bytes(payload))
                ]
                sizes = [len(b) if b else -1 for b in blobs]
                await c.write(m.Data(id=h.id, sizes=sizes), b"".join(blobs))
        except comm.CommError:
            pass


class Cluster:
    """A scheduler and one fake worker on an event loop in another thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.graphs = 0

        async def start() -> tuple[SchedulerServer, FakeWorker]:
            server = SchedulerServer("tcp://127.0.0.1:0", {"validate": True})
            await server.start()
            # Read when a client connects, to make its handlers.
            original = server.client_room._update_graph

            def counting(*args: Any) -> Any:
                self.graphs += 1
                return original(*args)

            server.client_room._update_graph = counting  # type: ignore[method-assign]
            worker = FakeWorker(server.address)
            await worker.start()
            return server, worker

        self.server, self.worker = self.run(start())
        self.address = self.server.address

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def call(self, fn: Callable[[], Any]) -> Any:
        async def go() -> Any:
            return fn()

        return self.run(go())

    def n_tasks(self) -> int:
        return int(self.call(lambda: self.server.core.n_tasks))

    def wait_for(self, cond: Callable[[], bool], timeout: float = 5) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < deadline, "condition not reached"
            time.sleep(0.01)

    def close(self) -> None:
        async def stop() -> None:
            await self.worker.close()
            await self.server.close()
            me = asyncio.current_task()
            rest = [t for t in asyncio.all_tasks() if t is not me]
            for t in rest:
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        self.run(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    yield c
    c.close()


@pytest.fixture
def client(cluster: Cluster) -> Iterator[Client]:
    with Client(cluster.address) as c:
        yield c


def inc(x: int) -> int:
    return x + 1


def add(x: int, y: int = 0) -> int:
    return x + y


def div(x: float, y: float) -> float:
    return x / y


def slow(x: Any, delay: float = 0.3) -> Any:
    time.sleep(delay)
    return x


ATTEMPTS: dict[str, int] = {}


def flaky(name: str) -> str:
    ATTEMPTS[name] = ATTEMPTS.get(name, 0) + 1
    if ATTEMPTS[name] == 1:
        raise ValueError("first attempt fails")
    return name


def test_submit_result_and_chains(client: Client, cluster: Cluster) -> None:
    x = client.submit(inc, 1)
    assert isinstance(x, Future) and x.key.startswith("inc-")
    assert x.result(timeout=5) == 2
    assert x.status == "finished" and x.done()
    y = client.submit(add, x, y=x)  # the same future twice: one dependency
    z = client.submit(sum, [x, y, 10])  # nested in a list
    w = client.submit(lambda d: d["a"] * 2, {"a": z})  # nested in a dict
    assert w.result(timeout=5) == 2 * (2 + 4 + 10)
    # pure: the same call gives the same key and the same shared state
    again = client.submit(inc, 1)
    assert again.key == x.key and again._state is x._state
    assert client.submit(inc, 1, pure=False).key != x.key
    assert client.submit(inc, 5, key="mine").key == "mine"
    assert client.who_has([x])[x.key] == [cluster.worker.address]


def test_map_sends_one_graph_per_batch(client: Client, cluster: Cluster) -> None:
    before = cluster.graphs
    futures = client.map(inc, range(2000))
    assert len({f.key for f in futures}) == 2000
    # {funcname}-{token}{index:08x}: 32 hex digits, the item's index last
    assert re.fullmatch("inc-[0-9a-f]{24}00000007", futures[7].key)
    assert client.gather(futures) == list(range(1, 2001))
    assert cluster.graphs == before + 1
    # the same pure map again: same keys, nothing sent
    again = client.map(inc, range(2000))
    assert [f.key for f in again] == [f.key for f in futures]
    # batches, several iterables, kwargs and futures as items
    sums = client.map(add, range(1000), range(1000), batch_size=400)
    assert client.gather(sums)[-1] == 1998
    assert cluster.graphs == before + 4
    chained = client.map(add, futures[:3], y=100)
    assert client.gather(chained) == [101, 102, 103]
    assert re.fullmatch("add-[0-9a-f]{24}00000002", chained[2].key)  # the general path's
    assert client.map(inc, [1, 2], key=["a", "b"])[1].key == "b"
    assert client.map(inc, [1], pure=False)[0].key != client.map(inc, [1], pure=False)[0].key


def test_map_streams_chunks_that_all_land_in_order(
    client: Client, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(squall.client.submission, "MAP_CHUNK", 100)
    before = cluster.graphs
    futures = client.map(inc, range(1050))
    assert len({f.key for f in futures}) == 1050 and futures[1049].key.endswith("00000419")
    assert client.gather(futures) == list(range(1, 1051))
    assert cluster.graphs == before + 11  # one update-graph per chunk
    # Each chunk is a new FIFO generation: the map's tasks are prioritised in item order.
    priorities = [cluster.worker.priorities[f.key] for f in futures]
    assert priorities == sorted(priorities)
    # The same map again holds the same keys and sends nothing; one held key in a chunk
    # of new ones sends only the new ones.
    again = client.map(inc, range(1050))
    assert [f.key for f in again] == [f.key for f in futures] and cluster.graphs == before + 11
    mixed = client.map(inc, [1, 2, 3], key=[futures[0].key, "m1", "m2"])
    assert mixed[0]._state is futures[0]._state
    assert client.gather(mixed) == [1, 3, 4] and cluster.graphs == before + 12
    held = dict(client.futures)
    with pytest.raises(TypeError, match="unhashable"):
        client.map(inc, [1, 2], key=["fine", ["not", "hashable"]])
    assert client.futures == held
    # A user batch_size still means one update-graph per batch, whatever the chunk size.
    batched = client.map(add, range(250), range(250), batch_size=250)
    assert client.gather(batched)[-1] == 498 and cluster.graphs == before + 13
    # Futures as items and kwargs take the general path, chunked the same way.
    chained = client.map(add, futures[:250], y=1000)
    assert client.gather(chained)[249] == 1250 and cluster.graphs == before + 16
    # Iterables of several lengths (one an iterator) stop at the shortest, as zip.
    uneven = client.map(add, range(250), iter(range(10**6)))
    assert client.gather(uneven) == [2 * i for i in range(250)]
    assert cluster.graphs == before + 19 and client.map(inc) == []


def test_map_pauses_the_cyclic_gc_only_while_it_runs(client: Client) -> None:
    assert gc.isenabled()
    assert client.gather(client.map(inc, range(10))) == list(range(1, 11))
    assert gc.isenabled()
    with pytest.raises(TypeError):
        client.map(inc, [1, threading.Lock()])  # cannot be pickled
    assert gc.isenabled()
    gc.disable()
    try:
        client.map(inc, range(5))
        assert not gc.isenabled()  # the caller's choice stays
    finally:
        gc.enable()


def test_streamed_map_futures_release(
    client: Client, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(squall.client.submission, "MAP_CHUNK", 64)
    futures = client.map(inc, range(500))
    duplicates = client.map(inc, [7, 7, 8], key=["d", "d", "e"])  # two futures, key "d"
    assert duplicates[0]._state is duplicates[1]._state
    done, not_done = wait(futures + duplicates + futures[:10], timeout=5)
    assert len(done) == 503 and not not_done  # sets of futures: one per future
    assert cluster.n_tasks() == 502 and client.refcount["d"] == 2
    del futures, done
    gc.collect()
    cluster.wait_for(lambda: cluster.n_tasks() == 2)
    duplicates.pop(0)
    gc.collect()
    time.sleep(0.05)
    assert cluster.n_tasks() == 2 and client.refcount["d"] == 1
    del duplicates
    gc.collect()
    cluster.wait_for(lambda: cluster.n_tasks() == 0)
    assert client.futures == {} and client.refcount == {}
    cluster.wait_for(lambda: cluster.worker.data == {})


def test_map_states_untracked_by_the_gc_until_they_err(client: Client, cluster: Cluster) -> None:
    good, bad = client.map(div, [1, 1], [1, 0])
    assert gc.is_tracked(good) and not gc.is_tracked(good._state)
    wait([good, bad])
    assert not gc.is_tracked(good._state) and gc.is_tracked(bad._state)
    with pytest.raises(ZeroDivisionError):
        bad.result()
    # The exception's traceback holds the future (a cycle through its tracked state):
    # the collector frees it, and the key is released.
    del good, bad
    gc.collect()
    cluster.wait_for(lambda: cluster.n_tasks() == 0)
    assert client.futures == {}


def test_gather_nested_structures(client: Client) -> None:
    a, b, c = client.map(inc, [1, 2, 3])
    got = client.gather({"x": [a, (b, 7)], "y": {"z": c}, "n": None})
    assert got == {"x": [2, (3, 7)], "y": {"z": 4}, "n": None}
    assert client.gather(a) == 2
    assert list(client.gather(iter([a, b]))) == [2, 3]


def test_a_gather_larger_than_a_slice_asks_slice_by_slice(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gather asks for its keys in bounded slices; every value arrives, in order, the
    repeated futures and plain and other values alike."""
    monkeypatch.setattr(data, "GATHER_SLICE", 7)
    futures = client.map(inc, range(40))
    assert client.gather(futures) == list(range(1, 41))  # each its own key: in order
    assert client.gather(tuple(futures[:9])) == tuple(range(1, 10))
    futures += [futures[3], client.submit(list, range(3))]
    assert client.gather(futures) == [*range(1, 41), 4, [0, 1, 2]]


def test_errors_are_reraised_with_the_remote_traceback(client: Client) -> None:
    bad = client.submit(div, 1, 0)
    with pytest.raises(ZeroDivisionError) as info:
        bad.result(timeout=5)
    assert bad.status == "error"
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "Remote traceback" in notes and "return x / y" in notes
    assert any(fr.name == "div" for fr in traceback.extract_tb(info.value.__traceback__))
    assert isinstance(bad.exception(timeout=5), ZeroDivisionError)
    assert any(fr.name == "div" for fr in traceback.extract_tb(bad.traceback(timeout=5)))
    # dependents fail with the same error; gather raises it; errors="skip" drops it
    dependent = client.submit(inc, bad)
    with pytest.raises(ZeroDivisionError):
        dependent.result(timeout=5)
    good = client.submit(inc, 1)
    with pytest.raises(ZeroDivisionError):
        client.gather([good, bad])
    assert client.gather([good, bad], errors="skip") == [2]


def test_retry_reruns_a_failed_task(client: Client) -> None:
    f = client.submit(flaky, "retry-test")
    with pytest.raises(ValueError, match="first attempt"):
        f.result(timeout=5)
    f.retry()
    assert f.result(timeout=5) == "retry-test"


def test_cancel_raises_cancelled_error(client: Client) -> None:
    f = client.submit(slow, 1, 0.5)
    f.cancel()
    with pytest.raises(CancelledError):
        f.result(timeout=5)
    assert f.status == "cancelled" and f.cancelled()


def test_a_cancelled_key_made_again_is_held_by_its_new_futures(client: Client) -> None:
    f = client.submit(slow, "c", 0.3)
    f.cancel()
    g = client.submit(slow, "c", 0.3)  # the same key, a new state
    assert g.key == f.key and g._state is not f._state
    del f
    gc.collect()
    time.sleep(0.05)
    assert client.futures[g.key] is g._state and client.refcount == {g.key: 1}
    del g
    gc.collect()
    deadline = time.monotonic() + 5
    while client.futures and time.monotonic() < deadline:
        time.sleep(0.01)
    assert client.futures == {}


def test_result_timeout(client: Client) -> None:
    f = client.submit(slow, 1, 0.5)
    t0 = time.monotonic()
    with pytest.raises(squall.TimeoutError):
        f.result(timeout=0.1)
    assert time.monotonic() - t0 < 0.4
    assert f.result(timeout=5) == 1  # the computation went on


def test_releasing_futures_frees_keys_on_the_scheduler(client: Client, cluster: Cluster) -> None:
    x = client.submit(inc, 1)
    y = client.submit(inc, x)
    futures = client.map(inc, range(100))
    assert y.result(timeout=5) == 3
    client.gather(futures)
    assert cluster.n_tasks() == 102
    del x
    gc.collect()
    time.sleep(0.05)
    assert cluster.n_tasks() == 102  # y still holds its state; x is y's dependency
    y2 = Future(y.key, client)  # another Future sharing y's state
    assert y2._state is y._state
    del y, futures
    gc.collect()
    # y stays (y2); x is released but kept as the dependency of y, as in Dask
    cluster.wait_for(lambda: cluster.n_tasks() == 2)
    y2.release()
    cluster.wait_for(lambda: cluster.n_tasks() == 0)
    assert client.futures == {} and client.refcount == {}
    cluster.wait_for(lambda: cluster.worker.data == {})


def test_wait_as_completed_and_callbacks(client: Client) -> None:
    fs = [client.submit(slow, i, d) for i, d in [(0, 0.3), (1, 0.01), (2, 0.15)]]
    done, not_done = wait(fs, return_when="FIRST_COMPLETED", timeout=5)
    assert fs[1] in done and fs[0] in not_done
    with pytest.raises(squall.TimeoutError):
        wait(fs, timeout=0.01)
    assert [f.key for f in as_completed(fs)] == [fs[1].key, fs[2].key, fs[0].key]
    assert sorted(r for _, r in as_completed(fs, with_results=True)) == [0, 1, 2]
    done, not_done = wait(fs)
    assert len(done) == 3 and not not_done
    seen = threading.Event()
    fs[0].add_done_callback(lambda f: seen.set() if f.status == "finished" else None)
    assert seen.wait(5)


def test_futures_of_another_client_are_external_dependencies(
    client: Client, cluster: Cluster
) -> None:
    x = client.submit(inc, 10)
    x.result(timeout=5)
    with Client(cluster.address) as other:
        y = other.submit(inc, x)
        assert y.result(timeout=5) == 12
        with pytest.raises(ValueError, match="another client"):
            other.gather([x])


def test_task_erred_messages() -> None:
    key = encode_keys(["k"])
    erred = m.TaskErred(
        exception_text="Attempted to run task 'k' on 3 different workers",
        error_kind="KilledWorker",
        n_key=len(key),
        n_exception=0,
    )
    k, exc, tb = parse_task_erred(erred, memoryview(key))
    assert k == "k" and isinstance(exc, KilledWorker) and "3 different workers" in str(exc)
    assert tb is None
    # an exception that cannot be unpickled here still carries its text
    erred = msgspec.structs.replace(
        erred, error_kind="Remote", exception_text="Boom()", n_exception=3
    )
    _, exc, _ = parse_task_erred(erred, memoryview(key + b"bad"))
    assert "Boom()" in str(exc)


def test_asynchronous_client() -> None:
    async def main() -> None:
        server = SchedulerServer("tcp://127.0.0.1:0", {"validate": True})
        await server.start()
        worker = FakeWorker(server.address)
        await worker.start()
        async with Client(server.address, asynchronous=True) as c:
            x = c.submit(inc, 1)
            assert await x == 2
            assert await x.result() == 2
            ys = c.map(inc, [x, 5])
            assert await c.gather(ys) == [3, 6]
            bad = c.submit(div, 1, 0)
            with pytest.raises(ZeroDivisionError):
                await bad.result()
            order = [f.key async for f in as_completed([c.submit(slow, 1, 0.05), x])]
            assert order[0] == x.key
            del x, ys, bad
            gc.collect()
            for _ in range(200):
                await asyncio.sleep(0.01)
                if server.core.n_tasks == 0:
                    break
            # every future is gone, the erred one too: its exception's traceback holds no
            # frame of squall's (which held the future in a cycle)
            assert server.core.n_tasks == 0
        await asyncio.sleep(0.05)
        assert server.clients == {}
        await worker.close()
        await server.close()

    asyncio.run(asyncio.wait_for(main(), 15))
