"""The dashboard's data (docs/dashboard.md#the-snapshot): JSON-able dicts built from the
core's counters in a handful of binding calls, O(prefixes + groups + workers), never a
pass over the tasks. Called on the scheduler's event loop."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from squall import config
from squall._core import TASK_STATES
from squall.protocol.identity import worker_identity

if TYPE_CHECKING:
    from squall.scheduler.server import SchedulerServer

#: At most this many task groups in a snapshot (active ones first, then newest).
GROUPS_CAP = 200

#: The live task states (all but forgotten), in the core's order
#: (docs/scheduling.md#task-states).
LIVE_STATES = tuple(s for s in TASK_STATES if s != "forgotten")

#: A worker's memory as the dashboard splits it (bytes; ``spilled`` is on disk).
MEMORY_PARTS = ("process", "managed", "unmanaged", "spilled")


def n_clients(server: SchedulerServer) -> int:
    """Connected clients (the fire-and-forget pseudo-client is none)."""
    return len(server.clients)


def worker_row(info: dict[str, Any]) -> dict[str, Any]:
    """One worker of ``Scheduler.workers_info`` as the dashboard's workers table shows
    it: its load as its last heartbeat reported, what the scheduler assigned it, and
    its memory split as distributed names it."""
    load, metrics = info["load"], info["metrics"]
    return {
        "address": info["address"],
        "name": info["name"],
        "host": info["host"],
        "nthreads": info["nthreads"],
        "status": info["status"],
        "executing": load["executing"],
        "ready": load["ready"],
        "in_flight": load["in_flight"],
        "processing": info["processing"],
        "in_memory": info["has_what"],
        "memory": {
            "process": metrics["memory"],
            "managed": metrics["managed_bytes"],
            "unmanaged": metrics["unmanaged"],
            "spilled": metrics["spilled_bytes"]["disk"],
        },
        "memory_limit": info["memory_limit"],
        "cpu": load["cpu"],
        "read_bps": load["read_bps"],
        "write_bps": load["write_bps"],
        "occupancy": info["occupancy"],
        "nbytes": info["nbytes"],
        "bandwidth": info["bandwidth"],
    }


def prefix_row(p: dict[str, Any]) -> dict[str, Any]:
    """One prefix with its live counts per state flattened beside its figures."""
    states = p["states"]
    return {
        "name": p["name"],
        **{s: states[s] for s in LIVE_STATES},
        "total": sum(states[s] for s in LIVE_STATES),
        "duration_average": p["duration_average"],
        "compute_total": p["compute_total"],
        "nbytes_total": p["nbytes_total"],
    }


def dashboard_snapshot(server: SchedulerServer) -> dict[str, Any]:
    """The status, workers and health pages' data in one dict (schema in
    docs/dashboard.md#the-snapshot)."""
    core = server.core
    counters = core.counters()
    totals = {k: v for k, v in counters.items() if k not in ("states", "workers")}
    rows = [worker_row(w) for w in core.workers_info()]
    return {
        "now": time.time(),
        "scheduler": {
            "address": server.address,
            "id": server.id,
            "started": server.started,
            "workers": len(rows),
            "clients": n_clients(server),
            "threads": core.total_nthreads,
            "memory_limit": core.total_memory,
            "memory": {k: sum(r["memory"][k] for r in rows) for k in MEMORY_PARTS},
            "occupancy": sum(r["occupancy"] for r in rows),
            "nbytes": sum(r["nbytes"] for r in rows),
        },
        "states": TASK_STATES,
        "counts": {s: counters["states"][s] for s in LIVE_STATES},
        "totals": totals,
        "worker_states": counters["workers"],
        "prefixes": [
            prefix_row(p) for p in core.prefix_states() if any(p["states"][s] for s in LIVE_STATES)
        ],
        "groups": core.group_states(GROUPS_CAP),
        "workers": rows,
        "health": server.health.figures(),
    }


def counts_json(server: SchedulerServer) -> dict[str, Any]:
    """``/json/counts.json`` with distributed's field names. ``waiting`` counts tasks in
    the waiting state; ``waiting_data`` (tasks some unfinished task needs) takes a pass
    over the tasks in the core, as distributed's does."""
    core = server.core
    counters = core.counters()
    counts, states = counters["states"], counters["workers"]
    workers = core.workers_info()
    return {
        "bytes": sum(w["nbytes"] for w in workers),
        "clients": n_clients(server),
        "cores": core.total_nthreads,
        "erred": counts["erred"],
        "hosts": len({w["host"] for w in workers}),
        "idle": states["idle"],
        "memory": sum(w["has_what"] for w in workers),
        "processing": sum(w["processing"] for w in workers),
        "released": counts["released"],
        "saturated": states["saturated"],
        "tasks": core.n_tasks,
        "unrunnable": counts["no-worker"],
        "waiting": counts["waiting"],
        "waiting_data": core.n_tasks_with_waiters(),
        "workers": len(workers),
        "desired_workers": core.adaptive_target(config.seconds("adaptive.target-duration")),
    }


def identity_json(server: SchedulerServer) -> dict[str, Any]:
    """``/json/identity.json``: the scheduler and its workers, with distributed's field
    names, each worker as the client's ``scheduler_info`` identity (``services`` is
    filled by the HTTP server that serves it)."""
    core = server.core
    nannies = {p.address: p.nanny for p in server.workers.values()}
    workers = {
        w["address"]: worker_identity({**w, "nanny": nannies.get(w["address"])})
        for w in core.workers_info()
    }
    return {
        "type": "Scheduler",
        "id": server.id,
        "address": server.address,
        "services": {},
        "started": server.started,
        "n_workers": len(workers),
        "total_threads": core.total_nthreads,
        "total_memory": core.total_memory,
        "workers": workers,
    }
