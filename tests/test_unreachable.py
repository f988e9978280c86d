"""A peer nobody can reach is an error within ``squall.comm.timeouts.connect``, naming
its address, never an endless retry (docs/deploy.md#across-hosts): a worker that
advertises an address where nothing listens (``--contact-address``), as a worker bound
to loopback on another host did."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from conftest import start_scheduler, start_worker

from squall import Client
from squall.protocol import comm

CONNECT = "1s"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def cluster() -> Iterator[tuple[str, str]]:
    """A scheduler, a worker others can reach, and one advertising a dead address:
    (the scheduler's address, the dead one)."""
    env = {**os.environ, "DASK_SQUALL__COMM__TIMEOUTS__CONNECT": CONNECT}
    sched, address = start_scheduler(env=env)
    dead = f"tcp://127.0.0.1:{closed_port()}"
    flags = ["--no-nanny", "--nthreads", "1"]
    workers = [
        start_worker(address, *flags, "--name", "good", env=env),
        start_worker(address, *flags, "--name", "lost", "--contact-address", dead, env=env),
    ]
    try:
        yield address, dead
    finally:
        # The workers first: one that loses its scheduler while closing reconnects.
        for p in [*workers, sched]:
            p.terminate()
            p.wait(10)


def connect(address: str) -> Client:
    """A client whose connect timeout (its bound for unreachable holders) is 1 s."""
    client = Client(address, timeout=1)
    client.wait_for_workers(2, timeout=20)
    return client


def test_gathering_from_an_unreachable_worker_errs_naming_it(cluster: tuple[str, str]) -> None:
    address, dead = cluster
    with connect(address) as c:
        future = c.submit(lambda: 42, workers=[dead])
        start = time.monotonic()
        with pytest.raises(comm.CommError, match=dead):
            future.result(timeout=30)
        assert time.monotonic() - start < 10


def test_fetching_from_an_unreachable_worker_errs_naming_it(cluster: tuple[str, str]) -> None:
    address, dead = cluster
    with connect(address) as c:
        (good,) = set(c.scheduler_info()["workers"]) - {dead}
        held = c.submit(lambda: 42, workers=[dead])
        start = time.monotonic()
        needs = c.submit(lambda x: x + 1, held, workers=[good], allow_other_workers=False)
        with pytest.raises(comm.CommError, match=dead):
            needs.result(timeout=30)
        assert time.monotonic() - start < 10


def test_a_client_waits_for_a_scheduler_still_starting() -> None:
    """As distributed's: a client started before its scheduler listens connects once
    it does, within the client's timeout."""
    port = closed_port()
    client: list[Client] = []
    thread = threading.Thread(
        target=lambda: client.append(Client(f"tcp://127.0.0.1:{port}", timeout=30))
    )
    thread.start()
    time.sleep(1.0)
    sched, address = start_scheduler("--port", str(port))
    try:
        thread.join(30)
        assert client and client[0].address == address
        client[0].close()
    finally:
        sched.terminate()
        sched.wait(20)


def test_a_client_without_a_scheduler_errs_within_its_timeout() -> None:
    address = f"tcp://127.0.0.1:{closed_port()}"
    start = time.monotonic()
    with pytest.raises(comm.ConnectError, match=f"no scheduler at {address} within"):
        Client(address, timeout=1)
    assert time.monotonic() - start < 5
