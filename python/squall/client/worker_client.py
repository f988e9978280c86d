"""``worker_client`` and ``local_client``: a task that waits on tasks of its own
(docs/runtime.md#tasks-that-use-the-cluster).

The task leaves its worker's thread pool while it holds the client (``secede``), so its
worker runs other tasks meanwhile (the ones it waits for among them) and a worker with
one thread cannot deadlock on it; it takes a thread slot back on leaving (``rejoin``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from squall import config
from squall.client.client import Client, get_client
from squall.client.loop import timeout_seconds
from squall.worker import context

__all__ = ["local_client", "worker_client"]


@contextmanager
def worker_client(
    timeout: float | str | None = None, separate_thread: bool = True
) -> Iterator[Client]:
    """The worker's client (``get_client``) for the block, from a task. Unless not
    ``separate_thread``, the task secedes for the block and rejoins after it.
    ``timeout`` (for connecting) defaults to ``squall.comm.timeouts.connect``."""
    seconds = timeout_seconds(timeout)
    if seconds is None:
        seconds = config.seconds("comm.timeouts.connect")
    context.get_worker()  # ValueError outside a worker
    client = get_client(timeout=seconds)
    seceded = separate_thread and context.secede_task()
    try:
        yield client
    finally:
        if seceded:
            context.rejoin()


def local_client(*args: Any, **kwargs: Any) -> AbstractContextManager[Client]:
    """The former name of :func:`worker_client` (warns, as distributed's)."""
    warnings.warn("local_client has moved to worker_client", stacklevel=2)
    return worker_client(*args, **kwargs)
