"""A worker as ``scheduler-info`` describes it, in the shape distributed's clients and
dashboards know (``WorkerState.identity``): the client's ``scheduler_info()`` and
``retire_workers()`` answer with it, and the scheduler's dashboard shows it."""

from __future__ import annotations

from typing import Any


def worker_identity(w: dict[str, Any]) -> dict[str, Any]:
    """One worker of ``scheduler_info()``, as ``distributed``'s ``WorkerState.identity``."""
    return {
        "type": "Worker",
        "id": w["name"],
        "host": w["host"],
        "name": w["name"],
        "nthreads": w["nthreads"],
        "memory_limit": w["memory_limit"],
        "resources": w["resources"],
        "status": w["status"],
        "services": w.get("services", {}),
        "nanny": w["nanny"],
        # The worker's memory (docs/runtime.md#memory), with distributed's names.
        "metrics": {**w["metrics"], "in_memory": w["has_what"], "processing": w["processing"]},
    }
