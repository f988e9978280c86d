"""The cluster lifecycle API (docs/runtime.md#cluster-lifecycle) on real processes:
graceful retirement (nothing recomputed), restarting some workers, waiting for
workers, shutdown, LocalCluster.scale/adapt and worker lifetimes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import pytest
from conftest import eventually

import squall
from squall import Client
from squall.deploy.lifeline import lifeline
from squall.deploy.local import LocalCluster

# Worker processes cannot import this test module: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def produce(log: str, i: int, nbytes: int) -> bytes:
    """A result of ``nbytes``; each execution leaves a line in ``log``."""
    with open(log, "a") as f:
        f.write(f"{i}\n")
    return bytes([i % 256]) * nbytes


def executions(log: Path) -> int:
    return len(log.read_text().split()) if log.exists() else 0


def held_on(c: Client) -> dict[str, int]:
    return {a: w["metrics"]["in_memory"] for a, w in c.scheduler_info()["workers"].items()}


@pytest.mark.parametrize("close_workers", [False, True])
def test_retire_workers_keeps_every_result_without_recomputing(
    tmp_path: Path, close_workers: bool
) -> None:
    log = tmp_path / "runs"
    with LocalCluster(n_workers=3, threads_per_worker=1) as cluster, Client(cluster) as c:
        futures = c.map(produce, [str(log)] * 30, range(30), [100_000] * 30)
        c.gather(futures)
        assert executions(log) == 30
        held = held_on(c)
        [leaving, *_] = sorted(held, key=lambda a: -held[a])
        assert held[leaving] > 0
        nanny = c.scheduler_info()["workers"][leaving]["nanny"]
        # By name (as distributed allows) or by address.
        name = c.scheduler_info()["workers"][leaving]["name"]
        retired = c.retire_workers(
            [name if close_workers else leaving], close_workers=close_workers
        )
        assert list(retired) == [leaving]
        assert retired[leaving]["nanny"] == nanny
        info = c.scheduler_info()["workers"]
        assert leaving not in info and len(info) == 2
        assert sum(w["metrics"]["in_memory"] for w in info.values()) == 30
        results = c.gather(futures)
        assert [r[0] for r in results] == list(range(30))
        assert executions(log) == 30, "a result was recomputed"
        if close_workers:  # its nanny exited too, and did not start another worker
            eventually(lambda: sum(p.poll() is None for p in cluster.worker_processes) == 2)
            time.sleep(0.5)
            assert len(c.scheduler_info()["workers"]) == 2


def test_retire_keeps_a_worker_whose_results_nobody_can_take(tmp_path: Path) -> None:
    with LocalCluster(n_workers=1, threads_per_worker=1) as cluster, Client(cluster) as c:
        future = c.submit(produce, str(tmp_path / "runs"), 1, 10)
        future.result()
        [only] = c.scheduler_info()["workers"]
        assert c.retire_workers([only]) == {}
        # The scheduler's own choice: no idle worker whose going leaves memory for the
        # data (no memory limit here), so none.
        assert c.retire_workers() == {}
        [w] = c.scheduler_info()["workers"].values()
        assert w["status"] == "running"
        assert future.result() == b"\x01" * 10


def pid() -> int:
    return os.getpid()


def test_restart_workers_restarts_only_those(tmp_path: Path) -> None:
    with LocalCluster(n_workers=2, threads_per_worker=1) as cluster, Client(cluster) as c:
        before = c.run(pid)
        info = c.scheduler_info()["workers"]
        [(first, w0), (second, _)] = sorted(info.items())
        out = c.restart_workers([w0["name"]], timeout=20)
        assert out == {w0["name"]: "OK"}
        after = c.run(pid)
        assert len(after) == 2
        assert after[second] == before[second], "the other worker was restarted"
        assert first not in after and before[first] not in after.values()
        assert c.submit(pid).result() in after.values()


def test_restart_workers_needs_a_nanny() -> None:
    with LocalCluster(n_workers=1, nanny=False) as cluster, Client(cluster) as c:
        [address] = c.scheduler_info()["workers"]
        with pytest.raises(ValueError, match="nanny"):
            c.restart_workers([address])


def test_wait_for_workers_returns_once_they_run_and_times_out_naming_how_many() -> None:
    with LocalCluster(n_workers=1, threads_per_worker=1) as cluster, Client(cluster) as c:
        c.wait_for_workers(1, timeout=5)
        start = time.monotonic()
        with pytest.raises(squall.TimeoutError, match="Only 1/2 workers arrived"):
            c.wait_for_workers(2, timeout=0.5)
        assert time.monotonic() - start < 5
        cluster.scale(2)
        c.wait_for_workers(2, timeout=20)
        assert len(c.scheduler_info()["workers"]) == 2
        with pytest.raises(ValueError):
            c.wait_for_workers(0)


def test_shutdown_closes_scheduler_workers_and_nannies() -> None:
    with LocalCluster(n_workers=2, threads_per_worker=1) as cluster:
        c = Client(cluster.scheduler_address)
        assert c.submit(pid).result() > 0
        procs = [cluster.scheduler_process, *cluster.worker_processes]
        c.shutdown()
        assert c.status == "closed"
        for p in procs:
            assert p is not None
            assert p.wait(timeout=15) == 0
        start = time.monotonic()
        cluster.close()
        assert time.monotonic() - start < 2


@pytest.mark.parametrize("nanny", [True, False])
def test_scale_up_then_down_moves_results_to_the_workers_that_stay(
    tmp_path: Path, nanny: bool
) -> None:
    log = tmp_path / "runs"
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, nanny=nanny) as cluster,
        Client(cluster) as c,
    ):
        cluster.scale(3)
        c.wait_for_workers(3, timeout=20)
        assert len(cluster.worker_processes) == 3
        futures = c.map(produce, [str(log)] * 12, range(12), [10_000] * 12)
        c.gather(futures)
        assert len(held_on(c)) == 3
        cluster.scale(1)
        assert len(cluster.worker_processes) == 1
        assert len(c.scheduler_info()["workers"]) == 1
        assert len(c.gather(futures)) == 12
        assert executions(log) == 12, "a result was recomputed"
        cluster.scale(2)
        c.wait_for_workers(2, timeout=20)
        names = {w["name"] for w in c.scheduler_info()["workers"].values()}
        assert len(names) == 2


def sleep_then(x: int, seconds: float) -> int:
    time.sleep(seconds)
    return x


def n_workers(c: Client) -> int:
    return len(c.scheduler_info()["workers"])


def test_adapt_scales_up_under_load_and_down_when_idle() -> None:
    with LocalCluster(n_workers=1, threads_per_worker=1) as cluster, Client(cluster) as c:
        adaptive = cluster.adapt(
            minimum=1, maximum=3, interval=0.1, wait_count=2, target_duration="1s"
        )
        start = time.monotonic()
        futures = c.map(sleep_then, range(40), [0.2] * 40)
        eventually(lambda: n_workers(c) == 3, timeout=20)
        up = time.monotonic() - start
        assert len(c.gather(futures)) == 40
        del futures
        start = time.monotonic()
        eventually(lambda: n_workers(c) == 1, timeout=20)
        down = time.monotonic() - start
        time.sleep(0.5)
        assert n_workers(c) == 1, "never below the minimum"
        assert len(cluster.worker_processes) == 1
        assert adaptive.close_counts == {}
        print(f"adapt reaction: up {up:.2f}s, down {down:.2f}s")


def start_worker(address: str, *flags: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "squall.worker", address, "--name", "mortal", *flags]
    return subprocess.Popen(cmd, stdin=lifeline())


def mortal(c: Client) -> dict[str, Any] | None:
    found = [w for w in c.scheduler_info()["workers"].values() if w["name"] == "mortal"]
    return found[0] if found else None


@pytest.mark.parametrize("restart", [False, True])
def test_lifetime_retires_the_worker_gracefully(tmp_path: Path, restart: bool) -> None:
    log = tmp_path / "runs"
    with LocalCluster(n_workers=1, threads_per_worker=1) as cluster, Client(cluster) as c:
        flags = ["--lifetime", "3s", "--lifetime-stagger", "0.5s"]
        proc = start_worker(cluster.scheduler_address, *flags, *["--lifetime-restart"] * restart)
        try:
            eventually(lambda: mortal(c) is not None)
            workers = c.scheduler_info()["workers"]
            [address] = [a for a, w in workers.items() if w["name"] == "mortal"]
            first = workers[address]
            futures = c.map(produce, [str(log)] * 5, range(5), [1000] * 5, workers=[address])
            c.gather(futures)
            assert held_on(c)[address] == 5
            eventually(lambda: address not in c.scheduler_info()["workers"], timeout=10)
            assert len(c.gather(futures)) == 5
            assert executions(log) == 5, "a result was recomputed"
            if restart:  # a fresh worker under the same nanny
                eventually(lambda: mortal(c) is not None, timeout=10)
                again = mortal(c)
                assert again is not None and again["nanny"] == first["nanny"]
                assert proc.poll() is None
            else:  # the nanny left with its worker
                assert proc.wait(timeout=10) == 0
                assert mortal(c) is None
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def slow_produce(log: str, i: int, seconds: float) -> bytes:
    time.sleep(seconds)
    return produce(log, i, 1000)


def test_retire_lets_running_tasks_finish_and_keeps_their_results(tmp_path: Path) -> None:
    log = tmp_path / "runs"
    with LocalCluster(n_workers=2, threads_per_worker=1) as cluster, Client(cluster) as c:
        leaving, staying = sorted(c.scheduler_info()["workers"])
        running = c.submit(slow_produce, str(log), 7, 1.0, workers=[leaving])
        eventually(lambda: c.scheduler_info()["workers"][leaving]["metrics"]["processing"] == 1)
        start = time.monotonic()
        assert list(c.retire_workers([leaving])) == [leaving]
        assert time.monotonic() - start >= 0.5, "did not wait for the running task"
        assert running.result() == b"\x07" * 1000
        assert executions(log) == 1, "the running task was rerun"
        assert list(c.scheduler_info()["workers"]) == [staying]
