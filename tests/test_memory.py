"""Worker memory (docs/runtime.md#memory): the limit's forms, the thresholds' sources,
spilling with transparent read-back, get-data of spilled keys, pause, and the nanny
restarting a worker whose task outgrows the limit; on real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import dask
import psutil
import pytest
from conftest import cli_scheduler, eventually
from prometheus_client.parser import text_string_to_metric_families

from squall import Client, wait
from squall.config import ConfigError
from squall.deploy.local import LocalCluster
from squall.errors import KilledWorker
from squall.worker.memory import (
    install_frame_size,
    parse_memory_limit,
    system_memory,
    thresholds,
)
from squall.worker.worker import Worker

# Worker processes cannot import this test module: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

MB = 1_000_000


# ----- the limit and the thresholds -------------------------------------------------


def test_memory_limit_forms() -> None:
    system = system_memory()
    assert parse_memory_limit(2_000_000_000, 1) == min(2_000_000_000, system)
    assert parse_memory_limit("4GB", 1) == min(4_000_000_000, system)
    assert parse_memory_limit("1 GiB", 1) == min(2**30, system)
    assert parse_memory_limit("300MB", 1) == 300 * MB
    assert parse_memory_limit(0.5, 1) == int(0.5 * system)
    assert parse_memory_limit("0.25", 1) == int(0.25 * system)
    assert parse_memory_limit(1, 1) == system  # 1 is a fraction, as in Dask
    assert parse_memory_limit("auto", 1, cores=4) == int(system / 4)
    assert parse_memory_limit("auto", 8, cores=4) == system
    for none in (0, "0", None, 0.0):
        assert parse_memory_limit(none, 1) == 0
    assert parse_memory_limit(100 * system, 1) == system  # capped
    for bad in ("lots", -1, "-5GB", True):
        with pytest.raises(ValueError):
            parse_memory_limit(bad, 1)


def test_thresholds_squall_keys_win_over_dasks_then_dasks_defaults() -> None:
    assert thresholds() == (0.6, 0.7, 0.8, 0.95, 0.1)
    with dask.config.set(
        {
            "distributed.worker.memory.target": False,
            "distributed.worker.memory.spill": 0.5,
            "distributed.worker.memory.monitor-interval": "20ms",
            "squall.worker.memory.spill": 0.65,
            "squall.worker.memory.terminate": False,
        }
    ):
        assert thresholds() == (None, 0.65, 0.8, None, 0.02)
    with (
        dask.config.set({"squall.worker.memory.pause": "high"}),
        pytest.raises(ConfigError, match=r"squall\.worker\.memory\.pause"),
    ):
        thresholds()


def test_a_worker_without_a_limit_has_no_monitor() -> None:
    assert Worker("tcp://127.0.0.1:1", memory_limit=0).memory is None
    worker = Worker("tcp://127.0.0.1:1", memory_limit="1GB")
    assert worker.memory_limit == min(10**9, system_memory())
    assert worker.memory is not None


def test_the_cli_takes_memory_limit_strings() -> None:
    cmd = [sys.executable, "-m", "squall.worker", "--nthreads", "1", "--memory-limit", "1.5GB"]
    with cli_scheduler() as address, Client(address) as c:
        worker = subprocess.Popen([*cmd, address])
        try:
            eventually(lambda: len(c.nthreads()) == 1, timeout=30)
            [info] = c.scheduler_info()["workers"].values()
            assert info["memory_limit"] == min(1_500_000_000, system_memory())
        finally:
            worker.terminate()
            worker.wait(timeout=20)


# ----- spilling ---------------------------------------------------------------------


def make(i: int, nbytes: int) -> Any:
    import numpy as np

    return np.full(nbytes // 8, i, dtype=np.float64)


def first(a: Any) -> float:
    return float(a[0])


def spilled_keys(dask_worker: Any) -> list[Any]:
    return [k for k, v in dask_worker.data.items() if type(v).__name__ == "Spilled"]


@contextmanager
def peak_rss(pids: list[int]) -> Iterator[dict[int, int]]:
    """Samples the processes' RSS every 20 ms; yields the peaks so far."""
    peaks = dict.fromkeys(pids, 0)
    done = threading.Event()

    def sample() -> None:
        procs = [psutil.Process(p) for p in pids]
        while not done.is_set():
            for p in procs:
                peaks[p.pid] = max(peaks[p.pid], p.memory_info().rss)
            time.sleep(0.02)

    t = threading.Thread(target=sample)
    t.start()
    try:
        yield peaks
    finally:
        done.set()
        t.join()


def spill_and_read_back(n: int, nbytes: int, limit: str) -> None:
    """``n`` results of ``nbytes`` on two workers of ``limit``: all computed, used by
    dependents and gathered, spilled bytes reported, no worker over terminate."""
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, memory_limit=limit) as cluster,
        Client(cluster) as c,
    ):
        pids = dict(c.run(os.getpid))
        with peak_rss(list(pids.values())) as peaks:
            t0 = time.monotonic()
            futures = c.map(make, range(n), nbytes=nbytes)
            total = c.submit(sum, c.map(first, futures))
            assert total.result(timeout=120) == sum(range(n))
            computed = time.monotonic() - t0
            eventually(lambda: all(w["metrics"]["spilled_count"] for w in workers(c)), 10)
            infos = workers(c)
            spilled = {a: spilled_keys_of(c, a) for a in pids}
            assert all(spilled.values())
            t1 = time.monotonic()
            for i, f in enumerate(futures):  # get-data, most of them from disk
                value = f.result(timeout=60)
                assert value.shape == (nbytes // 8,) and value[0] == value[-1] == i
            gathered = time.monotonic() - t1
        assert dict(c.run(os.getpid)) == pids  # no worker was restarted
        limit_bytes = cluster.memory_limit
        for info in infos:
            metrics = info["metrics"]
            assert info["memory_limit"] == limit_bytes
            assert metrics["spilled_bytes"]["memory"] >= nbytes  # at least one result
            assert metrics["spilled_bytes"]["disk"] >= nbytes
            assert metrics["unmanaged"] == metrics["memory"] - metrics["managed_bytes"]
            assert metrics["managed_bytes"] <= 0.7 * limit_bytes
        worst = max(peaks.values())
        assert worst < 0.95 * limit_bytes, (worst, limit_bytes)
        n_spilled = sum(i["metrics"]["spilled_count"] for i in infos)
        print(
            f"{n} x {nbytes / MB:.0f} MB on 2 workers of {limit}: computed in {computed:.2f} s, "
            f"{n_spilled} spilled, read back in {gathered:.2f} s, "
            f"peak RSS {worst / MB:.0f} MB ({100 * worst / limit_bytes:.0f}% of the limit)"
        )


def worker_metrics(c: Client, address: str) -> dict[tuple[str, str], float]:
    """A worker's ``/metrics`` over HTTP: {(sample name, its activity label): value}."""
    port = c.scheduler_info()["workers"][address]["services"]["dashboard"]
    host = address.removeprefix("tcp://").rsplit(":", 1)[0]
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {
        (s.name, s.labels.get("activity", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def workers(c: Client) -> list[dict[str, Any]]:
    return list(c.scheduler_info()["workers"].values())


def spilled_keys_of(c: Client, address: str) -> list[Any]:
    return c.run(spilled_keys, workers=[address])[address]


def test_results_beyond_the_limit_spill_and_are_read_back() -> None:
    spill_and_read_back(60, 20 * MB, "400MB")


@pytest.mark.slow
def test_thirty_100mb_results_on_two_1gb_workers() -> None:
    spill_and_read_back(30, 100 * MB, "1GB")


def test_get_data_serves_spilled_keys_as_stored() -> None:
    with (
        dask.config.set({"squall.worker.memory.target": 0.3}),
        LocalCluster(n_workers=1, threads_per_worker=1, memory_limit="400MB") as cluster,
        Client(cluster) as c,
    ):
        futures = c.map(make, range(12), nbytes=20 * MB)
        c.gather(futures[-1:])
        [address] = c.run(os.getpid)
        eventually(lambda: len(spilled_keys_of(c, address)) >= 5)
        on_disk = set(spilled_keys_of(c, address))
        spilled = [(i, f) for i, f in enumerate(futures) if f.key in on_disk]
        for i, f in spilled:  # one by one: each reply holds the bytes it serves
            assert f.result(timeout=30)[0] == i
        i, f = spilled[0]
        assert c.submit(first, f).result(timeout=30) == i  # a dependent loads it
        # Read back for get-data, they stay spilled (no copy kept in memory).
        assert on_disk <= set(spilled_keys_of(c, address))
        # The worker's /metrics counts those writes and reads, as distributed's.
        m = worker_metrics(c, address)
        assert m["dask_worker_spill_count_total", "disk-write"] >= len(on_disk)
        assert m["dask_worker_spill_count_total", "disk-read"] >= len(spilled) + 1
        for activity in ("disk-write", "disk-read"):
            count = m["dask_worker_spill_count_total", activity]
            assert m["dask_worker_spill_bytes_total", activity] >= count * 20 * MB
            assert m["dask_worker_spill_time_seconds_total", activity] > 0
        del futures, spilled, f
        eventually(lambda: not spilled_keys_of(c, address))  # freed: files deleted
        scratch = c.run(lambda dask_worker: dask_worker.memory.store.directory)[address]
        assert os.listdir(scratch) == []


# ----- pause ------------------------------------------------------------------------


def hold_memory(fraction: float, limit: int, seconds: float) -> float:
    """Take the process to ``fraction`` of ``limit``, hold it, free it; returns when."""
    import numpy as np

    rss = psutil.Process().memory_info().rss
    block = np.ones(max(0, int(fraction * limit) - rss) // 8)
    time.sleep(seconds)
    del block
    return time.time()


def started() -> float:
    return time.time()


def inc(x: int) -> int:
    return x + 1


def test_a_paused_worker_starts_no_task_until_memory_falls() -> None:
    with (
        LocalCluster(n_workers=1, threads_per_worker=2, memory_limit="400MB") as cluster,
        Client(cluster) as c,
    ):
        done = c.submit(inc, 41)
        wait([done])
        hog = c.submit(hold_memory, 0.87, cluster.memory_limit, 3.0)
        eventually(lambda: workers(c)[0]["status"] == "paused", timeout=15)
        other = c.submit(started)  # a free thread, but the worker is paused
        # As distributed's, run and the queries still reach a paused worker.
        assert list(c.run(os.getpid)) == list(c.nthreads()) == list(c.scheduler_info()["workers"])
        assert done.result(timeout=10) == 42  # paused, it still serves get-data
        freed = hog.result(timeout=30)
        assert other.result(timeout=30) >= freed
        eventually(lambda: workers(c)[0]["status"] == "running")
        assert c.submit(inc, 1).result(timeout=10) == 2


# ----- terminate ---------------------------------------------------------------------


def hog() -> None:
    """Grow without bound (each step touched, so resident), as a runaway task does."""
    import numpy as np

    blocks = []
    for _ in range(100):
        blocks.append(np.ones(50 * MB // 8))
        time.sleep(0.02)


def test_a_task_outgrowing_the_limit_restarts_its_worker_and_errs() -> None:
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, memory_limit="300MB") as cluster,
        Client(cluster) as c,
    ):
        others = c.map(inc, range(200))
        t0 = time.monotonic()
        bad = c.submit(hog)
        with pytest.raises(KilledWorker) as info:
            bad.result(timeout=60)
        erred = time.monotonic() - t0
        assert info.value.key == bad.key
        # Only the task running when the nanny killed its worker is a suspect
        # (tests/test_nanny.py): every other task completes.
        assert c.gather(others) == [i + 1 for i in range(200)]
        eventually(lambda: len(c.nthreads()) == 2, timeout=30)
        print(
            f"memory hog: KilledWorker after {erred:.2f} s, cluster full again "
            f"{time.monotonic() - t0:.2f} s after submit"
        )
        assert c.submit(inc, 1).result(timeout=30) == 2
        assert len(cluster.worker_processes) == 2  # the nannies stayed


def test_a_worker_killed_for_memory_is_replaced() -> None:
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, memory_limit="300MB") as cluster,
        Client(cluster) as c,
    ):
        [(address, pid)] = c.run(os.getpid).items()
        t0 = time.monotonic()
        bad = c.submit(hog)
        eventually(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie")
        killed = time.monotonic()
        eventually(lambda: set(c.nthreads()) - {address} != set(), timeout=30)
        print(
            f"worker over terminate: killed {killed - t0:.2f} s after submit, replacement "
            f"registered {time.monotonic() - killed:.2f} s after the kill"
        )
        assert cluster.memory_limit == 300 * MB
        del bad


def test_frames_measure_as_dask_measures_them() -> None:
    """The worker's measure of a DataFrame gives dask's figure, whatever the columns."""
    import numpy as np
    import pandas as pd
    from dask.sizeof import sizeof

    g = np.arange(250, dtype=np.int64)
    base = pd.DataFrame({"k": g % 7, "x": g.astype(np.float64)})
    frames = [
        base,
        base.iloc[5:50],
        base.iloc[:0],
        pd.DataFrame(index=range(5)),
        pd.DataFrame({"a": g, "b": g.astype(float), "c": g, "d": g.astype("int32")}),
        pd.DataFrame({"t": pd.to_datetime(g), "d": pd.to_timedelta(g, "s"), "b": g > 3}),
        pd.DataFrame({"s": ["a"] * 10, "k": range(10)}),  # object: dask's own
        pd.DataFrame([[1, 2]], columns=["a", "a"]),  # repeated labels: dask's own
        pd.DataFrame({"c": pd.Categorical(["x", "y"] * 5)}),
    ]
    before = [sizeof(f) for f in frames]
    install_frame_size()
    install_frame_size()  # once is enough: not wrapped twice
    assert [sizeof(f) for f in frames] == before
