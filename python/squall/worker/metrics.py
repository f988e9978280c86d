"""A worker's ``/metrics``: Prometheus text exposition (docs/dashboard.md#metrics).

distributed's metric names where the meaning is the same, ``squall_worker_*`` for the
rest. Read from the worker's compiled state: task counts in one pass under its lock,
memory from its totals and the process's RSS.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from squall.worker.load import Transfers
from squall.worker.spill import ACTIVITIES

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
        spilled = min(mem.spilled_count, counts.get("memory", 0))
        if spilled:
            counts["memory"] -= spilled
            counts["disk"] = spilled
        for state, n in sorted(counts.items()):
            tasks.add_metric([state], n)
        yield tasks

        yield GaugeMetricFamily("dask_worker_threads", "Task threads", value=w.nthreads)
        yield GaugeMetricFamily(
            "dask_worker_latency",
            "Round trip of the last heartbeat to the scheduler",
            value=w.latency,
            unit="seconds",
        )
        yield from _transfers(w.transfers)

        process = mem.process
        managed = min(process, mem.managed)
        memory = GaugeMetricFamily(
            "dask_worker_memory_bytes",
            "The process's memory: results held (managed), the rest, and results on disk",
            labels=["type"],
        )
        memory.add_metric(["managed"], managed)
        memory.add_metric(["unmanaged"], process - managed)
        memory.add_metric(["spilled"], mem.spilled_disk)
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
            value=mem.spilled_disk,
            unit="bytes",
        )
        yield GaugeMetricFamily(
            "squall_worker_spilled_values", "Results spilled now", value=mem.spilled_count
        )
        if w.memory is not None:
            yield from _spill_activity(w.memory.spill_activity())
        if w.bandwidth is not None:
            yield GaugeMetricFamily(
                "squall_worker_bandwidth",
                "Transfer bandwidth this worker measured (bytes per second)",
                value=w.bandwidth,
            )


def _spill_activity(totals: dict[tuple[str, str], float]) -> Iterator[Metric]:
    """Reads and writes of spilled results, as distributed's spill counters (labels
    ``disk-read`` and ``disk-write``; distributed's ``memory-read`` is not counted:
    tasks read their inputs in compiled code)."""
    about = {
        "count": ("dask_worker_spill_count", "Spilled results written to or read from disk", ""),
        "bytes": ("dask_worker_spill_bytes", "Bytes of spilled results written or read", ""),
        "seconds": (
            "dask_worker_spill_time",
            "Time spent writing (pickling included) and reading (unpickling included)",
            "seconds",
        ),
    }
    for unit, (name, text, suffix) in about.items():
        family = CounterMetricFamily(name, text, labels=["activity"], unit=suffix)
        for activity in ACTIVITIES:
            family.add_metric([activity], totals[activity, unit])
        yield family


def _transfers(t: Transfers) -> Iterator[Metric]:
    """Data transfers with peers, with distributed's names (squall's for incoming bytes,
    which distributed counts only while open)."""
    yield GaugeMetricFamily(
        "dask_worker_transfer_incoming_count",
        "Data requests to other workers open now",
        value=t.incoming_open,
    )
    yield CounterMetricFamily(
        "dask_worker_transfer_incoming_count",
        "Data requests to other workers since the worker started",
        value=t.incoming_total,
    )
    yield CounterMetricFamily(
        "squall_worker_transfer_incoming",
        "Bytes received from other workers since the worker started",
        value=t.incoming_bytes_total,
        unit="bytes",
    )
    yield GaugeMetricFamily(
        "dask_worker_transfer_outgoing_count",
        "Data replies to other workers being sent now",
        value=t.outgoing_open,
    )
    yield GaugeMetricFamily(
        "dask_worker_transfer_outgoing_bytes",
        "Bytes of the data replies being sent now",
        value=t.outgoing_open_bytes,
    )
    yield CounterMetricFamily(
        "dask_worker_transfer_outgoing_count",
        "Data replies to other workers since the worker started",
        value=t.outgoing_total,
    )
    yield CounterMetricFamily(
        "dask_worker_transfer_outgoing_bytes",
        "Bytes sent to other workers since the worker started, failed sends included",
        value=t.outgoing_bytes_total,
    )


def exposition(worker: Worker) -> bytes:
    """The worker's metrics in Prometheus' text format (call on its event loop)."""
    registry = CollectorRegistry()
    registry.register(WorkerCollector(worker))
    return generate_latest(registry)
