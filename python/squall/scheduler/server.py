"""The scheduler server: squall-core behind the wire protocol (docs/runtime.md).

Workers and clients connect over TCP. Every message is one stimulus to the core; after
each batch of messages from a peer, the core's pending commands are drained into
per-peer batched streams. Compute batches are encoded in Rust; worker reports arrive as
packed arrays handed to the core as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from squall import config, log_ring
from squall._core import Scheduler, SchedulerError, decode_keys, encode_keys
from squall.protocol import comm, liveness, ops
from squall.scheduler.client_diagnostics import ClientDiagnostics
from squall.scheduler.failure_log import FailureLog
from squall.scheduler.health import Health
from squall.scheduler.lifecycle import Lifecycle
from squall.scheduler.task_stream import TaskStream
from squall.scheduler.task_stream import answer as task_stream_answer
from squall.security import Security

if TYPE_CHECKING:
    from squall.http.server import HttpServer

logger = logging.getLogger("squall.scheduler")


def default_address() -> str:
    """``tcp://`` + ``squall.scheduler.host`` and ``.port``."""
    return comm.format_address(str(config.get("scheduler.host")), config.port("scheduler.port"))


# Commands sent one message each; the per-task ones go packed (encode_notices).
_RARE_OPS = frozenset(
    {ops.STEAL_REQUEST, ops.REMOVE_WORKER, ops.CLOSE_WORKER, ops.TASK_ERRED, ops.RESTART}
)

#: A connection's reader gives the event loop a turn after handling its messages for
#: this long: frames already buffered are read without one, so a client streaming a
#: million-task map would otherwise hold the loop (the dashboard, other peers) for
#: the whole intake (docs/runtime.md#why-the-protocol-looks-this-way).
YIELD_AFTER = 0.02


@dataclass
class Peer:
    conn: comm.Comm
    stream: comm.BatchedSend
    name: str
    address: str = ""
    #: The address of the nanny supervising this worker, if any, and the worker's
    #: process id, which tells it from the next worker of that nanny (workers only).
    nanny: str | None = None
    pid: int | None = None
    #: Its nanny's ``worker-died`` came while it was still registered (workers only).
    died: bool = False
    #: The port of its HTTP routes (workers only; None: it serves none) and their
    #: scheme, "http" or "https".
    dashboard: int | None = None
    dashboard_scheme: str = "http"

    def send(self, header: comm.Header, payload: bytes | memoryview = b"") -> None:
        """Queue a message. One to a peer whose connection already closed is dropped:
        its reader is about to forget it, and whoever's event led here (another peer's
        message, a tick) must not fail for it."""
        with contextlib.suppress(comm.CommClosedError):
            self.stream.send(header, payload)


def _port_or_none(value: Any) -> int | None:
    """A port a peer reported, if it is one (a malformed value is ignored: it only
    feeds links on the dashboard)."""
    return value if isinstance(value, int) and 0 < value < 65536 else None


class DeathReport(NamedTuple):
    """How a nanny's worker process ended: its exit code (0: it left cleanly) and the
    tasks it was running then (None if unknown)."""

    exit_code: int
    executing: list[int] | None


@dataclass
class SchedulerServer:
    """A running scheduler; ``await start()``, then ``address`` is where to connect.

    The core's knobs come from ``squall.scheduler.*``; entries of ``config``
    (``{"worker-saturation": "inf"}``) override them."""

    address: str = field(default_factory=default_address)
    config: dict[str, Any] | None = None
    #: TLS and token (docs/security.md); None: the process's, from config.
    security: Security | None = None
    #: Where the dashboard and HTTP routes are served (docs/dashboard.md): ":8787",
    #: "host:port", ":0" for a free port; None: not served.
    dashboard_address: str | int | None = field(
        default_factory=lambda: config.get("scheduler.dashboard.address")
    )
    #: The HTTP listener, once started (None: no dashboard).
    http: HttpServer | None = field(init=False, default=None)
    core: Scheduler = field(init=False)
    workers: dict[int, Peer] = field(default_factory=dict)
    clients: dict[int, Peer] = field(default_factory=dict)
    #: Connected nannies, by address (docs/runtime.md#supervision-the-nanny).
    nannies: dict[str, Peer] = field(default_factory=dict)
    _listener: comm.Listener | None = None
    _ticker: asyncio.Task[None] | None = None
    _t0: float = field(default_factory=time.monotonic)
    _batch_interval: float = field(init=False)
    _tick_interval: float = field(init=False)
    id: str = field(init=False, default_factory=lambda: f"Scheduler-{uuid.uuid4()}")
    started: float = field(init=False, default_factory=time.time)
    #: Held by a restart (of all workers or some) for its whole course.
    restart_lock: asyncio.Lock = field(init=False, default_factory=asyncio.Lock)
    _tasks: set[asyncio.Task[None]] = field(init=False, default_factory=set)
    #: Workers whose connection ended, waiting for their nanny's ``worker-died``.
    _deaths: dict[int, asyncio.Future[DeathReport | None]] = field(
        init=False, default_factory=dict
    )
    _nanny_report_timeout: float = field(init=False)
    _failures: FailureLog = field(init=False, default_factory=FailureLog)
    #: Retiring, restarting some workers, waiting for workers, adaptive target, shutdown.
    lifecycle: Lifecycle = field(init=False)
    #: Event-loop latency, message and core-time rates (docs/dashboard.md#health).
    health: Health = field(init=False)
    #: Client connections made and ended since start (for /metrics).
    clients_added: int = field(init=False, default=0)
    clients_removed: int = field(init=False, default=0)
    #: What ran where and when, from the workers' heartbeats (docs/runtime.md#task-stream).
    task_stream: TaskStream = field(init=False)
    #: Progress watches, and the logs and versions of the scheduler and workers.
    diagnostics: ClientDiagnostics = field(init=False)

    def __post_init__(self) -> None:
        self.core = Scheduler(config.core_config(self.config))
        self.lifecycle = Lifecycle(self)
        self.health = Health(lambda: int(self.core.counters()["tasks_computed"]))
        self.diagnostics = ClientDiagnostics(self)
        self._batch_interval = config.seconds("comm.batch-interval.scheduler")
        self._tick_interval = config.seconds("scheduler.tick-interval")
        self._nanny_report_timeout = config.seconds("scheduler.nanny-report-timeout")
        self.task_stream = TaskStream(config.integer("diagnostics.task-stream.capacity"))

    def now(self) -> float:
        return time.monotonic() - self._t0

    async def start(self) -> None:
        bind_host = comm.parse_address(self.address)[0]
        log_ring.install()
        self._listener = await comm.listen(
            self.address,
            self._serve,
            roles=frozenset({"worker", "client", "nanny"}),
            security=self.security,
        )
        self.address = self._listener.address
        if self.dashboard_address is not None:
            await self._serve_http(self.dashboard_address, bind_host)
        self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())
        self.health.start()
        # `squall scheduler` prints the one listening line (on stdout, for its starters).
        logger.debug("scheduler listening at %s", self.address)

    async def _serve_http(self, address: str | int, bind_host: str) -> None:
        """The dashboard and HTTP routes; a dashboard address without a host binds the
        interface the scheduler binds. Imported here: tornado is needed only then."""
        from squall.http.scheduler_routes import STATIC, api_enabled, scheduler_routes
        from squall.http.server import HttpServer, dashboard_tls, parse_http_address

        self.http = HttpServer(scheduler_routes(self), static_path=STATIC)
        await self.http.start(*parse_http_address(address, bind_host), tls=dashboard_tls())
        logger.info("dashboard at %s", self.http.url("/status"))
        if api_enabled() and not comm.is_loopback(self.http.host):
            logger.warning(
                "serving the API routes on %s without authentication: anyone who can "
                "reach it can retire workers (docs/dashboard.md#routes)",
                self.http.url("/api/v1"),
            )

    async def close(self) -> None:
        if self.http is not None:
            await self.http.close()
        for t in self._tasks:
            t.cancel()
        await self.health.stop()
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        for peer in [*self.workers.values(), *self.clients.values(), *self.nannies.values()]:
            await peer.stream.close()
            await peer.conn.close()
        if self._listener is not None:
            await self._listener.close()
        await self.diagnostics.close()

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(self._tick_interval)
            start = time.perf_counter()
            self.core.tick(now=self.now())
            self._failures.tick(self.now())
            self.dispatch()
            self.health.tick(time.perf_counter() - start)

    def _pace_heartbeats(self, w: int, interval: float) -> None:
        """Answer a worker's heartbeat with the period the core wants for this many
        workers (longer on large clusters, as Dask's). The answer is also how the
        worker knows this scheduler is alive (docs/runtime.md#reconnection-and-liveness):
        one small message per heartbeat, nothing per task."""
        peer = self.workers.get(w)
        if peer is not None:
            peer.send({"op": ops.HEARTBEAT_INTERVAL, "interval": interval})

    def _close_worker(self, w: int) -> None:
        """The core removed the worker on its own (silent past the TTL): close its
        connection, as Dask does, so that a worker that was only stopped or cut off finds
        itself disconnected and registers again instead of lingering, connected yet
        unknown."""
        peer = self.workers.get(w)
        if peer is None:
            return
        logger.warning("worker %s removed: no heartbeat within the TTL", peer.address)
        self._disconnect(peer)

    def _disconnect(self, peer: Peer) -> None:
        """Close a peer's connection; its reader then ends and forgets the peer."""
        self.spawn(peer.conn.close())

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` as a task of the server's (``close()`` cancels it)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _read_until_closed(
        self,
        c: comm.Comm,
        who: str,
        handle: Callable[[comm.Header, memoryview], None],
        log_level: int = logging.INFO,
    ) -> None:
        """Hand each message of ``c`` to ``handle``, and the core's commands out after
        each batch, until the connection ends (or stays silent past the idle timeout),
        which is logged at ``log_level``."""
        try:
            async with contextlib.aclosing(liveness.read_batches(c, who)) as batches:
                held = 0.0
                async for messages in batches:
                    start = time.perf_counter()
                    for header, payload in messages:
                        handle(header, payload)
                    self.dispatch()
                    took = time.perf_counter() - start
                    self.health.batch(len(messages), took)
                    held += took
                    if held > YIELD_AFTER:
                        held = 0.0
                        await asyncio.sleep(0)
        except comm.CommError as e:
            logger.log(log_level, "%s left: %s", who, e)

    async def _serve(self, c: comm.Comm) -> None:
        if c.peer_info["role"] == "worker":
            await self._serve_worker(c)
        elif c.peer_info["role"] == "nanny":
            await self._serve_nanny(c)
        else:
            await self._serve_client(c)

    # ----- workers --------------------------------------------------------------------

    async def _serve_worker(self, c: comm.Comm) -> None:
        info = c.peer_info
        self._drop_stale_registration(info)
        try:
            w = self.core.add_worker(
                str(info["address"]),
                int(info["nthreads"]),
                now=self.now(),
                name=info.get("name"),
                memory_limit=int(info.get("memory_limit", 0)),
                resources=[(str(k), float(v)) for k, v in (info.get("resources") or {}).items()],
            )
        except (SchedulerError, *comm.MALFORMED) as e:
            await c.write({"op": ops.ERROR, "message": f"cannot register worker: {e}"})
            return
        stream = comm.BatchedSend(c, self._batch_interval)
        name = str(info.get("name", info["address"]))
        self.workers[w] = Peer(
            c,
            stream,
            name,
            info["address"],
            nanny=info.get("nanny"),
            pid=info.get("pid"),
            dashboard=_port_or_none(info.get("dashboard")),
            dashboard_scheme="https" if info.get("dashboard_scheme") == "https" else "http",
        )
        await c.write({"op": ops.REGISTERED, "worker_id": w})
        stream.start()
        logger.info("worker %s joined (%s threads)", info["address"], info["nthreads"])
        self.dispatch()
        try:
            await self._read_until_closed(
                c, f"worker {info['address']}", lambda h, p: self._worker_message(w, h, p)
            )
        finally:
            report = await self._death_report(w)
            await self._drop_peer(
                self.workers, w, lambda w, now: self._remove_worker(w, now, report)
            )

    async def _death_report(self, w: int) -> DeathReport | None:
        """A worker's connection ended: if it has a nanny that has not reported yet,
        wait (bounded) for the ``worker-died`` that tells how its process ended and
        what it was running, so that only those tasks become suspicious
        (docs/runtime.md#supervision-the-nanny)."""
        peer = self.workers[w]
        if peer.died or peer.nanny not in self.nannies or not self._registered(w):
            return None
        report = self._deaths[w] = asyncio.get_running_loop().create_future()
        try:
            return await asyncio.wait_for(report, self._nanny_report_timeout)
        except TimeoutError:
            logger.info("no report from the nanny of worker %s", peer.address)
            return None
        finally:
            del self._deaths[w]

    def _registered(self, w: int) -> bool:
        """Whether the core still counts the worker (not removed by a restart, a
        retirement or the TTL meanwhile)."""
        try:
            return bool(self.core.worker_info(w)["status"] != "closed")
        except SchedulerError:
            return False

    def _remove_worker(self, w: int, now: float, report: DeathReport | None) -> None:
        """Remove a worker from the core; which of its tasks become suspicious follows
        its nanny's report: none after a clean exit, those it was running after a death,
        all of them (as Dask) when nothing is known."""
        if report is None or (report.exit_code != 0 and report.executing is None):
            self.core.remove_worker(w, now=now)
        elif report.exit_code == 0:
            self.core.remove_worker(w, now=now, expected=True)
        else:
            self.core.worker_died(w, report.executing or [], now=now)

    def _drop_stale_registration(self, info: comm.Header) -> None:
        """A worker process registering again (same address and pid) while its previous
        connection still looks open here: that one is stale (a partition hid its end,
        docs/runtime.md#reconnection-and-liveness). Remove it now, as a departure the
        tasks are not to blame for, rather than refuse the worker until the TTL."""
        for w, peer in list(self.workers.items()):
            if peer.pid is not None and (peer.address, peer.pid) == (
                info.get("address"),
                info.get("pid"),
            ):
                logger.warning(
                    "worker %s registers again: its old connection is stale", peer.address
                )
                with contextlib.suppress(SchedulerError):
                    self.core.remove_worker(w, now=self.now(), expected=True)
                self._disconnect(peer)
                # Its process lives: no death to wait for a nanny's word on.
                waiting = self._deaths.get(w)
                if waiting is not None and not waiting.done():
                    waiting.set_result(None)

    async def _drop_peer(
        self, peers: dict[int, Peer], i: int, remove: Callable[..., None]
    ) -> None:
        """A worker's or client's connection ended: stop its stream, remove it from the
        core (which may have removed it already) and send what that changes."""
        peer = peers.pop(i)
        await peer.stream.close()
        with contextlib.suppress(SchedulerError):
            remove(i, now=self.now())
        self.dispatch()

    def _worker_message(self, w: int, h: comm.Header, payload: memoryview) -> None:
        op, now = h["op"], self.now()
        try:
            if op == ops.FINISHED:
                rejected = self.core.finished_wire(w, bytes(payload), int(h["n"]), now=now)
                if rejected:
                    logger.debug("worker %d: %d stale finished reports", w, len(rejected))
            elif op == ops.ERRED:
                n_exc = int(h.get("n_exception", 0))
                self._failures.failed(
                    self.core.task_info(int(h["task"]))["key"],
                    self.workers[w].address,
                    str(h.get("exception_text", "")),
                    now,
                )
                self.core.task_erred(
                    w,
                    int(h["task"]),
                    int(h["run_id"]),
                    now=now,
                    exception=bytes(payload[:n_exc]),
                    traceback=bytes(payload[n_exc:]),
                    exception_text=str(h.get("exception_text", "")),
                    traceback_text=str(h.get("traceback_text", "")),
                )
            elif op == ops.HEARTBEAT:
                executing = [(int(t), float(s)) for t, s in h.get("executing", [])]
                interval = self.core.heartbeat(
                    w,
                    now=now,
                    bandwidth=h.get("bandwidth"),
                    executing=executing,
                    memory=heartbeat_memory(h),
                    load=h.get("load"),
                )
                self._pace_heartbeats(w, interval)
                self.task_stream.add_heartbeat(self.workers[w].address, h, payload)
            elif op == ops.WORKER_STATUS_CHANGE:
                self._worker_paused(w, str(h["status"]), now)
            elif op == ops.STEAL_RESPONSE:
                self.core.steal_response(
                    w, int(h["task"]), h.get("state"), int(h["stimulus"]), now=now
                )
            elif op == ops.ADD_REPLICAS:
                self.core.add_replicas(w, bytes(payload), now=now)
            elif op == ops.DROP_REPLICAS:
                self.core.drop_replicas(w, bytes(payload), now=now)
            elif op == ops.LONG_RUNNING:
                self.core.long_running(
                    w, int(h["task"]), int(h["run_id"]), float(h["duration"]), now=now
                )
            elif op == ops.RESCHEDULE:
                self.core.reschedule(w, int(h["task"]), now=now)
            elif op == ops.RELEASE_WORKER_DATA:
                self.core.release_worker_data(w, int(h["task"]), now=now)
            elif op == ops.RETIRE:
                self.lifecycle.worker_retires(w, bool(h.get("restart")))
            elif op == ops.HELD_KEYS:
                self._held_keys(w, decode_keys(bytes(payload)))
            else:
                raise comm.ProtocolError(f"unknown worker message {op!r}")
        except SchedulerError as e:
            # Stale or unknown reports are expected in a distributed system: log, go on.
            logger.debug("worker %d: %s ignored: %s", w, op, e)
        except comm.MALFORMED as e:
            raise comm.ProtocolError(f"malformed {op!r} message from worker {w}: {e}") from None

    def _held_keys(self, w: int, keys: list[Any]) -> None:
        """A worker that registered again still holds these results from before. A key
        in memory here gains it as a holder; any other key is dropped there: unknown
        ones, and lost ones waiting to be recomputed, since the core accepts a result
        only from the run it dispatched (docs/runtime.md#reconnection-and-liveness).
        Answered like a scatter: ``scattered`` with the task ids, -1 to drop."""
        tasks = []
        for key in keys:
            t = self.core.lookup(key)
            tasks.append(t if t is not None and self.core.state(key) == "memory" else -1)
        kept = [k for k, t in zip(keys, tasks, strict=True) if t >= 0]
        if kept:
            self.core.add_replicas(w, encode_keys(kept), now=self.now())
        logger.info(
            "worker %s still holds %d known results (%d dropped)",
            self.workers[w].address,
            len(kept),
            len(keys) - len(kept),
        )
        self.workers[w].send({"op": ops.SCATTERED, "tasks": tasks}, encode_keys(keys))

    def _worker_paused(self, w: int, status: str, now: float) -> None:
        """A worker paused or resumed for its memory (docs/runtime.md#memory). Only
        running ⇄ paused: a worker closing gracefully stays so."""
        current = self.core.worker_info(w)["status"]
        if status in ("running", "paused") and current in ("running", "paused"):
            self.core.worker_status_change(w, status, now=now)

    # ----- nannies --------------------------------------------------------------------

    async def _serve_nanny(self, c: comm.Comm) -> None:
        address = str(c.peer_info["address"])
        stream = comm.BatchedSend(c, self._batch_interval)
        self.nannies[address] = Peer(c, stream, address, address)
        await c.write({"op": ops.REGISTERED})
        stream.start()
        try:
            await self._read_until_closed(
                c, f"nanny {address}", lambda h, _: self._nanny_message(address, h)
            )
        finally:
            peer = self.nannies.get(address)
            if peer is not None and peer.conn is c:  # not replaced by its reconnection
                del self.nannies[address]
                for w, report in self._deaths.items():  # it will not report any more
                    if self.workers[w].nanny == address and not report.done():
                        report.set_result(None)
            await stream.close()

    def _nanny_message(self, nanny: str, h: comm.Header) -> None:
        if h["op"] == ops.HEARTBEAT_CLIENT:  # a keep-alive (idle connections close)
            return
        if h["op"] != ops.WORKER_DIED:
            raise comm.ProtocolError(f"unknown nanny message {h['op']!r}")
        try:
            pid = int(h["pid"])
            executing = h.get("executing")
            report = DeathReport(
                int(h["exit_code"]), None if executing is None else [int(t) for t in executing]
            )
        except comm.MALFORMED as e:
            raise comm.ProtocolError(f"malformed worker-died from nanny {nanny}: {e}") from None
        self._worker_died(nanny, pid, report)

    def _worker_died(self, nanny: str, pid: int, report: DeathReport) -> None:
        """A nanny saw its worker's process end. If the worker's connection has ended
        already, its reader is waiting for this report; otherwise remove the worker now,
        not when its connection's end is noticed (or its heartbeats are missed). The
        pid keeps a late report from touching the nanny's next worker."""
        for w, peer in self.workers.items():
            if peer.nanny != nanny or peer.pid != pid:
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
                    self._remove_worker(w, self.now(), report)
                self._disconnect(peer)
            return

    # ----- clients --------------------------------------------------------------------

    async def _serve_client(self, c: comm.Comm) -> None:
        name = str(c.peer_info.get("client", c.peer))
        # A connection made for one request (a LocalCluster's, a tool's) is no user's
        # client: logged for debugging only, and not counted in the client metrics.
        one_request = bool(c.peer_info.get("one_request"))
        log_level = logging.DEBUG if one_request else logging.INFO
        cid = self.core.client(name)
        stream = comm.BatchedSend(c, self._batch_interval)
        self.clients[cid] = Peer(c, stream, name)
        await c.write({"op": ops.REGISTERED, "client_id": cid, **self._dashboard_fields()})
        stream.start()
        logger.log(log_level, "client %s connected from %s", name, c.peer)
        self.clients_added += not one_request

        def handle(header: comm.Header, payload: memoryview) -> None:
            reply = self._client_message(cid, header, payload)
            if reply is not None:
                stream.send(*reply)

        try:
            await self._read_until_closed(c, f"client {name}", handle, log_level)
        finally:
            self.clients_removed += not one_request
            self.diagnostics.client_left(cid)
            await self._drop_peer(self.clients, cid, self.core.remove_client)

    def _client_message(
        self, cid: int, h: comm.Header, payload: memoryview
    ) -> tuple[comm.Header, bytes] | None:
        op, now = h["op"], self.now()
        try:
            if op == ops.UPDATE_GRAPH:
                return self._update_graph(cid, h, payload)
            if op == ops.WHO_HAS:
                addresses, holders = self.core.who_has_wire(bytes(payload))
                return {"op": ops.WHO_HAS, "id": h.get("id"), "addresses": addresses}, holders
            if op in (ops.RELEASE_KEYS, ops.CANCEL, ops.RETRY):
                keys = decode_keys(bytes(payload))
                if op == ops.RELEASE_KEYS:
                    self.core.client_releases_keys(cid, keys, now=now)
                elif op == ops.CANCEL:
                    self.core.cancel(cid, keys, now=now, force=bool(h.get("force")))
                else:
                    self.core.retry(keys, now=now)
                return None
            if op == ops.WORKER_KEYS:
                return self._worker_keys(h)
            if op == ops.STORY:
                return self._story(h, decode_keys(bytes(payload)))
            if op == ops.SCHEDULER_INFO:
                return self._scheduler_info(h), b""
            if op == ops.TASK_STREAM:
                self._answer_task_stream(cid, h)
                return None
            if op == ops.HEARTBEAT_CLIENT:  # a keep-alive: the answer shows this is alive
                return {"op": ops.HEARTBEAT_CLIENT}, b""
            if op == ops.SCATTER:
                return self._scatter(cid, h, decode_keys(bytes(payload)))
            if op == ops.FIRE_AND_FORGET:
                self.core.fire_and_forget(decode_keys(bytes(payload)), now=self.now())
                return None
            if op == ops.RESTART:
                self.lifecycle.restart(cid, h)
                return None
            if op in ops.DIAGNOSTIC_REQUESTS:
                return self.diagnostics.request(cid, h, payload)
            if op in ops.LIFECYCLE_REQUESTS:
                self.lifecycle.request(cid, h)
                return None
            raise comm.ProtocolError(f"unknown client message {op!r}")
        except SchedulerError as e:
            return {"op": ops.REQUEST_FAILED, "id": h.get("id"), "error": str(e)}, b""
        except comm.MALFORMED as e:
            return {"op": ops.REQUEST_FAILED, "id": h.get("id"), "error": f"malformed: {e}"}, b""

    def _answer_task_stream(self, cid: int, h: comm.Header) -> None:
        """Answers a ``task-stream`` request once its flush (a heartbeat from each worker)
        is done; other messages are handled meanwhile."""

        async def run() -> None:
            reply = await task_stream_answer(
                self.task_stream,
                h,
                lambda: [p.address for p in self.workers.values()],
                2 * config.seconds("worker.heartbeat-interval"),
            )
            peer = self.clients.get(cid)
            if peer is not None:
                peer.send(*reply)

        self.spawn(run())

    def _update_graph(
        self, cid: int, h: comm.Header, payload: memoryview
    ) -> tuple[comm.Header, bytes]:
        self.core.submit_wire(
            cid,
            bytes(payload),
            int(h["n"]),
            int(h["keys_bytes"]),
            now=self.now(),
            wanted=h.get("wanted"),
            order=str(h.get("order", "compute")),
            priority=int(h.get("priority", 0)),
            fifo_timeout=float(h.get("fifo_timeout", 0.0)),
            retries=h.get("retries"),
            workers=h.get("workers"),
            resources=[tuple(r) for r in h["resources"]] if h.get("resources") else None,
            allow_other_workers=bool(h.get("allow_other_workers", False)),
            task_options=_task_options(h.get("task_options")),
            data_producers=h.get("data_producers"),
        )
        redefined = self.core.take_redefined()
        if redefined:
            logger.warning(
                "a graph redefined %d known key(s) with other dependencies, e.g. %r; "
                "the tasks already known were kept (use unique keys, or release the "
                "results before resubmitting)",
                len(redefined),
                redefined[0],
            )
        return {"op": ops.GRAPH_ACCEPTED, "id": h.get("id")}, b""

    def _scheduler_info(self, h: comm.Header) -> comm.Header:
        workers = [
            {**self.core.worker_info(w), "nanny": self._nanny_of(w), "services": self._services(w)}
            for _, w in self.core.workers()
        ]
        return {
            "op": ops.SCHEDULER_INFO,
            "id": h.get("id"),
            "scheduler_id": self.id,
            "address": self.address,
            "started": self.started,
            "services": {} if self.http is None else {"dashboard": self.http.port},
            "dashboard_scheme": None if self.http is None else self.http.scheme,
            "total_threads": self.core.total_nthreads,
            "n_tasks": self.core.n_tasks,
            "total_memory": self.core.total_memory,
            "workers": workers,
        }

    def _worker_keys(self, h: comm.Header) -> tuple[comm.Header, bytes]:
        """The keys each worker holds or processes, with their sizes: counts per worker
        in the header, the keys in one payload (keys may be tuples, which msgpack
        would turn into lists)."""
        wanted = h.get("workers")
        counts: list[list[Any]] = []
        keys: list[Any] = []
        nbytes: list[int] = []
        for address, w in self.core.workers():
            if wanted is not None and address not in wanted:
                continue
            held = self.core.worker_keys(w, str(h["which"]))
            counts.append([address, len(held)])
            keys += [k for k, _ in held]
            nbytes += [n for _, n in held]
        reply = {"op": ops.WORKER_KEYS, "id": h.get("id"), "workers": counts, "nbytes": nbytes}
        return reply, encode_keys(keys)

    def _story(self, h: comm.Header, keys: list[Any]) -> tuple[comm.Header, bytes]:
        """Each key's retained transitions (the core keeps a log per key), their times
        in epoch seconds (the core's are seconds since the scheduler started)."""
        stories = [
            [[start, finish, stimulus, self.started + at] for start, finish, stimulus, at in story]
            for story in map(self.core.story, keys)
        ]
        return {"op": ops.STORY, "id": h.get("id"), "stories": stories}, b""

    def _dashboard_fields(self) -> dict[str, Any]:
        """Where a client finds the dashboard: its port and scheme (None: none)."""
        if self.http is None:
            return {"dashboard": None, "dashboard_scheme": None}
        return {"dashboard": self.http.port, "dashboard_scheme": self.http.scheme}

    def _services(self, w: int) -> dict[str, int]:
        """A worker's HTTP port, as distributed lists it (``{"dashboard": port}``)."""
        peer = self.workers.get(w)
        return {} if peer is None or peer.dashboard is None else {"dashboard": peer.dashboard}

    def _nanny_of(self, w: int) -> str | None:
        peer = self.workers.get(w)
        return None if peer is None else peer.nanny

    def _scatter(self, cid: int, h: comm.Header, keys: list[Any]) -> tuple[comm.Header, bytes]:
        """Register data a client put on workers (``update-data``), then tell each
        holder to keep it under its task id, or to drop it (-1) if the client failed to
        place some of it or the core refused it."""
        holders = [[str(a) for a in hs] for hs in h["holders"]]
        nbytes = [int(n) for n in h["nbytes"]]
        if not len(keys) == len(holders) == len(nbytes):
            raise ValueError("scatter needs one holder list and one size per key")
        error: str | None = h.get("error")
        tasks = [-1] * len(keys)
        if error is None:
            try:
                items = list(zip(keys, nbytes, holders, strict=True))
                tasks = self.core.scatter(cid, items, now=self.now())
            except SchedulerError as e:
                error = str(e)
        ids = dict(self.core.workers())
        per_worker: dict[str, list[int]] = {}
        for i, hs in enumerate(holders):
            for a in hs:
                per_worker.setdefault(a, []).append(i)
        for a, idx in per_worker.items():
            peer = self.workers.get(ids.get(a, -1))
            if peer is not None:
                peer.send(
                    {"op": ops.SCATTERED, "tasks": [tasks[i] for i in idx]},
                    encode_keys([keys[i] for i in idx]),
                )
        if error is not None:
            return {"op": ops.REQUEST_FAILED, "id": h.get("id"), "error": error}, b""
        return {"op": ops.SCATTERED, "id": h.get("id")}, b""

    # ----- outputs --------------------------------------------------------------------

    def dispatch(self) -> None:
        """Drain the core's commands into the peers' batched streams, keeping for each
        worker the core's order between freeing a task's old run and a new dispatch."""
        cmds = self.core.take_commands()
        if not len(cmds):
            return
        counts = cmds.counts()
        if counts.keys() & _RARE_OPS:
            for op, target, task, extra in cmds.records():
                if op == ops.STEAL_REQUEST:
                    self._to_worker(target, {"op": op, "task": task, "stimulus": extra})
                elif op == ops.REMOVE_WORKER:
                    gone = self.core.worker_info(extra)["address"]  # kept after removal
                    self._to_worker(target, {"op": op, "worker_id": extra, "address": gone})
                elif op == ops.CLOSE_WORKER:
                    self._close_worker(target)
                elif op == ops.TASK_ERRED:
                    self._erred_to_client(target, task)
                elif op == ops.RESTART:
                    self.lifecycle.close_worker(target, restart=True)
        # Per-task notices travel packed, one payload per peer and op (no Python object
        # per task). Frees first: a batch that frees an old run and re-dispatches the
        # task must not reach the worker the other way round.
        to_workers, to_clients = self.core.encode_notices(cmds)
        for w, op, tasks in to_workers:
            peer = self.workers.get(w)
            if peer is not None:
                peer.send({"op": op}, tasks)
        if ops.COMPUTE_TASK in counts:
            for w, (addresses, payload, count) in self.core.encode_compute(cmds).items():
                peer = self.workers.get(w)
                if peer is not None:
                    header = {"op": ops.COMPUTE, "addresses": addresses, "n": count}
                    peer.send(header, payload)
        for cid, op, keys in to_clients:
            client = self.clients.get(cid)
            if client is not None:
                client.send({"op": op}, keys)
        if ops.ACQUIRE_REPLICAS in counts:  # a retiring worker's results, copied elsewhere
            for w, holder, ids, keys in self.core.encode_acquire(cmds):
                peer = self.workers.get(w)
                if peer is not None:
                    peer.send({"op": ops.ACQUIRE_REPLICAS, "holder": holder, "tasks": ids}, keys)

    def _to_worker(self, w: int, header: comm.Header) -> None:
        peer = self.workers.get(w)
        if peer is not None:
            peer.send(header)

    def _erred_to_client(self, cid: int, task: int) -> None:
        peer = self.clients.get(cid)
        if peer is None:
            return
        info = self.core.task_info(task)
        exc, tb = info.get("exception", b""), info.get("traceback", b"")
        header = {
            "op": ops.TASK_ERRED,
            "exception_text": info.get("exception_text", ""),
            "traceback_text": info.get("traceback_text", ""),
            "error_kind": info.get("error_kind", "Remote"),
            "n_key": 0,
            "n_exception": len(exc),
        }
        key = encode_keys([info["key"]])
        header["n_key"] = len(key)
        peer.send(header, key + exc + tb)


def heartbeat_memory(h: comm.Header) -> tuple[int, int, int, int, int] | None:
    """A heartbeat's ``memory`` fields in the order ``Scheduler.heartbeat`` takes."""
    m = h.get("memory")
    if m is None:
        return None
    return (
        int(m["process"]),
        int(m["managed"]),
        int(m["spilled_memory"]),
        int(m["spilled_disk"]),
        int(m["spilled_count"]),
    )


def _task_options(classes: Any) -> list[tuple[dict[str, Any], list[int]]] | None:
    """msgpack gives lists where the core takes (options, indices) and (name, amount)
    pairs."""
    if not classes:
        return None
    out = []
    for opts, indices in classes:
        if opts.get("resources"):
            opts = {**opts, "resources": [tuple(r) for r in opts["resources"]]}
        out.append((opts, indices))
    return out
