"""What tasks can ask of their worker: ``get_worker``, ``secede``, ``rejoin``
(``get_client`` is the client's: squall.client.client).

They behave as ``distributed``'s.

A worker runs tasks in pool threads whose :data:`_task` names the worker (the task a
thread is running is known to the worker's compiled loop); code on the worker's event
loop (``Client.run``) finds the worker among the running ones of this process.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from squall.worker.worker import Worker

__all__ = ["get_worker", "rejoin", "secede"]

_task = threading.local()
#: Running workers of this process, oldest first.
_running: list[Worker] = []


def enter_thread(worker: Worker) -> None:
    """Called by each task thread of ``worker`` before it runs tasks."""
    _task.worker = worker


def leave_thread() -> None:
    _task.worker = None


def _current_task(caller: str) -> tuple[Worker, int]:
    worker: Worker | None = getattr(_task, "worker", None)
    tid = None if worker is None else worker._core.current_task()
    if worker is None or tid is None:
        raise ValueError(f"{caller}() must be called from a task running on a squall worker")
    return worker, tid


def task_worker() -> Worker | None:
    """The worker whose task thread this is, if any."""
    return getattr(_task, "worker", None)


def running_task(caller: str) -> tuple[Worker, int, Hashable]:
    """The worker, task id and key of the task this thread runs (ValueError outside one)."""
    worker, tid = _current_task(caller)
    return worker, tid, worker._core.task_key(tid)


def get_worker() -> Worker:
    """The :class:`~squall.worker.worker.Worker` running the current task (or, outside a task,
    this process's running worker); ``ValueError`` if there is none."""
    worker: Worker | None = getattr(_task, "worker", None)
    if worker is not None:
        return worker
    for w in _running:
        if w.status in ("running", "reconnecting"):
            return w
    raise ValueError("No worker found")


def task_worker_address() -> str | None:
    """The address of the worker whose task thread this is (None on any other thread):
    a client made here lives on that worker (docs/primitives.md#when-a-holder-dies)."""
    worker: Worker | None = getattr(_task, "worker", None)
    return None if worker is None else worker.address


def secede() -> None:
    """Have the current task leave its worker's thread pool: its thread no longer
    counts against ``nthreads``, so the worker starts another task (for instance one
    this task waits for). The scheduler is told (``long-running``)."""
    worker, tid = _current_task("secede")
    worker._secede(tid)


def secede_task() -> bool:
    """``secede()`` if called from a task that has not seceded yet (``worker_client``);
    whether it did."""
    worker: Worker | None = getattr(_task, "worker", None)
    tid = None if worker is None else worker._core.current_task()
    if worker is None or tid is None:
        return False
    return worker._secede(tid)


def rejoin() -> None:
    """Have a seceded task take a thread slot again; blocks until one is free (or the
    worker closes)."""
    worker, tid = _current_task("rejoin")
    worker._core.rejoin(tid)


def register(worker: Worker) -> None:
    _running.append(worker)


def unregister(worker: Worker) -> None:
    if worker in _running:
        _running.remove(worker)
