"""``squall bench core``: microbenchmarks of the scheduling core and its bindings.

Each row times one thing on this machine. Rows marked "bindings" drive the core from
Python in batches (the way the runtime does); rows marked "rust" time a kernel inside
the core. Comparisons with Dask run both in the same process, on the same graph.
"""

from __future__ import annotations

import array
import gc
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from squall._core import Scheduler, heap_bytes, microbench


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


def _tree_csr(n_leaves: int) -> tuple[list[Any], bytes, bytes]:
    """Keys and CSR dependencies (indices into the keys) of the tree reduction."""
    keys: list[Any] = []
    index: dict[Any, int] = {}
    offsets = array.array("I", [0])
    indices = array.array("I")
    for key, deps in _tree(n_leaves):
        index[key] = len(keys)
        keys.append(key)
        indices.extend(index[d] for d in deps)
        offsets.append(len(indices))
    return keys, offsets.tobytes(), indices.tobytes()


def _drive(s: Scheduler, client: int, ids: bytes, now: float) -> float:
    """Play the workers until nothing runs (one batch per round), then release all."""
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


def lifecycle_map(n: int, n_workers: int, config: dict[str, Any] | None = None) -> float:
    s, c = _cluster(n_workers, config)
    gc.disable()
    t0 = time.perf_counter()
    ids = s.submit_map(c, "inc", n, now=0.0, spec=b"f")
    _drive(s, c, ids, 0.0)
    dt = time.perf_counter() - t0
    gc.enable()
    assert s.n_tasks == 0, "the core is empty again"
    return dt


def lifecycle_tree(n_leaves: int, n_workers: int) -> tuple[int, float]:
    keys, offsets, indices = _tree_csr(n_leaves)
    s, c = _cluster(n_workers)
    gc.disable()
    t0 = time.perf_counter()
    ids = s.submit_csr(c, keys, offsets, indices, now=0.0, wanted=[len(keys) - 1])
    _drive(s, c, ids[-4:], 0.0)
    dt = time.perf_counter() - t0
    gc.enable()
    assert s.n_tasks == 0, "the core is empty again"
    return len(keys), dt


def ingest_map(n: int) -> tuple[float, float, float]:
    """Seconds to submit n map tasks; then the scheduler's heap bytes and the process's
    resident bytes per task held."""
    gc.collect()
    rss, heap = _rss(), heap_bytes()
    s = Scheduler()
    c = s.client("bench")
    t0 = time.perf_counter()
    ids = s.submit_map(c, "inc", n, now=0.0, spec=b"f")
    dt = time.perf_counter() - t0
    s.take_commands()
    per_task_heap = (heap_bytes() - heap) / n
    per_task_rss = (_rss() - rss) / n
    del s, ids
    return dt, per_task_heap, per_task_rss


def dask_tree(n_leaves: int) -> dict[Any, Any]:
    """The tree reduction as a legacy dask graph."""
    from operator import add

    return {
        key: (add, *deps) if len(deps) == 2 else (int, deps[0] if deps else key[1])
        for key, deps in _tree(n_leaves)
    }


def order_compare(n_leaves: int) -> Iterator[Row]:
    """squall.order vs dask.order on the same legacy dask graph, one process."""
    from dask.order import order as dask_order

    from squall.dask.ordering import order as squall_order

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
    t, heap, rss = ingest_map(n)
    yield Row("ingest-map", n, t, note="bindings; map tasks, no workers (all queue)")
    yield Row(
        "memory-per-task",
        n,
        t,
        bytes_per_task=heap,
        note=f"core heap per held task; RSS {rss:.0f}",
    )
    yield Row("ingest-map-core", n, _median(lambda: microbench("ingest", n), repeat), note="rust")
    yield Row(
        "order-tree-core", n, _median(lambda: microbench("order-tree", n), repeat), note="rust"
    )
    yield Row(
        "order-map-core", n, _median(lambda: microbench("order-map", n), repeat), note="rust"
    )
    if compare_dask:
        yield from order_compare(n // 2)
    t = _median(lambda: lifecycle_map(n, 16), repeat)
    yield Row(
        "lifecycle-map", n, t, note="bindings; 16 workers x 1 thread; ingest->finished->released"
    )
    nt, t = lifecycle_tree(n // 2, 16)
    yield Row("lifecycle-tree", nt, t, note="bindings; ordering included; 16 workers")
    m = min(n, 1_000_000)
    t = _median(lambda: microbench("steal-bins", m), repeat)
    yield Row("steal-bin-add-remove", 2 * m, t, note="rust; one add + one remove per task")
    decisions = 10_000
    per = _median(lambda: microbench("worker-choice", decisions, workers=1000), repeat)
    yield Row(
        "worker-choice-1000-workers", decisions, per * decisions, note="rust; tasks = decisions"
    )


def main(n: int, repeat: int, as_json: bool, compare_dask: bool) -> None:
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
