"""The scheduler's side of workers and nannies: registering them, their messages (one
handler each, docs/protocol.md#worker--scheduler) and their departures, with the
nanny's word on how a worker process ended (docs/runtime.md#supervision-the-nanny)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from squall import config
from squall._core import SchedulerError, decode_keys, encode_keys
from squall.errors import TimeoutError
from squall.protocol import comm
from squall.protocol import messages as m
from squall.protocol.bounded import within
from squall.protocol.dispatch import Handlers
from squall.scheduler.peer import Peer

if TYPE_CHECKING:
    from squall.scheduler.server import SchedulerServer

logger = logging.getLogger("squall.scheduler")


class DeathReport(NamedTuple):
    """How a nanny's worker process ended: its exit code (0: it left cleanly) and the
    tasks it was running then (None if unknown)."""

    exit_code: int
    executing: list[int] | None


def _port_or_none(value: Any) -> int | None:
    """A port a peer reported, if it is one (a malformed value is ignored: it only
    feeds links on the dashboard)."""
    return value if isinstance(value, int) and 0 < value < 65536 else None


class WorkerRoom:
    """Workers' and nannies' connections to one :class:`SchedulerServer`."""

    def __init__(self, server: SchedulerServer) -> None:
        self._server = server
        #: Workers whose connection ended, waiting for their nanny's ``worker-died``.
        self._deaths: dict[int, asyncio.Future[DeathReport | None]] = {}
        self._nanny_report_timeout = config.seconds("scheduler.nanny-report-timeout")

    # ----- workers --------------------------------------------------------------------

    async def serve_worker(self, c: comm.Comm, hello: m.Hello) -> None:
        s = self._server
        self._drop_stale_registration(hello)
        address = str(hello.address)
        try:
            w = s.core.add_worker(
                address,
                hello.nthreads,
                now=s.now(),
                name=hello.name,
                memory_limit=hello.memory_limit,
                resources=list(hello.resources.items()),
            )
        except (SchedulerError, *comm.MALFORMED) as e:
            await c.write(m.Error(message=f"cannot register worker: {e}"))
            return
        stream = s.stream(c)
        name = str(hello.name if hello.name is not None else address)
        s.workers[w] = Peer(
            c,
            stream,
            name,
            address,
            nanny=hello.nanny,
            pid=hello.pid,
            dashboard=_port_or_none(hello.dashboard),
            dashboard_scheme="https" if hello.dashboard_scheme == "https" else "http",
        )
        await c.write(m.WorkerRegistered(worker_id=w, plugins=dict(s.worker_plugins.worker)))
        stream.start()
        logger.info("worker %s joined (%s threads)", address, hello.nthreads)
        s.events.log(address, {"action": "add-worker"})
        s.events.log("all", {"action": "add-worker", "worker": address})
        s.plugin_host.add_worker(address)
        s.dispatch()
        handlers = self._handlers(w)
        try:
            await s.read_until_closed(
                c,
                f"worker {address}",
                lambda msg, payload: self._handle(w, handlers, msg, payload),
            )
        finally:
            # Its tasks' clients give back their leases now, whatever their
            # connections do (a hung worker's may stay open).
            s.coordination.worker_left(address)
            report = await self._death_report(w)
            peer = s.workers.pop(w)
            await peer.stream.close()
            with contextlib.suppress(SchedulerError):
                self._remove_worker(w, s.now(), report)
            s.dispatch()
            s.plugin_host.remove_worker(address)
            s.events.log(address, {"action": "remove-worker"})
            s.events.log("all", {"action": "remove-worker", "worker": address})
            s.events.left(address, lambda: any(p.address == address for p in s.workers.values()))

    def _handlers(self, w: int) -> Handlers[None]:
        """The handlers of worker ``w``'s messages."""
        table: dict[type[m.Message], Callable[..., None]] = {
            m.Finished: self._finished,
            m.Erred: self._erred,
            m.Heartbeat: self._heartbeat,
            m.WorkerStatusChange: self._status_change,
            m.StealResponse: self._steal_response,
            m.AddReplicas: self._add_replicas,
            m.DropReplicas: self._drop_replicas,
            m.LongRunning: self._long_running,
            m.Reschedule: self._reschedule,
            m.ReleaseWorkerData: self._release_worker_data,
            m.Retire: self._retire,
            m.HeldKeys: self._held_keys,
            m.LogEvent: self._log_event,
        }
        return Handlers(
            m.Route.WORKER_TO_SCHEDULER,
            {cls: functools.partial(handler, w) for cls, handler in table.items()},
            malformed=lambda msg: self._malformed(w, msg),
        )

    def _handle(
        self, w: int, handlers: Handlers[None], msg: m.Message | m.Malformed, payload: memoryview
    ) -> None:
        try:
            handlers(msg, payload)
        except SchedulerError as e:
            # Stale or unknown reports are expected in a distributed system: log, go on.
            logger.debug("worker %d: %s ignored: %s", w, type(msg).__name__, e)
        except comm.MALFORMED as e:
            op = msg.op() if isinstance(msg, m.Message) else msg.op
            raise comm.ProtocolError(f"malformed {op!r} message from worker {w}: {e}") from None

    def _malformed(self, w: int, msg: m.Malformed) -> None:
        raise comm.ProtocolError(f"worker {w}: {msg.error}")

    def _log_event(self, w: int, msg: m.LogEvent, payload: memoryview) -> None:
        self._server.events.worker_event(self._server.workers[w].address, msg)

    def _finished(self, w: int, msg: m.Finished, payload: memoryview) -> None:
        s = self._server
        rejected = s.core.finished_wire(w, bytes(payload), msg.n, now=s.now())
        if rejected:
            logger.debug("worker %d: %d stale finished reports", w, len(rejected))

    def _erred(self, w: int, msg: m.Erred, payload: memoryview) -> None:
        s, now, n_exc = self._server, self._server.now(), msg.n_exception
        key = s.core.task_info(msg.task)["key"]
        s.failures.failed(key, s.workers[w].address, msg.exception_text, now)
        s.core.task_erred(
            w,
            msg.task,
            msg.run_id,
            now=now,
            exception=bytes(payload[:n_exc]),
            traceback=bytes(payload[n_exc:]),
            exception_text=msg.exception_text,
            traceback_text=msg.traceback_text,
        )

    def _heartbeat(self, w: int, msg: m.Heartbeat, payload: memoryview) -> None:
        s = self._server
        memory = msg.memory
        interval = s.core.heartbeat(
            w,
            now=s.now(),
            bandwidth=msg.bandwidth,
            executing=msg.executing,
            memory=None
            if memory is None
            else (
                memory.process,
                memory.managed,
                memory.spilled_memory,
                memory.spilled_disk,
                memory.spilled_count,
            ),
            load=msg.load,
        )
        # The answer paces heartbeats by cluster size (as Dask's), and shows the worker
        # that this scheduler is alive (docs/runtime.md#reconnection-and-liveness).
        s.workers[w].send(m.HeartbeatInterval(interval=interval))
        s.task_stream.add_heartbeat(s.workers[w].address, msg, payload)

    def _status_change(self, w: int, msg: m.WorkerStatusChange, payload: memoryview) -> None:
        """A worker paused or resumed for its memory (docs/runtime.md#memory). Only
        running ⇄ paused: a worker closing gracefully stays so."""
        s = self._server
        current = s.core.worker_info(w)["status"]
        if msg.status in ("running", "paused") and current in ("running", "paused"):
            s.core.worker_status_change(w, msg.status, now=s.now())

    def _steal_response(self, w: int, msg: m.StealResponse, payload: memoryview) -> None:
        s = self._server
        s.core.steal_response(w, msg.task, msg.state, msg.stimulus, now=s.now())

    def _add_replicas(self, w: int, msg: m.AddReplicas, payload: memoryview) -> None:
        self._server.core.add_replicas(w, bytes(payload), now=self._server.now())

    def _drop_replicas(self, w: int, msg: m.DropReplicas, payload: memoryview) -> None:
        self._server.core.drop_replicas(w, bytes(payload), now=self._server.now())

    def _long_running(self, w: int, msg: m.LongRunning, payload: memoryview) -> None:
        s = self._server
        s.core.long_running(w, msg.task, msg.run_id, msg.duration, now=s.now())

    def _reschedule(self, w: int, msg: m.Reschedule, payload: memoryview) -> None:
        self._server.core.reschedule(w, msg.task, now=self._server.now())

    def _release_worker_data(self, w: int, msg: m.ReleaseWorkerData, payload: memoryview) -> None:
        self._server.core.release_worker_data(w, msg.task, now=self._server.now())

    def _retire(self, w: int, msg: m.Retire, payload: memoryview) -> None:
        self._server.lifecycle.worker_retires(w, msg.restart)

    def _held_keys(self, w: int, msg: m.HeldKeys, payload: memoryview) -> None:
        """A worker that registered again still holds these results from before. A key
        in memory here gains it as a holder; any other key is dropped there: unknown
        ones, and lost ones waiting to be recomputed, since the core accepts a result
        only from the run it dispatched (docs/runtime.md#reconnection-and-liveness).
        Answered like a scatter: ``scattered`` with the task ids, -1 to drop."""
        s = self._server
        keys = decode_keys(bytes(payload))
        tasks = []
        for key in keys:
            t = s.core.lookup(key)
            tasks.append(t if t is not None and s.core.state(key) == "memory" else -1)
        kept = [k for k, t in zip(keys, tasks, strict=True) if t >= 0]
        if kept:
            s.core.add_replicas(w, encode_keys(kept), now=s.now())
        logger.info(
            "worker %s still holds %d known results (%d dropped)",
            s.workers[w].address,
            len(kept),
            len(keys) - len(kept),
        )
        s.workers[w].send(m.Scattered(tasks=tasks), encode_keys(keys))

    # ----- departures -----------------------------------------------------------------

    async def _death_report(self, w: int) -> DeathReport | None:
        """A worker's connection ended: if it has a nanny that has not reported yet,
        wait (bounded) for the ``worker-died`` that tells how its process ended and
        what it was running, so that only those tasks become suspicious
        (docs/runtime.md#supervision-the-nanny)."""
        s = self._server
        peer = s.workers[w]
        if peer.died or peer.nanny not in s.nannies or not self._registered(w):
            return None
        report = self._deaths[w] = asyncio.get_running_loop().create_future()
        try:
            return await within(report, self._nanny_report_timeout)
        except TimeoutError:
            logger.info("no report from the nanny of worker %s", peer.address)
            return None
        finally:
            del self._deaths[w]

    def _registered(self, w: int) -> bool:
        """Whether the core still counts the worker (not removed by a restart, a
        retirement or the TTL meanwhile)."""
        try:
            return bool(self._server.core.worker_info(w)["status"] != "closed")
        except SchedulerError:
            return False

    def _remove_worker(self, w: int, now: float, report: DeathReport | None) -> None:
        """Remove a worker from the core; which of its tasks become suspicious follows
        its nanny's report: none after a clean exit, those it was running after a death,
        all of them (as Dask) when nothing is known."""
        core = self._server.core
        if report is None or (report.exit_code != 0 and report.executing is None):
            core.remove_worker(w, now=now)
        elif report.exit_code == 0:
            core.remove_worker(w, now=now, expected=True)
        else:
            core.worker_died(w, report.executing or [], now=now)

    def _drop_stale_registration(self, hello: m.Hello) -> None:
        """A worker process registering again (same address and pid) while its previous
        connection still looks open here: that one is stale (a partition hid its end,
        docs/runtime.md#reconnection-and-liveness). Remove it now, as a departure the
        tasks are not to blame for, rather than refuse the worker until the TTL."""
        s = self._server
        for w, peer in list(s.workers.items()):
            if peer.pid is not None and (peer.address, peer.pid) == (hello.address, hello.pid):
                logger.warning(
                    "worker %s registers again: its old connection is stale", peer.address
                )
                with contextlib.suppress(SchedulerError):
                    s.core.remove_worker(w, now=s.now(), expected=True)
                s.disconnect(peer)
                # Its process lives: no death to wait for a nanny's word on.
                waiting = self._deaths.get(w)
                if waiting is not None and not waiting.done():
                    waiting.set_result(None)

    # ----- nannies --------------------------------------------------------------------

    async def serve_nanny(self, c: comm.Comm, hello: m.Hello) -> None:
        s = self._server
        address = str(hello.address)
        stream = s.stream(c)
        s.nannies[address] = Peer(c, stream, address, address)
        await c.write(m.NannyRegistered(plugins=dict(s.worker_plugins.nanny)))
        stream.start()
        handlers: Handlers[None] = Handlers(
            m.Route.NANNY_TO_SCHEDULER,
            {
                m.WorkerDied: lambda msg, _: self._worker_died(address, msg),
                m.HeartbeatClient: lambda msg, _: None,  # a keep-alive
            },
            malformed=lambda msg: self._nanny_malformed(address, msg),
        )
        try:
            await s.read_until_closed(c, f"nanny {address}", handlers)
        finally:
            peer = s.nannies.get(address)
            if peer is not None and peer.conn is c:  # not replaced by its reconnection
                del s.nannies[address]
                for w, report in self._deaths.items():  # it will not report any more
                    if s.workers[w].nanny == address and not report.done():
                        report.set_result(None)
            await stream.close()

    def _nanny_malformed(self, nanny: str, msg: m.Malformed) -> None:
        raise comm.ProtocolError(f"nanny {nanny}: {msg.error}")

    def _worker_died(self, nanny: str, msg: m.WorkerDied) -> None:
        """A nanny saw its worker's process end. If the worker's connection has ended
        already, its reader is waiting for this report; otherwise remove the worker now,
        not when its connection's end is noticed (or its heartbeats are missed). The
        pid keeps a late report from touching the nanny's next worker."""
        s = self._server
        report = DeathReport(msg.exit_code, msg.executing)
        for w, peer in s.workers.items():
            if peer.nanny != nanny or peer.pid != msg.pid:
                continue
            if report.exit_code != 0:
                logger.warning("worker %s died (exit code %s)", peer.address, report.exit_code)
            waiting = self._deaths.get(w)
            if waiting is not None:
                if not waiting.done():
                    waiting.set_result(report)
            elif not peer.died:
                peer.died = True
                with contextlib.suppress(SchedulerError):
                    self._remove_worker(w, s.now(), report)
                s.disconnect(peer)
            return
