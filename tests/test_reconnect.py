"""Workers that outlive their scheduler, and a scheduler that goes silent
(docs/runtime.md#reconnection-and-liveness), over real processes: a scheduler
SIGKILLed and started again on its address, a worker cut off and reconciled, the death
timeout, a SIGSTOPped scheduler."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import conftest
import dask
import psutil
import pytest
from conftest import eventually

from squall import Client, as_completed, config, wait
from squall.deploy.local import LocalCluster, scheduler_info
from squall.errors import FutureCancelledError
from squall.protocol import comm, liveness
from squall.worker.worker import Worker

# Worker processes cannot import this test module: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

TIMEOUT = 30


def inc(x: int) -> int:
    return x + 1


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_scheduler(
    port: int, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    """``squall scheduler`` on ``port``; returns it and its address once it listens."""
    return conftest.start_scheduler("--port", str(port), env=env)


def start_worker(
    address: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return conftest.start_worker(address, *args, stderr=subprocess.PIPE, text=True, env=env)


def n_workers(address: str) -> int:
    try:
        info = asyncio.run(asyncio.wait_for(scheduler_info(address), 5))
    except (comm.CommError, asyncio.TimeoutError):
        return -1
    return len(info["workers"])


def stop(*procs: subprocess.Popen[str]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.kill()
        p.wait()


@contextmanager
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test starts, killed at its end whatever happened."""
    procs: list[subprocess.Popen[str]] = []
    try:
        yield procs
    finally:
        stop(*procs)


def child_pids(nanny: subprocess.Popen[str]) -> list[int]:
    return [p.pid for p in psutil.Process(nanny.pid).children()]


def test_workers_rejoin_a_scheduler_restarted_on_the_same_address() -> None:
    port = free_port()
    with processes() as procs:
        sched, address = start_scheduler(port)
        procs.append(sched)
        procs += [start_worker(address, "--nanny"), start_worker(address, "--no-nanny")]
        eventually(lambda: n_workers(address) == 2, TIMEOUT)
        with Client(address) as c:
            assert c.submit(inc, 1).result(timeout=TIMEOUT) == 2
        sched.kill()
        sched.wait()
        time.sleep(0.5)  # the workers are reconnecting now
        sched, again = start_scheduler(port)
        procs.append(sched)
        t0 = time.monotonic()
        assert again == address
        eventually(lambda: n_workers(address) == 2, TIMEOUT)
        print(
            f"2 workers registered {time.monotonic() - t0:.2f} s after the new scheduler listened"
        )
        with Client(address) as c:
            assert sum(c.gather(c.map(inc, range(100)))) == 5050
            c.restart()  # through the nanny, which joined the new scheduler too
            assert c.submit(inc, 1).result(timeout=TIMEOUT) == 2
        for p in procs[1:3]:  # both still the processes started first
            assert p.poll() is None
            p.terminate()
            assert p.wait(TIMEOUT) == 0


def cut_and_stall(dask_worker: Any) -> None:
    """In a worker: drop its scheduler connection, then hold its event loop for a
    second (it cannot reconnect meanwhile)."""
    dask_worker._scheduler.abort()
    asyncio.get_running_loop().call_soon(time.sleep, 1.0)


def keys_held(dask_worker: Any) -> list[Any]:
    return list(dask_worker.data)


def test_a_worker_cut_off_rejoins_and_the_scheduler_reconciles_what_it_holds() -> None:
    with (
        LocalCluster(n_workers=2, threads_per_worker=1) as cluster,
        Client(cluster) as c,
    ):
        a0, a1 = sorted(c.nthreads())
        kept = c.scatter(5, broadcast=True)  # in memory on both
        lost = c.submit(inc, 1, workers=[a0])  # on a0 only: lost when a0 leaves
        gone = c.submit(inc, 10, workers=[a0])  # released while a0 is away
        assert lost.result(timeout=TIMEOUT) == 2 and gone.result(timeout=TIMEOUT) == 11
        gone_key = gone.key
        before = c.run(registration, workers=[a0])[a0][0]
        t0 = time.monotonic()
        c.run(cut_and_stall, workers=[a0])
        del gone
        # A new registration (a new worker id), whether or not the scheduler was seen
        # without a0 meanwhile (it may wait for a nanny's account of a death).
        eventually(lambda: c.run(registration, workers=[a0])[a0] != (before, "running")
                   and c.run(registration, workers=[a0])[a0][1] == "running", TIMEOUT)  # fmt: skip
        eventually(lambda: sorted(c.nthreads()) == [a0, a1], TIMEOUT)
        print(f"cut-off worker registered again {time.monotonic() - t0:.2f} s after the cut")
        # Its copy of a result in memory elsewhere counts again; the result it alone
        # held was lost with it and is recomputed; the released one is freed there.
        eventually(lambda: sorted(c.who_has([kept])[kept.key]) == [a0, a1], TIMEOUT)
        assert lost.result(timeout=TIMEOUT) == 2
        assert c.submit(inc, kept, workers=[a0]).result(timeout=TIMEOUT) == 6
        assert gone_key not in c.run(keys_held, workers=[a0])[a0]
        nannies = cluster.worker_processes
        assert all(p.poll() is None for p in nannies)


def partition(dask_worker: Any) -> None:
    """In a worker: act as if its scheduler connection went silent, leaving it open on
    the scheduler's side (a partition: the scheduler sees no end)."""
    dask_worker._kept_open = dask_worker._scheduler
    dask_worker._scheduler = None
    dask_worker._lost_scheduler("partitioned (test)")


def registration(dask_worker: Any) -> tuple[int, str]:
    return dask_worker.worker_id, dask_worker.status


def test_a_worker_back_from_a_partition_replaces_its_stale_registration() -> None:
    with (
        LocalCluster(n_workers=1, threads_per_worker=1) as cluster,
        Client(cluster) as c,
    ):
        [a0] = c.nthreads()
        x = c.submit(inc, 1)
        assert x.result(timeout=TIMEOUT) == 2
        before = c.run(registration)[a0]
        t0 = time.monotonic()
        c.run(partition)
        # Not refused as "exists" until the TTL (5 minutes): registered again at once,
        # with what it holds.
        eventually(lambda: c.run(registration)[a0][0] != before[0], 10)
        assert c.run(registration)[a0][1] == "running" and list(c.nthreads()) == [a0]
        print(f"partitioned worker registered again {time.monotonic() - t0:.2f} s after")
        eventually(lambda: c.who_has([x])[x.key] == [a0], 10)
        assert c.submit(inc, x).result(timeout=TIMEOUT) == 3
        assert cluster.worker_processes[0].poll() is None


def test_a_worker_closed_as_it_loses_its_scheduler_closes() -> None:
    """SIGTERM as the scheduler goes: closing cancels the reconnection, which Python
    3.11's wait_for could swallow, leaving it retrying forever."""

    async def main() -> None:
        proc, address = start_scheduler(free_port())
        try:
            worker = await Worker(address, nthreads=1, dashboard_address=None).start()
            proc.terminate()
            while worker.status == "running":
                await asyncio.sleep(0)
            start = time.monotonic()
            await asyncio.wait_for(worker.close(), 30)
            assert time.monotonic() - start < 5
        finally:
            proc.kill()
            proc.wait()

    asyncio.run(main())


def test_the_death_timeout_ends_workers_and_their_nannies() -> None:
    with processes() as procs:
        sched, address = start_scheduler(0)
        procs.append(sched)
        nanny = start_worker(address, "--nanny", "--death-timeout", "1s")
        bare = start_worker(address, "--no-nanny", "--death-timeout", "1s")
        procs += [nanny, bare]
        eventually(lambda: n_workers(address) == 2 and len(child_pids(nanny)) == 1, TIMEOUT)
        [child] = child_pids(nanny)
        sched.kill()
        t0 = time.monotonic()
        assert nanny.wait(TIMEOUT) == 0 and bare.wait(TIMEOUT) == 0
        print(f"worker and nanny exited {time.monotonic() - t0:.2f} s after the scheduler died")
        assert not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie"
        for p in (nanny, bare):
            assert p.stderr is not None
            assert "no scheduler at" in p.stderr.read()
        # The first connection is bounded too.
        t0 = time.monotonic()
        lonely = start_worker(
            f"tcp://127.0.0.1:{free_port()}", "--no-nanny", "--death-timeout", "1"
        )
        procs.append(lonely)
        assert lonely.wait(TIMEOUT) == 1
        assert time.monotonic() - t0 < 10
        assert lonely.stderr is not None and "death timeout" in lonely.stderr.read()


def test_a_stopped_scheduler_fails_a_blocked_result_within_the_timeout() -> None:
    env = {**os.environ, "DASK_SQUALL__COMM__TIMEOUTS__TCP": "2s"}
    with processes() as procs, dask.config.set({"squall.comm.timeouts.tcp": "2s"}):
        sched, address = start_scheduler(0, env)
        procs.append(sched)
        worker = start_worker(address, "--no-nanny", env=env)
        procs.append(worker)
        eventually(lambda: n_workers(address) == 1, TIMEOUT)
        with Client(address) as c:
            # A stall shorter than the timeout is only a slow scheduler.
            os.kill(sched.pid, signal.SIGSTOP)
            time.sleep(1)
            os.kill(sched.pid, signal.SIGCONT)
            assert c.submit(inc, 1).result(timeout=TIMEOUT) == 2
            # Pending futures that no worker can run: had one started, the worker's
            # only thread would still be busy with it after the scheduler came back.
            never = {"resources": {"absent": 1}}
            slow, other = c.submit(time.sleep, 60, **never), c.submit(time.sleep, 61, **never)
            os.kill(sched.pid, signal.SIGSTOP)
            t0 = time.monotonic()
            with pytest.raises(FutureCancelledError) as e:
                slow.result(timeout=TIMEOUT)
            waited = time.monotonic() - t0
            print(f"result() raised {waited:.2f} s after the scheduler stopped")
            assert 1.5 < waited < 5
            assert "scheduler-connection-lost" in str(e.value)
            assert address in str(e.value) and "squall.comm.timeouts.tcp" in str(e.value)
            with pytest.raises(FutureCancelledError, match="scheduler-connection-lost"):
                wait([other], timeout=1)  # raises at once, as distributed's
            assert list(as_completed([other], timeout=1)) == [other]
        time.sleep(1)  # the worker noticed too, and is reconnecting
        os.kill(sched.pid, signal.SIGCONT)
        t0 = time.monotonic()
        eventually(lambda: n_workers(address) == 1, TIMEOUT)
        print(f"the worker registered again {time.monotonic() - t0:.2f} s after SIGCONT")
        with Client(address) as c:
            assert c.submit(inc, 1).result(timeout=TIMEOUT) == 2
        assert sched.poll() is None and worker.poll() is None
        worker.terminate()
        assert worker.wait(TIMEOUT) == 0
        assert worker.stderr is not None
        logged = worker.stderr.read()
        assert logged.count("lost the scheduler") == 1  # not at the short stall
        assert "no message from it" in logged


def test_a_stall_of_the_watching_process_is_not_the_peers_silence() -> None:
    async def main() -> None:
        silent: list[float] = []
        pings: list[float] = []
        loop = asyncio.get_running_loop()
        dog = liveness.Watchdog(0.4, lambda: pings.append(loop.time()), silent.append)
        time.sleep(1.0)  # this loop stalls past the timeout: nothing was read meanwhile
        await asyncio.sleep(0.15)
        assert silent == []
        t0 = loop.time()
        while not silent:
            await asyncio.sleep(0.01)
        assert 0.2 < loop.time() - t0 < 0.6 and silent[0] >= 0.4
        assert pings  # it asked the peer to answer first
        dog.stop()

    asyncio.run(main())


def test_timeouts_from_arguments_and_config() -> None:
    assert liveness.death_timeout() is None  # Dask's default: try forever
    assert liveness.death_timeout("1.5s") == 1.5 and liveness.death_timeout(2) == 2.0
    with pytest.raises(ValueError, match="death timeout"):
        liveness.death_timeout("-1s")
    with dask.config.set({"squall.worker.death-timeout": "3s", "squall.comm.timeouts.tcp": 5}):
        assert liveness.death_timeout() == 3.0 and liveness.silence_timeout() == 5.0
    assert liveness.silence_timeout() == 30.0  # Dask's distributed.comm.timeouts.tcp
    with (
        dask.config.set({"squall.comm.timeouts.tcp": 0}),
        pytest.raises(config.ConfigError, match=r"squall\.comm\.timeouts\.tcp"),
    ):
        liveness.silence_timeout()
