"""A scheduler and workers inside the calling process: ``LocalCluster(processes=False)``.

They run on one event loop in a daemon thread of their own (docs/runtime.md#an-embedded-cluster),
so nothing is pickled between processes started for them and start-up takes milliseconds.
Tasks still run in the workers' own task threads, sharing this process's GIL with the
caller. A worker the scheduler asks to restart (``Client.restart``) is replaced by a new
``Worker`` of the same shape: threads cannot be killed, so a task still running in the
old one finishes unseen.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import threading
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

from squall.errors import TimeoutError
from squall.protocol.bounded import within
from squall.scheduler.server import SchedulerServer
from squall.security import Security
from squall.worker.worker import Worker

T = TypeVar("T")

logger = logging.getLogger("squall.deploy")

# Open embedded clusters, closed at exit while the interpreter still runs threads
# normally (a task thread woken during finalisation would abort the process).
_open: weakref.WeakSet[EmbeddedCluster] = weakref.WeakSet()


@atexit.register
def _close_open_clusters() -> None:
    for cluster in list(_open):
        cluster.close(timeout=5)


class EmbeddedCluster:
    """The event loop thread, the scheduler and the workers of one embedded cluster."""

    def __init__(
        self,
        address: str,
        scheduler_config: dict[str, Any] | None,
        security: Security | None = None,
        dashboard_address: str | int | None = "config",
        preload: tuple[Any, Any] = (None, None),
    ) -> None:
        self.security = security
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="squall-embedded-cluster", daemon=True
        )
        self._thread.start()
        self.workers: list[Worker] = []
        self._watchers: set[asyncio.Task[None]] = set()
        self.scheduler = self.call(
            self._start_scheduler(address, scheduler_config, security, dashboard_address, preload)
        )
        self.address = self.scheduler.address
        _open.add(self)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the cluster's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    @staticmethod
    async def _start_scheduler(
        address: str,
        config: dict[str, Any] | None,
        security: Security | None,
        dashboard_address: str | int | None,
        preload: tuple[Any, Any],
    ) -> SchedulerServer:
        preloads = {"preload": preload[0], "preload_argv": preload[1]}
        server = (
            SchedulerServer(address, config, security, **preloads)
            if dashboard_address == "config"
            else SchedulerServer(address, config, security, dashboard_address, **preloads)
        )
        await server.start()
        return server

    def add_worker(self, **kwargs: Any) -> Worker:
        """Start a worker (``Worker``'s keyword arguments) and keep it running."""
        return self.call(self._add_worker(kwargs))

    async def _add_worker(self, kwargs: dict[str, Any]) -> Worker:
        worker = Worker(self.address, security=self.security, **kwargs)
        await worker.start()
        self.workers.append(worker)
        watcher = asyncio.get_running_loop().create_task(self._replace_on_restart(worker, kwargs))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)
        return worker

    async def _replace_on_restart(self, worker: Worker, kwargs: dict[str, Any]) -> None:
        await worker.finished()
        with contextlib.suppress(ValueError):
            self.workers.remove(worker)
        if worker.restart_requested:
            try:
                await self._add_worker(kwargs)
            except Exception:  # the scheduler is closing meanwhile
                logger.exception("could not replace restarted worker %s", worker.address)

    def remove_workers(self, names: set[str], timeout: float) -> None:
        """Wait (at most ``timeout``) for the workers of these names to close, as
        retired ones do on their own, and close those still running."""
        self.call(self._remove_workers(names, timeout))

    async def _remove_workers(self, names: set[str], timeout: float) -> None:
        leaving = [w for w in self.workers if str(w.name) in names]
        done = asyncio.gather(*(w.finished() for w in leaving))
        with contextlib.suppress(TimeoutError):
            await within(done, timeout)
        await asyncio.gather(*(w.close() for w in leaving), return_exceptions=True)

    def close(self, timeout: float | None = None) -> None:
        """Close the workers, then the scheduler, then stop the loop; waits at most
        ``timeout`` seconds (None: until done) for the workers and scheduler to close."""
        if self._loop.is_closed():
            return
        _open.discard(self)
        try:
            self.call(self._close(), timeout)
        except concurrent.futures.TimeoutError:
            logger.warning("embedded cluster %s did not close in %ss", self.address, timeout)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
            if not self._thread.is_alive():
                self._loop.close()

    async def _close(self) -> None:
        for watcher in self._watchers:
            watcher.cancel()
        await asyncio.gather(*(w.close() for w in self.workers), return_exceptions=True)
        self.workers.clear()
        await self.scheduler.close()
