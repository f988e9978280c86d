"""Cluster lifecycle on the scheduler (docs/runtime.md#cluster-lifecycle): retiring
workers gracefully, restarting some of them, waiting for workers, the adaptive target
and shutting the cluster down.

These are rare, slow requests: each runs as a task of its own and answers the client
with a message of the request's op (``request-failed`` if it cannot be done). Every
wait is bounded: by ``squall.retire.timeout``, by the request's timeout, or by the
client staying connected.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import math
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from squall import config
from squall._core import SchedulerError, encode_keys
from squall.protocol import comm, ops

if TYPE_CHECKING:
    from squall.scheduler.server import Peer, SchedulerServer

logger = logging.getLogger("squall.scheduler")

#: How often a lifecycle wait checks its condition (seconds).
POLL = 0.02
#: How long a shutdown waits for workers and nannies to leave before the scheduler goes.
SHUTDOWN_GRACE = 10.0
#: A result still held only by retiring workers this long after its copy was asked for
#: is asked for again (the destination may have died or failed to fetch it).
REASK = 5.0


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
        self._retiring: set[int] = set()
        self._closing: asyncio.Task[None] | None = None
        self._idle_since: float | None = None

    # ----- requests -------------------------------------------------------------------

    def request(self, cid: int, h: comm.Header) -> None:
        """A client's lifecycle request; answered when done."""
        handlers: dict[str, Callable[[int, comm.Header], Coroutine[Any, Any, comm.Header]]] = {
            ops.RETIRE_WORKERS: self._retire_request,
            ops.RESTART_WORKERS: self._restart_request,
            ops.WAIT_FOR_WORKERS: self._wait_request,
            ops.ADAPTIVE_TARGET: self._adaptive_request,
            ops.SHUTDOWN: self._shutdown_request,
        }
        self._spawn(self._answer(cid, h, handlers[h["op"]](cid, h)))

    async def _answer(
        self, cid: int, h: comm.Header, work: Coroutine[Any, Any, comm.Header]
    ) -> None:
        try:
            reply = {"op": h["op"], "id": h.get("id"), **await work}
        except (SchedulerError, KeyError, TypeError, ValueError) as e:
            reply = {"op": ops.REQUEST_FAILED, "id": h.get("id"), "error": str(e)}
        peer = self.server.clients.get(cid)
        if peer is not None:
            peer.send(reply)

    def worker_retires(self, w: int, restart: bool) -> None:
        """A worker asks to leave (``--lifetime``): retire it, then close it or, with
        ``restart``, have it restarted. It leaves even if some of its results could
        not be copied (they are recomputed if needed), as Dask's workers do."""
        self._spawn(self.retire([w], close=True, remove=True, restart=restart, anyway=True))

    async def _retire_request(self, cid: int, h: comm.Header) -> comm.Header:
        s = self.server
        if h.get("workers") is not None:
            ids = self.resolve(h["workers"])
        else:  # Dask's choice: idle workers whose going leaves memory for the data
            n = h.get("n")
            ids = s.core.workers_to_close(n=None if n is None else int(n))
        done = await self.retire(
            ids, close=bool(h.get("close_workers")), remove=bool(h.get("remove", True))
        )
        return {"retired": done.retired, "kept": done.kept}

    async def _restart_request(self, cid: int, h: comm.Header) -> comm.Header:
        s = self.server
        ids = self.resolve(h["workers"])
        peers = [s.workers[w] for w in ids if w in s.workers]
        no_nanny = [p.address for p in peers if p.nanny is None]
        if no_nanny:
            raise ValueError(
                f"Restarting workers requires a nanny to be used; {', '.join(no_nanny)} have none"
            )
        addresses = [p.address for p in peers]
        ids = [w for w in ids if w in s.workers]
        async with s._restart_lock:
            error = await s.restart_these(ids, float(h["timeout"]), wait_for_workers=True)
        return {"results": {a: "OK" if error is None else "timed out" for a in addresses}}

    async def _wait_request(self, cid: int, h: comm.Header) -> comm.Header:
        """Answers once ``n_workers`` workers are running, or at ``timeout`` (null:
        while the client is connected) with how many are."""
        s, n = self.server, int(h["n_workers"])
        timeout = None if h.get("timeout") is None else float(h["timeout"])
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while s.core.n_running < n and cid in s.clients:
            if deadline is not None and loop.time() > deadline:
                return {
                    "error": f"Only {s.core.n_running}/{n} workers arrived after {timeout}s",
                    "n": s.core.n_running,
                }
            await asyncio.sleep(POLL)
        return {"error": None, "n": s.core.n_running}

    async def _adaptive_request(self, cid: int, h: comm.Header) -> comm.Header:
        """The core's adaptive target within [``minimum``, ``maximum``], and when it is
        below the number of workers, which to close (addresses, first first)."""
        s = self.server
        duration = h.get("target_duration")
        target = s.core.adaptive_target(
            config.seconds("adaptive.target-duration") if duration is None else float(duration)
        )
        minimum = int(h.get("minimum") or 0)
        maximum = h.get("maximum")
        target = max(minimum, target if maximum is None else min(int(maximum), target))
        to_close = s.core.workers_to_close(target=target, minimum=minimum)
        return {"target": target, "to_close": [s.core.worker_info(w)["address"] for w in to_close]}

    async def _shutdown_request(self, cid: int, h: comm.Header) -> comm.Header:
        self._spawn(self._shut_down())
        return {}

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
        """Retire workers gracefully: no new tasks for them; the tasks executing there
        finish; every result only they hold is copied to a running worker; then they
        are removed from the core as an expected departure (``remove``) and closed
        (``close``; ``restart`` has their nanny start a fresh one instead). A worker
        whose results could not all be copied within ``squall.retire.timeout`` is
        kept, back to running, unless ``anyway``."""
        s = self.server
        ids = [w for w in dict.fromkeys(ids) if w in s.workers and w not in self._retiring]
        out = Retirement()
        if not ids:
            return out
        infos = {w: {**s.core.worker_info(w), "nanny": s.workers[w].nanny} for w in ids}
        self._retiring.update(ids)
        try:
            for w in ids:
                with contextlib.suppress(SchedulerError):  # gone meanwhile
                    s.core.worker_status_change(w, "closing_gracefully", now=s.now())
            s._dispatch()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + config.seconds("retire.timeout")
            while any(self._processing(w) for w in ids) and loop.time() < deadline:
                await asyncio.sleep(POLL)
            kept, why = await self._hand_over(ids, deadline)
            if anyway and kept:
                logger.warning("workers leave with results nobody else holds: %s", why)
                kept = set()
            for w in ids:
                address = infos[w]["address"]
                if w in kept:
                    out.kept[address] = why
                    with contextlib.suppress(SchedulerError):
                        s.core.worker_status_change(w, "running", now=s.now())
                    continue
                out.retired[address] = infos[w]
                self._leave(w, close=close, remove=remove, restart=restart)
            s._dispatch()
        finally:
            self._retiring.difference_update(ids)
        if out.kept:
            logger.warning("workers kept, not retired: %s", out.kept)
        return out

    def _processing(self, w: int) -> int:
        with contextlib.suppress(SchedulerError):
            if w in self.server.workers:
                return int(self.server.core.worker_info(w)["processing"])
        return 0

    async def _hand_over(self, ids: list[int], deadline: float) -> tuple[set[int], str]:
        """Have running workers copy the results that only ``ids`` hold, until none
        is left or ``deadline``; the workers still holding some, and why."""
        s = self.server
        asked: dict[int, float] = {}  # task -> when its copy was asked for
        loop = asyncio.get_running_loop()
        while True:
            held = s.core.held_only_by([w for w in ids if w in s.workers])
            if not held:
                return set(), ""
            now = loop.time()
            new = [h for h in held if now - asked.get(h[0], -math.inf) >= REASK]
            if new and not self._ask_copies(new, set(ids)):
                why = "no other running worker can take its results"
                break
            asked.update((t, now) for t, *_ in new)
            if loop.time() > deadline:
                why = f"{len(held)} results held only here were not copied in time"
                break
            await asyncio.sleep(POLL)
        return {holder for *_, holder in held}, why

    def _ask_copies(self, held: list[tuple[int, Any, int, int]], leaving: set[int]) -> bool:
        """Send ``acquire-replicas`` for these results, each to the running worker
        holding the least data so far (as Dask's retirement spreads them); False if
        there is no such worker."""
        s = self.server
        load = [
            (int(info["nbytes"]), w)
            for _, w in s.core.workers()
            if w not in leaving and w not in self._retiring and w in s.workers
            for info in [s.core.worker_info(w)]
            if info["status"] == "running"
        ]
        if not load:
            return False
        heapq.heapify(load)
        groups: dict[tuple[int, int], list[tuple[int, Any]]] = {}
        for task, key, nbytes, holder in held:
            used, dest = heapq.heappop(load)
            groups.setdefault((dest, holder), []).append((task, key))
            heapq.heappush(load, (used + max(nbytes, 0), dest))
        for (dest, holder), items in groups.items():
            header = {
                "op": ops.ACQUIRE_REPLICAS,
                "holder": s.core.worker_info(holder)["address"],
                "tasks": [t for t, _ in items],
            }
            s.workers[dest].send(header, encode_keys([k for _, k in items]))
        return True

    def _leave(self, w: int, *, close: bool, remove: bool, restart: bool) -> None:
        s = self.server
        if remove:
            with contextlib.suppress(SchedulerError):
                s.core.remove_worker(w, now=s.now(), expected=True)
        peer = s.workers.get(w)
        if peer is None:
            return
        if close or restart:
            self._close(peer, restart=restart)
        elif remove:
            # Removed but not closed: told to leave, not to reconnect (a dropped
            # connection alone would bring it back); its nanny, seeing it leave
            # cleanly, leaves too: what is left is for whoever deployed it.
            peer.send({"op": ops.CLOSE})

    def _close(self, peer: Peer, *, restart: bool = False) -> None:
        """Close a worker for good (its nanny, if any, too: it must not start another),
        or with ``restart`` have it replaced by a fresh process."""
        nanny = self.server.nannies.get(peer.nanny) if peer.nanny is not None else None
        (nanny or peer).send({"op": ops.RESTART if restart else ops.CLOSE})

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
            nanny.send({"op": ops.CLOSE})
        for peer in s.workers.values():
            if peer.nanny not in s.nannies:
                peer.send({"op": ops.CLOSE})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SHUTDOWN_GRACE
        while (s.workers or s.nannies) and loop.time() < deadline:
            await asyncio.sleep(POLL)
        if self.on_shutdown is not None:
            self.on_shutdown()
        else:  # not one of the server's tasks: close() cancels those
            self._closing = asyncio.get_running_loop().create_task(s.close())

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        s = self.server
        task = asyncio.get_running_loop().create_task(coro)
        s._tasks.add(task)
        task.add_done_callback(s._tasks.discard)
