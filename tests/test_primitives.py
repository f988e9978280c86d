"""The coordination primitives on real multi-process clusters (docs/primitives.md):
Lock, Semaphore, MultiLock, Event, Variable, Queue — from the client, from tasks, across
clients, with timeouts, futures inside values, and holders that close or die."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import sys
import time
from collections.abc import Iterator

import cloudpickle
import pytest

import squall
from squall import Event, Lock, MultiLock, Queue, Semaphore, Variable

WAIT = 30  # the bound of every wait that should succeed

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def client() -> Iterator[squall.Client]:
    with (
        squall.LocalCluster(n_workers=2, threads_per_worker=2) as cluster,
        squall.Client(cluster) as c,
    ):
        yield c


def hold_for(name: str, seconds: float) -> tuple[float, float]:
    """A task: hold the lock ``name`` for ``seconds``; when it held it."""
    with Lock(name):
        start = time.monotonic()
        time.sleep(seconds)
        return start, time.monotonic()


def overlaps(spans: list[tuple[float, float]]) -> int:
    """The most spans open at once."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, d in edges:
        now += d
        most = max(most, now)
    return most


# ----- Lock -----------------------------------------------------------------------------


def test_lock(client: squall.Client) -> None:
    a, b = Lock("x"), Lock("x")
    assert not a.locked()
    assert a.acquire(timeout=WAIT) is True
    assert a.locked() and b.locked()
    assert b.acquire(timeout=0.2) is False
    assert b.acquire(blocking=False) is False
    with pytest.raises(ValueError, match="non-blocking"):
        b.acquire(blocking=False, timeout=1)
    start = time.monotonic()
    assert b.acquire(timeout="300ms") is False
    assert time.monotonic() - start >= 0.25
    a.release()
    assert b.acquire(timeout=WAIT) is True
    b.release()
    with pytest.raises(RuntimeError, match="Released too often"):
        b.release()
    with Lock("x"):
        assert Lock("x").locked()
    assert not Lock("x").locked()


def test_lock_excludes_tasks(client: squall.Client) -> None:
    futures = client.map(hold_for, ["y"] * 6, [0.05] * 6, pure=False)
    assert overlaps(client.gather(futures)) == 1


def test_lock_pickles_by_name() -> None:
    lock = pickle.loads(pickle.dumps(Lock("z")))
    assert isinstance(lock, Lock) and lock.name == "z" and lock.max_leases == 1


def test_lock_released_when_its_client_closes(client: squall.Client) -> None:
    with squall.Client(client.scheduler_info()["address"]) as other:
        held = Lock("held-by-other")  # bound to the default client: ``other``
        assert held.acquire(timeout=WAIT)
        assert held._bound.client is other
    taker = Lock("held-by-other")
    assert taker.acquire(timeout=WAIT)
    assert taker._bound.client is client


# ----- Semaphore ------------------------------------------------------------------------


def hold_lease(sem: Semaphore, seconds: float) -> tuple[float, float]:
    with sem:
        start = time.monotonic()
        time.sleep(seconds)
        return start, time.monotonic()


def test_semaphore(client: squall.Client) -> None:
    sem = Semaphore(max_leases=2, name="s")
    assert sem.acquire(timeout=WAIT) and sem.acquire(timeout=WAIT)
    assert sem.get_value() == 2
    assert Semaphore(2, "s").acquire(timeout=0.1) is False
    assert sem.release() is True
    assert sem.get_value() == 1
    sem.release()
    with pytest.raises(RuntimeError, match="Inconsistent max leases"):
        Semaphore(3, "s").acquire(timeout=1)
    sem.close()
    assert Semaphore(3, "s").acquire(timeout=1)  # a closed name is free again


def test_semaphore_bounds_tasks(client: squall.Client) -> None:
    sem = Semaphore(max_leases=2, name="tasks")
    futures = client.map(hold_lease, [sem] * 8, [0.1] * 8, pure=False)
    assert overlaps(client.gather(futures)) <= 2
    assert sem.get_value() == 0


def test_semaphore_pickles_with_max_leases() -> None:
    sem = pickle.loads(pickle.dumps(Semaphore(3, "p")))
    assert (sem.name, sem.max_leases) == ("p", 3)


# ----- MultiLock ------------------------------------------------------------------------


def test_multi_lock(client: squall.Client) -> None:
    ab, bc, c = MultiLock(["a", "b"]), MultiLock(["b", "c"]), MultiLock(["c"])
    assert ab.acquire(timeout=WAIT) and ab.locked()
    assert bc.acquire(timeout=0.1) is False and not bc.locked()
    assert c.acquire(timeout=WAIT)  # c is free: bc gave up its place
    assert MultiLock(["b", "c"]).acquire(blocking=False) is False
    assert MultiLock(["a", "c", "d"]).acquire(timeout=WAIT, num_locks=1)
    ab.release()
    c.release()
    with pytest.raises(ValueError, match="not yet acquired"):
        ab.release()
    assert bc.acquire(timeout=WAIT)
    bc.release()
    # Lock's namespace is another.
    with MultiLock(["a"]):
        assert Lock("a").acquire(timeout=WAIT)


def multi_hold(names: list[str]) -> tuple[float, float]:
    with MultiLock(names):
        start = time.monotonic()
        time.sleep(0.05)
        return start, time.monotonic()


def test_multi_lock_in_tasks(client: squall.Client) -> None:
    sets = [["m1", "m2"], ["m2", "m3"], ["m3", "m1"]] * 2
    spans = client.gather(client.map(multi_hold, sets, pure=False))
    assert overlaps(spans) == 1  # every two sets overlap
    assert pickle.loads(pickle.dumps(MultiLock(["q"]))).names == ["q"]


# ----- Event ----------------------------------------------------------------------------


def wait_for_event(event: Event) -> bool:
    return bool(event.wait(timeout=WAIT))


def test_event(client: squall.Client) -> None:
    e = Event("go")
    assert not e.is_set()
    assert e.wait(timeout=0.1) is False
    waiters = client.map(wait_for_event, [e] * 3, pure=False)
    time.sleep(0.2)
    assert not any(f.done() for f in waiters)
    e.set()
    assert client.gather(waiters) == [True] * 3
    assert Event("go").is_set() and Event("go").wait(timeout=0) is True
    e.clear()
    assert not e.is_set() and e.wait(timeout="100ms") is False
    assert pickle.loads(pickle.dumps(e)).name == "go"


# ----- Variable -------------------------------------------------------------------------


def inc(x: int) -> int:
    return x + 1


def test_variable(client: squall.Client) -> None:
    v = Variable("v")
    with pytest.raises(squall.TimeoutError):
        v.get(timeout=0.1)
    v.set({"a": [1, 2]})
    assert v.get() == {"a": [1, 2]}
    assert Variable("v").get(timeout=1) == {"a": [1, 2]}
    v.delete()
    eventually_raises_timeout(v)
    assert pickle.loads(pickle.dumps(v)).name == "v"


def eventually_raises_timeout(v: Variable) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            v.get(timeout=0.05)
        except squall.TimeoutError:
            return
    raise AssertionError("the variable was not deleted")


def test_variable_get_waits_for_set(client: squall.Client) -> None:
    def later() -> None:
        time.sleep(0.2)
        Variable("later").set(7)

    f = client.submit(later, pure=False)
    assert Variable("later").get(timeout=WAIT) == 7
    f.result()


def test_variable_keeps_its_future_alive(client: squall.Client) -> None:
    address = client.scheduler_info()["address"]
    with squall.Client(address, set_as_default=False) as setter:
        v = Variable("fut", client=setter)
        future = setter.submit(inc, 41)
        v.set(future)
        del future
    got = Variable("fut").get(timeout=WAIT)
    assert isinstance(got, squall.Future) and got.client is client
    assert got.result(timeout=WAIT) == 42
    Variable("fut").set([got, 1])  # inside a container too
    again = Variable("fut").get(timeout=WAIT)
    assert again[0].key == got.key and again[1] == 1


def set_from_task(name: str) -> None:
    client = squall.get_client()
    Variable(name).set(client.submit(inc, 1, pure=False))


def test_variable_from_tasks(client: squall.Client) -> None:
    client.submit(set_from_task, "from-task").result(timeout=WAIT)
    assert Variable("from-task").get(timeout=WAIT).result(timeout=WAIT) == 2


# ----- Queue ----------------------------------------------------------------------------


def test_queue(client: squall.Client) -> None:
    q = Queue("q")
    for i in range(5):
        q.put(i)
    assert q.qsize() == 5
    assert q.get() == 0
    assert q.get(batch=2) == [1, 2]
    assert q.get(batch=True) == [3, 4]
    assert q.get(batch=True) == []
    with pytest.raises(squall.TimeoutError):
        q.get(timeout=0.1)
    with pytest.raises(NotImplementedError):
        q.get(batch=2, timeout=1)
    bounded = Queue("bounded", maxsize=1)
    bounded.put(1)
    with pytest.raises(squall.TimeoutError):
        bounded.put(2, timeout="100ms")
    assert bounded.get() == 1
    restored = pickle.loads(pickle.dumps(bounded))
    assert (restored.name, restored.maxsize) == ("bounded", 1)


def produce(q: Queue, n: int) -> None:
    for i in range(n):
        q.put(i)


def consume(q: Queue, n: int) -> int:
    return sum(q.get(timeout=WAIT) for _ in range(n))


def test_queue_between_tasks(client: squall.Client) -> None:
    q = Queue("tasks", maxsize=2)
    consumers = client.map(consume, [q] * 2, [10, 10], pure=False)
    producers = client.map(produce, [q] * 2, [10, 10], pure=False)
    client.gather(producers)
    assert sum(client.gather(consumers)) == 2 * sum(range(10))


def test_queue_futures(client: squall.Client) -> None:
    address = client.scheduler_info()["address"]
    q = Queue("futures")
    with squall.Client(address, set_as_default=False) as putter:
        theirs = Queue("futures", client=putter)
        theirs.put(putter.submit(inc, 1))
        theirs.put({"f": putter.submit(inc, 2)})
    first = q.get(timeout=WAIT)
    assert first.client is client and first.result(timeout=WAIT) == 2
    assert q.get(timeout=WAIT)["f"].result(timeout=WAIT) == 3


# ----- asynchronous clients -------------------------------------------------------------


def test_asynchronous_client(client: squall.Client) -> None:
    address = client.scheduler_info()["address"]

    async def main() -> None:
        async with squall.Client(address, asynchronous=True) as c:
            lock = Lock("async")  # bound to the default client: ``c``
            assert await lock.acquire(timeout=WAIT)
            assert await lock.locked()
            await lock.release()
            e = Event("async", client=c)
            await e.set()
            assert await e.wait(timeout=WAIT)
            v = Variable("async", client=c)
            await v.set(3)
            assert await v.get() == 3
            q = Queue("async", client=c)
            await q.put(1)
            assert await q.qsize() == 1
            assert await q.get() == 1

    asyncio.run(main())


# ----- holders that die -----------------------------------------------------------------


def hold_until_killed(primitive: Semaphore, name: str) -> None:
    """A task: take a lease, say where it runs, then hold it until the test ends."""
    primitive.acquire()
    Variable(name).set(os.getpid())
    Event(f"{name}-done").wait(timeout=WAIT * 2)


def take(primitive: Semaphore) -> bool:
    ok = bool(primitive.acquire(timeout=WAIT))
    primitive.release()
    return ok


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_lease_comes_back_when_its_worker_is_killed(kind: str) -> None:
    name = f"killed-{kind}"
    primitive = Lock(name) if kind == "lock" else Semaphore(1, name)
    with (
        squall.LocalCluster(n_workers=2, threads_per_worker=1) as cluster,
        squall.Client(cluster) as c,
    ):
        c.wait_for_workers(2, timeout=WAIT)
        a, b = sorted(c.scheduler_info()["workers"])
        holder = c.submit(hold_until_killed, primitive, name, workers=[a], pure=False)
        pid = Variable(name).get(timeout=WAIT)
        waiter = c.submit(take, primitive, workers=[b], pure=False)
        time.sleep(0.2)
        assert not waiter.done()
        start = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        assert waiter.result(timeout=WAIT) is True
        assert time.monotonic() - start < 15
        Event(f"{name}-done").set()
        del holder
