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
from squall.protocol import comm, ops
from squall.protocol.peers import Peers

if TYPE_CHECKING:
    from squall.scheduler.server import SchedulerServer

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
        self._tasks: set[asyncio.Task[None]] = set()

    def request(
        self, cid: int, h: comm.Header, payload: memoryview
    ) -> tuple[comm.Header, bytes] | None:
        """Answer now (progress, the scheduler's logs and versions) or, for what the
        workers are asked, later: None, and the answer is sent when they replied."""
        op = h["op"]
        if op == ops.PROGRESS:
            return self._progress(cid, h, payload), b""
        if op == ops.GET_LOGS and h.get("which") == "scheduler":
            logs = log_ring.tail(h.get("n"))
            return {"op": op, "id": h.get("id"), "logs": logs}, b""
        if op == ops.GET_LOGS:
            blob = cloudpickle.dumps((log_ring.tail, (h.get("n"),), {}))
            self._ask_workers(cid, h, blob, lambda found, errors: {"workers": found})
        else:
            packages = list(h.get("packages") or [])
            blob = cloudpickle.dumps((versions.get_versions, (packages,), {}))
            mine = versions.get_versions(packages)
            self._ask_workers(
                cid, h, blob, lambda found, errors: {"scheduler": mine, "workers": found}
            )
        return None

    def _progress(self, cid: int, h: comm.Header, payload: memoryview) -> comm.Header:
        watches = self._watches.setdefault(cid, {})
        number = h.get("watch")
        if number is None:
            number = next(self._ids)
            core = self._server.core.progress_watch(bytes(payload), bool(h.get("complete")))
            watch = watches[number] = _Watch(core)
        elif h.get("stop"):
            watches.pop(number, None)
            return {"op": ops.PROGRESS, "id": h.get("id"), "watch": number}
        else:
            found = watches.get(number)
            if found is None:
                error = f"no progress watch {number}: it finished or was stopped"
                return {"op": ops.REQUEST_FAILED, "id": h.get("id"), "error": error}
            watch = found
            start = time.perf_counter()
            if start >= watch.next_update:
                self._server.core.progress_update(watch.core, UPDATE_BUDGET)
                watch.next_update = start + UPDATE_SPACING * (time.perf_counter() - start)
        if watch.core.remaining == 0:
            del watches[number]
        return {
            "op": ops.PROGRESS,
            "id": h.get("id"),
            "watch": number,
            "counts": watch.core.counts(),
            "remaining": watch.core.remaining,
            "cancelled": watch.core.cancelled,
        }

    def _ask_workers(
        self,
        cid: int,
        h: comm.Header,
        blob: bytes,
        reply: Callable[[dict[str, Any], dict[str, str]], comm.Header],
    ) -> None:
        """Run ``blob`` on the workers ``h`` names (all if none), or their nannies, and
        send the client ``reply(results by worker, errors by worker)``."""
        wanted = h.get("workers")
        targets = {
            peer.address: peer.nanny if h.get("nanny") else peer.address
            for peer in self._server.workers.values()
            if wanted is None or peer.address in wanted
        }

        async def one(target: str | None) -> Any:
            if target is None:
                raise ValueError("it has no nanny")
            try:
                return await asyncio.wait_for(self._peers.run(target, blob), self._timeout)
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
                header = {"op": h["op"], "id": h.get("id"), "errors": errors}
                peer.send({**header, **reply(found, errors)})

        task = asyncio.get_running_loop().create_task(ask())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def client_left(self, cid: int) -> None:
        self._watches.pop(cid, None)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(comm.CommError):
            await self._peers.close()
