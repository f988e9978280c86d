"""The task stream (docs/runtime.md#task-stream): sampled in the workers' task loops,
sent in heartbeats, kept by the scheduler, read with ``get_task_stream`` and
``performance_report``; and the load figures of heartbeats."""

from __future__ import annotations

import asyncio
import gzip
import itertools
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import dask
import pytest

from squall import Client, LocalCluster, get_task_stream, performance_report, wait
from squall._core import encode_keys
from squall.protocol import messages as m
from squall.scheduler.task_stream import TaskStream

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def inc(x: int) -> int:
    return x + 1


def as_array(x: int) -> Any:
    import numpy as np

    return np.arange(x)


def nap(x: int) -> int:
    time.sleep(0.01)
    return x


def boom(x: int) -> int:
    raise ValueError(x)


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    """Two worker processes of two threads; at most 200 tasks per heartbeat recorded."""
    with (
        dask.config.set({"squall.diagnostics.task-stream.samples": 200}),
        LocalCluster(n_workers=2, threads_per_worker=2) as cluster,
        Client(cluster) as c,
    ):
        yield c


def test_the_stream_holds_what_ran_where_and_when(client: Client) -> None:
    workers = set(client.nthreads())
    before = time.time()
    with get_task_stream(client) as ts:
        futures = client.map(nap, range(20), key=[("nap", i) for i in range(20)])
        client.gather(futures)
        bad = client.submit(boom, 1, key="boom-1")
        with pytest.raises(ValueError):
            bad.result(timeout=10)
    after = time.time()
    by_key = {r["key"]: r for r in ts.data}
    assert set(by_key) == {("nap", i) for i in range(20)} | {"boom-1"}
    assert len(ts.data) == 21  # below the sampling bound every task has its record
    for r in ts.data:
        (compute,) = r["startstops"]
        assert compute["action"] == "compute"
        assert before <= compute["start"] < compute["stop"] <= after
        assert r["worker"] in workers
        assert r["prefix"] == ("boom" if r["key"] == "boom-1" else "nap")
    assert by_key["boom-1"]["status"] == "error"
    assert {r["status"] for k, r in by_key.items() if k != "boom-1"} == {"OK"}
    # The result's size and type, as distributed's records give them.
    assert {(r["typename"], r["nbytes"] > 0) for k, r in by_key.items() if k != "boom-1"} == {
        ("int", True)
    }
    assert (by_key["boom-1"]["nbytes"], by_key["boom-1"]["typename"]) == (0, "")
    with get_task_stream(client) as arrays:
        client.submit(as_array, 100, key="an-array").result()
    [r] = arrays.data
    assert r["typename"] == "numpy.ndarray" and r["nbytes"] >= 800  # dask.utils.typename
    for worker in workers:
        threads = {r["thread"] for r in ts.data if r["worker"] == worker}
        assert threads <= {0, 1}, threads  # two task threads each, numbered from 0
    # Each thread runs one task at a time: its records do not overlap.
    for row in {(r["worker"], r["thread"]) for r in ts.data}:
        spans = sorted(
            (r["startstops"][0]["start"], r["startstops"][0]["stop"])
            for r in ts.data
            if (r["worker"], r["thread"]) == row
        )
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))


def test_get_task_stream_windows(client: Client) -> None:
    first = client.map(nap, range(4), key=[f"first-{i}" for i in range(4)])
    client.gather(first)
    middle = time.time()
    time.sleep(0.05)
    second = client.map(nap, range(4), key=[f"second-{i}" for i in range(4)])
    client.gather(second)
    keys = {f.key for f in second}
    assert {r["key"] for r in client.get_task_stream(start=middle)} == keys
    earlier = {r["key"] for r in client.get_task_stream(stop=middle)}
    assert {f.key for f in first} <= earlier and not keys & earlier
    assert {r["key"] for r in client.get_task_stream(start="1 minute", count=100)} >= keys
    last = client.get_task_stream(count=3)
    assert len(last) == 3 and all(r["key"] in keys for r in last)
    after = client.get_task_stream(start=middle)
    assert client.get_task_stream(start=middle, count=2) == after[:2]
    with pytest.raises(ValueError, match="plot='save'"):
        client.get_task_stream(plot=True)


def test_many_tiny_tasks_are_sampled_within_the_bound(client: Client) -> None:
    n = 50_000
    begun = client.sync(client.task_stream.read, {"count": 0})
    start = time.monotonic()
    client.gather(client.map(inc, range(n), pure=False))
    ended = client.sync(client.task_stream.read, {"cursor": begun.cursor})
    elapsed = time.monotonic() - start
    assert ended.tasks - begun.tasks == n  # the samples stand for every task
    # At most 200 records per worker and heartbeat (0.5 s apart), plus the flush's.
    heartbeats = 2 * (elapsed / 0.5 + 3)
    assert 0 < len(ended.records) <= 200 * heartbeats < n / 2
    assert {r["prefix"] for r in ended.records} == {"inc"}
    # The context manager says when its records are a sample.
    with (
        pytest.warns(UserWarning, match=r"records stand for the 20000 tasks") as caught,
        get_task_stream(client) as ts,
    ):
        client.gather(client.map(inc, range(20_000), pure=False))
    assert ts.tasks == 20_000 and len(ts.data) < 20_000
    assert str(len(ts.data)) in str(caught[0].message)
    assert ts.figure is None


def test_performance_report_is_one_self_contained_file(client: Client, tmp_path: Path) -> None:
    path = tmp_path / "report.html"
    with performance_report(filename=str(path)):
        client.gather(client.map(nap, range(8), key=[("load-part", i) for i in range(8)]))
        client.gather(client.map(inc, range(8), key=[f"finish-{i}" for i in range(8)]))
    page = path.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "load-part" in page and "finish" in page  # the stream and the prefix table
    assert "16 task records" in page
    markup = re.sub(r"<pre>.*?</pre>", "", page, flags=re.S)  # the calling code aside
    assert "<script" not in markup and "src=" not in markup and "href=" not in markup
    assert page.count("<polyline") >= 2 * len(client.nthreads())  # memory over time
    # The calling code, as distributed's: the source of the function that opened it.
    assert "def test_performance_report_is_one_self_contained_file" in page
    # Where fsspec writes, compressed by the extension, distributed's arguments taken.
    gz = tmp_path / "report.html.gz"
    with performance_report(str(gz), 1, mode="inline", storage_options={}):
        client.submit(inc, 1, key="gzipped").result()
    assert "gzipped" in gzip.decompress(gz.read_bytes()).decode()


def test_async_clients_and_a_saved_page(client: Client, tmp_path: Path) -> None:
    page, report = tmp_path / "stream.html", tmp_path / "report.html"

    async def main() -> list[dict[str, object]]:
        async with Client(client.address, asynchronous=True) as c:
            async with get_task_stream(c, plot="save", filename=str(page)) as ts:
                await c.gather(c.map(inc, range(3), key=[f"async-{i}" for i in range(3)]))
            async with performance_report(filename=str(report), client=c):
                await c.submit(inc, 1, key="in-report")
            assert {r["key"] for r in await c.get_task_stream(count=1)} == {"in-report"}
            return ts.data

    data = asyncio.run(main())
    assert {r["key"] for r in data} == {"async-0", "async-1", "async-2"}
    assert "async" in page.read_text() and "in-report" in report.read_text()
    assert "async def main()" in report.read_text(), "the calling coroutine's code"


def test_worker_load_figures() -> None:
    with (
        LocalCluster(processes=False, n_workers=1, threads_per_worker=2) as cluster,
        Client(cluster) as c,
    ):
        futures = c.map(inc, range(5))
        c.gather(futures)
        embedded = cluster._embedded
        assert embedded is not None
        (worker,) = embedded.workers

        async def figures() -> dict[str, float]:
            return worker._load.figures(worker._core)

        load = embedded.call(figures())
        assert load["cpu"] >= 0 and load["read_bps"] >= 0 and load["write_bps"] >= 0
        assert (load["executing"], load["ready"], load["in_flight"]) == (0, 0, 0)
        assert load["in_memory"] == 5


def test_the_ring_keeps_the_newest_and_counts_what_it_stands_for() -> None:
    now = [100.0]
    ts = TaskStream(capacity=4, clock=lambda: now[0])
    ts.add("tcp://a:1", [(("x", i), i, i + 0.5, 0, True, 28, "int") for i in range(3)], 3)
    assert ts.cursor == 3 and ts.sampled_fraction() == 1.0
    ts.add("tcp://b:1", [("y", 10.0, 11.0, 1, False, 0, "")], 10)
    assert ts.tasks == 13 and ts.sampled_fraction() == 4 / 13
    cursor, records = ts.since(0)
    assert cursor == 4 and [r["key"] for r in records] == [("x", 0), ("x", 1), ("x", 2), "y"]
    assert records[-1]["status"] == "error" and records[-1]["prefix"] == "y"
    assert (records[0]["nbytes"], records[0]["typename"]) == (28, "int")
    ts.add("tcp://a:1", [("z", 20.0, 21.0, 0, True, 8, "float")], 1)
    assert [r["key"] for r in ts.since(0)[1]] == [("x", 1), ("x", 2), "y", "z"]  # ring of 4
    assert ts.since(4) == (5, ts.window(start=15))
    assert [r["key"] for r in ts.since(2, limit=1)[1]] == ["z"]
    assert [r["key"] for r in ts.window(stop=11.0)] == [("x", 1), ("x", 2)]
    assert [r["key"] for r in ts.window(count=2)] == ["y", "z"]
    assert [r["key"] for r in ts.window(start=1.6, count=1)] == [("x", 2)]
    now[0] += 60  # the rate forgets old heartbeats
    ts.add("tcp://a:1", [], 0)
    assert ts.sampled_fraction() == 1.0


def test_a_heartbeat_whose_keys_and_samples_disagree_is_malformed() -> None:
    ts = TaskStream(capacity=10)
    with pytest.raises(ValueError, match="2 keys for 1 samples"):
        beat = m.Heartbeat(stream=[(1.0, 2.0, 0, True, 8, "float")], stream_tasks=1)
        ts.add_heartbeat("tcp://a:1", beat, encode_keys(["a", "b"]))
    # Fewer tasks than samples, or more than a worker runs: the totals sent to clients
    # must stay within the protocol's integers.
    for tasks in (0, -1, 2**32, 2**63 - 1):
        with pytest.raises(ValueError, match=f"{tasks} tasks for 1 samples"):
            beat = m.Heartbeat(stream=[(1.0, 2.0, 0, True, 8, "float")], stream_tasks=tasks)
            ts.add_heartbeat("tcp://a:1", beat, encode_keys(["a"]))
    with pytest.raises(ValueError, match="-1 tasks for 0 samples"):
        ts.add_heartbeat("tcp://a:1", m.Heartbeat(stream_tasks=-1), b"")
    ts.add_heartbeat("tcp://a:1", m.Heartbeat(), b"")
    assert ts.tasks == 0
    assert ts.cursor == 0


def test_waiting_for_heartbeats_is_bounded() -> None:
    async def run() -> None:
        ts = TaskStream(capacity=10)
        workers = ["tcp://a:1", "tcp://b:1"]
        assert not await ts.heard_from(lambda: workers, 0.05)
        waiting = asyncio.ensure_future(ts.heard_from(lambda: workers, 5))
        await asyncio.sleep(0)
        ts.add_heartbeat("tcp://a:1", m.Heartbeat(), b"")
        await asyncio.sleep(0.01)
        assert not waiting.done()
        workers.pop()  # b left: not waited for any more
        ts.add_heartbeat("tcp://a:1", m.Heartbeat(), b"")
        assert await asyncio.wait_for(waiting, 1)

    asyncio.run(run())


def slow_typed_result() -> object:
    """A result whose type takes a second to name: the worker names it for the task
    stream while its task thread holds the machine's lock, with the GIL released."""

    class SlowNamed(type):
        @property
        def __module__(cls) -> str:  # type: ignore[override]
            time.sleep(1.0)
            return "slow"

    return SlowNamed("Odd", (), {})()


def test_a_slow_result_type_does_not_deadlock_the_worker() -> None:
    """The worker's event loop calls into the machine (heartbeats, new tasks) while a
    task thread names a result under the lock; waiting for the lock with the GIL held
    would hang both threads for good."""
    with LocalCluster(n_workers=1, threads_per_worker=1) as cluster, Client(cluster) as c:
        odd = c.submit(slow_typed_result, pure=False)
        later = c.map(inc, range(20))
        done, _ = wait([odd, *later], timeout=30)
        assert len(done) == 21
        assert c.gather(later) == list(range(1, 21))
        assert [r["key"] for r in c.get_task_stream(count=100) if r["key"] == odd.key]
