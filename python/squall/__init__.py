"""squall: a distributed task scheduler with a Rust scheduling core, drop-in for Dask.

Its names mean what ``distributed``'s do: ``squall.Scheduler`` is the scheduler server
(the bare Rust core is ``squall.core.Scheduler``), ``squall.Worker`` and
``squall.Nanny`` the worker and its supervisor (docs/runtime.md#servers-in-process).
"""

from squall import config, core, sim
from squall._core import __version__
from squall.client.client import Client, get_client
from squall.client.compat import CompatibleExecutor
from squall.client.futures import Future, fire_and_forget
from squall.client.loop import sync
from squall.client.performance_report import performance_report
from squall.client.task_stream import get_task_stream
from squall.client.waiting import as_completed, wait
from squall.core import (
    CycleError,
    DuplicateKeyError,
    InternalError,
    SchedulerError,
    StaleReportError,
    UnknownDependencyError,
    UnknownKeyError,
    UnknownTaskError,
    UnknownWorkerError,
)
from squall.dask.ordering import order
from squall.deploy.local import LocalCluster
from squall.deploy.servers import Nanny, Scheduler, Status
from squall.diagnostics import progress
from squall.errors import CancelledError, KilledWorker
from squall.primitives import Event, Lock, MultiLock, Queue, Semaphore, Variable
from squall.security import Security
from squall.worker.context import get_worker, rejoin, secede
from squall.worker.events import print, warn
from squall.worker.worker import Worker

#: distributed's ``TimeoutError``: the builtin one, which squall raises.
TimeoutError = TimeoutError

__all__ = [
    "CancelledError",
    "Client",
    "CompatibleExecutor",
    "CycleError",
    "DuplicateKeyError",
    "Event",
    "Future",
    "InternalError",
    "KilledWorker",
    "LocalCluster",
    "Lock",
    "MultiLock",
    "Nanny",
    "Queue",
    "Scheduler",
    "SchedulerError",
    "Security",
    "Semaphore",
    "StaleReportError",
    "Status",
    "TimeoutError",
    "UnknownDependencyError",
    "UnknownKeyError",
    "UnknownTaskError",
    "UnknownWorkerError",
    "Variable",
    "Worker",
    "__version__",
    "as_completed",
    "config",
    "core",
    "fire_and_forget",
    "get_client",
    "get_task_stream",
    "get_worker",
    "order",
    "performance_report",
    "print",
    "progress",
    "rejoin",
    "secede",
    "sim",
    "sync",
    "wait",
    "warn",
]
