"""A worker's ``/metrics``: Prometheus text exposition (docs/dashboard.md#metrics).

distributed's metric names where the meaning is the same, ``squall_worker_*`` for the
rest. Read from the worker's compiled state: task counts in one pass under its lock,
memory from its totals and the process's RSS.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from squall.worker.worker import Worker


class WorkerCollector:
    """A prometheus_client collector reading one worker at each scrape."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def collect(self) -> Iterator[Metric]:
        w = self.worker
        mem = w.memory_metrics()
        counts = w.task_counts()

        tasks = GaugeMetricFamily(
            "dask_worker_tasks", "Tasks this worker knows, by state", labels=["state"]
        )
        # As distributed does: results spilled to disk count as "disk", not "memory".
        spilled = min(mem["spilled_count"], counts.get("memory", 0))
        if spilled:
            counts["memory"] -= spilled
            counts["disk"] = spilled
        for state, n in sorted(counts.items()):
            tasks.add_metric([state], n)
        yield tasks

        yield GaugeMetricFamily("dask_worker_threads", "Task threads", value=w.nthreads)

        process = mem["process"]
        managed = min(process, mem["managed"])
        memory = GaugeMetricFamily(
            "dask_worker_memory_bytes",
            "The process's memory: results held (managed), the rest, and results on disk",
            labels=["type"],
        )
        memory.add_metric(["managed"], managed)
        memory.add_metric(["unmanaged"], process - managed)
        memory.add_metric(["spilled"], mem["spilled_disk"])
        yield memory

        yield GaugeMetricFamily(
            "squall_worker_memory_limit",
            "The memory limit (0: none)",
            value=w.memory_limit,
            unit="bytes",
        )
        yield GaugeMetricFamily(
            "squall_worker_spilled",
            "Bytes on disk of the results spilled now",
            value=mem["spilled_disk"],
            unit="bytes",
        )
        yield GaugeMetricFamily(
            "squall_worker_spilled_values", "Results spilled now", value=mem["spilled_count"]
        )
        if w.bandwidth is not None:
            yield GaugeMetricFamily(
                "squall_worker_bandwidth",
                "Transfer bandwidth this worker measured (bytes per second)",
                value=w.bandwidth,
            )


def exposition(worker: Worker) -> bytes:
    """The worker's metrics in Prometheus' text format (call on its event loop)."""
    registry = CollectorRegistry()
    registry.register(WorkerCollector(worker))
    return generate_latest(registry)
