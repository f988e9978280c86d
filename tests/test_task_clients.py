"""Tasks that use the cluster, over real processes: dask calls made in a task,
``worker_client``/``local_client``, ``futures_of``, the current client,
``normalize_collection``, ``Reschedule``, ``span`` and ``get_task_metadata``
(docs/runtime.md#tasks-that-use-the-cluster). Ported from the behaviour distributed's
test_worker_client.py, test_reschedule.py and test_spans.py describe."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import dask
import dask.array as da
import dask.dataframe as dd
import pandas as pd
import pytest

import squall
from squall import (
    Client,
    Future,
    LocalCluster,
    Reschedule,
    default_client,
    futures_of,
    get_task_metadata,
    get_worker,
    local_client,
    secede,
    span,
    wait,
    worker_client,
)
from squall.errors import CancelledError

# Worker processes cannot import this test module: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def inc(x: int) -> int:
    return x + 1


def double(x: int) -> int:
    return 2 * x


# The tests use conftest's cluster: one thread per worker, so a task waiting on tasks it
# submitted would deadlock its worker unless it secedes.


# ----- dask calls made in a task go to the cluster ------------------------------------------


def test_dataframe_of_futures_computed_in_a_task(client: Client) -> None:
    """The issue's case: a persisted dataframe, scattered, computed inside a task (dask's
    local scheduler would miss the futures' keys)."""
    df = pd.DataFrame({"x": range(10), "y": list("abcdefghij")})
    ddf = dd.from_pandas(df, npartitions=2).persist()
    future = client.scatter(ddf)
    out = client.submit(lambda x: x.compute(), future).result(timeout=60)
    pd.testing.assert_frame_equal(out, ddf.compute())

    def persist_then_compute(x: Any) -> tuple[int, Any]:
        y = (x.x + 1).persist()
        return len(futures_of(y)), y.compute()

    n, total = client.submit(persist_then_compute, future).result(timeout=60)
    assert n == 2
    pd.testing.assert_series_equal(total, df.x + 1)


def test_array_of_futures_computed_in_a_task(client: Client) -> None:
    x = client.persist(da.random.uniform(size=(100, 10), chunks=50))
    wait(x, timeout=30)
    assert client.submit(lambda a: a.sum().compute(), x).result(timeout=60) > 0
    # The collection itself (not a future of it) as the argument, under another name.
    expected = float(x.sum().compute())
    got = client.submit(lambda a: float(a.sum().compute()), x, pure=False).result(timeout=60)
    assert got == pytest.approx(expected)


def test_tasks_resolve_dask_scheduler_to_the_cluster(client: Client) -> None:
    def which() -> tuple[bool, bool]:
        found = dask.base.get_scheduler()
        here = squall.get_client()
        owner = getattr(found, "__self__", None)
        return found is not None and "squall" in type(owner).__module__, here.status == "running"

    assert client.submit(which).result(timeout=30) == (True, True)


def test_compute_of_delayed_in_a_task(client: Client) -> None:
    @dask.delayed
    def outer() -> int:
        with worker_client():
            return int(dask.delayed(inc)(1).compute())

    assert client.compute(outer()).result(timeout=30) == 2


# ----- worker_client / local_client -----------------------------------------------------------


def test_worker_client_submits_and_gathers(client: Client) -> None:
    def func(x: int) -> int:
        with worker_client() as c:
            a = c.submit(inc, x)
            b = c.submit(double, a)
            return int(a.result() + b.result())

    # Both workers' only threads run func at once: each must secede for its tasks.
    assert client.gather(client.map(func, [10, 20]), asynchronous=False) == [
        11 + 22,
        21 + 42,
    ]


def test_worker_client_nested(client: Client) -> None:
    def leaf(x: int) -> int:
        with worker_client() as c:
            return int(c.submit(inc, x).result())

    def root(xs: list[int]) -> int:
        with worker_client() as c:
            return sum(c.gather(c.map(leaf, xs)))

    assert client.submit(root, [1, 2, 3]).result(timeout=60) == 2 + 3 + 4


def test_worker_client_scatter_and_workers(client: Client) -> None:
    a, b = sorted(client.scheduler_info()["workers"])

    def func() -> tuple[int, tuple[int, int], bool]:
        with worker_client() as c:
            futures = c.scatter([1, 2, 3, 4, 5])
            total = c.submit(sum, futures).result()
            x = c.submit(inc, 1, workers=a)
            y = c.submit(inc, 2, workers=b)
            values = tuple(c.gather([x, y]))
            where = c.who_has([x, y])
            return total, values, where[x.key] == [a] and where[y.key] == [b]

    assert client.submit(func).result(timeout=60) == (15, (2, 3), True)


def test_worker_client_is_the_workers_client(client: Client) -> None:
    def func() -> bool:
        with worker_client() as c1, worker_client(separate_thread=False) as c2:
            return c1 is c2 is squall.get_client() is default_client()

    assert client.submit(func).result(timeout=30)


def test_worker_client_rejoins(client: Client) -> None:
    """After the block the task holds a thread slot again: a second task on the same
    1-thread worker waits for it."""

    def first() -> float:
        with worker_client():
            pass
        time.sleep(0.5)
        return time.time()

    (w, *_) = sorted(client.scheduler_info()["workers"])
    x = client.submit(first, workers=w)
    time.sleep(0.2)
    y = client.submit(time.time, workers=w, pure=False)
    assert y.result(timeout=30) >= x.result(timeout=30)


def test_worker_client_separate_thread_false(cluster: LocalCluster) -> None:
    with Client(cluster) as c:

        def f(i: int) -> int:
            with worker_client(separate_thread=False) as wc:
                assert wc.status == "running"
            return i

        assert c.gather(c.map(f, range(10))) == list(range(10))


def test_worker_client_outside_a_worker_raises(client: Client) -> None:
    with pytest.raises(ValueError), worker_client():
        pass


def test_local_client_warns(client: Client) -> None:
    def func(x: int) -> tuple[int, bool]:
        import warnings

        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            with local_client() as c:
                result = c.submit(inc, x).result()
        return result, any("worker_client" in str(r.message) for r in record)

    assert client.submit(func, 10).result(timeout=30) == (11, True)


def test_worker_closing_does_not_close_a_default_client() -> None:
    """In one process (threads for workers), tasks use the process's own client."""

    def same() -> bool:
        return squall.get_client() is default_client()

    with (
        LocalCluster(n_workers=1, threads_per_worker=2, processes=False) as cluster,
        Client(cluster) as c,
    ):
        assert c.submit(same).result(timeout=30)
        cluster.scale(0)
        assert c.status == "running"


# ----- futures_of, the current client, normalize_collection -----------------------------------


def test_futures_of(client: Client) -> None:
    x, y = client.submit(inc, 1), client.submit(inc, 2)
    assert futures_of(x) == [x]
    assert set(futures_of([x, (y, {"k": x})])) == {x, y}
    assert futures_of([1, "a"]) == []
    arr = client.persist(da.ones((10, 10), chunks=5))
    assert len(futures_of(arr)) == 4 and all(isinstance(f, Future) for f in futures_of(arr))
    ddf = client.persist(dd.from_pandas(pd.DataFrame({"a": range(6)}), npartitions=3))
    assert len(futures_of(ddf)) == 3
    assert set(client.futures_of([x, arr])) == {x, *futures_of(arr)}
    x.cancel()
    with pytest.raises(CancelledError):
        client.futures_of([x, y])
    assert futures_of([x, y]) == [x, y]  # no client: no check


def test_current_and_as_current(cluster: LocalCluster) -> None:
    with Client(cluster) as a, Client(cluster) as b:
        assert Client.current() is b is default_client()
        with pytest.raises(ValueError, match="as_current"):
            Client.current(allow_global=False)
        with a.as_current():
            assert Client.current() is a is default_client()
            assert Client.current(allow_global=False) is a
            assert Future("a-key").client is a
            assert dask.delayed(inc)(1).compute() == 2
            seen: list[Client] = []
            t = threading.Thread(target=lambda: seen.append(Client.current()))
            t.start()
            t.join(10)
            assert seen == [b]  # another thread does not see this block's client
        assert Client.current() is b


def test_default_client_after_close(cluster: LocalCluster) -> None:
    with Client(cluster) as a:
        assert default_client() is a
        assert default_client(a) is a
    with pytest.raises(ValueError):
        default_client()


def test_normalize_collection(client: Client) -> None:
    x = dask.delayed(inc)(1)
    y = dask.delayed(inc)(x)
    z = dask.delayed(double)(y)
    assert client.normalize_collection(z) is z  # nothing held yet
    yy = client.persist(y)
    wait(yy, timeout=30)
    zz = client.normalize_collection(z)
    graph = dict(zz.__dask_graph__())
    assert isinstance(graph[y.key], Future) and x.key not in graph
    assert zz.compute() == 6

    a = da.ones(10, chunks=5)
    b = a + 1
    bb = client.persist(b)
    wait(bb, timeout=30)
    s = b.sum()
    ss = client.normalize_collection(s)
    held = [v for v in dict(ss.__dask_graph__()).values() if isinstance(v, Future)]
    assert len(held) == 2
    assert int(ss.compute()) == 20


# ----- Reschedule ---------------------------------------------------------------------------


@pytest.mark.parametrize("long_running", [False, True])
def test_reschedule(client: Client, tmp_path: Path, long_running: bool) -> None:
    """A task raising Reschedule runs again (not an error), here once per key."""

    def f(x: int, marks: str) -> tuple[int, str]:
        if long_running:
            secede()
        mark = Path(marks) / str(x)
        if not mark.exists():
            mark.write_text(get_worker().address)
            raise Reschedule()
        return x, get_worker().address

    futures = client.map(f, range(4), marks=str(tmp_path), pure=False)
    results = client.gather(futures)
    assert [r[0] for r in results] == [0, 1, 2, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0", "1", "2", "3"]
    assert all(f.status == "finished" for f in futures)


def test_reschedule_of_a_released_task(client: Client, tmp_path: Path) -> None:
    """The client released the task before it raised: it is forgotten, nothing breaks."""

    def f(started: str) -> None:
        Path(started).write_text("x")
        time.sleep(0.5)
        raise Reschedule()

    started = tmp_path / "started"
    x = client.submit(f, str(started), pure=False)
    deadline = time.monotonic() + 20
    while not started.exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    key = x.key
    del x
    time.sleep(1.0)
    assert client.submit(inc, 1).result(timeout=30) == 2
    assert key not in client.who_has()


# ----- span and get_task_metadata -----------------------------------------------------------


def test_span_is_accepted_and_annotates(client: Client) -> None:
    with span("outer") as outer_id, span("inner") as inner_id:
        annotation = dask.get_annotations()["span"]
        x = dask.delayed(inc)(1)
        assert client.compute(x).result(timeout=30) == 2
        assert client.submit(inc, 2).result(timeout=30) == 3
    assert annotation["name"] == ("outer", "inner")
    assert annotation["ids"][-2:] == (outer_id, inner_id)
    assert "span" not in dask.get_annotations()
    with pytest.raises(ValueError), span():
        pass


def test_get_task_metadata(client: Client) -> None:
    x = dask.delayed(inc)(1)
    with get_task_metadata() as tasks:
        assert x.compute() == 2
        bad = client.submit(lambda: 1 / 0)
        wait(bad, timeout=30)
    assert tasks.state is not None and tasks.metadata is not None
    assert tasks.state == {x.key: "memory", bad.key: "erred"}
    assert tasks.metadata == {x.key: {}, bad.key: {}}
    assert tasks.keys == {x.key, bad.key}
    outside = client.submit(inc, 5)
    assert outside.key not in tasks.keys
