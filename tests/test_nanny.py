"""Workers under nannies (docs/runtime.md#supervision), over real processes: crashing
tasks, killed workers, restart, ``Client.run(nanny=True)``, no orphans."""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import cloudpickle  # type: ignore[import-untyped]
import psutil
import pytest
from conftest import cli_scheduler, eventually

from squall import Client
from squall._core import read_executing_record
from squall.deploy.local import LocalCluster
from squall.errors import CancelledError, KilledWorker
from squall.protocol import comm
from squall.protocol import messages as m
from squall.scheduler.server import SchedulerServer

# Worker processes cannot import this test module: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def inc(x: int) -> int:
    time.sleep(0.001)
    return x + 1


def exit_process() -> None:
    os._exit(1)


def segfault() -> None:
    ctypes.string_at(0)


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    """A client of the module's cluster (conftest), which it leaves at full size."""
    with Client(cluster) as c:
        yield c
    cluster.wait_for_workers(2)


def worker_pids(c: Client) -> dict[str, int]:
    return dict(c.run(os.getpid))


def nanny_pids(cluster: LocalCluster) -> set[int]:
    return {p.pid for p in cluster.worker_processes}


def test_the_scheduler_removes_the_worker_a_nanny_reports_dead_at_once() -> None:
    nanny_address = "tcp://127.0.0.1:9100"

    async def main() -> None:
        server = SchedulerServer("tcp://127.0.0.1:0", {"validate": True})
        await server.start()
        try:
            nanny = await comm.connect(
                server.address, role="nanny", info={"address": nanny_address}
            )
            assert isinstance((await nanny.read())[0], m.NannyRegistered)
            info = {"address": "tcp://127.0.0.1:9101", "nthreads": 1, "pid": 42}
            worker = await comm.connect(
                server.address, role="worker", info={**info, "nanny": nanny_address}
            )
            assert isinstance((await worker.read())[0], m.WorkerRegistered)
            answer = server.client_room._scheduler_info(0, m.SchedulerInfo(), memoryview(b""))
            assert answer is not None and isinstance(answer[0], m.SchedulerInfoReply)
            [listed] = answer[0].workers
            assert listed["nanny"] == nanny_address
            # A late report about the nanny's previous worker process changes nothing.
            await nanny.write(m.WorkerDied(pid=41, exit_code=-9, executing=None))
            await asyncio.sleep(0.2)
            assert len(list(server.core.workers())) == 1
            # The worker's connection is still open: only the report can remove it,
            # and the scheduler then disconnects it; the connection's end finds the
            # worker removed already.
            await nanny.write(m.WorkerDied(pid=42, exit_code=-9, executing=None))
            with pytest.raises(comm.CommClosedError):
                while True:
                    await worker.read_messages()
            assert list(server.core.workers()) == []
            while server.workers:
                await asyncio.sleep(0.01)
            await nanny.close()
        finally:
            await server.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_killed_worker_is_replaced_under_the_same_name(
    cluster: LocalCluster, client: Client
) -> None:
    before = worker_pids(client)
    names = {a: w["name"] for a, w in client.scheduler_info()["workers"].items()}
    address = min(before)
    t0 = time.monotonic()
    os.kill(before[address], signal.SIGKILL)
    eventually(lambda: address not in client.nthreads() and len(client.nthreads()) == 2, 30)
    print(f"worker replaced {time.monotonic() - t0:.2f} s after its SIGKILL")
    after = worker_pids(client)
    [new] = set(after) - set(before)
    assert psutil.Process(after[new]).ppid() in nanny_pids(cluster)
    assert client.scheduler_info()["workers"][new]["name"] == names[address]
    assert client.submit(inc, 1, workers=[new]).result(timeout=30) == 2


@pytest.mark.parametrize("crash", [exit_process, segfault])
def test_a_crashing_task_errs_with_killed_worker_while_the_others_complete(
    cluster: LocalCluster, client: Client, crash: Callable[[], None]
) -> None:
    nannies = nanny_pids(cluster)
    others = client.map(inc, range(2000))
    bad = client.submit(crash)
    dependent = client.submit(inc, bad)
    t0 = time.monotonic()
    with pytest.raises(KilledWorker) as info:
        bad.result(timeout=60)
    print(f"{crash.__name__}: KilledWorker after {time.monotonic() - t0:.2f} s")
    with pytest.raises(KilledWorker):
        dependent.result(timeout=10)  # errs with it: never a hanging future
    assert bad.key in str(info.value) and info.value.key == bad.key
    assert "The last worker that attempt to run the task was tcp://" in str(info.value)
    # Only tasks running when a worker died are suspects (its nanny says which), so
    # tasks waiting in its slots beside the crashing one are merely rescheduled.
    assert client.gather(others) == [i + 1 for i in range(2000)]
    eventually(lambda: len(client.nthreads()) == 2, timeout=30)  # full size again
    print(f"{crash.__name__}: full size again {time.monotonic() - t0:.2f} s after submit")
    assert nanny_pids(cluster) == nannies  # the nannies stayed
    assert client.submit(inc, 1).result(timeout=30) == 2


def test_the_executing_record_names_the_running_calls_or_nothing() -> None:
    record = bytearray(4096)
    assert read_executing_record(bytes(record)) == []
    record[8:16] = (7 + 1).to_bytes(8, "little")  # slots hold task id + 1
    record[4088:] = (0 + 1).to_bytes(8, "little")
    assert sorted(read_executing_record(bytes(record)) or []) == [0, 7]
    record[0] = 1  # a call found no free slot: the record is incomplete
    assert read_executing_record(bytes(record)) is None
    assert read_executing_record(b"") is None  # the worker died before keeping one


def test_tasks_waiting_beside_a_crashing_one_are_not_suspects() -> None:
    # Every task goes to the one worker at once (no queuing on the scheduler), the
    # crashing one runs first each time: under Dask's rule the 40 waiting beside it
    # would share each of its four deaths and err with it.
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, scheduler_kwargs={"worker_saturation": "inf"}
        ) as cluster,
        Client(cluster) as client,
    ):
        others = client.map(inc, range(40))
        bad = client.submit(exit_process, priority=10)
        with pytest.raises(KilledWorker):
            bad.result(timeout=60)
        assert client.gather(others) == list(range(1, 41))


def test_restart_starts_new_worker_processes_through_the_nannies(
    cluster: LocalCluster, client: Client
) -> None:
    before = worker_pids(client)
    nannies = nanny_pids(cluster)
    stuck = client.submit(time.sleep, 60)
    client.restart()
    with pytest.raises(CancelledError, match="scheduler-restart"):
        stuck.result(timeout=5)
    after = worker_pids(client)
    assert len(after) == 2 and not set(after.values()) & set(before.values())
    assert nanny_pids(cluster) == nannies
    assert all(p.poll() is None for p in cluster.worker_processes)
    assert client.submit(inc, 1).result(timeout=30) == 2


def nanny_type(dask_worker: object) -> str:
    return type(dask_worker).__name__


def test_run_in_the_nannies(cluster: LocalCluster, client: Client) -> None:
    ran = client.run(os.getpid, nanny=True)
    assert set(ran) == set(client.nthreads())  # keyed by worker address, as distributed
    assert set(ran.values()) == nanny_pids(cluster)
    assert set(client.run(nanny_type, nanny=True).values()) == {"Nanny"}
    workers = client.scheduler_info()["workers"].values()
    assert all(w["nanny"].startswith("tcp://") for w in workers)


def exited(pid: int) -> bool:
    """Gone, or a zombie nobody reaped yet."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_closing_a_local_cluster_leaves_no_process() -> None:
    with LocalCluster(n_workers=1, threads_per_worker=1) as cluster, Client(cluster) as c:
        pids = nanny_pids(cluster) | set(worker_pids(c).values())
        assert len(pids) == 2
    assert all(map(exited, pids))


def test_a_nanny_started_by_hand_closes_its_worker_and_takes_it_along_when_killed() -> None:
    cmd = [sys.executable, "-m", "squall.worker", "--nthreads", "1"]
    with cli_scheduler() as address, Client(address) as c:
        for stop in (signal.SIGTERM, signal.SIGKILL):
            nanny = subprocess.Popen([*cmd, address])
            try:
                eventually(lambda: len(c.nthreads()) == 1, timeout=30)
                [pid] = c.run(os.getpid).values()
                assert psutil.Process(pid).ppid() == nanny.pid
                nanny.send_signal(stop)
                assert nanny.wait(timeout=20) == (0 if stop == signal.SIGTERM else -stop)
                # SIGKILLed, the nanny leaves its worker a closed stdin: it shuts down.
                eventually(lambda pid=pid: exited(pid), timeout=15)
                eventually(lambda: c.nthreads() == {})
            finally:
                if nanny.poll() is None:
                    nanny.kill()
                    nanny.wait()


def test_squall_worker_without_a_nanny() -> None:
    with cli_scheduler() as address:
        cmd = [sys.executable, "-m", "squall.worker", address, "--no-nanny", "--nthreads", "1"]
        worker = subprocess.Popen(cmd)
        try:
            with Client(address) as c:
                eventually(lambda: len(c.nthreads()) == 1, timeout=30)
                assert list(c.run(os.getpid).values()) == [worker.pid]  # no process between
                workers = c.scheduler_info()["workers"].values()
                assert [w["nanny"] for w in workers] == [None]
                with pytest.raises(ValueError, match="no nanny"):
                    c.run(os.getpid, nanny=True)
                assert c.submit(inc, 1).result(timeout=30) == 2
                worker.send_signal(signal.SIGTERM)
                assert worker.wait(timeout=20) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()


def test_the_worker_environment_takes_dasks_pre_spawn_environ() -> None:
    import dask

    from squall.worker.nanny import _worker_environment

    with dask.config.set({"distributed.nanny.pre-spawn-environ": {"SQUALL_TEST_X": 1}}):
        assert _worker_environment()["SQUALL_TEST_X"] == "1"
    # By default (a nanny process, where distributed is not imported) nothing is added.
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_TRIM_THRESHOLD_"}
    probe = "from squall.worker.nanny import _worker_environment as e; print(sorted(e()))"
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert "MALLOC_TRIM_THRESHOLD_" not in out.stdout
