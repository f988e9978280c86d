from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import dask.config
import psutil
import pytest

import squall
from squall.deploy.lifeline import lifeline
from squall.protocol import update_graph


def pytest_configure(config: pytest.Config) -> None:
    """Many schedulers run during the tests, some at once: each serves its dashboard on
    a free port (processes started by tests inherit this), not all on 8787."""
    os.environ["DASK_SQUALL__SCHEDULER__DASHBOARD__ADDRESS"] = ":0"
    dask.config.set({"squall.scheduler.dashboard.address": ":0"})


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Processes a test started and did not stop (a test that failed before its cleanup)
    must not outlive the run: they would hold ports and CPU under the next runs."""
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()


@pytest.fixture
def sched() -> squall.core.Scheduler:
    return squall.core.Scheduler({"validate": True})


def map_wire(n: int, prefix: str = "inc") -> tuple[bytes, int, int]:
    """``(payload, n, keys_bytes)`` of the ``update-graph`` of a ``client.map`` of n tasks
    keyed ``{prefix}-{i}``, for ``Scheduler.submit_wire``."""
    keys = [f"{prefix}-{i}" for i in range(n)]
    n, keys_bytes, payload, _ = update_graph.encode(keys, [b"f"] * n)
    return payload, n, keys_bytes


def submit_map(s: squall.core.Scheduler, client: int, n: int, *, now: float) -> bytes:
    """A ``client.map`` of n tasks keyed ``inc-{i}``, submitted as the scheduler receives
    it (ordered as a map is); the task ids, packed."""
    return s.submit_wire(client, *map_wire(n), now=now, order="sequential")


@pytest.fixture(scope="module")
def cluster() -> Iterator[squall.LocalCluster]:
    """A cluster of 2 workers x 1 thread shared by a module's tests."""
    with squall.LocalCluster(n_workers=2, threads_per_worker=1) as cluster:
        yield cluster


@pytest.fixture
def client(cluster: squall.LocalCluster) -> Iterator[squall.Client]:
    """A client of the module's ``cluster`` (this one, or the module's own), one per test."""
    with squall.Client(cluster) as c:
        yield c


def start_scheduler(*flags: str, **popen: Any) -> tuple[subprocess.Popen[str], str]:
    """``squall scheduler --port 0 FLAGS`` in a subprocess (``popen``: more
    ``subprocess.Popen`` arguments, e.g. ``stderr=``, ``env=``) and the address it prints.
    It ends with the test run, however that ends (``--watch-stdin`` on the run's
    lifeline), so a failed or killed test cannot leave it running."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "squall.cli",
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--watch-stdin",
            *flags,
        ],
        stdin=lifeline(),
        stdout=subprocess.PIPE,
        text=True,
        **popen,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().rsplit(" ", 1)[-1].strip()


def start_worker(address: str, *flags: str, **popen: Any) -> subprocess.Popen[bytes]:
    """``squall worker ADDRESS FLAGS`` in a subprocess, ending with the test run as
    :func:`start_scheduler`'s scheduler does."""
    return subprocess.Popen(
        [sys.executable, "-m", "squall.cli", "worker", address, "--watch-stdin", *flags],
        stdin=lifeline(),
        **popen,
    )


@contextmanager
def cli_scheduler() -> Iterator[str]:
    """``squall scheduler --port 0`` in a subprocess; yields its address and checks it
    exits cleanly on SIGTERM."""
    proc, address = start_scheduler()
    try:
        yield address
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


def eventually(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait for ``cond()`` to hold, polling; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)
