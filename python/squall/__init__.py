"""squall: a distributed task scheduler with a Rust scheduling core, drop-in for Dask.

Its names mean what ``distributed``'s do: ``squall.Scheduler`` is the scheduler server
(the bare Rust core is ``squall.core.Scheduler``), ``squall.Worker`` and
``squall.Nanny`` the worker and its supervisor (docs/runtime.md#servers-in-process).
"""

from squall import config, core, sim
from squall._core import __version__
from squall.client.actor import Actor, ActorFuture, BaseActorFuture
from squall.client.client import Client, get_client
from squall.client.compat import CompatibleExecutor
from squall.client.default import default_client
from squall.client.futures import Future, fire_and_forget, futures_of
from squall.client.loop import sync
from squall.client.performance_report import performance_report
from squall.client.task_metadata import get_task_metadata, span
from squall.client.task_stream import get_task_stream
from squall.client.waiting import as_completed, wait
from squall.client.worker_client import local_client, worker_client
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
from squall.deploy.ssh import SSHCluster
from squall.diagnostics import progress
from squall.diagnostics.plugin import (
    CondaInstall,
    Environ,
    InstallPlugin,
    NannyPlugin,
    PipInstall,
    SchedulerPlugin,
    UploadDirectory,
    UploadFile,
    WorkerPlugin,
)
from squall.errors import CancelledError, KilledWorker, Reschedule, TimeoutError
from squall.primitives import Event, Lock, MultiLock, Queue, Semaphore, Variable
from squall.security import Security
from squall.worker.context import get_worker, rejoin, secede
from squall.worker.events import print, warn
from squall.worker.worker import Worker

__all__ = [
    "Actor",
    "ActorFuture",
    "BaseActorFuture",
    "CancelledError",
    "Client",
    "CompatibleExecutor",
    "CondaInstall",
    "CycleError",
    "DuplicateKeyError",
    "Environ",
    "Event",
    "Future",
    "InstallPlugin",
    "InternalError",
    "KilledWorker",
    "LocalCluster",
    "Lock",
    "MultiLock",
    "Nanny",
    "NannyPlugin",
    "PipInstall",
    "Queue",
    "Reschedule",
    "SSHCluster",
    "Scheduler",
    "SchedulerError",
    "SchedulerPlugin",
    "Security",
    "Semaphore",
    "StaleReportError",
    "Status",
    "TimeoutError",
    "UnknownDependencyError",
    "UnknownKeyError",
    "UnknownTaskError",
    "UnknownWorkerError",
    "UploadDirectory",
    "UploadFile",
    "Variable",
    "Worker",
    "WorkerPlugin",
    "__version__",
    "as_completed",
    "config",
    "core",
    "default_client",
    "fire_and_forget",
    "futures_of",
    "get_client",
    "get_task_metadata",
    "get_task_stream",
    "get_worker",
    "local_client",
    "order",
    "performance_report",
    "print",
    "progress",
    "rejoin",
    "secede",
    "sim",
    "span",
    "sync",
    "wait",
    "warn",
    "worker_client",
]
