"""``Client.get_scheduler_logs`` and ``get_worker_logs`` on a real cluster: the lines a
failing task caused, newest first (as distributed's); a LocalCluster's processes keep
INFO lines while printing only warnings; a worker that does not answer is reported."""

from __future__ import annotations

import asyncio
import logging
import sys
import time

import cloudpickle  # type: ignore[import-untyped]
import dask
import pytest

from squall import Client, LocalCluster
from squall.log_ring import LogRing

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def fail(x: int) -> float:
    return 1 / x


def block_event_loop(seconds: float) -> None:
    """Run in a worker by ``Client.run``: its event loop stops answering for a while."""
    asyncio.get_running_loop().call_soon(time.sleep, seconds)


def test_logs_hold_the_lines_a_failing_task_caused(cluster: LocalCluster) -> None:
    with Client(cluster) as client:
        bad = client.submit(fail, 0, key="failing-logged")
        assert isinstance(bad.exception(timeout=20), ZeroDivisionError)
        where = client.who_has(bad)  # no holder: find the worker from its log
        assert not any(where.values())
        scheduler = client.get_scheduler_logs()
        assert all(isinstance(e, tuple) and len(e) == 2 for e in scheduler)
        level, line = scheduler[0]
        assert level == "WARNING" and "'failing-logged' failed on tcp://" in line
        assert client.get_scheduler_logs(n=1) == [scheduler[0]]
        workers = client.get_worker_logs()
        assert set(workers) == set(client.nthreads())
        failed = [a for a, logs in workers.items() if any("failing-logged" in m for _, m in logs)]
        assert len(failed) == 1 and failed[0] in line
        level, message = workers[failed[0]][0]
        assert level == "WARNING" and "ZeroDivisionError" in message
        only = client.get_worker_logs(1, failed)  # distributed's order: n, workers, nanny
        assert only == {failed[0]: [workers[failed[0]][0]]}
        nannies = client.get_worker_logs(nanny=True)
        assert set(nannies) == set(workers)
        assert all(isinstance(logs, list) for logs in nannies.values())


def test_local_processes_keep_info_lines_and_print_only_warnings(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with LocalCluster(n_workers=1, threads_per_worker=1) as cluster, Client(cluster) as client:
        assert client.submit(fail, 1).result(timeout=20) == 1.0
        scheduler = client.get_scheduler_logs()
        [worker] = client.get_worker_logs().values()
        [nanny] = client.get_worker_logs(nanny=True).values()
    assert any(lv == "INFO" and "joined" in line for lv, line in scheduler)
    assert any(lv == "INFO" and "registered with" in line for lv, line in worker)
    assert any(lv == "INFO" and "started worker process" in line for lv, line in nanny)
    # The cluster's own one-request connections are no clients: not logged at INFO.
    assert not any("-request" in line for _, line in scheduler)
    printed = capfd.readouterr().err  # the processes write to this process's stderr
    assert " INFO " not in printed, printed


def test_a_worker_that_does_not_answer_is_reported() -> None:
    with (
        dask.config.set({"squall.comm.timeouts.connect": "1s"}),
        LocalCluster(n_workers=2, threads_per_worker=1) as cluster,
        Client(cluster) as client,
    ):
        stuck, fine = sorted(client.nthreads())
        client.run(block_event_loop, 4, workers=[stuck])
        start = time.monotonic()
        logs = client.get_worker_logs()
        assert time.monotonic() - start < 3.5
        assert isinstance(logs[fine], list)
        [(level, why)] = logs[stuck]
        assert level == "ERROR" and f"no logs from {stuck}" in why


def test_the_ring_keeps_the_newest_lines() -> None:
    ring = LogRing(3)
    log = logging.getLogger("squall.test-ring")
    log.addHandler(ring)
    log.setLevel(logging.INFO)
    try:
        for i in range(5):
            log.info("line %d", i)
    finally:
        log.removeHandler(ring)
    assert [(lv, m.rsplit(": ", 1)[1]) for lv, m in ring.lines] == [
        ("INFO", "line 2"),
        ("INFO", "line 3"),
        ("INFO", "line 4"),
    ]
    assert " INFO    squall.test-ring: line 4" in ring.lines[-1][1]
