"""``squall bench e2e``: squall and ``distributed`` end to end, in one run, on the same
machine and cluster shape (one scheduler process, worker processes with the same
threads, with or without a nanny: ``--nanny``), so the figures are ratios taken under
the same noise.

Rows: a no-op ``map``, N ``submit`` calls, a ``dask.delayed`` binary-tree sum and a
dask.array ``(x + x.T).sum()``: tasks/s (median of ``--repeat`` runs), the squall/dask
throughput ratio, and scheduler-process CPU µs per task. The tree and the array are
built (and the array's tasks counted) by dask's own code before the timer starts, the
same on both systems; the row shows how long that took. On request (``--workloads``),
the primitives from a task: N ``Lock`` acquire/release pairs and N ``Queue`` put/get
pairs (pairs/s in place of tasks/s), and ``map-transition-plugin``: the ``map`` with a
scheduler plugin counting every transition. Two more: scheduler memory per
task while holding N waiting tasks (no workers), and the time from a 100k-task delayed
graph leaving the client until the scheduler holds all of it. Sizes differ per system
(distributed is far slower); throughput, not wall time, is compared.

Dataframe shuffles, on request: ``frame-{set-index,shuffle}-{100,1000}-{p2p,tasks}``
(all eight: ``--workloads frame-shuffle-100-p2p,frame-shuffle-100-tasks,``
``frame-set-index-100-p2p,frame-set-index-100-tasks,frame-shuffle-1000-p2p,``
``frame-shuffle-1000-tasks,frame-set-index-1000-p2p,frame-set-index-1000-tasks``).
Each ``set_index("k")``s or ``shuffle("k")``s a frame generated in its tasks on the
workers (``dd.from_map``), in 100 or 1,000 partitions, and checks the result; squall
shuffles by tasks (it has no P2P service), distributed by the method the name ends
with, so each row's ratio is squall against that method. Throughput is rows/s: the
methods' task counts differ (each row's label gives its graph's), the rows moved do
not; scheduler CPU is per task of that graph.
"""

from __future__ import annotations

import functools
import json
import operator
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import psutil  # type: ignore[import-untyped]

from squall.client.client import Client
from squall.client.waiting import wait as squall_wait
from squall.deploy.local import LocalCluster
from squall.diagnostics.plugin import SchedulerPlugin
from squall.primitives import Lock, Queue
from squall.tools.browser import chromium, open_page

SYSTEMS = ("squall", "dask")


def noop(x: Any) -> Any:
    return x


@dataclass
class Sizes:
    """Problem sizes per system (tasks for map/submit, leaves, array side in chunks)."""

    map: int
    submit: int
    tree_leaves: int
    array_side: int
    hold: int
    accept_leaves: int
    primitive_pairs: int
    frame_rows: int


SIZES = {
    "squall": Sizes(200_000, 20_000, 20_000, 100, 1_000_000, 50_000, 10_000, 1_000_000),
    "dask": Sizes(3_000, 2_000, 1_000, 20, 100_000, 50_000, 10_000, 1_000_000),
}
QUICK = {
    "squall": Sizes(2_000, 500, 500, 10, 20_000, 2_000, 200, 100_000),
    "dask": Sizes(300, 200, 100, 6, 5_000, 2_000, 200, 100_000),
}


#: What a workload did: a count of work done (tasks, pairs), or (rows, tasks) for a
#: frame row, whose throughput counts rows (the task counts of shuffle methods differ).
Done = int | tuple[int, int]


@dataclass
class Row:
    workload: str
    system: str
    tasks: int
    seconds: float
    tasks_per_s: float
    sched_cpu_us_per_task: float
    ratio: float | None = None


# ----- clusters ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Shape:
    """The cluster a workload runs on: worker processes, threads each, nannies, TLS."""

    workers: int
    threads: int
    nanny: bool
    tls: bool


@contextmanager
def cluster(
    system: str, shape: Shape, dashboard: bool = False
) -> Iterator[tuple[Any, psutil.Process]]:
    """A client and the scheduler's process, for ``system`` on ``shape`` (no workers if
    0; squall's over mutual TLS with ``tls``). distributed's scheduler serves its
    dashboard only if ``dashboard`` (squall's always does)."""
    workers, threads, nanny, tls = shape.workers, shape.threads, shape.nanny, shape.tls
    if system == "squall":
        with LocalCluster(
            n_workers=workers, threads_per_worker=threads, nanny=nanny, security=tls
        ) as c:
            assert c.scheduler_process is not None
            with Client(c) as client:
                yield client, psutil.Process(c.scheduler_process.pid)
        return
    if tls:
        raise ValueError("--tls measures squall only (--systems squall)")
    from distributed import Client as DaskClient  # the bench extra: measured only here

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"

    def spawn(*args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    http = (
        ("--dashboard-address", f"127.0.0.1:{_free_port()}") if dashboard else ("--no-dashboard",)
    )
    procs = [spawn("distributed.cli.dask_scheduler", "--port", str(port), *http)]
    try:
        for _ in range(workers):
            procs.append(
                spawn(
                    "distributed.cli.dask_worker",
                    address,
                    *("--nthreads", str(threads), "--no-dashboard"),
                    "--nanny" if nanny else "--no-nanny",
                )
            )
        with DaskClient(address, timeout=30) as client:  # type: ignore[no-untyped-call]
            if workers:
                client.wait_for_workers(workers, timeout=60)
            yield client, psutil.Process(procs[0].pid)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()  # a worker without a nanny may linger in its shutdown
                p.wait()


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return float(t.user + t.system)


# ----- workloads --------------------------------------------------------------------


def _wait(client: Any, futures: list[Any]) -> None:
    if type(client).__module__.startswith("squall"):
        squall_wait(futures)
    else:
        from distributed import wait  # the bench extra

        wait(futures)  # type: ignore[no-untyped-call]


def run_map(client: Any, n: int) -> int:
    _wait(client, client.map(noop, range(n)))
    return n


def run_submit(client: Any, n: int) -> int:
    _wait(client, [client.submit(noop, i, pure=False) for i in range(n)])
    return n


def _tree(leaves: int) -> tuple[Any, int]:
    from dask.delayed import delayed

    level = [delayed(noop)(i) for i in range(leaves)]
    n = leaves
    while len(level) > 1:
        pairs = zip(level[::2], level[1::2], strict=False)
        nxt = [delayed(operator.add)(a, b) for a, b in pairs]
        if len(level) % 2:
            nxt.append(level[-1])
        n += len(level) // 2
        level = nxt
    return level[0], n


class Built(NamedTuple):
    """A collection built by dask's own code before a row's timer starts (the same code
    on every system), its graph's task count and the value it must compute to."""

    collection: Any
    tasks: int
    expected: Any


def build_tree(leaves: int) -> Built:
    total, n = _tree(leaves)
    return Built(total, n, leaves * (leaves - 1) // 2)


def build_array(side: int) -> Built:
    """``(x + x.T).sum()`` of ``side`` by ``side`` chunks; counting its optimised graph's
    tasks costs dask a materialisation of its own."""
    import dask.array as da
    from dask.base import collections_to_expr

    x = da.ones((side * 10, side * 10), chunks=10)
    y = (x + x.T).sum()
    n = len(collections_to_expr([y]).optimize().__dask_graph__())  # type: ignore[no-untyped-call]
    return Built(y, n, 2 * (side * 10) ** 2)


def run_built(client: Any, built: Built) -> int:
    """Compute a built collection: the timed part of the tree and array rows."""
    value = client.compute(built.collection).result()
    assert value == built.expected, value
    return built.tasks


def _run_prebuilt(built: Built, client: Any, _size: int) -> int:
    return run_built(client, built)


def run_tree(client: Any, leaves: int) -> int:
    return run_built(client, build_tree(leaves))


def run_array(client: Any, side: int) -> int:
    return run_built(client, build_array(side))


def _primitive(system: str, kind: str) -> Any:
    """The ``Lock`` or ``Queue`` class of ``system``, in a task."""
    if system == "squall":
        return {"Lock": Lock, "Queue": Queue}[kind]
    import distributed  # the bench extra

    return getattr(distributed, kind)


def lock_pairs(system: str, n: int) -> int:
    """A task: ``n`` acquire/release pairs of one lock."""
    lock = _primitive(system, "Lock")("bench-lock")
    for _ in range(n):
        lock.acquire()
        lock.release()
    return n


def queue_pairs(system: str, n: int) -> int:
    """A task: ``n`` put/get pairs on one queue."""
    q = _primitive(system, "Queue")("bench-queue")
    for i in range(n):
        q.put(i)
        assert q.get() == i
    return n


def _system(client: Any) -> str:
    return "squall" if type(client).__module__.startswith("squall") else "dask"


def run_lock_pairs(client: Any, n: int) -> int:
    return int(client.submit(lock_pairs, _system(client), n, pure=False).result())


def run_queue_pairs(client: Any, n: int) -> int:
    return int(client.submit(queue_pairs, _system(client), n, pure=False).result())


#: The name the transition-counting plugin registers under.
COUNTER = "bench-transition-counter"


class _CountsTransitions:
    """A scheduler plugin's ``transition``: counts transitions per finish state."""

    name = COUNTER

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        self.counts[finish] = self.counts.get(finish, 0) + 1


class SquallTransitionCounter(_CountsTransitions, SchedulerPlugin):
    pass


def _transition_counter(system: str) -> Any:
    """The counting plugin on ``system``'s own base class (distributed registers only
    its own plugins)."""
    if system == "squall":
        return SquallTransitionCounter()
    from distributed.diagnostics.plugin import SchedulerPlugin as DaskPlugin  # the bench extra

    class DaskTransitionCounter(_CountsTransitions, DaskPlugin):
        pass

    return DaskTransitionCounter()


def _counts(dask_scheduler: Any) -> dict[str, int]:
    return dict(dask_scheduler.plugins[COUNTER].counts)


def run_map_transition_plugin(client: Any, n: int) -> int:
    """``map`` with a scheduler plugin counting every transition (what a ``transition``
    plugin costs, docs/runtime.md#scheduler-plugins); fails unless it saw each task
    reach memory."""
    system = _system(client)
    plugin = _transition_counter(system)
    if system == "squall":
        client.register_scheduler_plugin(plugin)
    else:
        client.register_plugin(plugin)
    try:
        run_map(client, n)
        counts = client.run_on_scheduler(_counts)
    finally:
        client.unregister_scheduler_plugin(COUNTER)
    assert counts.get("memory") == n, counts
    return n


# ----- dataframe shuffles -----------------------------------------------------------

#: How squall shuffles a dataframe: by tasks, its only method (it runs no P2P service).
SQUALL_SHUFFLE = "tasks"
#: Row ``g``'s key is ``g * SCATTER % (rows // 4)``: a prime that does not divide the key
#: count puts every key on exactly four rows spread over the frame, so a shuffle moves
#: most rows.
SCATTER = 1_000_003


def frame_part(i: int, rows: int, keys: int) -> Any:
    """Partition ``i`` of the frame (``rows`` rows each), made in its task."""
    import numpy as np
    import pandas as pd  # type: ignore[import-untyped]

    g = np.arange(i * rows, (i + 1) * rows, dtype=np.int64)
    return pd.DataFrame({"k": g * SCATTER % keys, "x": g.astype(np.float64)})


def frame_summary(part: Any, by_index: bool) -> Any:
    """One row per partition: its rows, distinct keys, lowest and highest key, and
    whether its keys are sorted (the shuffled column, or the index after set_index)."""
    import pandas as pd

    k = part.index if by_index else part["k"]
    low, high = (float(k.min()), float(k.max())) if len(k) else (0.0, 0.0)
    return pd.DataFrame(
        {
            "rows": [len(k)],
            "keys": [k.nunique()],
            "low": [low],
            "high": [high],
            "sorted": [bool(k.is_monotonic_increasing)],
        }
    )


def run_frame(op: str, partitions: int, dask_method: str, client: Any, rows: int) -> Done:
    """``set_index("k")`` or ``shuffle("k")`` of a frame of about ``rows`` rows in
    ``partitions`` partitions, generated on the workers, with ``dask_method`` on
    distributed and :data:`SQUALL_SHUFFLE` on squall; forced by a summary per output
    partition, checked: no row lost or repeated, each key in one partition (and for
    set_index, partitions sorted and in order). Returns (rows, tasks of the graph that
    shuffles: set_index's pass computing divisions is timed but not counted)."""
    import dask.dataframe as dd
    import pandas as pd
    from dask.base import collections_to_expr

    per = max(rows // partitions // 4 * 4, 4)
    total, keys = per * partitions, per * partitions // 4
    assert keys % SCATTER, keys
    method = dask_method if _system(client) == "dask" else SQUALL_SHUFFLE
    meta = pd.DataFrame({"k": pd.Series(dtype="int64"), "x": pd.Series(dtype="float64")})
    frame = dd.from_map(frame_part, range(partitions), rows=per, keys=keys, meta=meta)  # type: ignore[no-untyped-call]
    by_index = op == "set-index"
    if by_index:
        out = frame.set_index("k", shuffle_method=method)
    else:
        out = frame.shuffle("k", shuffle_method=method)
    summary = out.map_partitions(frame_summary, by_index, meta=frame_summary(meta, False))
    tasks = len(collections_to_expr([summary]).optimize().__dask_graph__())  # type: ignore[no-untyped-call]
    got = client.compute(summary).result()
    assert int(got["rows"].sum()) == total, (int(got["rows"].sum()), total)
    assert int(got["keys"].sum()) == keys, (int(got["keys"].sum()), keys)
    if by_index:
        filled = got[got["rows"] > 0]
        assert filled["sorted"].all(), filled
        assert (filled["high"].to_numpy()[:-1] < filled["low"].to_numpy()[1:]).all(), filled
    return total, tasks


#: ``set_index`` and ``shuffle`` at 100 and 1,000 partitions, against distributed's P2P
#: shuffle and against its task-based one (squall shuffles by tasks in both).
FRAME_SHAPES = {
    f"frame-{op}-{partitions}-{method}": (op, partitions, method)
    for op in ("set-index", "shuffle")
    for partitions in (100, 1_000)
    for method in ("p2p", "tasks")
}
#: A frame row warms up on 10 partitions: its cost is per task, so a hundredth of its
#: rows on all its partitions would cost as much as the run.
WARM_UPS: dict[str, Callable[[Any], Done]] = {
    name: functools.partial(run_frame, op, 10, method, rows=10_000)
    for name, (op, _, method) in FRAME_SHAPES.items()
}


WORKLOADS: dict[str, tuple[Callable[[Any, int], Done], str]] = {
    "map": (run_map, "map"),
    "map-transition-plugin": (run_map_transition_plugin, "map"),
    "submit": (run_submit, "submit"),
    "delayed-tree": (run_tree, "tree_leaves"),
    "array-x+xT-sum": (run_array, "array_side"),
    "lock-acquire-release": (run_lock_pairs, "primitive_pairs"),
    "queue-put-get": (run_queue_pairs, "primitive_pairs"),
    **{
        name: (functools.partial(run_frame, *shape), "frame_rows")
        for name, shape in FRAME_SHAPES.items()
    },
}
#: What runs unless ``--workloads`` says otherwise: the task-throughput rows.
DEFAULT_WORKLOADS = ("map", "submit", "delayed-tree", "array-x+xT-sum")


#: units/s, seconds, sched CPU µs/task, units, tasks, seconds of dask's untimed build
Run = tuple[float, float, float, int, int, float]

#: The rows whose collection dask builds before the timer starts (``Built``): building
#: a 40k-task delayed tree is 4-5 s of dask's own ``delayed`` calls on this machine,
#: identical on every system and most of squall's time if timed; the build's seconds
#: are shown beside the row.
BUILDS: dict[str, Callable[[int], Built]] = {
    "delayed-tree": build_tree,
    "array-x+xT-sum": build_array,
}


#: Before each timed run the machine must have been this idle (busy CPU seconds per
#: second, all cores) over ``SETTLE_STEP`` seconds, waiting at most ``SETTLE_MAX``
#: seconds: a run that starts while the previous one's million results are still being
#: released measured 10-15% slower than one that starts after a pause, which biased
#: whichever came first.
SETTLE_IDLE, SETTLE_STEP, SETTLE_MAX = 0.15, 0.25, 10.0


def _settle() -> None:
    deadline = time.monotonic() + SETTLE_MAX
    while time.monotonic() < deadline:
        before = psutil.cpu_times()
        time.sleep(SETTLE_STEP)
        after = psutil.cpu_times()
        busy = sum(after) - sum(before) - (after.idle - before.idle)
        busy -= getattr(after, "iowait", 0.0) - getattr(before, "iowait", 0.0)
        if busy < SETTLE_IDLE * SETTLE_STEP:
            return


def _timed(name: str, client: Any, size: int, sched: psutil.Process) -> Run:
    fn = WORKLOADS[name][0]
    build, built_in = BUILDS.get(name), 0.0
    if build is not None:
        t0 = time.perf_counter()
        built = build(size)
        built_in = time.perf_counter() - t0
        fn = functools.partial(_run_prebuilt, built)
    _settle()
    cpu0, t0 = _cpu(sched), time.perf_counter()
    done = fn(client, size)
    dt, cpu = time.perf_counter() - t0, _cpu(sched) - cpu0
    n, tasks = (done, done) if isinstance(done, int) else done
    return n / dt, dt, cpu / tasks * 1e6, n, tasks, built_in


def _median_row(name: str, system: str, runs: list[Run]) -> Row:
    rate, dt, cpu_us, n, tasks, built_in = sorted(runs)[len(runs) // 2]
    label = name if tasks == n else f"{name} ({tasks:,} tasks)"
    if built_in:
        label += f" (dask's build {built_in:.2f} s, untimed)"
    return Row(label, system, n, dt, rate, cpu_us)


def throughput(system: str, name: str, size: int, repeat: int, shape: Shape) -> Row:
    fn = WORKLOADS[name][0]
    with cluster(system, shape) as (client, sched):
        warm_up = WARM_UPS.get(name, lambda c: fn(c, max(size // 100, 10)))
        warm_up(client)  # imports, connections, durations
        runs = [_timed(name, client, size, sched) for _ in range(repeat)]
    return _median_row(name, system, runs)


def with_dashboard(system: str, name: str, size: int, repeat: int, shape: Shape) -> list[Row]:
    """``name`` on one cluster, alternating runs without and with the scheduler's status
    page open in headless Chromium (closed-open, then open-closed, …: a drift over
    the runs favours neither). For squall, also how live its page stayed: update
    latency and the longest gap between updates (distributed's Bokeh page is measured
    only by what it costs)."""

    fn = WORKLOADS[name][0]
    closed: list[Run] = []
    opened: list[Run] = []
    latencies: list[float] = []
    gap = 0.0
    with (
        cluster(system, shape, dashboard=True) as (client, sched),
        chromium() as b,
    ):
        fn(client, max(size // 100, 10))

        def run_open() -> None:
            nonlocal gap
            if system == "squall":
                page = open_page(b, client.dashboard_link, updates=2)
            else:  # a Bokeh page: give it time to load and connect its websocket
                page = b.new_page(viewport={"width": 1400, "height": 900})
                page.goto(client.dashboard_link)
                time.sleep(5)
            opened.append(_timed(name, client, size, sched))
            if system == "squall":
                stats = page.evaluate("squallDashboard.stats()")
                latencies.extend(stats["latencies_ms"][1:])  # the first includes loading
                gap = max(gap, float(stats["longest_gap_ms"]))
            page.close()

        for i in range(repeat):
            if i % 2:
                run_open()
            closed.append(_timed(name, client, size, sched))
            if not i % 2:
                run_open()
    label = f"{name}, page open"
    if latencies:
        latencies.sort()
        p50, top = latencies[len(latencies) // 2], latencies[-1]
        label += f" (update p50 {p50:.0f} ms, max {top:.0f} ms, gap {gap / 1e3:.1f} s)"
    row, page_row = _median_row(name, system, closed), _median_row(label, system, opened)
    page_row.ratio = page_row.tasks_per_s / row.tasks_per_s
    return [row, page_row]


def hold_memory(system: str, n: int, tls: bool) -> Row:
    """Scheduler RSS per task with ``n`` waiting tasks and no workers."""
    with cluster(system, Shape(0, 1, False, tls)) as (client, sched):
        time.sleep(0.5)
        rss0 = sched.memory_info().rss
        t0 = time.perf_counter()
        futures = client.map(noop, range(n))
        _until_held(client, n)
        dt = time.perf_counter() - t0
        rss = sched.memory_info().rss - rss0
        del futures
    return Row("hold-waiting (bytes/task)", system, n, dt, rss / n, 0.0)


def accept_latency(system: str, leaves: int, nanny: bool, tls: bool) -> Row:
    """Seconds from a delayed graph leaving the client until the scheduler holds it."""
    total, n = _tree(leaves)
    with cluster(system, Shape(1, 1, nanny, tls)) as (client, _):
        t0 = time.perf_counter()
        future = client.compute(total)
        sent = time.perf_counter()
        _until_held(client, n)
        dt = time.perf_counter() - sent
        del future
    return Row(f"accept-delayed (client prep {sent - t0:.2f}s)", system, n, dt, n / dt, 0.0)


def _until_held(client: Any, n: int) -> None:
    def held() -> int:
        if type(client).__module__.startswith("squall"):
            return int(client.scheduler_info()["n_tasks"])
        return int(client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)))

    while held() < n:
        time.sleep(0.005)


# ----- report -----------------------------------------------------------------------


def main(
    *,
    systems: tuple[str, ...] = SYSTEMS,
    workloads: tuple[str, ...] = DEFAULT_WORKLOADS,
    repeat: int = 3,
    workers: int = 1,
    threads: int = 1,
    quick: bool = False,
    full: bool = False,
    nanny: bool = False,
    tls: bool = False,
    dashboard: bool = False,
    as_json: bool = False,
) -> list[Row]:
    sizes = QUICK if quick else SIZES
    if full:
        sizes = {**sizes, "squall": Sizes(**{**asdict(sizes["squall"]), "map": 1_000_000})}
    rows: list[Row] = []
    shape = Shape(workers, threads, nanny, tls)
    if dashboard:  # with and without the status page open; ratio: open / closed
        for name in workloads:
            for s in systems:
                size = getattr(sizes[s], WORKLOADS[name][1])
                pair = with_dashboard(s, name, size, repeat, shape)
                rows.extend(pair)
                _show(pair, as_json)
        return rows
    for name in workloads:
        attr = WORKLOADS[name][1]
        got = {s: throughput(s, name, getattr(sizes[s], attr), repeat, shape) for s in systems}
        if "dask" in got and "squall" in got:
            got["squall"].ratio = got["squall"].tasks_per_s / got["dask"].tasks_per_s
        rows.extend(got.values())
        _show(list(got.values()), as_json)
    for s in systems:
        rows.append(hold_memory(s, sizes[s].hold, tls))
        _show(rows[-1:], as_json)
    for s in systems:
        rows.append(accept_latency(s, sizes[s].accept_leaves, nanny, tls))
        _show(rows[-1:], as_json)
    return rows


def _show(rows: list[Row], as_json: bool) -> None:
    for r in rows:
        if as_json:
            print(json.dumps(asdict(r)), flush=True)
            continue
        ratio = f"{r.ratio:8.1f}x" if r.ratio is not None else " " * 9
        if r.workload.startswith("hold"):
            print(
                f"{r.workload:38} {r.system:7} {r.tasks:>9,} tasks {r.tasks_per_s:10,.0f} B/task"
            )
        elif r.workload.startswith("accept"):
            print(f"{r.workload:38} {r.system:7} {r.tasks:>9,} tasks {r.seconds:10.3f} s")
        else:
            unit = "rows " if r.workload.startswith("frame") else "tasks"
            print(
                f"{r.workload:38} {r.system:7} {r.tasks:>9,} {unit} {r.tasks_per_s:10,.0f} /s"
                f" {ratio} sched {r.sched_cpu_us_per_task:8.1f} us/task",
                flush=True,
            )
