"""Scheduling policies observed on real multi-process clusters: priorities, fifo_timeout,
restrictions and resources, retries, errors, cancellation, release, work stealing and
the heartbeat TTL (docs/scheduling.md).

Tasks synchronise with the test through files (a blocker task waits for a "go" file) and
record what ran, and where, in files, so no assertion depends on how fast processes run
(the one pause, in the fifo_timeout test, only lengthens a separation it needs)."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import dask
import psutil
import pytest

from squall import Client, config, fire_and_forget, get_worker
from squall.deploy.local import LocalCluster
from squall.errors import CancelledError, RemoteError
from squall.worker.worker import Worker

# Worker processes cannot import this test module: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

TIMEOUT = 60.0  # generous: the machine is shared and loaded


def eventually(cond: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def wait_for_file(path: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)


# ----- task functions (run on workers) ----------------------------------------------------


def block(started: str, go: str) -> str:
    """Occupy a worker thread until the test creates ``go``."""
    Path(started).touch()
    wait_for_file(go)
    return get_worker().address


def record(log: str, name: str) -> str:
    """Append ``name`` to ``log``: the order of lines is the execution order."""
    with open(log, "a") as f:
        f.write(f"{name}\n")
    return name


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


class Blocker:
    """A task holding a worker's only thread until ``release()``."""

    def __init__(self, client: Client, tmp: Path, name: str = "blocker", **kwargs: object) -> None:
        self.started, self.go = tmp / f"{name}-started", tmp / f"{name}-go"
        self.future = client.submit(block, str(self.started), str(self.go), pure=False, **kwargs)
        eventually(self.started.exists)

    def release(self) -> str:
        self.go.touch()
        return str(self.future.result(timeout=TIMEOUT))


def task_states(client: Client, keys: set[str]) -> list[str]:
    """States of these tasks on the workers (asked with Client.run)."""

    def states(dask_worker: Worker) -> list[str]:
        return [ts.state for ts in dask_worker.tasks.values() if ts.key in keys]

    return [s for per_worker in client.run(states).values() for s in per_worker]


def barrier(client: Client) -> None:
    """Return once the scheduler has handled everything this client sent before: the
    reply to scheduler-info travels the same stream, after those messages."""
    client.scheduler_info()


@pytest.fixture
def one_worker() -> Iterator[Client]:
    """One worker with one thread, default scheduling knobs."""
    with LocalCluster(n_workers=1, threads_per_worker=1) as cluster, Client(cluster) as c:
        yield c


# ----- 1. priorities ----------------------------------------------------------------------


def test_submit_priorities_order_execution_on_a_busy_worker(tmp_path: Path) -> None:
    # worker-saturation inf: nothing queues on the scheduler, every task reaches the
    # worker at once and its ready heap orders them by the scheduler's priority. (With
    # queuing, the first tasks of a group are not root-ish yet and go to the worker
    # before the rest queue; Dask behaves the same.)
    kwargs = {"worker_saturation": "inf"}
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, scheduler_kwargs=kwargs) as cluster,
        Client(cluster) as c,
    ):
        log = tmp_path / "log"
        blocker = Blocker(c, tmp_path)
        priorities = [3, -2, 10, 0, 7, -5, 1]
        futures = [c.submit(record, str(log), str(p), priority=p, pure=False) for p in priorities]
        keys = {f.key for f in futures}

        # Wait until all are in the worker's ready heap, so none can start early.
        eventually(lambda: task_states(c, keys) == ["ready"] * len(keys))
        blocker.release()
        c.gather(futures)
        assert lines(log) == [str(p) for p in sorted(priorities, reverse=True)]


def test_annotated_priorities_order_the_schedulers_queue(
    one_worker: Client, tmp_path: Path
) -> None:
    # Default worker-saturation: the root-ish tasks of one graph queue on the scheduler,
    # which hands them out best priority first as the worker frees slots.
    c = one_worker
    log = tmp_path / "log"
    blocker = Blocker(c, tmp_path)
    priorities = [0, 5, -1, 2, 9, 1, -3, 4]
    tasks = []
    for p in priorities:
        with dask.annotate(priority=p):
            tasks.append(dask.delayed(record, pure=False)(str(log), str(p)))
    futures = c.compute(tasks)
    barrier(c)
    blocker.release()
    c.gather(futures)
    assert lines(log) == [str(p) for p in sorted(priorities, reverse=True)]


# ----- 2. fifo_timeout --------------------------------------------------------------------


def test_fifo_timeout_older_submissions_first_then_graph_order(tmp_path: Path) -> None:
    """FIFO generations (docs/scheduling.md#fifo-generations): a graph arriving more than
    its fifo_timeout after the current generation began opens a new generation, which
    sorts after every older one whatever the graph order; within fifo_timeout graphs
    share a generation and interleave by graph order (map's order index is the item's
    position)."""
    # worker-saturation-duration 0 (Dask's queuing): the worker holds the blocker and
    # one task, the rest wait in the scheduler's queue, so a later graph's tasks cannot
    # reach the worker after it has started an earlier graph's worse ones.
    kwargs = {"worker_saturation_duration": 0}
    log = tmp_path / "log"
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, scheduler_kwargs=kwargs) as cluster,
        Client(cluster) as c,
    ):

        def run_two_maps(first_fifo: str, pause: float, later_fifo: str) -> list[str]:
            log.unlink(missing_ok=True)
            blocker = Blocker(c, tmp_path, f"blocker-{first_fifo}")
            logs = [str(log)] * 4
            names = [f"a{i}" for i in range(4)]
            first = c.map(record, logs, names, fifo_timeout=first_fifo, pure=False)
            barrier(c)  # the scheduler has `first`: the pause separates the arrivals
            time.sleep(pause)
            names = [f"b{i}" for i in range(4)]
            later = c.map(record, logs, names, fifo_timeout=later_fifo, pure=False)
            barrier(c)
            blocker.release()
            c.gather(first + later)
            return lines(log)

        # 0.5 s apart, fifo_timeout 100 ms: every a before every b, although b0 (position
        # 0) is ahead of a1..a3 in graph order.
        assert run_two_maps("100ms", 0.5, "100ms") == [f"{s}{i}" for s in "ab" for i in range(4)]
        # Within fifo_timeout (60 s from the start of the generation): one generation, so
        # b0 runs before a1 although submitted later.
        got = run_two_maps("60s", 0.0, "60s")
        assert sorted(got) == sorted(f"{s}{i}" for s in "ab" for i in range(4))
        assert [int(x[1]) for x in got] == [0, 0, 1, 1, 2, 2, 3, 3], got


# ----- 3. restrictions and resources ------------------------------------------------------


def where(*_: object) -> str:
    return str(get_worker().address)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def extra_worker(
    cluster: LocalCluster, name: str, *flags: str
) -> Iterator[subprocess.Popen[bytes]]:
    """A ``squall worker`` started by hand next to the cluster's (same config)."""
    cmd = [sys.executable, "-m", "squall.worker", cluster.scheduler_address, "--name", name]
    cmd += ["--nthreads", "1", "--log-level", "WARNING", *flags]
    proc = subprocess.Popen(cmd, env={**os.environ, **config.inherit()})
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def two_workers(**scheduler_kwargs: Any) -> Iterator[tuple[LocalCluster, Client, str, str]]:
    """A 2 x 1 cluster with these scheduler options, a client, and the addresses of
    the workers named local-0 and local-1."""
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, scheduler_kwargs=scheduler_kwargs) as cl,
        Client(cl) as c,
    ):
        by_name = {w["name"]: a for a, w in c.scheduler_info()["workers"].items()}
        yield cl, c, by_name["local-0"], by_name["local-1"]


def test_worker_restrictions_by_address_and_name() -> None:
    with two_workers() as (_, c, a0, a1):

        def ran_on(workers: str | list[str]) -> set[str]:
            # Several tasks: random placement would rarely put them all right.
            futures = [c.submit(where, workers=workers, pure=False) for _ in range(6)]
            return set(c.gather(futures))

        assert ran_on([a1]) == {a1} and ran_on([a0]) == {a0}
        assert ran_on("local-0") == {a0} and ran_on(["local-1"]) == {a1}
        assert set(c.gather(c.map(where, range(6), workers=["local-1"], pure=False))) == {a1}


def test_strict_restriction_waits_for_its_worker_loose_one_does_not() -> None:
    with LocalCluster(n_workers=1, threads_per_worker=1) as cluster, Client(cluster) as c:
        absent = f"tcp://127.0.0.1:{free_port()}"
        strict = c.submit(where, workers=[absent], pure=False)
        loose = c.submit(where, workers=[absent], allow_other_workers=True, pure=False)
        assert loose.result(timeout=TIMEOUT) == next(iter(c.nthreads()))
        barrier(c)
        assert strict.status == "pending"  # no valid worker: it waits (no-worker)
        with extra_worker(cluster, "late", "--listen", absent):
            assert strict.result(timeout=TIMEOUT) == absent


def test_loose_restriction_on_a_busy_worker_is_stolen_strict_one_waits(tmp_path: Path) -> None:
    # Dask places a loosely restricted task on its worker even when that worker is busy;
    # work stealing may then give it to any idle worker, a strict one never
    # (docs/scheduling.md#restrictions).
    with two_workers(work_stealing_interval="100ms") as (_, c, a0, a1):
        blocker = Blocker(c, tmp_path, workers=[a0])
        strict = c.submit(where, workers=[a0], pure=False)
        loose = c.submit(where, workers=[a0], allow_other_workers=True, pure=False)
        assert loose.result(timeout=TIMEOUT) == a1  # while local-0 is still blocked
        assert strict.status == "pending"
        assert blocker.release() == a0
        assert strict.result(timeout=TIMEOUT) == a0


def use_gpu(hold: float) -> str:
    """Count this worker's concurrent GPU tasks; hold long enough for others to overlap."""
    w = get_worker()
    counts: dict[str, int] = w.__dict__.setdefault("gpu_counts", {"now": 0, "max": 0})
    lock: threading.Lock = w.__dict__.setdefault("gpu_lock", threading.Lock())
    with lock:
        counts["now"] += 1
        counts["max"] = max(counts["max"], counts["now"])
    time.sleep(hold)
    with lock:
        counts["now"] -= 1
    return str(w.address)


def test_resources_only_on_workers_declaring_them_and_never_oversubscribed() -> None:
    # One worker with 2 GPUs and 4 threads, one without GPUs.
    kwargs = {"no_workers_timeout": "500ms"}
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=4, resources={"GPU": 2}, scheduler_kwargs=kwargs
        ) as cluster,
        Client(cluster) as c,
        extra_worker(cluster, "cpu-only"),
    ):
        cluster.wait_for_workers(2)
        info = c.scheduler_info()["workers"]
        gpu = next(a for a, w in info.items() if w["resources"] == {"GPU": 2.0})
        other = next(a for a in info if a != gpu)
        assert info[other]["resources"] == {}
        futures = [c.submit(use_gpu, 0.2, resources={"GPU": 1}, pure=False) for _ in range(8)]
        assert set(c.gather(futures)) == {gpu}
        peak = c.run(lambda dask_worker: dask_worker.__dict__.get("gpu_counts", {}).get("max", 0))
        # With 4 threads up to 4 could run; the 2 GPUs allow at most 2 at a time.
        assert 1 <= peak[gpu] <= 2 and peak[other] == 0
        # No worker declares 3 GPUs: the task waits as no-worker, then errs.
        too_many = c.submit(use_gpu, 0.0, resources={"GPU": 3}, pure=False)
        with pytest.raises(RemoteError, match="no valid worker"):
            too_many.result(timeout=TIMEOUT)


# ----- 4. retries, errors, cancellation ---------------------------------------------------


def flaky(counter: str, failures: int) -> int:
    """Fail the first ``failures`` calls (counted in a file), then return the count."""
    with open(counter, "a") as f:
        f.write("x")
    n = len(Path(counter).read_text())
    if n <= failures:
        raise ValueError(f"attempt {n} fails")
    return n


def add_one(x: int) -> int:
    return x + 1


def test_retries_and_client_retry(one_worker: Client, tmp_path: Path) -> None:
    c = one_worker
    assert c.submit(flaky, str(tmp_path / "a"), 2, retries=2).result(timeout=TIMEOUT) == 3
    assert (tmp_path / "a").read_text() == "xxx"
    f = c.submit(flaky, str(tmp_path / "b"), 2, retries=1)
    with pytest.raises(ValueError, match="attempt 2 fails"):
        f.result(timeout=TIMEOUT)
    assert (tmp_path / "b").read_text() == "xx"
    # client.retry on a dependent reruns its erred dependency
    # (docs/scheduling.md#task-errors-and-retries).
    x = c.submit(flaky, str(tmp_path / "c"), 1)
    y = c.submit(add_one, x)
    with pytest.raises(ValueError, match="attempt 1 fails"):
        y.result(timeout=TIMEOUT)
    with pytest.raises(ValueError, match="attempt 1 fails"):
        x.result(timeout=TIMEOUT)
    c.retry(y)
    assert y.result(timeout=TIMEOUT) == 3 and x.result(timeout=TIMEOUT) == 2
    assert (tmp_path / "c").read_text() == "xx"
    c.retry(f)
    assert f.result(timeout=TIMEOUT) == 3


def outer(x: int) -> int:
    return middle(x) + 1


def middle(x: int) -> int:
    return innermost(x) + 1


def innermost(x: int) -> int:
    raise ValueError(f"bad input {x}")


def test_errors_reraise_with_remote_frames_also_in_dependents(one_worker: Client) -> None:
    c = one_worker
    f = c.submit(outer, 7)
    g = c.submit(add_one, f)
    for fut in (f, g):
        with pytest.raises(ValueError, match="bad input 7") as info:
            fut.result(timeout=TIMEOUT)
        names = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
        assert names[-3:] == ["outer", "middle", "innermost"]
        assert isinstance(fut.exception(timeout=TIMEOUT), ValueError)
        tb_names = [frame.name for frame in traceback.extract_tb(fut.traceback(timeout=TIMEOUT))]
        assert tb_names[-3:] == ["outer", "middle", "innermost"]


def test_cancelled_queued_future_never_runs(one_worker: Client, tmp_path: Path) -> None:
    c = one_worker
    log = tmp_path / "log"
    blocker = Blocker(c, tmp_path)

    [address] = c.nthreads()
    # Restricted tasks are never root-ish: they wait in the worker's ready heap. Once
    # they are there, the root-ish tasks of a map wait in the scheduler's queue (the
    # worker is full). All are cancelled before the blocker lets anything run.
    on_worker = [
        c.submit(record, str(log), f"w{i}", workers=[address], pure=False) for i in range(3)
    ]
    eventually(lambda: task_states(c, {f.key for f in on_worker}) == ["ready"] * 3)
    queued = c.map(record, [str(log)] * 6, [f"q{i}" for i in range(6)], pure=False)
    # A witness with lower priority: the cancelled tasks would have run before it.
    witness = c.submit(record, str(log), "witness", priority=-1, pure=False)
    cancelled = [*on_worker, *queued]
    c.cancel(cancelled)
    barrier(c)
    keys = {f.key for f in cancelled}
    eventually(lambda: task_states(c, keys) == [])  # the worker dropped its three
    blocker.release()
    assert witness.result(timeout=TIMEOUT) == "witness"
    assert lines(log) == ["witness"]
    for fut in cancelled:
        assert fut.cancelled()
        with pytest.raises(CancelledError):
            fut.result(timeout=TIMEOUT)


# ----- 5. release -------------------------------------------------------------------------


def make_bytes(n: int) -> bytes:
    return b"x" * n


def held(c: Client) -> set[str]:
    """Keys in the data of every worker."""
    per_worker = c.run(lambda dask_worker: list(dask_worker.data))
    return {k for keys in per_worker.values() for k in keys}


def test_released_futures_free_worker_memory() -> None:
    with LocalCluster(n_workers=2, threads_per_worker=1) as cluster, Client(cluster) as c:
        x = c.submit(make_bytes, 100_000)
        y = c.submit(len, x)
        assert y.result(timeout=TIMEOUT) == 100_000
        x_key, y_key = x.key, y.key
        assert {x_key, y_key} <= held(c)
        del x
        gc.collect()
        eventually(lambda: held(c) == {y_key})
        # Intermediates nobody holds a future for, spread over both workers (so the
        # sum fetches replicas), are freed once the sum is done: replicas too.
        parts = c.map(make_bytes, range(20))
        total = c.submit(lambda *p: sum(map(len, p)), *parts)
        del parts
        gc.collect()
        assert total.result(timeout=TIMEOUT) == sum(range(20))
        total_key = total.key
        eventually(lambda: held(c) == {y_key, total_key})
        del y, total
        gc.collect()
        eventually(lambda: held(c) == set())


def add_when_told(x: int, started: str, go: str) -> int:
    Path(started).touch()
    wait_for_file(go)
    return x + 1


def test_fetched_copies_count_as_holders_while_a_worker_keeps_them(tmp_path: Path) -> None:
    with two_workers() as (_, c, a0, a1):
        x = c.submit(add_one, 1, workers=[a0])
        started, go = tmp_path / "started", tmp_path / "go"
        y = c.submit(add_when_told, x, str(started), str(go), workers=[a1])
        eventually(started.exists)
        # local-1 fetched x for y: the scheduler knows both copies now.
        eventually(lambda: sorted(c.who_has([x])[x.key]) == sorted([a0, a1]))
        go.touch()
        assert y.result(timeout=TIMEOUT) == 3
        # y is done, so local-1 drops its copy and says so.
        eventually(lambda: c.who_has([x])[x.key] == [a0])
        assert x.key not in held_on(c, a1)


def held_on(client: Client, address: str) -> set[str]:
    return set(client.run(lambda dask_worker: list(dask_worker.data))[address])


def test_futures_dropped_before_the_client_sends_their_graph_are_released(
    tmp_path: Path,
) -> None:
    # The caller can run ahead of the client's event loop (a loaded machine): futures
    # dropped at once queue their releases before the loop has sent the graphs. Those
    # releases must still reach the scheduler after the graphs (and after a
    # fire-and-forget naming them), or the keys stay wanted, and held on the workers,
    # forever (or a fire-and-forget task is forgotten before it runs).
    with LocalCluster(n_workers=2, threads_per_worker=1) as cluster, Client(cluster) as c:
        gate = threading.Event()
        assert c.connection.loop is not None
        c.connection.loop.call_soon_threadsafe(gate.wait, TIMEOUT)  # stall the client's loop
        try:
            parts = c.map(make_bytes, range(20))
            total = c.submit(lambda *p: sum(map(len, p)), *parts)
            c.submit(make_bytes, 5)  # never kept
            fire_and_forget(c.submit(record, str(tmp_path / "log"), "ff", pure=False))
            del parts
            gc.collect()
        finally:
            gate.set()
        assert total.result(timeout=TIMEOUT) == sum(range(20))
        eventually(lambda: lines(tmp_path / "log") == ["ff"])
        total_key = total.key
        eventually(lambda: held(c) == {total_key})
        del total
        gc.collect()
        eventually(lambda: held(c) == set())


# ----- 6. work stealing -------------------------------------------------------------------


def run_once(directory: str, i: int, hold: float) -> str:
    """Record which worker ran task ``i`` (one line per execution)."""
    address = str(get_worker().address)
    with open(Path(directory) / str(i), "a") as f:
        f.write(f"{address}\n")
    time.sleep(hold)
    return address


def test_stealing_moves_queued_work_to_a_new_idle_worker_and_runs_each_task_once(
    tmp_path: Path,
) -> None:
    # worker-saturation inf: every task is processing on the only worker (nothing waits
    # in the scheduler's queue for the newcomer), so only stealing can move work.
    kwargs = {"worker_saturation": "inf", "work_stealing_interval": "100ms"}
    runs = tmp_path / "runs"
    runs.mkdir()
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, scheduler_kwargs=kwargs) as cluster,
        Client(cluster) as c,
    ):
        [a] = c.nthreads()
        blocker = Blocker(c, tmp_path)
        futures = [c.submit(run_once, str(runs), i, 0.2, pure=False) for i in range(10)]
        barrier(c)
        with extra_worker(cluster, "thief"):
            cluster.wait_for_workers(2)
            [b] = set(c.nthreads()) - {a}
            # The newcomer runs stolen tasks while the victim is still blocked ...
            eventually(lambda: any(b in p.read_text() for p in runs.iterdir()))
            # ... and, once unblocked, the victim races it for the rest.
            assert blocker.release() == a
            got = c.gather(futures)
            # Read before the thief leaves: its results would then be recomputed.
            ran = {int(p.name): p.read_text().split() for p in runs.iterdir()}
        assert sorted(ran) == list(range(10))
        assert all(len(v) == 1 for v in ran.values()), ran  # each task ran exactly once
        assert got == [ran[i][0] for i in range(10)]
        assert b in got


# ----- 7. heartbeat TTL -------------------------------------------------------------------


def test_silent_worker_is_removed_after_ttl_and_its_work_rescheduled(tmp_path: Path) -> None:
    # The scheduler waits max(worker-ttl, 10 heartbeat intervals) = 5 s.
    with two_workers(worker_ttl="1s") as (cluster, c, a0, a1):
        nanny = cluster.worker_processes[0]
        proc = psutil.Process(c.run(os.getpid, workers=[a0])[a0])
        x = c.submit(add_one, 1, workers=[a0], allow_other_workers=True)
        assert x.result(timeout=TIMEOUT) == 2  # held by local-0 only
        running = Blocker(c, tmp_path, workers=[a0], allow_other_workers=True)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            running.go.touch()  # local-0 is stopped: only a rerun elsewhere can see it
            y = c.submit(add_one, x)  # goes where x is: the stopped worker
            assert running.future.result(timeout=TIMEOUT) == a1
            assert y.result(timeout=TIMEOUT) == 3  # x recomputed on local-1
            assert list(c.nthreads()) == [a1]
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        # The scheduler dropped the silent worker; resumed, it finds itself disconnected
        # and registers again (docs/runtime.md#reconnection-and-liveness) rather than
        # lingering unknown: its copy of x, recomputed meanwhile, counts again.
        eventually(lambda: sorted(c.nthreads()) == sorted([a0, a1]), TIMEOUT)
        eventually(lambda: sorted(c.who_has([x])[x.key]) == sorted([a0, a1]), TIMEOUT)
        assert nanny.poll() is None
        assert c.submit(add_one, 10, workers=[a0]).result(timeout=TIMEOUT) == 11
