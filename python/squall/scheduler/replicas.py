"""Replicas on demand on the scheduler (docs/runtime.md#replicas-and-rebalancing):
``Client.replicate``, ``Client.rebalance`` and ``Client.amm``.

The core chooses which copies to make and drop and tracks them; here its rounds are
driven and its state awaited, every wait bounded by ``squall.scheduler.replicas-timeout``.
One replicate or rebalance runs at a time, as in Dask. The active memory manager's
periodic pass runs in the core's tick; it starts with the scheduler when
``squall.scheduler.active-memory-manager.start`` says so (off by default; Dask's
``distributed.scheduler.active-memory-manager.start`` where set).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from squall import config
from squall._core import SchedulerError, UnknownKeyError, decode_keys
from squall.protocol import comm
from squall.protocol import messages as m
from squall.worker.memory import rebalance_settings

if TYPE_CHECKING:
    from squall.scheduler.server import SchedulerServer

logger = logging.getLogger("squall.scheduler")

#: How often a wait checks the core (seconds).
POLL = 0.02


class Replicas:
    """The replica requests of one :class:`SchedulerServer`."""

    def __init__(self, server: SchedulerServer) -> None:
        self.server = server
        self._lock = asyncio.Lock()
        self._timeout = config.seconds("scheduler.replicas-timeout")
        # Dask's periodic pass (docs/runtime.md#replicas-and-rebalancing): squall's
        # default is off, Dask's key applies where set.
        self.amm_interval = config.seconds("scheduler.active-memory-manager.interval")
        if not self.amm_interval > 0:
            raise config.ConfigError(
                "squall.scheduler.active-memory-manager.interval: expected a duration > 0"
            )
        start = config.flag("scheduler.active-memory-manager.start")
        if start:
            server.core.amm_start(self.amm_interval)

    def handlers(self) -> dict[type[m.Message], Any]:
        return {
            m.Replicate: self._replicate_request,
            m.Rebalance: self._rebalance_request,
            m.Amm: self._amm_request,
        }

    def _answer(
        self, cid: int, msg: m.Request, work: Coroutine[Any, Any, m.ReplicasReply]
    ) -> None:
        async def answer() -> None:
            try:
                reply = await work
            except UnknownKeyError as e:
                reply = m.ReplicasReply(id=msg.id, error=str(e), error_type="KeyError")
            except (SchedulerError, *comm.MALFORMED) as e:
                reply = m.ReplicasReply(id=msg.id, error=str(e))
            except Exception as e:  # the client waits for an answer: it gets one
                logger.exception("%s failed", msg.op())
                reply = m.ReplicasReply(id=msg.id, error=f"{msg.op()} failed: {e!r}")
            peer = self.server.clients.get(cid)
            if peer is not None:
                peer.send(reply)

        self.server.spawn(answer())

    # ----- replicate ------------------------------------------------------------------

    def _replicate_request(self, cid: int, msg: m.Replicate, payload: memoryview) -> None:
        self._answer(cid, msg, self._replicate(msg, bytes(payload)))

    async def _replicate(self, msg: m.Replicate, keys: bytes) -> m.ReplicasReply:
        s = self.server
        ids = None if msg.workers is None else s.lifecycle.resolve(msg.workers)
        async with self._lock:
            if s.core.amm_running:
                logger.warning(
                    "replicate: the active memory manager is running; its next pass "
                    "drops the copies beyond one (docs/runtime.md#replicas-and-rebalancing)"
                )
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self._timeout
            while True:
                missing = s.core.replicate(keys, msg.n, ids, msg.branching_factor, now=s.now())
                s.dispatch()
                if missing == 0:
                    return m.ReplicasReply(id=msg.id)
                if loop.time() > deadline:
                    error = (
                        f"replicate: {missing} copies of {len(decode_keys(keys))} keys were "
                        f"not in place after {self._timeout}s"
                    )
                    return m.ReplicasReply(id=msg.id, error=error, error_type="TimeoutError")
                await asyncio.sleep(POLL)

    # ----- rebalance ------------------------------------------------------------------

    def _rebalance_request(self, cid: int, msg: m.Rebalance, payload: memoryview) -> None:
        self._answer(cid, msg, self._rebalance(msg, bytes(payload) if msg.some_keys else None))

    async def _rebalance(self, msg: m.Rebalance, keys: bytes | None) -> m.ReplicasReply:
        s = self.server
        ids = None if msg.workers is None else s.lifecycle.resolve(msg.workers)
        settings = rebalance_settings()
        async with self._lock:
            moves, missing = s.core.rebalance(keys, ids, **settings, now=s.now())
            s.dispatch()
            if missing:
                error = f"Could not rebalance keys: {missing!r}"
                return m.ReplicasReply(id=msg.id, error=error, error_type="KeyError")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self._timeout
            while s.core.moves_pending() and loop.time() < deadline:
                await asyncio.sleep(POLL)
            failed = s.core.end_moves()
        if failed:
            logger.warning("rebalance: %d of %d moves did not complete", len(failed), moves)
            if keys is not None:  # as Dask: named only when the keys were asked for
                error = f"Could not rebalance keys: {failed!r}"
                return m.ReplicasReply(id=msg.id, error=error, error_type="KeyError")
        return m.ReplicasReply(id=msg.id, done=moves - len(failed))

    # ----- the active memory manager ---------------------------------------------------

    def _amm_request(self, cid: int, msg: m.Amm, payload: memoryview) -> tuple[m.Message, bytes]:
        core = self.server.core
        done = 0
        if msg.method == "start":
            core.amm_start(self.amm_interval)
        elif msg.method == "stop":
            core.amm_stop()
        elif msg.method == "run_once":
            done = core.reduce_replicas(now=self.server.now())
            self.server.dispatch()
        elif msg.method != "running":
            error = f"amm: unknown method {msg.method!r}; known: start, stop, running, run_once"
            return m.ReplicasReply(id=msg.id, error=error), b""
        return m.ReplicasReply(id=msg.id, done=done, running=core.amm_running), b""
