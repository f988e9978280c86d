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
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from squall import config, log_ring
from squall._core import Scheduler
from squall.http.scheduler_routes import STATIC, api_enabled, scheduler_routes
from squall.http.server import HttpServer, dashboard_tls, parse_http_address
from squall.preload import Preloads
from squall.protocol import comm, liveness
from squall.protocol import messages as m
from squall.scheduler.client_diagnostics import ClientDiagnostics
from squall.scheduler.client_room import ClientRoom
from squall.scheduler.coordination import CoordinationRoom
from squall.scheduler.datasets import Datasets
from squall.scheduler.events import EventLog
from squall.scheduler.facade import SchedulerFacade
from squall.scheduler.failure_log import FailureLog
from squall.scheduler.health import Health
from squall.scheduler.lifecycle import Lifecycle
from squall.scheduler.metadata import MetadataStore
from squall.scheduler.outbox import Outbox
from squall.scheduler.peer import Peer
from squall.scheduler.plugins import SchedulerPlugins
from squall.scheduler.replicas import Replicas
from squall.scheduler.task_stream import TaskStream
from squall.scheduler.worker_plugins import WorkerPlugins
from squall.scheduler.worker_room import WorkerRoom
from squall.security import Security

logger = logging.getLogger("squall.scheduler")


def default_address() -> str:
    """``tcp://`` + ``squall.scheduler.host`` (all interfaces unless set) and ``.port``."""
    return comm.format_address(comm.scheduler_host(), config.port("scheduler.port"))


#: A connection's reader gives the event loop a turn after handling its messages for
#: this long: frames already buffered are read without one, so a client streaming a
#: million-task map would otherwise hold the loop (the dashboard, other peers) for
#: the whole intake (docs/runtime.md#why-the-protocol-looks-this-way).
YIELD_AFTER = 0.02


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
    #: Preloads (docs/runtime.md#preload): module names or ``.py`` paths, and the
    #: arguments of their click ``dask_setup``; empty: ``squall.scheduler.preload``,
    #: else Dask's ``distributed.scheduler.preload`` (and ``-argv``).
    preload: str | Sequence[str] | None = None
    preload_argv: Sequence[str] | Sequence[Sequence[str]] | None = None
    #: The path the HTTP routes are served under (``--dashboard-prefix``; "": the root),
    #: and whether a proxy's ``X-Forwarded-*`` headers are trusted (``--use-xheaders``).
    http_prefix: str = ""
    xheaders: bool = False
    #: The preloads, imported on creation (``PreloadError`` if one fails).
    preloads: Preloads = field(init=False)
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
    #: Held while workers restart: one restart at a time.
    restart_lock: asyncio.Lock = field(init=False, default_factory=asyncio.Lock)
    _tasks: set[asyncio.Task[Any]] = field(init=False, default_factory=set)
    failures: FailureLog = field(init=False, default_factory=FailureLog)
    #: The messages of workers and nannies, and of clients (by route).
    worker_room: WorkerRoom = field(init=False)
    client_room: ClientRoom = field(init=False)
    #: The core's commands, sent to the peers.
    outbox: Outbox = field(init=False)
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
    #: Events by topic and their subscribers (docs/runtime.md#events-and-printing-from-tasks).
    events: EventLog = field(init=False)
    #: Published datasets (docs/runtime.md#datasets).
    datasets: Datasets = field(init=False)
    #: Locks, semaphores, events, variables, queues (docs/primitives.md).
    coordination: CoordinationRoom = field(init=False)
    #: ``set_metadata``'s nested dict (docs/runtime.md#admin-calls).
    metadata: MetadataStore = field(init=False, default_factory=MetadataStore)
    #: What code run on the scheduler gets as ``dask_scheduler``.
    facade: SchedulerFacade = field(init=False)
    #: Client.replicate, rebalance and amm (docs/runtime.md#replicas-and-rebalancing).
    replicas: Replicas = field(init=False)
    #: Scheduler plugins and their hooks (docs/runtime.md#scheduler-plugins).
    plugin_host: SchedulerPlugins = field(init=False)
    #: The worker and nanny plugins (docs/runtime.md#worker-and-nanny-plugins).
    worker_plugins: WorkerPlugins = field(init=False)

    def __post_init__(self) -> None:
        self.preloads = Preloads.of("scheduler", self.preload, self.preload_argv)
        self.core = Scheduler(config.core_config(self.config))
        self.lifecycle = Lifecycle(self)
        self.replicas = Replicas(self)
        self.health = Health(lambda: int(self.core.counters()["tasks_computed"]))
        self.diagnostics = ClientDiagnostics(self)
        self.events = EventLog(self)
        self.datasets = Datasets(self)
        self.worker_plugins = WorkerPlugins(self)
        self._batch_interval = config.seconds("comm.batch-interval.scheduler")
        self._tick_interval = config.seconds("scheduler.tick-interval")
        self.worker_room = WorkerRoom(self)
        self.client_room = ClientRoom(self)
        self.coordination = CoordinationRoom(self)
        self.facade = SchedulerFacade(self)
        self.plugin_host = SchedulerPlugins(self)
        self.outbox = Outbox(self)
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
        # distributed's startup lines, which deployers parse (docs/deploy.md#startup-lines)
        logger.info("  Scheduler at: %25s", self.address)
        if self.dashboard_address is not None:
            await self._serve_http(self.dashboard_address, bind_host)
        self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())
        self.health.start()
        await self.preloads.setup(self)
        await self.plugin_host.start()
        # `squall scheduler` prints the one listening line (on stdout, for its starters).
        logger.debug("scheduler listening at %s", self.address)

    async def _serve_http(self, address: str | int, bind_host: str) -> None:
        """The dashboard and HTTP routes; a dashboard address without a host binds the
        interface the scheduler binds."""
        self.http = HttpServer(
            scheduler_routes(self),
            static_path=STATIC,
            prefix=self.http_prefix,
            xheaders=self.xheaders,
        )
        await self.http.start(*parse_http_address(address, bind_host), tls=dashboard_tls())
        logger.info("%11s at:  %25s", "dashboard", self.http.url("/status"))
        if api_enabled() and not comm.is_loopback(self.http.host):
            logger.warning(
                "serving the API routes on %s without authentication: anyone who can "
                "reach it can retire workers (docs/dashboard.md#routes)",
                self.http.url("/api/v1"),
            )

    async def close(self) -> None:
        if self._listener is not None:
            # No peer joins a closing scheduler (a worker whose connection closes below
            # reconnects at once).
            self._listener.stop_accepting()
        await self.plugin_host.before_close()
        await self.preloads.teardown(self)
        await self.plugin_host.close()
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
        await self.worker_plugins.close()
        self.coordination.close()

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(self._tick_interval)
            start = time.perf_counter()
            self.core.tick(now=self.now())
            self.failures.tick(self.now())
            self.dispatch()
            self.health.tick(time.perf_counter() - start)

    # distributed's names, for a preload's ``dask_setup(scheduler)``: the facade's.
    @property
    def plugins(self) -> dict[str, Any]:
        return self.plugin_host.plugins

    def add_plugin(self, plugin: Any, name: str | None = None, idempotent: bool = False) -> None:
        self.plugin_host.add(plugin, name=name, idempotent=idempotent)

    def remove_plugin(self, name: str) -> None:
        self.plugin_host.remove(name)

    def dispatch(self) -> None:
        """Hand the core's transitions to the plugins watching them, and send its
        pending commands (after each batch of events)."""
        self.plugin_host.transitions()
        self.outbox.dispatch()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` as one of the server's tasks (cancelled when it closes)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def disconnect(self, peer: Peer) -> None:
        """Close a peer's connection; its reader then ends and forgets the peer."""
        self.spawn(peer.conn.close())

    def stream(self, c: comm.Comm) -> comm.BatchedSend:
        return comm.BatchedSend(c, self._batch_interval)

    async def read_until_closed(
        self,
        c: comm.Comm,
        who: str,
        handle: Callable[[m.Message | m.Malformed, memoryview], None],
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
                    for msg, payload in messages:
                        handle(msg, payload)
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
        assert c.hello is not None
        if c.hello.role == "worker":
            await self.worker_room.serve_worker(c, c.hello)
        elif c.hello.role == "nanny":
            await self.worker_room.serve_nanny(c, c.hello)
        else:
            await self.client_room.serve(c, c.hello)
