"""A client sending a graph faster than its scheduler takes it waits, holding a bounded
backlog (docs/runtime.md#send-backlog): real processes, the scheduler stopped."""

from __future__ import annotations

import operator
import os
import signal
import threading
import time
from typing import Any

import pytest

from squall import Client, LocalCluster, wait
from squall.client import connection


def test_a_map_waits_for_a_stopped_scheduler_and_finishes_once_it_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connection, "MAX_BACKLOG", 1 << 20)
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, nanny=False) as cluster,
        Client(cluster) as client,
    ):
        assert cluster.scheduler_process is not None
        pid = cluster.scheduler_process.pid
        result: dict[str, Any] = {}
        biggest = 0
        os.kill(pid, signal.SIGSTOP)
        try:
            mapper = threading.Thread(
                target=lambda: result.update(futures=client.map(operator.neg, range(300_000)))
            )
            mapper.start()
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                biggest = max(biggest, client.connection._backlog())
                time.sleep(0.01)
            assert mapper.is_alive(), "map() returned while the scheduler took nothing"
        finally:
            os.kill(pid, signal.SIGCONT)
        mapper.join(60)
        assert not mapper.is_alive()
        # One chunk's payload (20,000 tasks) beyond the bound at most.
        assert 0 < biggest < (1 << 20) + 2 * (1 << 20)
        futures = result["futures"]
        wait(futures, timeout=60)
        assert client.gather(futures[-3:]) == [-299_997, -299_998, -299_999]


def test_a_thread_waiting_for_room_is_let_go_when_the_client_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connection, "MAX_BACKLOG", 0)
    with LocalCluster(n_workers=1, threads_per_worker=1, nanny=False) as cluster:
        client = Client(cluster)
        conn = client.connection
        assert conn._stream is not None
        conn._stream.backlog += 1  # as if one byte were never written
        waiter = threading.Thread(target=conn.wait_for_room)
        waiter.start()
        time.sleep(0.3)
        assert waiter.is_alive()
        client.close()
        waiter.join(connection.ROOM_RECHECK + 5)
        assert not waiter.is_alive()
