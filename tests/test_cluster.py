"""End to end over real processes: LocalCluster, the CLI programs, a worker killed."""

from __future__ import annotations

import asyncio
import contextlib
import operator
import os
import select
import signal
import subprocess
import sys
import time
import traceback

import cloudpickle
import dask
import psutil
import pytest
from conftest import cli_scheduler

import squall
from squall import Client
from squall.deploy.lifeline import STDIN_CLOSED_GRACE
from squall.deploy.local import LocalCluster
from squall.deploy.shape import default_shape
from squall.protocol.comm import CommError

# Worker processes cannot import this test module: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def inc(x: int) -> int:
    return x + 1


def div(a: float, b: float) -> float:
    return a / b


def slow_inc(x: int) -> int:
    time.sleep(0.02)
    return x + 1


def test_default_shape_follows_dask() -> None:
    assert default_shape(2) == (2, 1)
    assert default_shape(16) == (4, 4)


def test_client_starts_and_stops_its_own_local_cluster() -> None:
    with Client() as client:
        cluster = client.connection.own_cluster
        assert isinstance(cluster, LocalCluster)
        assert len(cluster.scheduler_info()["workers"]) == cluster.n_workers
        assert client.submit(inc, 1).result(timeout=30) == 2
        procs = cluster.worker_processes
    assert all(p.poll() is not None for p in procs)


def test_a_worker_that_cannot_start_fails_the_cluster_at_once() -> None:
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"worker process \d+ exited with code 2"):
        LocalCluster(n_workers=1, resources={"GPU": "many"}, timeout=30)  # type: ignore[dict-item]
    assert time.monotonic() - start < 10, "not after the 30 s timeout"


def test_waiting_for_workers_of_a_stopped_scheduler_is_bounded() -> None:
    with LocalCluster(n_workers=1, threads_per_worker=1) as cluster:
        assert cluster.scheduler_process is not None
        cluster.scheduler_process.send_signal(signal.SIGSTOP)
        try:
            start = time.monotonic()
            with (
                dask.config.set({"squall.comm.timeouts.connect": "1s"}),
                pytest.raises((squall.TimeoutError, CommError), match=r"127\.0\.0\.1"),
            ):
                cluster.wait_for_workers(2, timeout=1)
            assert time.monotonic() - start < 5
        finally:
            cluster.scheduler_process.send_signal(signal.SIGCONT)


def test_map_gather_and_dependencies_across_workers() -> None:
    with LocalCluster(n_workers=2, threads_per_worker=1) as cluster, Client(cluster) as c:
        futures = c.map(inc, range(500))
        assert c.gather(futures) == list(range(1, 501))
        total = c.submit(sum, futures)
        assert total.result(timeout=30) == sum(range(1, 501))
        x = c.submit(operator.add, futures[0], futures[-1])
        assert x.result(timeout=30) == 1 + 500
        workers = {w["address"] for w in cluster.scheduler_info()["workers"]}
        assert len(workers) == 2


def test_errors_carry_the_remote_traceback() -> None:
    with LocalCluster(n_workers=1, threads_per_worker=1) as cluster, Client(cluster) as c:
        f = c.submit(div, 1, 0)
        with pytest.raises(ZeroDivisionError):
            f.result(timeout=30)
        frames = "".join(traceback.format_tb(f.traceback()))
        # The source line shows only where the code's file is known: cloudpickle >= 3.1.3
        # names functions pickled by value "<dynamic-code>".
        assert "in div" in frames


def test_worker_killed_mid_graph_results_still_correct() -> None:
    with LocalCluster(n_workers=2, threads_per_worker=1) as cluster, Client(cluster) as c:
        futures = c.map(slow_inc, range(200))
        total = c.submit(sum, futures)
        time.sleep(0.5)
        os.kill(min(c.run(os.getpid).items())[1], signal.SIGKILL)  # a worker, not its nanny
        assert total.result(timeout=60) == sum(range(1, 201))


def squall_processes() -> set[int]:
    """This process's descendants running squall's scheduler or worker."""
    found = set()
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if any(part.startswith("squall.") for part in p.cmdline()):
                found.add(p.pid)
    return found


def test_asynchronous_client_with_its_own_cluster() -> None:
    before = squall_processes()
    # As distributed: not outside a running loop, and nothing is started then.
    with pytest.raises(RuntimeError, match="without a running loop"):
        Client(asynchronous=True)
    assert squall_processes() == before

    async def main() -> tuple[set[int], set[int]]:
        async with Client(asynchronous=True) as c:
            assert await c.submit(inc, 1) == 2
            first = squall_processes() - before
        c = await Client(asynchronous=True)
        assert await c.submit(inc, 2) == 3
        second = squall_processes() - before
        await c.close()
        return first, second

    first, second = asyncio.run(asyncio.wait_for(main(), 120))
    assert first and second  # each started a cluster, and closing the client stopped it
    assert not squall_processes() & (first | second)


def gone(pid: int) -> bool:
    """Exited (a zombie nobody reaped yet counts)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def pids_from(proc: subprocess.Popen[str], timeout: float = 60) -> list[int]:
    """The pids ``proc`` prints on its first line."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "no pids printed"
    return [int(pid) for pid in proc.stdout.readline().split()]


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)


def test_local_cluster_processes_end_with_the_process_that_started_them() -> None:
    # The parent forks a child that lives on: a fork must not keep the cluster alive.
    program = """if True:
        import os, sys, time
        from squall import Client
        cluster = Client().connection.own_cluster
        if os.fork():
            print(cluster.scheduler_process.pid, *[p.pid for p in cluster.worker_processes])
            sys.stdout.flush()
            time.sleep(120)
        else:
            time.sleep(30)
    """
    parent = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        pids = pids_from(parent)
        assert len(pids) == 1 + default_shape(os.cpu_count() or 1)[0]
        # The nannies' workers, before the forked child (the last pid).
        pids = [w.pid for n in pids[1:] for w in psutil.Process(n).children()] + pids
        assert len(pids) == 1 + 2 * default_shape(os.cpu_count() or 1)[0]
        forked = [c.pid for c in psutil.Process(parent.pid).children() if c.pid not in pids]
        assert len(forked) == 1
        pids += forked
        parent.kill()  # SIGKILL: nothing of the parent's runs
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while not all(map(gone, pids[:-1])):
            assert time.monotonic() < deadline, "LocalCluster processes outlived their parent"
            time.sleep(0.05)
        assert not gone(forked[0])
    finally:
        parent.kill()
        parent.wait(timeout=10)
        kill_all(pids)


def test_a_worker_stuck_holding_the_gil_ends_with_its_parent() -> None:
    """A task stuck in C code that holds the GIL (a runaway regex) leaves no Python
    thread of its worker able to run; the worker still ends once its parent is gone,
    STDIN_CLOSED_GRACE after its stdin closed."""
    program = """if True:
        import re, sys, time
        from squall import Client, LocalCluster, fire_and_forget
        cluster = LocalCluster(n_workers=1, threads_per_worker=1, nanny=False)
        client = Client(cluster)
        fire_and_forget(client.submit(re.fullmatch, "(a+)+b", "a" * 64))
        time.sleep(1.0)  # the task has started
        print(*[p.pid for p in cluster.worker_processes], flush=True)
        time.sleep(120)
    """
    parent = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        pids = pids_from(parent)
        assert len(pids) == 1
        parent.kill()
        parent.wait(timeout=10)
        deadline = time.monotonic() + STDIN_CLOSED_GRACE + 10
        while not gone(pids[0]):
            assert time.monotonic() < deadline, "a stuck worker outlived its parent"
            time.sleep(0.1)
    finally:
        parent.kill()
        parent.wait(timeout=10)
        kill_all(pids)


def test_a_worker_started_by_hand_outlives_its_parent() -> None:
    # Only --watch-stdin (what LocalCluster passes) ties a worker to its stdin.
    with cli_scheduler() as address:
        program = (
            "import subprocess, sys, time; "
            f"w = subprocess.Popen([sys.executable, '-m', 'squall.worker', {address!r}], "
            "stdin=subprocess.PIPE); print(w.pid, flush=True); time.sleep(120)"
        )
        parent = subprocess.Popen(
            [sys.executable, "-c", program], stdout=subprocess.PIPE, text=True
        )
        pids: list[int] = []
        try:
            pids = pids_from(parent)
            parent.kill()  # the worker's stdin reaches end of file
            parent.wait(timeout=10)
            time.sleep(0.5)  # a watching process would be shutting down by now
            with Client(address) as c:
                assert c.submit(inc, 1).result(timeout=30) == 2  # the worker still runs
            assert not gone(pids[0])
        finally:
            parent.kill()
            parent.wait(timeout=10)
            kill_all(pids)


def test_cli_programs() -> None:
    with cli_scheduler() as address:
        worker = subprocess.Popen(
            [sys.executable, "-m", "squall.cli", "worker", address, "--nthreads", "2"]
        )
        try:
            with Client(address) as c:
                assert c.submit(inc, 41).result(timeout=30) == 42
        finally:
            worker.send_signal(signal.SIGINT)
            assert worker.wait(timeout=20) == 0
    bad = subprocess.run(
        [sys.executable, "-m", "squall.cli", "scheduler", "--port", "70000"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode != 0 and "invalid address" in bad.stderr


def test_package_exports() -> None:
    assert squall.Client is Client and squall.LocalCluster is LocalCluster
