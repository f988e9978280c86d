"""squall: a distributed task scheduler with a Rust scheduling core, drop-in for Dask."""

from squall import config, sim
from squall._core import (
    Commands,
    CycleError,
    DuplicateKeyError,
    InternalError,
    Scheduler,
    SchedulerError,
    StaleReportError,
    UnknownDependencyError,
    UnknownKeyError,
    UnknownTaskError,
    UnknownWorkerError,
    __version__,
)
from squall.client.client import Client, get_client
from squall.client.default import default_client
from squall.client.futures import Future, fire_and_forget, futures_of
from squall.client.performance_report import performance_report
from squall.client.task_metadata import get_task_metadata, span
from squall.client.task_stream import get_task_stream
from squall.client.waiting import as_completed, wait
from squall.client.worker_client import local_client, worker_client
from squall.dask.ordering import order
from squall.deploy.local import LocalCluster
from squall.diagnostics import progress
from squall.errors import Reschedule
from squall.worker.context import get_worker, rejoin, secede

__all__ = [
    "Client",
    "Commands",
    "CycleError",
    "DuplicateKeyError",
    "Future",
    "InternalError",
    "LocalCluster",
    "Reschedule",
    "Scheduler",
    "SchedulerError",
    "StaleReportError",
    "UnknownDependencyError",
    "UnknownKeyError",
    "UnknownTaskError",
    "UnknownWorkerError",
    "__version__",
    "as_completed",
    "config",
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
    "progress",
    "rejoin",
    "secede",
    "sim",
    "span",
    "wait",
    "worker_client",
]
