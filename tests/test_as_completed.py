"""``as_completed`` over real processes, as distributed's test_as_completed.py describes
it (what tests/test_client.py and tests/test_client_api.py do not already check)."""

from __future__ import annotations

import asyncio
import random
import sys
import time
from operator import add

import cloudpickle  # type: ignore[import-untyped]
import pytest

import squall
from squall import Client, LocalCluster, as_completed, wait
from squall.errors import CancelledError

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def inc(x: int) -> int:
    return x + 1


def slowinc(x: int, delay: float = 0.1) -> int:
    time.sleep(delay)
    return x + 1


def throws(x: object) -> None:
    raise RuntimeError("hello!")


def test_add_while_iterating(client: Client) -> None:
    total = 0
    expected = sum(map(inc, range(10)))
    ac = as_completed(client.map(inc, range(10)), timeout=30)
    for future in ac:
        result = future.result()
        total += result
        if random.random() < 0.5:
            ac.add(client.submit(add, future, 10))
            expected += result + 10
    assert total == expected


def test_update_and_next_batch(client: Client) -> None:
    total = 0
    todo = list(range(10))
    ac = as_completed([], timeout=30)
    while todo or not ac.is_empty():
        if todo:
            work, todo = todo[:4], todo[4:]
            ac.update(client.map(inc, work))
        total += sum(f.result() for f in ac.next_batch(block=True))
    assert total == sum(map(inc, range(10)))
    assert ac.next_batch(block=False) == []


def test_batches(client: Client) -> None:
    futures = client.map(slowinc, range(6), delay=0.05)
    seen = [f for batch in as_completed(futures, timeout=30).batches() for f in batch]
    assert sorted(f.key for f in seen) == sorted(f.key for f in futures)


def test_repeats_and_is_empty(client: Client) -> None:
    ac = as_completed()
    assert ac.is_empty() and ac.count() == 0
    x = client.submit(inc, 1)
    ac.add(x)
    ac.add(x)
    assert not ac.is_empty()
    assert next(ac) is x and next(ac) is x
    with pytest.raises(StopIteration):
        next(ac)
    assert ac.is_empty()
    ac.add(x)
    assert next(ac) is x


def test_cancelled_futures_are_yielded(client: Client) -> None:
    x = client.submit(slowinc, 1, 1.0, pure=False)
    y = client.submit(inc, 1)
    ac = as_completed([x, y], timeout=30)
    x.cancel()
    assert {next(ac), next(ac)} == {x, y}
    res = list(as_completed([x, y, x], timeout=30))
    assert len(res) == 3 and res.count(x) == 2


def test_with_results(client: Client) -> None:
    x = client.submit(throws, 1)
    y = client.submit(slowinc, 5, 1.0, pure=False)
    z = client.submit(inc, 1)
    y.cancel()
    with pytest.raises(RuntimeError, match="hello!"):
        list(as_completed([x, y, z], with_results=True, timeout=30))

    got = {f: r for f, r in as_completed([x, y, z], with_results=True, raise_errors=False)}
    assert isinstance(got[y], CancelledError)
    assert isinstance(got[x][1], RuntimeError)
    assert got[z] == 2


def test_errors_are_yielded(client: Client) -> None:
    x = client.submit(throws, 1)
    y = client.submit(inc, 1)
    assert set(as_completed([x, y], timeout=30)) == {x, y}
    assert x.status == "error" and y.status == "finished"


def test_repr(client: Client) -> None:
    futures = client.map(slowinc, range(3), delay=0.3)
    ac = as_completed(futures, timeout=30)
    assert "waiting=3" in repr(ac) and "done=0" in str(ac)
    wait(futures, timeout=30)
    deadline = time.monotonic() + 10
    while "done=3" not in repr(ac):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert "waiting=0" in repr(ac)


def test_clear(client: Client) -> None:
    futures = client.map(inc, range(3))
    ac = as_completed(futures)
    wait(futures, timeout=30)
    ac.clear()
    assert ac.is_empty()
    with pytest.raises(StopIteration):
        next(ac)


def test_async_iteration(cluster: LocalCluster) -> None:
    asyncio.run(asyncio.wait_for(_async_iteration(cluster.scheduler_address), 60))


async def _async_iteration(address: str) -> None:
    async with Client(address, asynchronous=True) as c:
        futures = c.map(slowinc, range(3), delay=0.01, pure=False)
        got = [f async for f in as_completed(futures, timeout=30)]
        assert {f.key for f in got} == {f.key for f in futures}
        assert all(f.done() for f in got)

        x, y = c.submit(throws, 1), c.submit(inc, 1)
        assert {f async for f in as_completed([x, y], timeout=30)} == {x, y}

        slow = c.submit(slowinc, 1, 2.0, pure=False)
        ac = as_completed([c.submit(inc, 5), slow], timeout=0.5)
        await ac.__anext__()
        with pytest.raises(squall.TimeoutError):
            await ac.__anext__()

        futures = c.map(inc, range(3))
        ac = as_completed(futures)
        await wait(futures)
        ac.clear()
        with pytest.raises(StopAsyncIteration):
            await ac.__anext__()
