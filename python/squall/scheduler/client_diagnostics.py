"""The scheduler's answers to a client's diagnostic requests: ``progress``, ``get-logs``
and ``versions`` (docs/runtime.md#diagnostics).

Workers' logs and versions are asked of each worker (or its nanny) with ``run`` over
:class:`~squall.protocol.peers.Peers`, as ``Client.run`` does, concurrently and each
within ``squall.comm.timeouts.connect``: a worker that does not answer in time is named
in the reply's ``errors``, not waited for.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import cloudpickle  # type: ignore[import-untyped]

from squall import config, log_ring, versions
from squall._core import ProgressWatch
from squall.protocol import messages as m
from squall.protocol.bounded import within
from squall.protocol.comm import CommError
from squall.protocol.peers import Peers

if TYPE_CHECKING:
    from squall.scheduler.server import SchedulerServer

#: A request's answer now (the reply and its payload), or None: sent later.
Answer = tuple[m.Message, bytes] | None

#: Unfinished tasks of a progress watch looked at per poll (a few milliseconds at most,
#: docs/runtime.md#progress): a poll never holds the scheduler up for longer, however
#: many tasks the watch has; the next poll goes on from there.
UPDATE_BUDGET = 100_000
#: A watch is looked at again at most once per this many times the duration of its
#: last look: its polls take at most 1/20 of the scheduler's time however often its
#: client polls.
UPDATE_SPACING = 20.0


@dataclass
class _Watch:
    core: ProgressWatch
    next_update: float = 0.0


class ClientDiagnostics:
    """Progress watches per client, and the requests that ask the workers."""

    def __init__(self, server: SchedulerServer) -> None:
        self._server = server
        self._timeout = config.seconds("comm.timeouts.connect")
        self._peers = Peers(
            connect_timeout=self._timeout, reply_timeout=self._timeout, security=server.security
        )
        self._watches: dict[int, dict[int, _Watch]] = {}
        self._ids = itertools.count(1)

    def get_logs(self, cid: int, msg: m.GetLogs, payload: memoryview) -> Answer:
        """The scheduler's logs now; the workers' (or their nannies') once they answered."""
        if msg.which == "scheduler":
            return m.GetLogsReply(id=msg.id, logs=log_ring.tail(msg.n)), b""
        blob = cloudpickle.dumps((log_ring.tail, (msg.n,), {}))

        def reply(found: dict[str, Any], errors: dict[str, str]) -> m.Message:
            return m.GetLogsReply(id=msg.id, workers=found, errors=errors)

        self._ask_workers(cid, msg.workers, msg.nanny, blob, reply)
        return None

    def versions(self, cid: int, msg: m.Versions, payload: memoryview) -> Answer:
        """The scheduler's and, once they answered, the workers' versions."""
        blob = cloudpickle.dumps((versions.get_versions, (msg.packages,), {}))
        mine = versions.get_versions(msg.packages)

        def reply(found: dict[str, Any], errors: dict[str, str]) -> m.Message:
            return m.VersionsReply(id=msg.id, scheduler=mine, workers=found, errors=errors)

        self._ask_workers(cid, None, False, blob, reply)
        return None

    def progress(self, cid: int, msg: m.Progress, payload: memoryview) -> Answer:
        watches = self._watches.setdefault(cid, {})
        number = msg.watch
        if number is None:
            number = next(self._ids)
            core = self._server.core.progress_watch(bytes(payload), msg.complete)
            watch = watches[number] = _Watch(core)
        elif msg.stop:
            watches.pop(number, None)
            return m.ProgressReply(id=msg.id, watch=number), b""
        else:
            found = watches.get(number)
            if found is None:
                error = f"no progress watch {number}: it finished or was stopped"
                return m.RequestFailed(id=msg.id, error=error), b""
            watch = found
            start = time.perf_counter()
            if start >= watch.next_update:
                self._server.core.progress_update(watch.core, UPDATE_BUDGET)
                watch.next_update = start + UPDATE_SPACING * (time.perf_counter() - start)
        if watch.core.remaining == 0:
            del watches[number]
        reply = m.ProgressReply(
            id=msg.id,
            watch=number,
            counts=watch.core.counts(),
            remaining=watch.core.remaining,
            cancelled=watch.core.cancelled,
        )
        return reply, b""

    def _ask_workers(
        self,
        cid: int,
        wanted: list[str] | None,
        nanny: bool,
        blob: bytes,
        reply: Callable[[dict[str, Any], dict[str, str]], m.Message],
    ) -> None:
        """Run ``blob`` on the workers ``wanted`` (all if None), or their nannies, and
        send the client ``reply(results by worker, errors by worker)``."""
        targets = {
            peer.address: peer.nanny if nanny else peer.address
            for peer in self._server.workers.values()
            if wanted is None or peer.address in wanted
        }

        async def one(target: str | None) -> Any:
            if target is None:
                raise ValueError("it has no nanny")
            try:
                return await within(self._peers.run(target, blob), self._timeout)
            finally:
                # Rare requests: no connection is kept open to a worker or nanny.
                await self._peers.drop(target)

        async def ask() -> None:
            results = await asyncio.gather(*map(one, targets.values()), return_exceptions=True)
            found: dict[str, Any] = {}
            errors: dict[str, str] = {}
            for address, r in zip(targets, results, strict=True):
                if isinstance(r, BaseException):
                    errors[address] = f"{type(r).__name__}: {r}".rstrip(": ")
                else:
                    found[address] = r
            peer = self._server.clients.get(cid)
            if peer is not None:
                peer.send(reply(found, errors))

        self._server.spawn(ask())

    def client_left(self, cid: int) -> None:
        self._watches.pop(cid, None)

    async def close(self) -> None:
        with contextlib.suppress(CommError):
            await self._peers.close()
