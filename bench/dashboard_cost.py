"""The cost of the dashboard's data on a scheduler holding 100,000 tasks
(docs/measurements.md#dashboard-data): ``python bench/dashboard_cost.py [PREFIXES]``.

100 groups of 1,000 keys over 8 workers of 4 threads, spread over PREFIXES prefixes
(default 20); the first results reported. Each call is timed with ``timeit``, 200
runs, best of 3."""

from __future__ import annotations

import array
import sys
import timeit
from collections.abc import Callable
from typing import Any

from squall.scheduler import metrics
from squall.scheduler.server import SchedulerServer
from squall.scheduler.snapshot import counts_json, dashboard_snapshot


def main(n_prefixes: int) -> None:
    server = SchedulerServer("tcp://127.0.0.1:0")
    core = server.core
    c = core.client("c")
    for i in range(8):
        core.add_worker(f"tcp://127.0.0.1:{1000 + i}", 4, now=0.0)
    for g in range(100):
        # Tuple keys ("pP-G", i): group "pP-G", prefix "pP".
        keys = [(f"p{g % n_prefixes}-{g}", i) for i in range(1000)]
        core.submit(c, keys, None, now=0.0, wanted=list(range(1000)))
    workers, tasks, runs = core.take_commands().compute()
    n = len(tasks) // 4
    core.tasks_finished(workers, tasks, runs, array.array("q", [8] * n).tobytes(), now=1.0)
    core.take_commands()
    print(f"{core.n_tasks} tasks, {len(core.prefix_states())} prefixes: {core.state_counts()}")
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("dashboard_snapshot", lambda: dashboard_snapshot(server)),
        ("scheduler exposition", lambda: metrics.exposition(server)),
        ("counts_json", lambda: counts_json(server)),
        ("Scheduler.counters", core.counters),
        ("Scheduler.state_counts", core.state_counts),
    ]
    for name, call in calls:
        best = min(timeit.repeat(call, number=200, repeat=3)) / 200
        print(f"{name}: {best * 1e6:.0f} µs")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
