"""The core through its Python face: lifecycle, batching, errors."""

from __future__ import annotations

import array

import pytest
from conftest import map_wire, submit_map

import squall


def finish_all(s: squall.core.Scheduler, cmds: squall.core.Commands, now: float) -> int:
    """Play every worker: report each dispatched task finished, all in one batch."""
    workers, tasks, runs = cmds.compute()
    n = len(tasks) // 4
    sizes = array.array("q", [8] * n).tobytes()
    assert s.tasks_finished(workers, tasks, runs, sizes, now=now) == []
    return n


def test_chain_lifecycle(sched: squall.core.Scheduler) -> None:
    c = sched.client("c")
    w = sched.add_worker("tcp://127.0.0.1:1", 2, now=0.0)
    ids = sched.submit(c, ["x", "y", ("z", 0)], [[], [0], ["y"]], now=0.0, wanted=[2])
    assert len(ids) == 12
    assert sched.state("x") == "processing"
    assert sched.state(("z", 0)) == "waiting"
    now = 0.0
    for _ in range(3):
        now += 0.1
        finish_all(sched, sched.take_commands(), now)
    assert sched.state(("z", 0)) == "memory"
    recs = sched.take_commands().records()
    assert ("key-in-memory", c, sched.lookup(("z", 0)), 0) in recs
    info = sched.task_info(sched.lookup(("z", 0)))
    assert info["who_has"] == ["tcp://127.0.0.1:1"]
    assert info["prefix"] == "z"
    sched.client_releases_keys(c, [("z", 0)], now=now)
    assert sched.n_tasks == 0
    free = sched.take_commands()
    assert free.counts() == {"free-keys": 1}
    sched.validate()
    assert sched.worker_info(w)["has_what"] == 0


def test_map_batch_lifecycle_leaves_core_empty(sched: squall.core.Scheduler) -> None:
    c = sched.client("c")
    for i in range(4):
        sched.add_worker(f"tcp://127.0.0.1:{i}", 2, now=0.0)
    ids = submit_map(sched, c, 1000, now=0.0)
    assert sched.n_tasks == 1000
    assert sched.key_of(int.from_bytes(ids[:4], "little")) == "inc-0"
    assert sched.n_queued == 1000 - 4 * 3  # ceil(1.1 * 2) = 3 slots per worker
    done, now = 0, 0.0
    while done < 1000:
        now += 0.01
        n = finish_all(sched, sched.take_commands(), now)
        assert n > 0
        done += n
    assert sched.state_counts() == {"memory": 1000}
    sched.client_releases_tasks(c, ids, now=now)
    assert sched.n_tasks == 0


def test_keys_of_forgotten_tasks_resolve_until_next_drain(sched: squall.core.Scheduler) -> None:
    c = sched.client("c")
    sched.add_worker("tcp://127.0.0.1:1", 1, now=0.0)
    sched.submit(c, ["a"], now=0.0)
    finish_all(sched, sched.take_commands(), 0.1)
    sched.client_releases_keys(c, ["a"], now=0.2)
    cmds = sched.take_commands()
    (_, _, task, _), *_ = [r for r in cmds.records() if r[0] == "free-keys"]
    assert sched.key_of(task) == "a"


def test_cycle_is_rejected_and_state_kept(sched: squall.core.Scheduler) -> None:
    c = sched.client("c")
    sched.submit(c, ["ok"], now=0.0)
    with pytest.raises(squall.CycleError, match=r"'a'|'b'"):
        sched.submit(c, ["a", "b"], [[1], [0]], now=0.0)
    assert sched.n_tasks == 1
    sched.validate()


def test_bad_input_errors(sched: squall.core.Scheduler) -> None:
    c = sched.client("c")
    with pytest.raises(squall.UnknownDependencyError, match="ghost"):
        sched.submit(c, ["a"], [["ghost"]], now=0.0)
    sched.submit(c, ["a"], specs=[b"1"], now=0.0)
    sched.submit(c, ["a"], specs=[b"2"], now=0.0)  # a known key keeps its definition
    with pytest.raises(squall.DuplicateKeyError):
        sched.submit(c, ["b", "b"], specs=[b"1", b"2"], now=0.0)
    with pytest.raises(squall.UnknownWorkerError):
        sched.task_finished(7, 0, 1, 8, now=0.0)
    w = sched.add_worker("tcp://127.0.0.1:1", 1, now=0.0)
    with pytest.raises(squall.UnknownTaskError):
        sched.task_finished(w, 999, 1, 8, now=0.0)
    with pytest.raises(squall.SchedulerError, match="already registered"):
        sched.add_worker("tcp://127.0.0.1:1", 1, now=0.0)
    with pytest.raises(TypeError, match="invalid key"):
        sched.submit(c, [object()], now=0.0)
    with pytest.raises(ValueError, match="multiple of 4"):
        sched.tasks_finished(w, b"123", b"", b"", now=0.0)
    with pytest.raises(ValueError, match="unknown scheduler config"):
        squall.core.Scheduler({"no-such-knob": 1})
    assert sched.n_tasks == 1
    sched.validate()


def test_stale_report_is_an_error(sched: squall.core.Scheduler) -> None:
    c = sched.client("c")
    a = sched.add_worker("tcp://127.0.0.1:1", 1, now=0.0)
    b = sched.add_worker("tcp://127.0.0.1:2", 1, now=0.0)
    sched.submit(c, ["x"], now=0.0)
    (_, worker, task, run), *_ = sched.take_commands().records()
    other = b if worker == a else a
    with pytest.raises(squall.StaleReportError):
        sched.task_finished(other, task, run + 100, 8, now=0.1)
    assert sched.task_finished(worker, task, run, 8, now=0.1) == "applied"


def test_errors_carry_payloads_and_blame(sched: squall.core.Scheduler) -> None:
    c = sched.client("c")
    sched.add_worker("tcp://127.0.0.1:1", 1, now=0.0)
    sched.submit(c, ["x", "y"], [[], [0]], now=0.0, wanted=[1])
    (_, worker, task, run), *_ = sched.take_commands().records()
    sched.task_erred(
        worker, task, run, now=0.1, exception=b"pickled", exception_text="ZeroDivisionError"
    )
    assert sched.state("y") == "erred"
    erred = [r for r in sched.take_commands().records() if r[0] == "task-erred"]
    assert erred == [("task-erred", c, sched.lookup("y"), task)]
    info = sched.task_info(sched.lookup("y"))
    assert info["exception"] == b"pickled"
    assert info["exception_text"] == "ZeroDivisionError"
    assert [s[:2] for s in sched.story("x")] == [
        ("released", "waiting"),
        ("waiting", "processing"),
        ("processing", "erred"),
    ]


def test_config_knobs(sched: squall.core.Scheduler) -> None:
    s = squall.core.Scheduler({"worker-saturation": "inf", "validate": True})
    c = s.client("c")
    s.add_worker("tcp://127.0.0.1:1", 1, now=0.0)
    submit_map(s, c, 10, now=0.0)
    assert s.n_queued == 0
    with pytest.raises(ValueError):
        squall.core.Scheduler({"worker-saturation": 0})


def test_core_work_releases_the_gil() -> None:
    """A long core call on one thread must not stop Python code on another."""
    import threading
    import time

    s = squall.core.Scheduler()
    c = s.client("c")
    wire = map_wire(600_000)
    done = threading.Event()
    took: list[float] = []

    def ingest() -> None:
        t0 = time.perf_counter()
        s.submit_wire(c, *wire, now=0.0)
        took.append(time.perf_counter() - t0)
        done.set()

    worker = threading.Thread(target=ingest)
    ticks, last, longest_gap = 0, time.perf_counter(), 0.0
    worker.start()
    while not done.is_set():
        time.sleep(0.001)
        now = time.perf_counter()
        longest_gap, last, ticks = max(longest_gap, now - last), now, ticks + 1
    worker.join()
    assert s.n_tasks == 600_000
    # Holding the GIL would freeze this loop for the whole call.
    assert longest_gap < took[0] / 2, (longest_gap, took[0], ticks)
