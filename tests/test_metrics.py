"""``/metrics`` content: the scheduler's and a worker's Prometheus exposition on live
clusters, parsed back as Prometheus would."""

from __future__ import annotations

import operator
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from conftest import eventually, start_worker
from prometheus_client.parser import text_string_to_metric_families

from squall import Client, LocalCluster
from squall.deploy.embedded import EmbeddedCluster
from squall.scheduler import metrics as scheduler_metrics
from squall.worker import metrics as worker_metrics


def inc(x: int) -> int:
    return x + 1


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: bytes) -> Samples:
    """{(sample name, sorted labels): value}: every sample of an exposition."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def scrape(embedded: EmbeddedCluster) -> Samples:
    async def read() -> bytes:
        return scheduler_metrics.exposition(embedded.scheduler)

    return parse(embedded.call(read(), timeout=10))


def test_scheduler_and_worker_metrics_of_an_embedded_cluster() -> None:
    with (
        LocalCluster(processes=False, n_workers=2, threads_per_worker=2) as cluster,
        Client(cluster) as client,
    ):
        futures = client.map(inc, range(50))
        client.gather(futures)
        embedded = cluster._embedded
        assert embedded is not None
        m = scrape(embedded)

        async def read_workers() -> list[bytes]:
            return [worker_metrics.exposition(w) for w in embedded.workers]

        workers = [parse(t) for t in embedded.call(read_workers(), timeout=10)]

    assert m["dask_scheduler_clients", ()] == 1
    # The client only: the cluster's own one-request connections are not counted.
    assert m["dask_scheduler_client_connections_added_total", ()] == 1
    assert m["dask_scheduler_workers_added_total", ()] == 2
    assert m["dask_scheduler_workers_removed_total", ()] == 0
    assert m["dask_scheduler_tasks", (("state", "memory"),)] == 50
    assert m["dask_scheduler_tasks", (("state", "processing"),)] == 0
    assert m["dask_scheduler_task_groups", ()] == 1
    inc_label = ("task_prefix_name", "inc")
    assert m["dask_scheduler_tasks_compute_seconds_total", (inc_label,)] > 0
    assert m["dask_scheduler_tasks_output_bytes", (inc_label,)] > 0
    assert m["dask_scheduler_prefix_state_totals_total", (("state", "memory"), inc_label)] == 50
    assert m["squall_scheduler_tasks_computed_total", ()] == 50
    assert m["squall_scheduler_messages_total", ()] > 0
    assert m["squall_scheduler_core_seconds_total", ()] > 0
    assert ("squall_scheduler_event_loop_latency_seconds", ()) in m

    assert all(w["dask_worker_threads", ()] == 2 for w in workers)
    assert sum(w.get(("dask_worker_tasks", (("state", "memory"),)), 0) for w in workers) == 50
    for w in workers:
        assert w["dask_worker_memory_bytes", (("type", "unmanaged"),)] > 0
        assert w["dask_worker_memory_bytes", (("type", "spilled"),)] == 0


@contextmanager
def worker_processes(address: str, n: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = [start_worker(address, "--nthreads", "1") for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=20)


def test_scheduler_metrics_count_worker_processes_coming_and_going() -> None:
    with (
        LocalCluster(processes=False, n_workers=0) as cluster,
        worker_processes(cluster.scheduler_address, 2) as procs,
        Client(cluster) as client,
    ):
        embedded = cluster._embedded
        assert embedded is not None
        client.wait_for_workers(2, timeout=20)
        # A builtin: worker processes cannot import this test module.
        futures = client.map(operator.neg, range(20))
        assert client.gather(futures) == [-i for i in range(20)]
        m = scrape(embedded)
        assert m["dask_scheduler_workers_added_total", ()] == 2
        assert m["dask_scheduler_tasks", (("state", "memory"),)] == 20
        procs[0].send_signal(signal.SIGTERM)

        def settled() -> bool:
            # The results the leaving worker held are moved or computed again.
            m = scrape(embedded)
            return (
                m["dask_scheduler_workers_removed_total", ()] == 1
                and m["dask_scheduler_workers", (("state", "idle"),)] == 1
                and m["dask_scheduler_tasks", (("state", "memory"),)] == 20
            )

        eventually(settled, 20)
