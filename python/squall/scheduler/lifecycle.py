"""Cluster lifecycle on the scheduler (docs/runtime.md#cluster-lifecycle): retiring
workers gracefully, restarting the cluster or some workers, waiting for workers, the
adaptive target and shutting the cluster down.

These are rare, slow requests: each runs as a task of its own and answers the client
with a message of the request's op (``request-failed`` if it cannot be done). Every
wait is bounded: by ``squall.retire.timeout``, by the request's timeout, or by the
client staying connected. What to do is the core's to decide (which workers take a
retiring worker's results, when a retirement is over, what a restart forgets); here
its commands are sent and its state awaited.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from squall import config
from squall._core import SchedulerError
from squall.protocol import comm
from squall.protocol import messages as m

if TYPE_CHECKING:
    from squall.scheduler.server import SchedulerServer

logger = logging.getLogger("squall.scheduler")

#: How often a lifecycle wait checks its condition (seconds).
POLL = 0.02
#: How long a shutdown waits for workers and nannies to leave before the scheduler goes.
SHUTDOWN_GRACE = 10.0


@dataclass
class Retirement:
    """The outcome of retiring workers: those retired (address → their info, as
    ``scheduler-info`` lists workers) and those kept (address → why)."""

    retired: dict[str, dict[str, Any]] = field(default_factory=dict)
    kept: dict[str, str] = field(default_factory=dict)


class Lifecycle:
    """The lifecycle requests of one :class:`SchedulerServer`."""

    def __init__(self, server: SchedulerServer) -> None:
        self.server = server
        #: Called once a shutdown has closed the workers (``squall scheduler`` then
        #: exits); without it the server closes itself.
        self.on_shutdown: Callable[[], None] | None = None
        self._closing: asyncio.Task[None] | None = None
        self._idle_since: float | None = None

    # ----- requests -------------------------------------------------------------------

    def retire_request(self, cid: int, msg: m.RetireWorkers, payload: memoryview) -> None:
        self._answer(cid, msg, self._retire(msg))

    def restart_workers_request(
        self, cid: int, msg: m.RestartWorkers, payload: memoryview
    ) -> None:
        self._answer(cid, msg, self._restart_workers(msg))

    def wait_request(self, cid: int, msg: m.WaitForWorkers, payload: memoryview) -> None:
        self._answer(cid, msg, self._wait(cid, msg))

    def adaptive_request(self, cid: int, msg: m.AdaptiveTarget, payload: memoryview) -> None:
        self._answer(cid, msg, self._adaptive(msg))

    def shutdown_request(self, cid: int, msg: m.Shutdown, payload: memoryview) -> None:
        self.server.spawn(self._shut_down())
        self._answer(cid, msg, _done(m.ShutdownReply(id=msg.id)))

    def _answer(self, cid: int, msg: m.Request, work: Coroutine[Any, Any, m.Message]) -> None:
        """Answer a client's request once ``work`` is done (``request-failed`` if it
        could not be done)."""

        async def answer() -> None:
            try:
                reply = await work
            except (SchedulerError, *comm.MALFORMED) as e:
                reply = m.RequestFailed(id=msg.id, error=str(e))
            peer = self.server.clients.get(cid)
            if peer is not None:
                peer.send(reply)

        self.server.spawn(answer())

    def worker_retires(self, w: int, restart: bool) -> None:
        """A worker asks to leave (``--lifetime``): retire it, then close it or, with
        ``restart``, have it restarted. It leaves even if some of its results could
        not be copied (they are recomputed if needed), as Dask's workers do."""
        self.server.spawn(self.retire([w], close=True, remove=True, restart=restart, anyway=True))

    async def _retire(self, msg: m.RetireWorkers) -> m.Message:
        s = self.server
        if msg.workers is not None:
            ids = self.resolve(msg.workers)
        else:  # Dask's choice: idle workers whose going leaves memory for the data
            ids = s.core.workers_to_close(n=msg.n)
        done = await self.retire(ids, close=msg.close_workers, remove=msg.remove)
        return m.RetireWorkersReply(id=msg.id, retired=done.retired, kept=done.kept)

    async def _restart_workers(self, msg: m.RestartWorkers) -> m.Message:
        s = self.server
        ids = [w for w in self.resolve(msg.workers) if w in s.workers]
        peers = [s.workers[w] for w in ids]
        no_nanny = [p.address for p in peers if p.nanny is None]
        if no_nanny:
            raise ValueError(
                f"Restarting workers requires a nanny to be used; {', '.join(no_nanny)} have none"
            )
        async with s.restart_lock:
            s.core.restart_workers(ids, now=s.now())
            error = await self._await_restart(ids, msg.timeout, wait_for_workers=True)
        results = {p.address: "OK" if error is None else "timed out" for p in peers}
        return m.RestartWorkersReply(id=msg.id, results=results)

    async def _wait(self, cid: int, msg: m.WaitForWorkers) -> m.Message:
        """Answers once ``n_workers`` workers are running, or at ``timeout`` (null:
        while the client is connected) with how many are."""
        s, n, timeout = self.server, msg.n_workers, msg.timeout
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while s.core.n_running < n and cid in s.clients:
            if deadline is not None and loop.time() > deadline:
                error = f"Only {s.core.n_running}/{n} workers arrived after {timeout}s"
                return m.WaitForWorkersReply(id=msg.id, n=s.core.n_running, error=error)
            await asyncio.sleep(POLL)
        return m.WaitForWorkersReply(id=msg.id, n=s.core.n_running)

    async def _adaptive(self, msg: m.AdaptiveTarget) -> m.Message:
        """The core's adaptive target within [``minimum``, ``maximum``], and when it is
        below the number of workers, which to close (addresses, first first)."""
        s = self.server
        duration = msg.target_duration
        target = s.core.adaptive_target(
            config.seconds("adaptive.target-duration") if duration is None else duration
        )
        maximum = msg.maximum
        target = max(msg.minimum, target if maximum is None else min(maximum, target))
        to_close = s.core.workers_to_close(target=target, minimum=msg.minimum)
        addresses = [s.core.worker_info(w)["address"] for w in to_close]
        return m.AdaptiveTargetReply(id=msg.id, target=target, to_close=addresses)

    # ----- restarting -----------------------------------------------------------------

    def restart_request(self, cid: int, msg: m.RestartCluster, payload: memoryview) -> None:
        """``Client.restart``: the core forgets every task and removes every worker, to
        be restarted; the clients are told (``restart``), then the scheduler waits for
        the workers to leave and as many to join, and answers ``restarted`` with what
        went wrong, if anything."""
        self._answer(cid, msg, self._restart(msg))

    async def _restart(self, msg: m.RestartCluster) -> m.Message:
        s = self.server
        async with s.restart_lock:
            try:
                workers = s.core.restart(now=s.now())
                s.plugin_host.restart()
                for client in s.clients.values():
                    client.send(m.Restart())
                error = await self._await_restart(workers, msg.timeout, msg.wait_for_workers)
            except (SchedulerError, *comm.MALFORMED) as e:
                error = f"restart failed: {e}"
        return m.Restarted(id=msg.id, error=error)

    async def _await_restart(
        self, old: list[int], timeout: float, wait_for_workers: bool
    ) -> str | None:
        """Send the core's ``restart`` commands for the workers it removed (``old``),
        wait for them to leave — closing the connections of those still there at
        ``timeout`` — and, with ``wait_for_workers``, for as many to join. Returns what
        went wrong, if anything."""
        s = self.server
        before = len(s.workers)
        s.dispatch()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while any(w in s.workers for w in old) and loop.time() < deadline:
            await asyncio.sleep(POLL)
        stuck = [s.workers[w] for w in old if w in s.workers]
        for peer in stuck:
            await peer.conn.close()  # its reader ends and removes it
        if stuck:
            return f"{len(stuck)}/{len(old)} workers did not shut down within {timeout}s"
        while wait_for_workers and len(s.workers) < before:
            if loop.time() > deadline:
                return f"{len(s.workers)}/{len(old)} workers came back within {timeout}s"
            await asyncio.sleep(POLL)
        return None

    # ----- retiring -------------------------------------------------------------------

    async def retire(
        self,
        ids: list[int],
        *,
        close: bool,
        remove: bool,
        restart: bool = False,
        anyway: bool = False,
    ) -> Retirement:
        """Retire workers gracefully (the core's retirement: no new tasks for them, the
        tasks executing there finish, every result only they hold is copied to a running
        worker), then close them (``close``; ``restart`` has their nanny start a fresh
        one instead). Waits while the core says waiting may help, up to
        ``squall.retire.timeout``; the core then ends the retirement: a worker whose
        results were all copied (or any, with ``anyway``) is retired — removed from the
        core as an expected departure with ``remove`` — the others kept, running again.
        Workers already being retired are skipped."""
        s = self.server
        ids = [w for w in dict.fromkeys(ids) if w in s.workers]
        out = Retirement()
        if not ids:
            return out
        infos = {w: {**s.core.worker_info(w), "nanny": s.workers[w].nanny} for w in ids}
        ids = s.core.retire_workers(ids, now=s.now())
        s.dispatch()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + config.seconds("retire.timeout")
        while s.core.retirement_pending(ids) and loop.time() < deadline:
            await asyncio.sleep(POLL)
        retired, kept = s.core.end_retirement(ids, anyway=anyway, remove=remove, now=s.now())
        for w, why in kept:
            out.kept[infos[w]["address"]] = why
        for w in retired:
            out.retired[infos[w]["address"]] = infos[w]
            self._leave(w, close=close, remove=remove, restart=restart)
        s.dispatch()
        if out.kept:
            logger.warning("workers kept, not retired: %s", out.kept)
        return out

    def _leave(self, w: int, *, close: bool, remove: bool, restart: bool) -> None:
        peer = self.server.workers.get(w)
        if peer is None:
            return
        if close or restart:
            self.close_worker(w, restart=restart)
        elif remove:
            # Removed but not closed: told to leave, not to reconnect (a dropped
            # connection alone would bring it back); its nanny, seeing it leave
            # cleanly, leaves too: what is left is for whoever deployed it.
            peer.send(m.Close())

    def close_worker(self, w: int, *, restart: bool = False) -> None:
        """Close a worker for good (its nanny, if any, too: it must not start another),
        or with ``restart`` have it replaced by a fresh process (through its nanny, or
        the worker re-executes itself)."""
        s = self.server
        peer = s.workers.get(w)
        if peer is None:
            return
        nanny = s.nannies.get(peer.nanny) if peer.nanny is not None else None
        (nanny or peer).send(m.Restart() if restart else m.Close())

    def resolve(self, workers: Any) -> list[int]:
        """Worker ids of ``workers`` (addresses or names); ValueError names unknown ones."""
        s = self.server
        names = {}
        for address, w in s.core.workers():
            names[address] = w
            names.setdefault(str(s.core.worker_info(w)["name"]), w)
        wanted = [workers] if isinstance(workers, str) else list(workers)
        unknown = [x for x in wanted if str(x) not in names]
        if unknown:
            raise ValueError(f"no such worker(s): {', '.join(map(str, unknown))}")
        return [names[str(x)] for x in wanted]

    def check_idle(self) -> float | None:
        """When (epoch seconds) the cluster last became idle — nothing processing,
        queued or waiting for a worker — as last seen by this call; None while busy
        (Dask's ``check_idle``, polled by Kubernetes' Dask operator)."""
        counts = self.server.core.counters()["states"]  # every live state: a bad name fails
        if any(counts[state] for state in ("processing", "queued", "no-worker")):
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = time.time()
        return self._idle_since

    # ----- shutdown -------------------------------------------------------------------

    async def _shut_down(self) -> None:
        """Close every nanny and worker, wait (bounded) for them to leave, then stop."""
        s = self.server
        logger.info("shutdown requested: closing %d workers", len(s.workers))
        for nanny in s.nannies.values():
            nanny.send(m.Close())
        for peer in s.workers.values():
            if peer.nanny not in s.nannies:
                peer.send(m.Close())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SHUTDOWN_GRACE
        while (s.workers or s.nannies) and loop.time() < deadline:
            await asyncio.sleep(POLL)
        if self.on_shutdown is not None:
            self.on_shutdown()
        else:  # not one of the server's tasks: close() cancels those
            self._closing = asyncio.get_running_loop().create_task(s.close())


async def _done(reply: m.Message) -> m.Message:
    return reply
