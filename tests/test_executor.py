"""``Client.get_executor()`` over real processes: a ``concurrent.futures.Executor``
(docs/runtime.md#the-executor). Ported from the behaviour distributed's
test_client_executor.py describes."""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import cloudpickle  # type: ignore[import-untyped]
import pytest
from conftest import eventually

from squall import Client, LocalCluster, worker_client

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def inc(x: int) -> int:
    return x + 1


def slowinc(x: int, delay: float = 0.05) -> int:
    time.sleep(delay)
    return x + 1


def throws(x: object) -> None:
    raise RuntimeError(f"hello {x}")


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(n_workers=2, threads_per_worker=2) as c:
        yield c


def processing(client: Client) -> int:
    return sum(len(v) for v in client.processing().values())


def test_submit(client: Client) -> None:
    with client.get_executor() as e:
        assert isinstance(e, cf.Executor)
        f1 = e.submit(inc, 1)
        assert isinstance(f1, cf.Future)
        f2 = e.submit(lambda x, y: x + y, 3, y=4)
        f3 = e.submit(throws, "foo")
        assert f1.result(timeout=30) == 2
        assert f2.result(timeout=30) == 7
        with pytest.raises(RuntimeError, match="hello foo"):
            f3.result(timeout=30)
        assert isinstance(f3.exception(), RuntimeError)


def test_concurrent_futures_wait_and_as_completed(client: Client) -> None:
    with client.get_executor(pure=False) as e:
        fs = [e.submit(slowinc, i, 0.02) for i in range(10)]
        assert {f.result() for f in cf.as_completed(fs, timeout=30)} == set(range(1, 11))

        fs = [e.submit(slowinc, i, 0.3) for i in range(4)]
        done, not_done = cf.wait(fs, timeout=0.01)
        assert not_done
        done, not_done = cf.wait(fs, timeout=30)
        assert not not_done and done == set(fs)

        fs = [e.submit(throws, None)] + [e.submit(slowinc, i, 0.5) for i in range(8)]
        done, not_done = cf.wait(fs, timeout=30, return_when=cf.FIRST_EXCEPTION)
        assert fs[0] in done and not_done


def test_cancellation(client: Client) -> None:
    with client.get_executor(pure=False) as e:
        fut = e.submit(time.sleep, 2.0)
        eventually(lambda: processing(client) > 0)
        assert not fut.done()
        assert fut.cancel() and fut.cancelled()
        eventually(lambda: processing(client) == 0)
        with pytest.raises(cf.CancelledError):
            fut.result()

    with client.get_executor(pure=False) as e:
        fs = [e.submit(slowinc, i, 0.1) for i in range(6)]
        fs[3].cancel()
        done, _ = cf.wait(fs, timeout=30, return_when=cf.FIRST_COMPLETED)
        assert fs[3] in done and fs[3].cancelled()
        fs[4].cancel()
        assert sum(f.cancelled() for f in cf.as_completed(fs, timeout=30)) == 2


def test_cancelled_on_the_cluster_is_cancelled_here(client: Client) -> None:
    with client.get_executor(pure=False) as e:
        fut = e.submit(time.sleep, 2.0)
        eventually(lambda: processing(client) > 0)
        client.cancel(list(e._futures))
        done, _ = cf.wait([fut], timeout=10)
        assert fut in done and fut.cancelled()


def test_map(client: Client) -> None:
    with client.get_executor() as e:
        assert list(e.map(inc, range(10))) == list(range(1, 11))
        assert list(e.map(lambda a, b: a * b, [1, 2, 3], [4, 5, 6], chunksize=2)) == [4, 10, 18]
        with pytest.raises(TypeError, match="unexpected arguments"):
            e.map(inc, range(3), bogus=1)

    with client.get_executor(pure=False) as e:
        it = e.map(slowinc, range(20), [0.2] * 20, timeout=0.5)
        results = []
        with pytest.raises(cf.TimeoutError):
            for x in it:
                results.append(x)
        assert len(results) < 20

    with client.get_executor(pure=False) as e:
        it = e.map(slowinc, range(20), [0.2] * 20)
        assert list(itertools.islice(it, 2)) == [1, 2]
        assert processing(client) > 0
        del it  # the iterator is collected: the calls not yet iterated are cancelled
        eventually(lambda: processing(client) == 0)


def test_map_raises_a_calls_exception(client: Client) -> None:
    with client.get_executor() as e, pytest.raises(RuntimeError, match="hello 1"):
        list(e.map(throws, [1]))


def get_random() -> float:
    return random.random()


def test_pure(client: Client) -> None:
    with client.get_executor() as e:
        fs = [e.submit(get_random) for _ in range(5)]
        assert len({f.result(timeout=30) for f in fs}) == 1
    with client.get_executor(pure=False) as e:
        fs = [e.submit(get_random) for _ in range(5)]
        assert len({f.result(timeout=30) for f in fs}) == 5


def test_workers(client: Client) -> None:
    a, b = sorted(client.scheduler_info()["workers"])
    with client.get_executor(workers=[b]) as e:
        fs = [e.submit(slowinc, i, 0.01) for i in range(10)]
        cf.wait(fs, timeout=30)
        has_what = client.has_what()
        assert not has_what.get(a) and len(has_what[b]) == 10


def test_unsupported_arguments(client: Client) -> None:
    with pytest.raises(
        TypeError, match=r"unsupported arguments to ClientExecutor: \['bar', 'foo'\]"
    ):
        client.get_executor(workers=None, foo=1, bar=2)


def test_retries(client: Client, tmp_path: Path) -> None:
    def flaky(path: str, failures: int) -> int:
        p = Path(path)
        n = int(p.read_text()) if p.exists() else 0
        p.write_text(str(n + 1))
        if n < failures:
            raise ZeroDivisionError(f"attempt {n}")
        return 42

    with client.get_executor(retries=3, pure=False) as e:
        assert e.submit(flaky, str(tmp_path / "a"), 2).result(timeout=30) == 42
    with (
        client.get_executor(retries=1, pure=False) as e,
        pytest.raises(ZeroDivisionError, match="attempt 1"),
    ):
        e.submit(flaky, str(tmp_path / "b"), 2).result(timeout=30)


def test_shutdown(client: Client) -> None:
    e = client.get_executor(pure=False)
    fut = e.submit(time.sleep, 0.5)
    t = time.monotonic()
    e.shutdown()  # waits for the calls submitted
    assert 0.3 <= time.monotonic() - t <= 10
    eventually(fut.done)
    fut.result()
    with pytest.raises(RuntimeError):
        e.submit(inc, 1)
    e.shutdown()  # again: nothing

    for kwargs in ({"wait": False}, {"cancel_futures": True}):
        e = client.get_executor(pure=False)
        fut = e.submit(time.sleep, 2.0)
        t = time.monotonic()
        e.shutdown(**kwargs)  # cancels them
        assert time.monotonic() - t < 1.5
        eventually(fut.cancelled)
        with pytest.raises(RuntimeError):
            e.map(inc, [1])


def test_executor_in_a_task(client: Client) -> None:
    def mysum() -> int:
        with worker_client() as c, c.get_executor() as e:
            return sum(e.map(lambda x: 2 * x, range(30)))

    assert client.submit(mysum).result(timeout=60) == 30 * 29
