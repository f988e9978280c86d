"""distributed's top-level names that concern a user's code, from ``squall``, meaning
the same kind of thing; the server classes run in-process as distributed's do."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from pathlib import Path

import distributed
import pytest

import squall

#: Names of distributed.__all__ squall has, and the other helpers' (issue 19) and the
#: plugin and deploy issues' names it does not have yet; ``rpc``/``connect`` (its wire
#: internals) and ``widgets`` (its HTML templates) are left out on purpose.
OURS = {
    "CancelledError", "Client", "CompatibleExecutor", "Future", "KilledWorker",
    "LocalCluster", "Nanny", "Scheduler", "Security", "Status", "TimeoutError", "Worker",
    "as_completed", "fire_and_forget", "get_client", "get_task_stream",
    "get_worker", "performance_report", "progress", "rejoin", "secede", "sync", "wait",
    "print", "warn", "Event", "Lock", "MultiLock", "Queue", "Semaphore", "Variable",
    "worker_client", "local_client", "futures_of", "default_client", "get_task_metadata",
    "span", "Reschedule", "Actor", "ActorFuture", "BaseActorFuture", "SchedulerPlugin",
    "WorkerPlugin", "NannyPlugin", "InstallPlugin", "PipInstall", "CondaInstall", "Environ",
    "UploadDirectory", "UploadFile", "SSHCluster",
}  # fmt: skip
OTHERS = {"Adaptive", "SpecCluster", "SubprocessCluster"}
LEFT_OUT = {"rpc", "connect", "widgets"}
#: Names squall has with a meaning of its own: ``squall.config`` is squall's settings
#: (distributed's is dask's config dict, which is ``dask.config.config``) and
#: ``squall.dask`` its dask integration package (distributed's is the dask module).
SQUALL_OWN = {"config", "dask"}


def test_every_name_is_accounted_for() -> None:
    assert set(distributed.__all__) <= OURS | OTHERS | LEFT_OUT | SQUALL_OWN
    for name in OURS:
        assert name in squall.__all__, name


def test_names_mean_what_distributed_means() -> None:
    assert squall.CancelledError is concurrent.futures.CancelledError
    assert squall.CancelledError is distributed.CancelledError
    assert squall.TimeoutError is distributed.TimeoutError
    assert issubclass(squall.KilledWorker, Exception)
    assert {s.name for s in squall.Status} == {s.name for s in distributed.Status}
    assert squall.Status.running == "running"
    assert squall.Security().require_encryption in (None, False)
    with pytest.raises(RuntimeError, match="get_executor"):
        squall.CompatibleExecutor()
    # The core moved to squall.core; squall.Scheduler is the server.
    assert squall.core.Scheduler is squall._core.Scheduler
    assert squall.Scheduler is not squall.core.Scheduler
    assert issubclass(squall.core.CycleError, squall.SchedulerError)


def test_sync_runs_a_coroutine_on_a_loop_in_another_thread() -> None:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:

        async def double(x: int) -> int:
            await asyncio.sleep(0)
            return 2 * x

        assert squall.sync(loop, double, 21) == 42
        with pytest.raises(squall.TimeoutError):
            squall.sync(loop, asyncio.sleep, 5, callback_timeout=0.05)

        async def from_the_loop() -> None:
            squall.sync(loop, double, 1)

        with pytest.raises(RuntimeError, match="running loop"):
            squall.sync(loop, from_the_loop)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_in_process_scheduler_and_worker_serve_a_client(tmp_path: Path) -> None:
    path = tmp_path / "scheduler.json"

    async def main() -> None:
        async with squall.Scheduler(
            host="127.0.0.1", port=0, dashboard=False, scheduler_file=str(path)
        ) as s:
            assert s.status == squall.Status.running
            assert json.loads(path.read_text())["address"] == s.address
            async with squall.Worker(s.address, nthreads=2) as w:
                assert w.status == "running"
                async with squall.Client(s.address, asynchronous=True) as c:
                    assert await c.submit(lambda x: x + 1, 1) == 2
                    assert list(await c.nthreads()) == [w.address]
            w2 = await squall.Worker(s.address, nthreads=1)
            await w2.close()
        assert s.status == squall.Status.closed
        assert not path.exists()  # gone with its scheduler

    asyncio.run(asyncio.wait_for(main(), 60))


def test_built_in_plugins_are_of_distributeds_kinds() -> None:
    """Each built-in plugin runs where distributed's of the same name does."""
    from distributed.diagnostics.plugin import NannyPlugin, SchedulerPlugin, WorkerPlugin

    from squall.diagnostics.plugin import plugin_kind

    kinds = {SchedulerPlugin: "scheduler", NannyPlugin: "nanny", WorkerPlugin: "worker"}
    for name in ("InstallPlugin", "PipInstall", "CondaInstall", "Environ", "UploadDirectory"):
        ours, theirs = getattr(squall, name), getattr(distributed, name)
        [kind] = [k for base, k in kinds.items() if issubclass(theirs, base)]
        assert plugin_kind(ours.__new__(ours)) == kind, name
    assert plugin_kind(squall.UploadFile.__new__(squall.UploadFile)) == "worker"


def test_server_arguments_squall_lacks_are_refused() -> None:
    with pytest.raises(TypeError, match="extensions"):
        squall.Scheduler(extensions={"x": object})
    with pytest.raises(TypeError, match="no_such_option"):
        squall.Scheduler(no_such_option=1)
    with pytest.raises(TypeError, match="plugins"):
        squall.Nanny("tcp://127.0.0.1:1", plugins={"p"})


def test_in_process_scheduler_closes_when_idle() -> None:
    """``Scheduler(idle_timeout=)``: no work for that long closes it, as distributed's."""

    async def main() -> None:
        s = await squall.Scheduler(host="127.0.0.1", dashboard=False, idle_timeout="0.5s")
        assert s.idle_timeout == 0.5
        while s.status != squall.Status.closed:
            await asyncio.sleep(0.05)

    asyncio.run(asyncio.wait_for(main(), 20))


def test_in_process_nanny_runs_a_worker_process() -> None:
    async def main() -> None:
        async with squall.Scheduler(host="127.0.0.1", port=0, dashboard=False) as s:
            async with squall.Nanny(s.address, nthreads=1, name="n0") as n:
                assert n.worker_address is not None and n.status == squall.Status.running
                async with squall.Client(s.address, asynchronous=True) as c:
                    assert await c.submit(lambda: 7) == 7
                    pids = await c.run(lambda: __import__("os").getpid())
                    assert list(pids) == [n.worker_address]
            assert n.status == squall.Status.closed

    asyncio.run(asyncio.wait_for(main(), 90))
