"""``squall.core``: the bare scheduling core, sans-IO (docs/core.md).

``squall.core.Scheduler`` is the Rust core itself: events in (with the time), commands
out, no sockets, no threads — what ``squall.sim`` and the scheduler server drive. It is
not ``squall.Scheduler``, which (as ``distributed.Scheduler``) is the scheduler server.
Bad input raises a :class:`SchedulerError` subclass and leaves the state untouched.
"""

from __future__ import annotations

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
)

__all__ = [
    "Commands",
    "CycleError",
    "DuplicateKeyError",
    "InternalError",
    "Scheduler",
    "SchedulerError",
    "StaleReportError",
    "UnknownDependencyError",
    "UnknownKeyError",
    "UnknownTaskError",
    "UnknownWorkerError",
]
