"""Actors on real multi-process clusters (docs/actors.md), after what distributed's
own actor tests describe: a counter's method calls and attribute reads, handles passed
into tasks, many calls, ``async def`` methods, ``map(actor=True)``, ``compute(actors=)``,
an actor lost with its worker, and an actor never moved by stealing or retirement."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Iterator

import cloudpickle  # type: ignore[import-untyped]
import dask
import pytest

import squall
from squall import Actor, ActorFuture, BaseActorFuture

# Workers cannot import this module: its classes and functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Counter:
    n = 0

    def __init__(self, start: int = 0) -> None:
        self.n = start

    def increment(self, by: int = 1) -> int:
        self.n += by
        return self.n

    async def ainc(self) -> int:
        await asyncio.sleep(0)
        self.n += 1
        return self.n

    def fail(self) -> None:
        raise ZeroDivisionError("counted wrong")

    def where(self) -> int:
        return os.getpid()


@pytest.fixture(scope="module")
def client() -> Iterator[squall.Client]:
    with (
        squall.LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster,
        squall.Client(cluster) as c,
    ):
        yield c


def test_counter_calls_and_attributes(client: squall.Client) -> None:
    future = client.submit(Counter, 10, actor=True)
    counter = future.result(timeout=30)
    assert isinstance(counter, Actor)
    assert repr(counter).startswith("<Actor: Counter, key=Counter-")
    assert "increment" in dir(counter)
    call = counter.increment()
    assert isinstance(call, ActorFuture) and isinstance(call, BaseActorFuture)
    assert call.result(timeout=10) == 11
    assert call.done()
    assert counter.increment(by=5).result(timeout=10) == 16
    assert counter.n == 16  # a read blocks on a synchronous client
    with pytest.raises(ZeroDivisionError, match="counted wrong"):
        counter.fail().result(timeout=10)
    with pytest.raises(AttributeError):
        _ = counter.missing


def test_submissions_of_an_actor_are_distinct(client: squall.Client) -> None:
    a, b = client.submit(Counter, actor=True), client.submit(Counter, actor=True)
    assert a.key != b.key  # stateful: never pure
    ca, cb = a.result(timeout=30), b.result(timeout=30)
    ca.increment().result(timeout=10)
    assert (ca.n, cb.n) == (1, 0)


def test_async_methods(client: squall.Client) -> None:
    counter = client.submit(Counter, actor=True).result(timeout=30)
    calls = [counter.ainc() for _ in range(20)]
    assert sorted(c.result(timeout=10) for c in calls) == list(range(1, 21))


def test_many_calls_keep_their_order(client: squall.Client) -> None:
    counter = client.submit(Counter, actor=True).result(timeout=30)
    calls = [counter.increment() for _ in range(500)]
    assert [c.result(timeout=30) for c in calls] == list(range(1, 501))
    assert counter.n == 500


def test_actor_passed_into_tasks(client: squall.Client) -> None:
    """Tasks on both workers get a handle and call the actor's worker."""
    future = client.submit(Counter, actor=True)

    def bump(counter: Actor, i: int) -> int:
        assert isinstance(counter, Actor)
        for _ in range(3):
            counter.increment().result()
        return int(counter.n)

    workers = list(client.scheduler_info()["workers"])
    done = [client.submit(bump, future, i, workers=[workers[i % 2]], pure=False) for i in range(4)]
    assert len({f.result(timeout=30) for f in done}) >= 1
    assert future.result(timeout=10).n == 12


def test_actor_calling_an_actor_on_its_own_worker(client: squall.Client) -> None:
    class Caller:
        def __init__(self, other: Actor) -> None:
            self.other = other

        def call(self) -> int:
            return int(self.other.increment().result())

    worker = next(iter(client.scheduler_info()["workers"]))
    target = client.submit(Counter, actor=True, workers=[worker])
    caller = client.submit(Caller, target, actor=True, workers=[worker]).result(timeout=30)
    assert caller.call().result(timeout=10) == 1
    assert caller.call().result(timeout=10) == 2


def test_map_actors_spread_over_workers(client: squall.Client) -> None:
    futures = client.map(Counter, range(6), actor=True)
    counters = client.gather(futures)
    assert all(isinstance(c, Actor) for c in counters)
    assert [c.increment().result(timeout=10) for c in counters] == list(range(1, 7))
    assert len({c.where().result(timeout=10) for c in counters}) == 2


def test_compute_with_actors(client: squall.Client) -> None:
    """``compute(actors=)`` on a delayed graph: tasks depending on the actor get a handle."""

    @dask.delayed
    def work(n: int, counter: Actor) -> None:
        for _ in range(n):
            counter.increment().result()

    @dask.delayed
    def total(counter: Actor, done: list[None]) -> int:
        return int(counter.n)

    counter = dask.delayed(Counter)()
    final = total(counter, [work(i, counter) for i in range(5)])
    assert client.compute(final, actors=counter.__dask_keys__()).result(timeout=60) == 10


def test_async_client(client: squall.Client) -> None:
    async def main() -> None:
        async with squall.Client(client.address, asynchronous=True) as c:
            counter = await c.submit(Counter, actor=True)
            assert await counter.increment() == 1
            assert await counter.ainc() == 2
            assert await counter.n == 2  # a read is awaited on an asynchronous client

    asyncio.run(asyncio.wait_for(main(), 60))


def test_actor_never_moved_by_retirement() -> None:
    with (
        squall.LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster,
        squall.Client(cluster) as c,
    ):
        a = next(iter(c.scheduler_info()["workers"]))
        future = c.submit(Counter, actor=True, workers=[a])
        counter = future.result(timeout=30)
        counter.increment().result(timeout=10)
        out = c.retire_workers([a])
        assert a in c.scheduler_info()["workers"], out
        assert list(c.who_has([future])[future.key]) == [a]
        assert counter.increment().result(timeout=10) == 2


def test_actor_lost_with_its_killed_worker() -> None:
    with (
        squall.LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster,
        squall.Client(cluster) as c,
    ):
        future = c.submit(Counter, actor=True)
        counter = future.result(timeout=30)
        pid = counter.where().result(timeout=10)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while future.status != "error" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert future.status == "error"
        with pytest.raises(RuntimeError, match="Worker holding Actor was lost"):
            future.result(timeout=10)
        with pytest.raises(RuntimeError, match="Worker holding Actor was lost"):
            counter.increment()
