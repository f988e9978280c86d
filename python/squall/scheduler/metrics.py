"""The scheduler's ``/metrics``: Prometheus text exposition (docs/dashboard.md#metrics).

distributed's metric names where the meaning is the same, ``squall_scheduler_*`` for
figures distributed has none for. Every value comes from the core's counters or the
server's own, read in a few binding calls: O(prefixes + workers) per scrape.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from squall import config
from squall.scheduler.snapshot import LIVE_STATES, n_clients

if TYPE_CHECKING:
    from squall.scheduler.server import SchedulerServer

_PREFIX = ["task_prefix_name"]


class SchedulerCollector:
    """A prometheus_client collector reading one scheduler at each scrape."""

    def __init__(self, server: SchedulerServer) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        s = self.server
        core = s.core
        c = core.counters()
        prefixes = core.prefix_states()

        yield GaugeMetricFamily("dask_scheduler_clients", "Connected clients", value=n_clients(s))
        yield CounterMetricFamily(
            "dask_scheduler_client_connections_added",
            "Client connections made since the scheduler started",
            value=s.clients_added,
        )
        yield CounterMetricFamily(
            "dask_scheduler_client_connections_removed",
            "Client connections ended since the scheduler started",
            value=s.clients_removed,
        )
        yield GaugeMetricFamily(
            "dask_scheduler_desired_workers",
            "Workers the current work needs (the adaptive target)",
            value=core.adaptive_target(config.seconds("adaptive.target-duration")),
        )
        workers = GaugeMetricFamily(
            "dask_scheduler_workers", "Registered workers by state", labels=["state"]
        )
        for state, n in c["workers"].items():
            workers.add_metric([state], n)
        yield workers
        yield CounterMetricFamily(
            "dask_scheduler_workers_added", "Workers registered ever", value=c["workers_added"]
        )
        yield CounterMetricFamily(
            "dask_scheduler_workers_removed", "Workers removed ever", value=c["workers_removed"]
        )

        tasks = GaugeMetricFamily(
            "dask_scheduler_tasks", "Tasks the scheduler holds by state", labels=["state"]
        )
        for state in LIVE_STATES:
            tasks.add_metric([state], c["states"][state])
        yield tasks
        yield CounterMetricFamily(
            "dask_scheduler_tasks_forgotten",
            "Tasks forgotten ever (done and released, or cancelled)",
            value=c["tasks_forgotten"],
        )
        yield GaugeMetricFamily(
            "dask_scheduler_task_groups",
            "Task groups that still hold a task",
            value=c["task_groups"],
        )

        suspicious = CounterMetricFamily(
            "dask_scheduler_tasks_suspicious",
            "Times a task of the prefix was running on a worker that died",
            labels=_PREFIX,
        )
        compute = CounterMetricFamily(
            "dask_scheduler_tasks_compute",
            "Seconds of compute per prefix",
            labels=_PREFIX,
            unit="seconds",
        )
        transfer = CounterMetricFamily(
            "dask_scheduler_tasks_transfer",
            "Seconds of transfer of the prefix's dependencies, as workers reported",
            labels=_PREFIX,
            unit="seconds",
        )
        output = GaugeMetricFamily(
            "dask_scheduler_tasks_output",
            "Bytes of the results of the prefix's live groups",
            labels=_PREFIX,
            unit="bytes",
        )
        state_totals = CounterMetricFamily(
            "dask_scheduler_prefix_state_totals",
            "Times a task of the prefix entered each state",
            labels=[*_PREFIX, "state"],
        )
        for p in prefixes:
            name = [p["name"]]
            suspicious.add_metric(name, p["suspicious"])
            compute.add_metric(name, p["compute_total"])
            transfer.add_metric(name, p["transfer_total"])
            output.add_metric(name, p["nbytes_total"])
            for state, n in p["totals"].items():
                if n:
                    state_totals.add_metric([p["name"], state], n)
        yield from (suspicious, compute, transfer, output, state_totals)

        yield from _squall_metrics(s, c)


def _squall_metrics(s: SchedulerServer, c: dict[str, Any]) -> Iterator[Metric]:
    """squall's own: totals distributed does not export and the scheduler's health."""
    h = s.health.figures()
    for name, doc in (
        ("tasks_computed", "Results computed by workers ever"),
        ("tasks_erred", "Times a task erred"),
        ("transitions", "Task state transitions ever"),
    ):
        yield CounterMetricFamily(f"squall_scheduler_{name}", doc, value=c[name])
    yield GaugeMetricFamily(
        "squall_scheduler_event_loop_latency",
        "How late the scheduler's event loop last woke a sleeper",
        value=h["latency"],
        unit="seconds",
    )
    yield GaugeMetricFamily(
        "squall_scheduler_event_loop_latency_max",
        "The longest such lateness over the last seconds",
        value=h["latency_max"],
        unit="seconds",
    )
    yield CounterMetricFamily(
        "squall_scheduler_messages", "Messages read from workers and clients", value=h["messages"]
    )
    yield CounterMetricFamily(
        "squall_scheduler_core",
        "Seconds spent handling messages and ticks (core and dispatch)",
        value=h["core_seconds"],
        unit="seconds",
    )
    yield CounterMetricFamily("squall_scheduler_ticks", "Periodic ticks", value=h["ticks"])


def exposition(server: SchedulerServer) -> bytes:
    """The scheduler's metrics in Prometheus' text format (call on its event loop)."""
    registry = CollectorRegistry()
    registry.register(SchedulerCollector(server))
    return generate_latest(registry)
