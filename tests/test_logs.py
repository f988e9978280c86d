"""What the programs log: level names on every line, one listening line, clients
coming and going, task failures on the worker and summarised on the scheduler."""

from __future__ import annotations

import logging
import re
import signal
import sys
from pathlib import Path

import cloudpickle  # type: ignore[import-untyped]
import dask
import pytest
from conftest import eventually, start_scheduler, start_worker

from squall import Client, config
from squall.scheduler.failure_log import FailureLog

# Worker processes cannot import this test module: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

LINE = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ (DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+[\w.]+: ")


def fail(x: int) -> float:
    return 1 / x


def test_the_programs_logs(tmp_path: Path) -> None:
    sched_log, worker_log = tmp_path / "scheduler.log", tmp_path / "worker.log"
    sched, address = start_scheduler(stderr=sched_log.open("w"))
    worker = start_worker(address, "--no-nanny", stderr=worker_log.open("w"))
    try:
        with Client(address, name="log-test") as client:
            eventually(lambda: len(client.nthreads()) == 1, timeout=30)
            bad = client.submit(fail, 0, key="failing-task")
            assert isinstance(bad.exception(timeout=20), ZeroDivisionError)
        eventually(lambda: "client log-test left" in sched_log.read_text(), timeout=10)
    finally:
        for p in (worker, sched):
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=20)
    assert sched.stdout is not None
    assert "listening at" not in sched.stdout.read()  # the one line, read when it started
    logs = sched_log.read_text()
    assert "listening at" not in logs
    assert f"  Scheduler at: {address:>25}" in logs  # distributed's startup lines
    assert "client log-test connected from tcp://127.0.0.1:" in logs
    assert "task 'failing-task' failed on tcp://" in logs and "ZeroDivisionError" in logs
    wlogs = worker_log.read_text()
    assert "      Start worker at:  " in wlogs and "Waiting to connect to: " in wlogs
    assert "task 'failing-task' failed: ZeroDivisionError" in wlogs
    assert "Traceback" in wlogs and ", in fail" in wlogs  # with its traceback, once
    assert wlogs.count("task 'failing-task' failed") == 1
    for text in (logs, wlogs):
        starts = [line for line in text.splitlines() if re.match(r"^\d{4}-", line)]
        assert starts and all(LINE.match(line) for line in starts), starts


def test_failures_are_summarised_past_a_burst(caplog: pytest.LogCaptureFixture) -> None:
    log = FailureLog(window=10.0, burst=2)
    for i in range(7):
        log.failed(f"k-{i}", "tcp://w:1", "ValueError()", now=float(i))
    log.tick(11.0)
    text = caplog.text
    assert "task 'k-0' failed" in text and "task 'k-1' failed" in text
    assert "task 'k-2' failed" not in text
    assert "5 more tasks failed in the last 11 s" in text


def test_logging_config_sets_levels_per_logger() -> None:
    comm_logger = logging.getLogger("squall.comm")
    before = comm_logger.level
    try:
        with dask.config.set({"squall.logging": {"level": "INFO", "squall.comm": "debug"}}):
            config.setup_logging("INFO")
        assert comm_logger.level == logging.DEBUG
    finally:
        comm_logger.setLevel(before)
