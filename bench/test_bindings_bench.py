"""pytest-benchmark benches of the bindings (``pytest bench -m slow``): the batch calls
the runtime makes, at sizes that keep each round short."""

from __future__ import annotations

import array
from typing import Any

import pytest

import squall
from squall.tools import bench

pytestmark = pytest.mark.slow

N = 100_000


def test_submit_wire_map(benchmark: Any) -> None:
    graph = bench.map_graph(N)

    def run() -> None:
        s = squall.core.Scheduler()
        graph.submit(s, s.client("c"))

    benchmark(run)


def test_lifecycle_map_16_workers(benchmark: Any) -> None:
    benchmark(bench.lifecycle, bench.map_graph(N), 16)


def test_lifecycle_tree_16_workers(benchmark: Any) -> None:
    benchmark(bench.lifecycle, bench.tree_graph(N // 2), 16)


def test_tasks_finished_batch(benchmark: Any) -> None:
    graph = bench.map_graph(N)

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        s = squall.core.Scheduler({"worker-saturation": "inf"})
        c = s.client("c")
        s.add_worker("tcp://10.0.0.1:1", 1, now=0.0)
        graph.submit(s, c)
        workers, tasks, runs = s.take_commands().compute()
        sizes = array.array("q", [8] * (len(tasks) // 4)).tobytes()
        return (s, workers, tasks, runs, sizes), {}

    def run(s: squall.core.Scheduler, w: bytes, t: bytes, r: bytes, n: bytes) -> None:
        s.tasks_finished(w, t, r, n, now=1.0)

    benchmark.pedantic(run, setup=setup, rounds=5)


def test_order_tree(benchmark: Any) -> None:
    dsk = bench.dask_tree(N // 2)
    benchmark(squall.order, dsk)
