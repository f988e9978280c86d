"""``/dashboard/data.json``: what the dashboard's pages draw, in one answer
(docs/dashboard.md#pages): the scheduler's snapshot of its counters and the task
stream's records since the page's cursor, compacted to arrays."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dask.utils import key_split

from squall.scheduler.snapshot import dashboard_snapshot

if TYPE_CHECKING:
    from squall.scheduler.server import SchedulerServer

#: At most this many task-stream records per answer: the newest, when more came since
#: the page last asked (a page that fell behind skips ahead instead of lagging; a
#: worker's heartbeat brings at most squall.diagnostics.task-stream.samples).
STREAM_LIMIT = 5000


def dashboard_data(server: SchedulerServer, cursor: int) -> dict[str, Any]:
    """The snapshot, each worker's ``/metrics`` link, and with ``cursor`` ≥ 0 the task
    stream after it as ``[worker, thread, start, stop, prefix, key, status]`` rows."""
    data = dashboard_snapshot(server)
    served = {p.address: (p.dashboard_scheme, p.dashboard) for p in server.workers.values()}
    for w in data["workers"]:
        scheme, port = served.get(w["address"], ("http", None))
        w["dashboard"] = None if port is None else f"{scheme}://{w['host']}:{port}/metrics"
    if cursor >= 0:
        stream = server.task_stream
        cursor, rows = stream.rows_since(cursor, STREAM_LIMIT)
        fraction = stream.sampled_fraction()
        data["stream"] = {
            "cursor": cursor,
            "sampled": 1 / fraction if fraction > 0 else 1,
            "records": [
                [worker, thread, start, stop, key_split(key), str(key), "OK" if ok else "error"]
                for key, worker, thread, ok, start, stop, _, _ in rows
            ],
        }
    return data
