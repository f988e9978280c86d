"""``squall demo``: squall's main job on an embedded cluster. ``Client()`` starts a
LocalCluster (scheduler and worker processes on loopback) and runs futures, a
``dask.delayed`` graph and, when numpy is installed, a dask.array reduction, each
checked against a local computation."""

from __future__ import annotations

import operator
import time
from typing import Any

from dask.delayed import delayed

from squall.client.client import Client


def inc(x: int) -> int:
    return x + 1


def _line(what: str, tasks: int, seconds: float, result: Any) -> None:
    rate = f"{tasks / seconds:>10,.0f} tasks/s"
    print(f"{what:44} {tasks:>9,} tasks {seconds:7.2f} s {rate}  -> {result}")


def main(n: int = 100_000) -> int:
    t0 = time.perf_counter()
    with Client() as client:
        info = client.scheduler_info()
        threads = sum(w["nthreads"] for w in info["workers"].values())
        print(
            f"squall LocalCluster at {info['address']}: {len(info['workers'])} workers, "
            f"{threads} threads (started in {time.perf_counter() - t0:.2f} s)"
        )

        t = time.perf_counter()
        futures = client.map(inc, range(n))
        total = client.submit(sum, futures).result()
        assert total == n * (n + 1) // 2
        _line(f"client.map(inc, range({n:,})) then sum", n + 1, time.perf_counter() - t, total)
        del futures

        leaves = [delayed(inc)(i) for i in range(4096)]
        level, count = leaves, len(leaves)
        while len(level) > 1:
            level = [
                delayed(operator.add)(a, b) for a, b in zip(level[::2], level[1::2], strict=True)
            ]
            count += len(level)
        t = time.perf_counter()
        tree = level[0].compute(scheduler=client)
        assert tree == sum(range(1, 4097))
        _line("dask.delayed binary-tree sum of 4,096 leaves", count, time.perf_counter() - t, tree)

        try:
            import dask.array as da
        except ImportError:
            print("(dask.array needs numpy: pip install 'dask[array]' for the array example)")
            return 0
        x = da.random.RandomState(0).random((2000, 2000), chunks=(100, 100))  # type: ignore[no-untyped-call]
        y = (x + x.T).sum()
        t = time.perf_counter()
        value = y.compute(scheduler=client)
        seconds = time.perf_counter() - t
        expected = y.compute(scheduler="sync")
        assert abs(value - expected) < 1e-6 * abs(expected)
        tasks = len(y.__dask_graph__())
        _line("dask.array (x + x.T).sum(), 400 chunks", tasks, seconds, value)
    return 0
