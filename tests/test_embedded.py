"""``LocalCluster(processes=False)``, ``Client.cluster`` and ``close(timeout=)``."""

from __future__ import annotations

import os
import signal
import socket
import time

import dask.array as da
import numpy as np
import psutil
import pytest
from conftest import eventually

from squall import Client, LocalCluster
from squall.protocol import comm


def listening(address: str) -> bool:
    host, port = comm.parse_address(address)
    with socket.socket() as s:
        return s.connect_ex((host, port)) == 0


def inc(x: int) -> int:
    return x + 1


def test_an_embedded_cluster_runs_in_this_process() -> None:
    children = set(psutil.Process().children(recursive=True))
    with LocalCluster(processes=False, n_workers=2, threads_per_worker=2) as cluster:
        assert set(psutil.Process().children(recursive=True)) == children
        assert cluster.worker_processes == [] and cluster.scheduler_process is None
        with Client(cluster) as client:
            assert client.cluster is cluster
            assert client.nthreads() == dict.fromkeys(client.nthreads(), 2)
            assert len(client.nthreads()) == 2
            assert client.gather(client.map(inc, range(1000))) == list(range(1, 1001))
            x = da.random.default_rng(0).random((400, 400), chunks=100)
            expected = (x.T @ x).compute(scheduler="sync")
            assert np.allclose(client.compute(x.T @ x).result(), expected)
            # Tasks see their worker, which is an object of this process.
            assert client.submit(lambda: os.getpid()).result(timeout=10) == os.getpid()
        address = cluster.scheduler_address
    assert not listening(address)


def test_an_embedded_cluster_replaces_workers_on_restart() -> None:
    with (
        LocalCluster(processes=False, n_workers=2, threads_per_worker=1) as cluster,
        Client(cluster) as client,
    ):
        before = set(client.nthreads())
        assert client.submit(inc, 1).result(timeout=10) == 2
        client.restart(timeout=20)
        after = set(client.nthreads())
        assert len(after) == 2 and not after & before
        assert client.submit(inc, 2).result(timeout=10) == 3


def test_client_without_address_passes_cluster_options_and_owns_the_cluster() -> None:
    with Client(processes=False, n_workers=1, threads_per_worker=3) as client:
        cluster = client.cluster
        assert isinstance(cluster, LocalCluster) and not cluster.processes
        assert list(client.nthreads().values()) == [3]
        address = client.address
    assert not listening(address)


def test_client_of_an_address_has_no_cluster(cluster: LocalCluster) -> None:
    with Client(cluster.scheduler_address) as client:
        assert client.cluster is None


def test_close_with_a_timeout_kills_workers_that_do_not_stop() -> None:
    cluster = LocalCluster(n_workers=1, threads_per_worker=1, nanny=False)
    try:
        (worker,) = cluster.worker_processes
        os.kill(worker.pid, signal.SIGSTOP)  # SIGTERM cannot be handled now
        start = time.monotonic()
        cluster.close(timeout=1)
        assert time.monotonic() - start < 8
        assert worker.poll() is not None
    finally:
        cluster.close()


@pytest.mark.parametrize("processes", [True, False])
def test_closing_twice_is_harmless(processes: bool) -> None:
    cluster = LocalCluster(n_workers=1, processes=processes, nanny=False)
    cluster.close(timeout=10)
    cluster.close()
    eventually(lambda: not listening(cluster.scheduler_address))


def test_an_embedded_cluster_scales_up_and_down_keeping_results() -> None:
    with (
        LocalCluster(processes=False, n_workers=1, threads_per_worker=1) as cluster,
        Client(cluster) as client,
    ):
        cluster.scale(3)
        cluster.wait_for_workers(3, timeout=20)
        futures = client.map(inc, range(30))
        assert client.gather(futures) == list(range(1, 31))
        cluster.scale(1)
        eventually(lambda: len(client.nthreads()) == 1, timeout=20)
        assert client.gather(futures) == list(range(1, 31))  # moved, not lost
