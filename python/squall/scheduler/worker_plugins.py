"""The worker and nanny plugins registered with the scheduler
(docs/runtime.md#worker-and-nanny-plugins): pickled bytes by name, in registration
order, which the scheduler never unpickles. A registration (or removal) is sent to
every worker (or nanny) there is, over its peer listener, and answered with each one's
status; a worker or nanny that joins later gets them all in its ``registered``."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, NamedTuple

from squall import config
from squall.protocol import comm
from squall.protocol import messages as m
from squall.protocol.peers import Peers
from squall.protocol.remote_errors import error_fields, pack_error, unpack_error

if TYPE_CHECKING:
    from squall.scheduler.server import SchedulerServer

logger = logging.getLogger("squall.scheduler")

#: A request's answer now (the reply and its payload), or None: sent later.
Answer = tuple[m.Message, bytes] | None


class Failure(NamedTuple):
    """A worker's (or nanny's) error report: the reply's fields and payload."""

    report: m.ErrorReport
    payload: bytes


#: Per address: None (done) or what failed there.
Statuses = dict[str, Failure | None]


class WorkerPlugins:
    """The registered plugins (``worker``, ``nanny``: name → pickled plugin) and the
    requests that change them."""

    def __init__(self, server: SchedulerServer) -> None:
        self._server = server
        self.worker: dict[str, bytes] = {}
        self.nanny: dict[str, bytes] = {}
        # No reply timeout: a setup may install packages for minutes.
        self._peers = Peers(
            connect_timeout=config.seconds("comm.timeouts.connect"), security=server.security
        )
        # One change at a time: workers see the changes in the order the store does,
        # and no broadcast's connection is closed under another's request.
        self._lock = asyncio.Lock()

    def _store(self, nanny: bool) -> dict[str, bytes]:
        return self.nanny if nanny else self.worker

    async def register(self, blob: bytes, name: str, *, idempotent: bool, nanny: bool) -> Statuses:
        """Keep the plugin under ``name`` (unless ``idempotent`` and the name is taken)
        and set it up on every worker (or nanny) there is now."""
        store = self._store(nanny)
        async with self._lock:
            if idempotent and name in store:
                return {}
            logger.info("registering %s plugin %s", "nanny" if nanny else "worker", name)
            store[name] = blob
            # Taken in the same turn as the store's change: a worker registering later
            # gets the plugin in its ``registered`` instead.
            targets = self._targets(nanny)
            return await self._broadcast(targets, m.PluginAdd(name=name), blob)

    async def unregister(self, name: str, *, nanny: bool) -> Statuses:
        """Forget the plugin and tear it down everywhere; ValueError if unknown."""
        kind = "nanny" if nanny else "worker"
        async with self._lock:
            if self._store(nanny).pop(name, None) is None:
                raise ValueError(f"The {kind} plugin {name} does not exist")
            logger.info("removing %s plugin %s", kind, name)
            targets = self._targets(nanny)
            return await self._broadcast(targets, m.PluginRemove(name=name), b"")

    def _targets(self, nanny: bool) -> list[str]:
        s = self._server
        return list(s.nannies) if nanny else [p.address for p in s.workers.values()]

    async def _broadcast(self, targets: list[str], msg: m.Request, blob: bytes) -> Statuses:
        async def one(address: str) -> Failure | None:
            try:
                h, payload = await self._peers.request(address, msg, blob, reply=m.PluginResult)
            finally:
                await self._peers.drop(address)  # rare requests: no connection kept
            return None if h.status == "OK" else Failure(h, bytes(payload))

        results = await asyncio.gather(*map(one, targets), return_exceptions=True)
        statuses: Statuses = {}
        for address, r in zip(targets, results, strict=True):
            if isinstance(r, comm.CommError) and not self._present(address):
                continue  # it left meanwhile: it will not run the plugin
            if isinstance(r, BaseException):
                if not isinstance(r, Exception):
                    raise r
                report, payload = error_fields(m.PluginResult(status="error"), pack_error(r))
                statuses[address] = Failure(report, payload)
            else:
                statuses[address] = r
        return statuses

    def _present(self, address: str) -> bool:
        s = self._server
        return address in s.nannies or any(p.address == address for p in s.workers.values())

    # ----- client requests ----------------------------------------------------------

    def register_request(
        self, cid: int, msg: m.RegisterWorkerPlugin, payload: memoryview
    ) -> Answer:
        blob = bytes(payload)
        change = self.register(blob, msg.name, idempotent=msg.idempotent, nanny=msg.nanny)
        self._answer_later(cid, msg.id, change)
        return None

    def unregister_request(
        self, cid: int, msg: m.UnregisterWorkerPlugin, payload: memoryview
    ) -> Answer:
        self._answer_later(cid, msg.id, self.unregister(msg.name, nanny=msg.nanny))
        return None

    def _answer_later(self, cid: int, rid: int | None, change: Any) -> None:
        s = self._server

        async def answer() -> None:
            reply: tuple[m.Message, bytes]
            try:
                reply = _reply(rid, await change)
            except ValueError as e:
                reply = m.PluginReply(id=rid, error=str(e)), b""
            peer = s.clients.get(cid)
            if peer is not None:
                peer.send(*reply)

        s.spawn(answer())

    async def close(self) -> None:
        await self._peers.close()


def _reply(rid: int | None, statuses: Statuses) -> tuple[m.Message, bytes]:
    """``plugin-reply``: each status, with the first failure's error report."""
    reply = m.PluginReply(
        id=rid, statuses={a: "OK" if f is None else "error" for a, f in statuses.items()}
    )
    for failure in statuses.values():
        if failure is not None:
            r = failure.report
            reply.exception_text, reply.traceback_text = r.exception_text, r.traceback_text
            reply.n_exception = r.n_exception
            return reply, failure.payload
    return reply, b""


def responses(statuses: Statuses, where: str) -> dict[str, dict[str, Any]]:
    """Statuses as distributed's scheduler returns them to code on the scheduler:
    ``{"status": "OK"}``, or ``"error"`` with the exception and traceback."""
    out: dict[str, dict[str, Any]] = {}
    for address, failure in statuses.items():
        if failure is None:
            out[address] = {"status": "OK"}
        else:
            exc, tb = unpack_error(failure.report, memoryview(failure.payload), where)
            out[address] = {"status": "error", "exception": exc, "traceback": tb}
    return out
