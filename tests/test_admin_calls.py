"""Admin calls on a real multi-process cluster (docs/runtime.md#admin-calls):
``run_on_scheduler`` with and without ``dask_scheduler``, coroutines, errors with the
scheduler's traceback, the facade's workers and tasks after a computation; the
scheduler's metadata, nested, with defaults, as distributed's tests/test_client.py
describes it."""

from __future__ import annotations

import asyncio
import os
import sys
import traceback
import uuid
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import pytest

from squall import Client, LocalCluster
from squall.scheduler.facade import SchedulerFacade
from tests.conftest import eventually

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def inc(x: int) -> int:
    return x + 1


def scheduler_failure() -> None:
    raise ValueError("raised on the scheduler")


def test_run_on_scheduler_in_the_scheduler_process(cluster: LocalCluster) -> None:
    with Client(cluster) as c:
        pid = c.run_on_scheduler(os.getpid)
        assert pid != os.getpid() and pid not in c.run(os.getpid).values()
        assert c.run_on_scheduler(lambda x, y=0: x + y, 1, y=2) == 3

        def info(dask_scheduler: SchedulerFacade) -> tuple[str, str, int]:
            s = dask_scheduler
            return type(s).__name__, s.address, len(s.clients)

        name, address, n_clients = c.run_on_scheduler(info)
        assert name == "SchedulerFacade" and address == cluster.scheduler_address
        assert n_clients >= 1
        events = c.get_events("all")
        assert any(e.get("action") == "run-function" for _, e in events)


def test_run_on_scheduler_awaits_a_coroutine(cluster: LocalCluster) -> None:
    async def later(x: int, dask_scheduler: SchedulerFacade) -> tuple[int, int]:
        await asyncio.sleep(0.01)
        return x, dask_scheduler.n_tasks

    with Client(cluster) as c:
        x, _ = c.run_on_scheduler(later, 5)
        assert x == 5

        async def mark(key: str, dask_scheduler: SchedulerFacade) -> None:
            await asyncio.sleep(0.05)
            dask_scheduler.set_metadata([key], "done")

        key = f"background-{uuid.uuid4().hex}"
        assert c.run_on_scheduler(mark, key, wait=False) is None
        eventually(lambda: c.get_metadata(key, None) == "done")


def test_run_on_scheduler_raises_with_the_remote_traceback(cluster: LocalCluster) -> None:
    with Client(cluster) as c:
        with pytest.raises(ValueError, match="raised on the scheduler") as info:
            c.run_on_scheduler(scheduler_failure)
        frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
        assert "scheduler_failure" in frames
        assert c.run_on_scheduler(inc, 1) == 2  # the scheduler carries on


def test_the_facade_reads_workers_and_tasks(cluster: LocalCluster) -> None:
    with Client(cluster) as c:
        futures = c.map(inc, range(4), key=[f"facade-{i}" for i in range(4)])
        c.gather(futures)
        holders = c.who_has(futures)

        def read(dask_scheduler: SchedulerFacade) -> dict[str, Any]:
            tasks = dask_scheduler.tasks
            mine = {k: tasks[k] for k in tasks if str(k).startswith("facade-")}
            return {
                "workers": {
                    a: (w.address, w.name, w.nthreads, w.memory_limit, w.status)
                    for a, w in dask_scheduler.workers.items()
                },
                "tasks": {k: (t.key, t.state, set(t.who_has), t.nbytes) for k, t in mine.items()},
                "n_tasks": dask_scheduler.n_tasks == len(tasks),
                "absent": "nothing-here" in tasks,
                "id": dask_scheduler.id,
            }

        got = c.run_on_scheduler(read)
        info = c.scheduler_info()
        assert set(got["workers"]) == set(info["workers"])
        for address, (a, name, nthreads, memory_limit, status) in got["workers"].items():
            w = info["workers"][address]
            assert (a, name, nthreads, memory_limit) == (
                address,
                w["name"],
                w["nthreads"],
                w["memory_limit"],
            )
            assert status == "running"
        assert set(got["tasks"]) == {f.key for f in futures}
        for f in futures:
            key, state, who_has, nbytes = got["tasks"][f.key]
            assert (key, state) == (f.key, "memory")
            assert who_has == set(holders[f.key]) and nbytes > 0
        assert got["n_tasks"] and not got["absent"] and got["id"] == info["id"]
        with pytest.raises(KeyError):
            c.run_on_scheduler(lambda dask_scheduler: dask_scheduler.tasks["nothing-here"])


def test_metadata_nested_default_and_overwrite(cluster: LocalCluster) -> None:
    with Client(cluster) as c, Client(cluster) as other:
        x = f"x-{uuid.uuid4().hex}"
        c.set_metadata(x, 123)
        assert other.get_metadata(x) == 123
        c.set_metadata([x, "y"], 123)  # a value that is no dict gives way to one
        assert c.get_metadata(x) == {"y": 123}
        c.set_metadata([x, "w", "z"], 456)
        assert c.get_metadata(x) == {"y": 123, "w": {"z": 456}}
        assert c.get_metadata([x, "w"]) == {"z": 456}
        assert c.get_metadata((x, "w", "z")) == 456
        c.set_metadata([x, "w"], [1, 2])  # overwrite
        assert c.get_metadata([x, "w"]) == [1, 2]

        with pytest.raises(KeyError, match="missing"):
            c.get_metadata([x, "missing", "deeper"])
        assert c.get_metadata([x, "missing"], default=None) is None
        assert c.get_metadata(f"absent-{x}", "fallback") == "fallback"

        # Values of other types come back as they were set; tuple keys (dask keys)
        # are one key to set_metadata.
        c.set_metadata(("task", 0), {"when": (1, 2), "tags": {"a", "b"}})
        assert c.get_metadata([("task", 0)]) == {"when": (1, 2), "tags": {"a", "b"}}

        # Paths go into lists by index, as in distributed; a bad index is refused.
        c.set_metadata([x, "l"], [10, {"k": 20}])
        c.set_metadata([x, "l", 1, "j"], 21)
        c.set_metadata([x, "l", 0], {("a", 1): 2})
        assert c.get_metadata([x, "l"]) == [{("a", 1): 2}, {"k": 20, "j": 21}]
        with pytest.raises(RuntimeError, match="IndexError"):
            c.get_metadata([x, "l", 5])

        def read(dask_scheduler: SchedulerFacade) -> Any:
            return dask_scheduler.get_metadata([x, "w"]), dask_scheduler.get_metadata(["q"], 0)

        assert c.run_on_scheduler(read) == ([1, 2], 0)


def test_async_client(cluster: LocalCluster) -> None:
    async def main() -> None:
        async with Client(cluster.scheduler_address, asynchronous=True) as c:

            async def n_workers(dask_scheduler: SchedulerFacade) -> int:
                await asyncio.sleep(0)
                return len(dask_scheduler.workers)

            info = await c.scheduler_info()
            assert await c.run_on_scheduler(n_workers) == len(info["workers"])
            key = f"async-{uuid.uuid4().hex}"
            await c.set_metadata([key, "a"], 1)
            assert await c.get_metadata([key, "a"]) == 1
            assert await c.get_metadata([key, "b"], default="d") == "d"
            with pytest.raises(KeyError):
                await c.get_metadata([key, "b"])
            with pytest.raises(ValueError, match="raised on the scheduler"):
                await c.run_on_scheduler(scheduler_failure)

    asyncio.run(asyncio.wait_for(main(), 60))
