"""``squall bench core``: microbenchmarks of the scheduling core and its bindings.

Each row times one thing on this machine. Rows marked "bindings" drive the core from
Python in batches, through the entry points the runtime uses; rows marked "rust" time a
kernel inside the core. Comparisons with Dask run both in the same process, on the same
graph. The "rust" rows and the core's heap per task need the bench build of
``squall._core`` (cargo feature ``bench``), which the wheel is not: without it they are
skipped, saying how to get them.
"""

from __future__ import annotations

import array
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import add
from typing import Any

from dask.order import order as dask_order

from squall import _core
from squall._core import Scheduler
from squall.dask.ordering import order as squall_order
from squall.protocol import update_graph

#: Whether ``squall._core`` is the bench build: its counting allocator (``heap_bytes``)
#: and the core's benchmark kernels (``microbench``).
BENCH_BUILD = hasattr(_core, "microbench")

#: The rows only the bench build measures.
BENCH_ROWS = (
    "memory-per-task",
    "ingest-map-core",
    "order-tree-core",
    "order-map-core",
    "steal-bin-add-remove",
    "worker-choice-1000-workers",
)

NEEDS_BENCH_BUILD = (
    f"squall bench core: skipping {', '.join(BENCH_ROWS)}: they need the bench build of "
    "squall._core (cargo feature 'bench'), not installed; from a source checkout, run "
    "`maturin develop --release --features bench`"
)


@dataclass
class Row:
    name: str
    tasks: int
    seconds: float
    bytes_per_task: float | None = None
    note: str = ""

    @property
    def tasks_per_s(self) -> float:
        return self.tasks / self.seconds if self.seconds > 0 else float("inf")

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "tasks": self.tasks,
            "seconds": round(self.seconds, 9),
            "tasks_per_s": round(self.tasks_per_s, 1),
        }
        if self.bytes_per_task is not None:
            d["bytes_per_task"] = round(self.bytes_per_task, 1)
        if self.note:
            d["note"] = self.note
        return d


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _median(fn: Callable[[], float], repeat: int) -> float:
    return statistics.median(fn() for _ in range(repeat))


def _tree(n_leaves: int) -> Iterator[tuple[Any, list[Any]]]:
    """(key, dependency keys) of a binary tree reduction over n_leaves leaves, leaves
    first, each task after its dependencies."""
    level: list[Any] = [("leaf", i) for i in range(n_leaves)]
    for k in level:
        yield k, []
    depth = 0
    while len(level) > 1:
        depth += 1
        nxt = []
        for j in range(0, len(level), 2):
            key = (f"sum-{depth}", j // 2)
            yield key, level[j : j + 2]
            nxt.append(key)
        level = nxt


@dataclass(frozen=True)
class Graph:
    """An ``update-graph`` as a client sends it, encoded once outside the timings."""

    n: int
    keys_bytes: int
    payload: bytes
    order: str
    wanted: list[int] | None = None  # task indices the client holds (default: all)

    def submit(self, s: Scheduler, client: int) -> bytes:
        """What the scheduler does with it (decode and ingest, one call): the task ids."""
        return s.submit_wire(
            client,
            self.payload,
            self.n,
            self.keys_bytes,
            now=0.0,
            wanted=self.wanted,
            order=self.order,
        )


def map_graph(n: int) -> Graph:
    """``client.map`` of n tasks (keys ``inc-i``, one spec), ordered as a map is."""
    n, keys_bytes, payload, _ = update_graph.encode([f"inc-{i}" for i in range(n)], [b"f"] * n)
    return Graph(n, keys_bytes, payload, "sequential")


def tree_graph(n_leaves: int) -> Graph:
    """The tree reduction, the client holding its root."""
    keys, deps = map(list, zip(*_tree(n_leaves), strict=True))
    n, keys_bytes, payload, _ = update_graph.encode(keys, [b"f"] * len(keys), deps)
    return Graph(n, keys_bytes, payload, "compute", wanted=[len(keys) - 1])


def _drive(s: Scheduler, client: int, ids: bytes, now: float) -> float:
    """Play the workers until nothing runs (one batch per round), then release ``ids``."""
    nbytes_cache: dict[int, bytes] = {}
    while True:
        workers, tasks, runs = s.take_commands().compute()
        n = len(tasks) // 4
        if n == 0:
            break
        sizes = nbytes_cache.get(n)
        if sizes is None:
            sizes = nbytes_cache[n] = array.array("q", [8] * n).tobytes()
        now += 0.001
        s.tasks_finished(workers, tasks, runs, sizes, now=now)
    s.client_releases_tasks(client, ids, now=now)
    s.take_commands()
    return now


def _cluster(n_workers: int, config: dict[str, Any] | None = None) -> tuple[Scheduler, int]:
    """A scheduler with a client and n one-thread workers, nothing pending."""
    s = Scheduler(config)
    c = s.client("bench")
    for i in range(n_workers):
        s.add_worker(f"tcp://10.0.0.{i}:8000", 1, now=0.0)
    s.take_commands()
    return s, c


def lifecycle(graph: Graph, n_workers: int, config: dict[str, Any] | None = None) -> float:
    """Seconds from submitting the graph until its tasks finished and were released."""
    s, c = _cluster(n_workers, config)
    gc.disable()
    t0 = time.perf_counter()
    ids = graph.submit(s, c)
    if graph.wanted is not None:
        ids = b"".join(ids[4 * i : 4 * i + 4] for i in graph.wanted)
    _drive(s, c, ids, 0.0)
    dt = time.perf_counter() - t0
    gc.enable()
    assert s.n_tasks == 0, "the core is empty again"
    return dt


def ingest(graph: Graph) -> tuple[float, float | None, float]:
    """Seconds to submit the graph; then the scheduler's heap bytes (bench build only)
    and the process's resident bytes per task held."""
    gc.collect()
    rss, heap = _rss(), _core.heap_bytes() if BENCH_BUILD else 0
    s = Scheduler()
    c = s.client("bench")
    t0 = time.perf_counter()
    ids = graph.submit(s, c)
    dt = time.perf_counter() - t0
    s.take_commands()
    per_task_heap = (_core.heap_bytes() - heap) / graph.n if BENCH_BUILD else None
    per_task_rss = (_rss() - rss) / graph.n
    del s, ids
    return dt, per_task_heap, per_task_rss


def dask_tree(n_leaves: int) -> dict[Any, Any]:
    """The tree reduction as a legacy dask graph."""
    return {
        key: (add, *deps) if len(deps) == 2 else (int, deps[0] if deps else key[1])
        for key, deps in _tree(n_leaves)
    }


def order_compare(n_leaves: int) -> Iterator[Row]:
    """squall.order vs dask.order on the same legacy dask graph, one process."""
    dsk = dask_tree(n_leaves)
    n = len(dsk)
    t0 = time.perf_counter()
    squall_order(dsk)
    t_sq = time.perf_counter() - t0
    t0 = time.perf_counter()
    dask_order(dsk)
    t_dask = time.perf_counter() - t0
    yield Row(
        "order-tree-squall.order", n, t_sq, note=f"python graph in; {t_dask / t_sq:.1f}x dask"
    )
    yield Row("order-tree-dask.order", n, t_dask, note="dask.order on the same graph")


def run(n: int, repeat: int, compare_dask: bool) -> Iterator[Row]:
    mapped = map_graph(n)
    t, heap, rss = ingest(mapped)
    yield Row("ingest-map", n, t, note="bindings; map update-graph, no workers (all queue)")
    if BENCH_BUILD:
        mb = _core.microbench
        note = f"core heap per held task; RSS {rss:.0f}"
        yield Row("memory-per-task", n, t, bytes_per_task=heap, note=note)
        yield Row("ingest-map-core", n, _median(lambda: mb("ingest", n), repeat), note="rust")
        yield Row("order-tree-core", n, _median(lambda: mb("order-tree", n), repeat), note="rust")
        yield Row("order-map-core", n, _median(lambda: mb("order-map", n), repeat), note="rust")
    if compare_dask:
        yield from order_compare(n // 2)
    t = _median(lambda: lifecycle(mapped, 16), repeat)
    yield Row(
        "lifecycle-map", n, t, note="bindings; 16 workers x 1 thread; ingest->finished->released"
    )
    tree = tree_graph(n // 2)
    yield Row("lifecycle-tree", tree.n, lifecycle(tree, 16), note="bindings; 16 workers")
    if BENCH_BUILD:
        m = min(n, 1_000_000)
        t = _median(lambda: mb("steal-bins", m), repeat)
        yield Row("steal-bin-add-remove", 2 * m, t, note="rust; one add + one remove per task")
        decisions = 10_000
        per = _median(lambda: mb("worker-choice", decisions, workers=1000), repeat)
        note = "rust; tasks = decisions"
        yield Row("worker-choice-1000-workers", decisions, per * decisions, note=note)


def main(n: int, repeat: int, as_json: bool, compare_dask: bool) -> None:
    if not BENCH_BUILD:
        print(NEEDS_BENCH_BUILD, file=sys.stderr, flush=True)
    rows = run(n, repeat, compare_dask)
    if as_json:
        for r in rows:
            print(json.dumps(r.as_dict()), flush=True)
        return
    print(f"{'name':30} {'tasks':>10} {'seconds':>10} {'tasks/s':>14} {'B/task':>8}  note")
    for r in rows:
        bpt = f"{r.bytes_per_task:8.0f}" if r.bytes_per_task is not None else " " * 8
        rate = f"{r.tasks_per_s:>14,.0f}"
        print(f"{r.name:30} {r.tasks:>10} {r.seconds:>10.4f} {rate} {bpt}  {r.note}", flush=True)
