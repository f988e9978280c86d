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
from squall.client.actor import Actor, ActorFuture, BaseActorFuture
from squall.client.client import Client, get_client
from squall.client.futures import Future, fire_and_forget
from squall.client.performance_report import performance_report
from squall.client.task_stream import get_task_stream
from squall.client.waiting import as_completed, wait
from squall.dask.ordering import order
from squall.deploy.local import LocalCluster
from squall.diagnostics import progress
from squall.worker.context import get_worker, rejoin, secede

__all__ = [
    "Actor",
    "ActorFuture",
    "BaseActorFuture",
    "Client",
    "Commands",
    "CycleError",
    "DuplicateKeyError",
    "Future",
    "InternalError",
    "LocalCluster",
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
    "fire_and_forget",
    "get_client",
    "get_task_stream",
    "get_worker",
    "order",
    "performance_report",
    "progress",
    "rejoin",
    "secede",
    "sim",
    "wait",
]
