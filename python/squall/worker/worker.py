"""The worker process: runs the tasks the scheduler assigns and serves their results.

It listens for peers (:mod:`squall.worker.serving`) and connects to the scheduler as
role ``worker``; the messages, their fields and payloads are those of docs/protocol.md
(declared in :mod:`squall.protocol.messages`), and each scheduler message has one
handler here (a :class:`~squall.protocol.dispatch.Handlers` table). The worker's own
choices:

* Task state lives in a compiled machine (``squall._core.WorkerCore``): ``compute``
  payloads go into it whole, and task threads run its loop, which takes the best ready
  task, calls it and records the result with no Python code of squall's per task. The
  event loop moves messages and flushes the reports the machine buffers: completions
  go out as one ``finished`` once nothing executes, else at most
  ``squall.worker.finished-delay`` later.
* Tasks run in a thread pool that grows as needed, at most ``nthreads`` counted as
  running: ``secede()`` uncounts a task (and sends ``long-running``), ``rejoin()`` waits
  for a slot (:mod:`squall.worker.context`).
* Dependencies are fetched from their holders (:mod:`squall.worker.fetch`), copies
  announced and dropped by key; a dependency nobody has sends its dependents back with
  ``reschedule`` after ``squall.worker.missing-data-retry``.
* ``restart`` (no nanny) closes the worker, and the ``squall worker`` program
  re-executes itself; ``close`` closes it for good; ``retire`` (``--lifetime``) asks the
  scheduler to retire it (docs/runtime.md#cluster-lifecycle).
* A lost scheduler (closed, silent for ``squall.comm.timeouts.tcp``, or a message that
  does not validate) does not end the worker: it forgets the tasks it was given, keeps
  its results, and registers again for ``death_timeout``, announcing them in
  ``held-keys`` (docs/runtime.md#reconnection-and-liveness).
* With a memory limit, a monitor spills results to disk and pauses the worker
  (docs/runtime.md#memory).
* A task raising ``Reschedule`` is reported with ``reschedule`` instead of ``erred``.
* Actors live in :class:`~squall.worker.actors.ActorHost` beside the results, their
  methods called by peers directly (docs/actors.md).
* Worker plugins (:mod:`squall.worker.plugins`) are set up as they arrive from the
  scheduler, and those it holds at registration before any task runs; a plugin with a
  ``transition`` hook turns on the machine's record of task state changes, handed to
  it in batches (docs/runtime.md#worker-and-nanny-plugins).
* Its task threads' stacks are sampled by a profiler (:mod:`squall.worker.profile`) for
  ``Client.profile`` and read for ``Client.call_stack``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import struct
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Collection, Generator, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import psutil  # type: ignore[import-untyped]
from dask.utils import format_bytes

from squall import config, log_ring
from squall._core import (
    RunAnswer,
    WorkerCore,
    clear_function_cache,
    decode_keys,
    encode_keys,
)
from squall.errors import Reschedule
from squall.http.server import HttpServer, dashboard_tls, parse_http_address
from squall.http.worker_routes import worker_routes
from squall.preload import Preloads
from squall.protocol import comm, dispatch, liveness
from squall.protocol import messages as m
from squall.protocol.actor_links import close_links
from squall.protocol.remote_errors import error_fields, pack_error
from squall.protocol.specs import fill_call
from squall.security import Security
from squall.worker import context, profile
from squall.worker.actors import ActorHost
from squall.worker.events import log_event_message
from squall.worker.fetch import Fetcher
from squall.worker.load import LoadMeter, Transfers, heartbeat
from squall.worker.memory import (
    MemoryMonitor,
    install_frame_size,
    local_directory,
    parse_memory_limit,
    sizeof_value,
    thresholds,
)
from squall.worker.plugins import PluginHost, import_file, overrides_transition
from squall.worker.profile import Profiler
from squall.worker.serving import ABSENT, PeerService
from squall.worker.spill import Spilled, SpillStore

if TYPE_CHECKING:
    from squall.client.client import Client

logger = logging.getLogger("squall.worker")

Key = Hashable


class TaskView(NamedTuple):
    """A task as ``Worker.tasks`` shows it (a snapshot)."""

    key: Key
    state: str


class Worker:
    """A worker. ``await start()`` to join the scheduler, ``await close()`` to leave.

    ``nthreads`` and ``address`` default to ``squall.worker.nthreads``, ``.host`` and
    ``.port``, ``death_timeout`` (seconds or a duration string: how long to try to reach
    the scheduler, at start and after losing it, before closing) to
    ``squall.worker.death-timeout``; ``memory_limit`` takes any form
    :func:`squall.worker.memory.parse_memory_limit` reads ("auto" by default, as Dask's
    workers); spilled values go under ``local_directory`` (default:
    ``squall.worker.local-directory``, else Dask's ``temporary-directory``). Timings come
    from ``squall.worker.*`` and
    ``squall.comm.*``. ``preload`` and ``preload_argv`` are distributed's
    (docs/runtime.md#preload); empty, they are ``squall.worker.preload``, else Dask's
    ``distributed.worker.preload``."""

    def __init__(
        self,
        scheduler_address: str,
        *,
        nthreads: int | None = None,
        name: str | None = None,
        address: str | None = None,
        resources: dict[str, float] | None = None,
        memory_limit: str | float | None = "auto",
        nanny: str | None = None,
        executing_record: str | None = None,
        security: Security | None = None,
        contact_address: str | None = None,
        death_timeout: float | str | None = None,
        local_directory: str | None = None,
        dashboard_address: str | int | None = "config",
        preload: str | Sequence[str] | None = None,
        preload_argv: Sequence[str] | Sequence[Sequence[str]] | None = None,
        scheduler_sni: str | None = None,
    ) -> None:
        #: The name the worker's TLS connection to the scheduler asks for (SNI), for a
        #: proxy that routes on it (``--scheduler-sni``); None: none.
        self.scheduler_sni = scheduler_sni
        #: Imported first: a preload that fails to import fails the worker at once.
        self.preloads = Preloads.of("worker", preload, preload_argv)
        if nthreads is None:
            nthreads = config.integer("worker.nthreads", minimum=1)
        if address is None:
            address = default_address(scheduler_address)
        if nthreads < 1:
            raise ValueError(f"nthreads must be at least 1, not {nthreads}")
        self.scheduler_address = scheduler_address
        self.nthreads = nthreads
        self.name = name
        self.address = address
        if resources is None:
            resources = config.get("worker.resources") or {}
        self.resources = {str(k): float(v) for k, v in resources.items()}
        #: Bytes; 0 = none.
        self.memory_limit = parse_memory_limit(memory_limit, nthreads)
        #: ``local_directory`` as given (None: from config; see ``memory.local_directory``).
        self.local_directory_option = local_directory
        self._process = psutil.Process()
        #: The address of the nanny supervising this worker (squall.worker.nanny), if any.
        self.nanny = nanny
        self.worker_id: int | None = None
        #: A name unique to this worker object (distributed's ``Worker.id``).
        self.id = f"Worker-{uuid.uuid4()}"
        self._local_directory: str | None = None
        #: Its worker plugins (docs/runtime.md#worker-and-nanny-plugins).
        self.plugin_host = PluginHost(self, changed=self._plugins_changed)
        #: The plugins with a ``transition`` hook: while any, the core records task
        #: state changes, handed to them in batches (``_flush_buffered``).
        self._transition_plugins: list[Any] = []
        self._batch_interval = config.seconds("comm.batch-interval.worker")
        self._heartbeat_interval = config.seconds("worker.heartbeat-interval")
        self._finished_delay = config.seconds("worker.finished-delay")
        #: Seconds to keep trying to reach the scheduler (None: forever, as Dask).
        self.death_timeout = liveness.death_timeout(death_timeout)
        self._silence_timeout = liveness.silence_timeout()
        self._watchdog: liveness.Watchdog | None = None
        #: Results kept from before a reconnection, announced with ``held-keys`` (staged
        #: until the answer, ``scattered``, takes them out of ``_staged``).
        self._held: list[Key] = []
        self.status = "created"

        install_frame_size()
        self._core = WorkerCore(
            address,
            nthreads,
            list(self.resources.items()),
            self._finished_delay,
            fill_call,
            _pack_task_error,
            sizeof_value,
            config.integer("diagnostics.task-stream.samples"),
        )
        self._load = LoadMeter(self._process)
        #: Data transfers with peers, for /metrics.
        self.transfers = Transfers()
        #: Seconds from a heartbeat to the scheduler's answer, the last one measured.
        self.latency = 0.0
        self._heartbeat_sent = 0.0
        if executing_record is not None:  # the nanny's (docs/runtime.md#supervision-the-nanny)
            self._core.record_executing(executing_record)

        #: TLS and token (docs/security.md); None: the process's, from config.
        self.security = security
        #: What others are told to reach this worker at, if not where it listens.
        self.contact_address = contact_address
        #: Where ``/health`` and ``/metrics`` are served (docs/dashboard.md); None: not.
        self.dashboard_address = (
            config.get("worker.dashboard.address")
            if dashboard_address == "config"
            else dashboard_address
        )
        self.http: HttpServer | None = None

        #: Spills and pauses; only with a memory limit (docs/runtime.md#memory).
        self.memory: MemoryMonitor | None = None
        if self.memory_limit:
            self.memory = MemoryMonitor(
                self._core, self.memory_limit, thresholds(), self._spill_store, self._paused
            )
        self._monitor: asyncio.Task[None] | None = None

        self._fetcher = Fetcher(self)
        #: The actor instances built here (docs/actors.md).
        self.actors = ActorHost(address)
        self._peer_service = PeerService(self)
        #: Samples the task threads' stacks (``squall.worker.profile.*``); None: off.
        self.profiler = (
            Profiler(self._core, Worker._run_tasks.__code__)
            if config.get("worker.profile.enabled")
            else None
        )
        self._bg: set[asyncio.Task[Any]] = set()
        self._on_scheduler: dispatch.Handlers[None] = dispatch.Handlers(
            m.Route.SCHEDULER_TO_WORKER,
            {
                m.Compute: self._compute,
                m.FreeKeys: self._free_keys,
                m.RemoveReplicas: self._remove_replicas,
                m.StealRequest: self._steal_request,
                m.Scattered: self._scattered,
                m.RemoveWorker: self._remove_worker,
                m.HeartbeatInterval: self._pace_heartbeats,
                m.Restart: self._restart,
                m.AcquireReplicas: self._acquire_replicas,
                m.Close: self._close_requested,
                m.Error: self._refused,
                m.WorkerRegistered: self._registered_again,
            },
            malformed=self._malformed,
        )

        self._listener: comm.Listener | None = None
        self._scheduler: comm.Comm | None = None
        self._stream: comm.BatchedSend | None = None
        self._reader: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._loop_thread: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = asyncio.Event()
        self.bandwidth: float | None = None  # bytes/s, from transfers

        self._staged: dict[Key, tuple[Any, int]] = {}  # scattered, not yet registered
        self._client: Client | None = None
        self._client_lock = threading.Lock()
        #: The scheduler asked for a restart (``squall worker`` re-executes itself).
        self.restart_requested = False

    # ----- what the worker holds (snapshots, for users and tests) -----------------------

    @property
    def data(self) -> dict[Key, Any]:
        """The values held, by key."""
        return self._core.data()

    @property
    def plugins(self) -> dict[str, Any]:
        """The worker plugins set up here, by name."""
        return self.plugin_host.plugins

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The worker's event loop (an asyncio loop; distributed's is a tornado IOLoop)."""
        assert self._loop is not None, "the worker has not started"
        return self._loop

    @property
    def local_directory(self) -> str:
        """This worker's own scratch directory (made on first use, removed when it
        closes) under ``squall.worker.local-directory``: uploaded files go here."""
        if self._local_directory is None:
            base = local_directory(self.local_directory_option)
            self._local_directory = tempfile.mkdtemp(prefix="squall-worker-", dir=base)
        return self._local_directory

    @property
    def nbytes(self) -> dict[Key, int]:
        return self._core.nbytes()

    @property
    def tasks(self) -> dict[int, TaskView]:
        """The tasks this worker knows, by the scheduler's task id."""
        return {t: TaskView(*kv) for t, kv in self._core.tasks().items()}

    def call_stack(self, keys: Iterable[Key] | None = None) -> dict[Key, list[str]]:
        """What each running task (of ``keys``) executes now, as stack lines."""
        return profile.call_stacks(self._core, Worker._run_tasks.__code__, keys)

    def get_profile(
        self, start: float | None = None, stop: float | None = None, key: str | None = None
    ) -> dict[str, Any]:
        """The sampled profile of the tasks run between ``start`` and ``stop`` (epoch
        seconds), of key prefix ``key`` if given; empty if profiling is off."""
        if self.profiler is None:
            return profile.create()
        return self.profiler.get(start, stop, key)

    def task_counts(self) -> dict[str, int]:
        """How many of those tasks are in each state (for /metrics; no key is read)."""
        return self._core.task_counts()

    # ----- lifecycle ------------------------------------------------------------------

    async def start(self) -> Worker:
        log_ring.install()
        self._loop = asyncio.get_running_loop()
        self._listener = await comm.listen(
            self.address,
            self._peer_service.serve,
            roles=frozenset({"peer"}),
            security=self.security,
        )
        self.address = self._listener.address
        if self.contact_address is not None:
            self.address = _contact(self.contact_address, self.address)
        self._core.set_address(self.address)
        self.actors.set_address(self.address)
        if self.dashboard_address is not None:
            await self._serve_http(self.dashboard_address)
        self._loop_thread = threading.get_ident()
        await self.preloads.setup(self)
        self._log_startup(self._listener.address)
        what = f"worker {self.address} joining {self.scheduler_address}"
        if not await liveness.retry(self._register, self.death_timeout, what):
            await self._listener.close()
            raise comm.CommError(
                f"worker {self.address}: no scheduler at {self.scheduler_address} "
                f"within the death timeout of {self.death_timeout}s"
            )
        for _ in range(self.nthreads):
            self._start_thread()
        if self.profiler is not None:
            self.profiler.start()
        self._heartbeat = self._loop.create_task(self._heartbeat_forever())
        if self.memory is not None:
            self._monitor = self._loop.create_task(self.memory.run())
        context.register(self)
        config.route_dask(self)  # dask calls in its tasks go to the cluster
        return self

    def _log_startup(self, listening: str) -> None:
        """distributed's startup lines, which deployers parse (docs/deploy.md#startup-lines)."""
        logger.info("      Start worker at: %26s", self.address)
        logger.info("         Listening to: %26s", listening)
        if self.name is not None:
            logger.info("          Worker name: %26s", self.name)
        if self.http is not None:
            logger.info("         dashboard at: %26s", self.http.url("/status"))
        logger.info("Waiting to connect to: %26s", self.scheduler_address)
        logger.info("-" * 49)
        logger.info("              Threads: %26d", self.nthreads)
        if self.memory_limit:
            logger.info("               Memory: %26s", format_bytes(self.memory_limit))
        base = self._local_directory or local_directory(self.local_directory_option)
        logger.info("      Local Directory: %26s", base)
        logger.info("-" * 49)

    async def _serve_http(self, address: str | int) -> None:
        """``/health`` and ``/metrics`` on the interface the worker binds unless the
        address names another, over HTTPS with the scheduler's dashboard certificate
        (as Dask's workers). Imported here: tornado is needed only then."""
        self.http = HttpServer(worker_routes(self))
        host, port = parse_http_address(address, comm.parse_address(self.address)[0])
        await self.http.start(host, port, tls=dashboard_tls())

    async def _register(self) -> None:
        """One attempt to register (docs/protocol.md#handshake); raises CommError."""
        info = {
            "address": self.address,
            "nthreads": self.nthreads,
            "name": self.name if self.name is not None else self.address,
            "memory_limit": self.memory_limit,
            "resources": self.resources,
            "nanny": self.nanny,
            "pid": os.getpid(),
            "dashboard": None if self.http is None else self.http.port,
            "dashboard_scheme": None if self.http is None else self.http.scheme,
        }
        c, reply = await liveness.register(
            self.scheduler_address,
            "worker",
            info,
            m.WorkerRegistered,
            self.security,
            server_hostname=self.scheduler_sni,
        )
        assert self._loop is not None
        self._scheduler = c
        self.worker_id = reply.worker_id
        # This scheduler names blobs anew: whatever a former connection sent goes
        # (docs/protocol.md#compute).
        self._core.clear_blobs()
        self._stream = comm.BatchedSend(c, self._batch_interval)
        self._stream.start()
        if self._held:  # first, before any report of this connection
            self._stream.send(m.HeldKeys(), encode_keys(self._held))
        self.status = "running"
        # Before the reader takes any task: plugins are set up before tasks run.
        await self.plugin_host.add_all(reply.plugins)
        self._reader = self._loop.create_task(self._read_scheduler())
        self._watchdog = liveness.Watchdog(
            self._silence_timeout, self._send_heartbeat, self._scheduler_silent
        )
        logger.info("        Registered to: %26s", self.scheduler_address)
        logger.info(
            "worker %s (%s threads) registered with %s as %d",
            self.address,
            self.nthreads,
            self.scheduler_address,
            self.worker_id,
        )

    async def close(self, *, abort: bool = False) -> None:
        """Leave: stop reading, flush pending reports (unless ``abort``), close every
        connection. Tasks still running in threads finish, but their results are dropped."""
        if self.status in ("closing", "closed"):
            await self._closed.wait()
            return
        self.status = "closing"
        await self.plugin_host.close()
        await self.preloads.teardown(self)
        context.unregister(self)
        if self.profiler is not None:
            self.profiler.stop()
        config.unroute_dask(self)
        me = asyncio.current_task()
        if self._watchdog is not None:
            self._watchdog.stop()
        for t in (self._reader, self._heartbeat, self._monitor, *self._bg):
            if t is not None and t is not me:
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
        if not abort:
            self._flush_buffered()
        self._core.close()
        self.actors.close()
        if abort and self._scheduler is not None:
            await self._scheduler.close()  # nothing pending is sent
        if self._stream is not None:
            await self._stream.close()
        if self._scheduler is not None:
            await self._scheduler.close()
        await self._fetcher.peers.close()
        await close_links()
        for c in list(self._peer_service.incoming):
            await c.close()
        if self._listener is not None:
            await self._listener.close()
        if self.http is not None:
            await self.http.close()
        if self._client is not None:  # get_client()'s: its close blocks, not on this loop
            await asyncio.get_running_loop().run_in_executor(None, self._client.close)
        if self.memory is not None:
            await self.memory.close()
        if self._local_directory is not None:
            shutil.rmtree(self._local_directory, ignore_errors=True)
        self.status = "closed"
        self._closed.set()
        logger.info("worker %s closed", self.address)

    async def finished(self) -> None:
        """Wait until the worker has closed."""
        await self._closed.wait()

    def __await__(self) -> Generator[Any, None, Worker]:
        return self.start().__await__()

    async def __aenter__(self) -> Worker:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _spawn(self, coro: Any) -> None:
        assert self._loop is not None
        t = self._loop.create_task(coro)
        self._bg.add(t)
        t.add_done_callback(self._bg.discard)

    def _send(self, msg: m.Message, payload: bytes = b"") -> None:
        if threading.get_ident() != self._loop_thread:  # from a task thread
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self._send, msg, payload)
            return
        if self._stream is None or self.status != "running":
            return
        with contextlib.suppress(comm.CommClosedError):  # the reader notices, closes
            self._stream.send(msg, payload)

    async def _read_scheduler(self) -> None:
        assert self._scheduler is not None
        try:
            while True:
                messages = await self._scheduler.read_messages()
                if self._watchdog is not None:
                    self._watchdog.heard()
                for msg, payload in messages:
                    self._on_scheduler(msg, payload)
                self._fetcher.fetch_missing()
                self._flush_buffered()  # e.g. re-sent tasks already in memory
        except comm.CommError as e:
            self._lost_scheduler(str(e))
        except Exception:
            logger.exception(
                "worker %s: error handling a scheduler message; closing", self.address
            )
            self._loop_close()

    def _loop_close(self) -> None:
        self._spawn(self.close())

    async def _heartbeat_forever(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_interval)
            self._send_heartbeat()

    def _send_heartbeat(self) -> None:
        """A heartbeat, which the scheduler answers (``heartbeat-interval``)."""
        self._heartbeat_sent = time.monotonic()
        self._send(*heartbeat(self._core, self._load, self.bandwidth, self.memory_metrics()))

    # ----- losing the scheduler -------------------------------------------------------

    def _scheduler_silent(self, seconds: float) -> None:
        self._lost_scheduler(
            f"no message from it for {seconds:.1f}s "
            f"(squall.comm.timeouts.tcp = {self._silence_timeout}s)"
        )

    def _lost_scheduler(self, reason: str) -> None:
        """The connection to the scheduler is gone or silent: reconnect (once)."""
        if self.status != "running":
            return
        self.status = "reconnecting"
        limit = "forever" if self.death_timeout is None else f"for {self.death_timeout}s"
        logger.warning(
            "worker %s lost the scheduler %s: %s; reconnecting %s",
            self.address,
            self.scheduler_address,
            reason,
            limit,
        )
        self._spawn(self._reconnect())

    async def _reconnect(self) -> None:
        me = asyncio.current_task()
        if self._watchdog is not None:
            self._watchdog.stop()
        if self._reader is not None and self._reader is not me:
            self._reader.cancel()
        if self._scheduler is not None:
            self._scheduler.abort()  # a silent peer would hold a graceful close
        if self._stream is not None:
            await self._stream.close()  # nothing is sent on an aborted connection
        self._forget_assigned_work()
        assert self._loop is not None
        started = self._loop.time()
        what = f"worker {self.address} rejoining {self.scheduler_address}"
        if not await liveness.retry(self._register, self.death_timeout, what):
            logger.error(
                "worker %s: no scheduler at %s for %.1fs (death timeout); closing",
                self.address,
                self.scheduler_address,
                self._loop.time() - started,
            )
            for key in self._held:
                self._staged.pop(key, None)
            self._held = []
            self._spawn(self.close())

    def _forget_assigned_work(self) -> None:
        """The scheduler that assigned this worker's tasks is gone: forget them (running
        ones finish, their results dropped, as for ``free-keys``) and everything not yet
        reported, but keep the results held in memory, staged like scattered data until
        the next registration's ``scattered`` says which to keep (spilled ones go with
        the rest: a copy elsewhere, or a recomputation, serves as well)."""
        tasks = self._core.tasks()
        values, sizes = self._core.data(), self._core.nbytes()
        # Announced on a connection that ended before the answer: announce them again.
        self._held = [key for key in self._held if key in self._staged]
        for key, state in tasks.values():
            if state == "memory" and key in values and not isinstance(values[key], Spilled):
                self._staged[key] = (values[key], sizes.get(key, 0))
                self._held.append(key)
        self._core.free(struct.pack(f"<{len(tasks)}I", *tasks))
        self.actors.clear()  # the scheduler that knew them reports them lost
        self._core.take_reports()  # of tasks the next scheduler never gave

    def memory_metrics(self) -> m.Memory:
        """The process's RSS and the results' bytes in memory and spilled."""
        return m.Memory(int(self._process.memory_info().rss), *self._core.memory())

    def _spill_store(self) -> SpillStore:
        return SpillStore(local_directory(self.local_directory_option))

    def _paused(self, paused: bool) -> None:
        """The memory monitor paused or resumed the worker: tell the scheduler."""
        status = "paused" if paused else "running"
        self._send(m.WorkerStatusChange(status=status))

    # ----- scheduler messages (a handler per message of the route) -------------------

    def _compute(self, msg: m.Compute, payload: memoryview) -> None:
        # The header's count makes room for the tasks at once (any value is safe).
        self._core.compute(bytes(payload), msg.addresses, min(msg.n, len(payload)))

    def _free_keys(self, msg: m.FreeKeys, payload: memoryview) -> None:
        tasks = bytes(payload)
        self.actors.free(tasks)
        self._core.free(tasks)

    def _remove_replicas(self, msg: m.RemoveReplicas, payload: memoryview) -> None:
        self._core.remove_replicas(bytes(payload))

    def _steal_request(self, msg: m.StealRequest, payload: memoryview) -> None:
        state = self._core.steal(msg.task)
        self._send(m.StealResponse(task=msg.task, state=state, stimulus=msg.stimulus))

    def _scattered(self, msg: m.Scattered, payload: memoryview) -> None:
        """The scheduler registered staged data as tasks in memory (-1: refused it)."""
        for tid, key in zip(msg.tasks, decode_keys(bytes(payload)), strict=True):
            staged = self._staged.pop(key, None)
            if tid < 0:
                continue
            if staged is None:  # its staging failed; unless held already, it is not here
                [held] = self._core.get_data(encode_keys([key]), ABSENT)
                if held is ABSENT:
                    self._send(m.ReleaseWorkerData(task=tid))
                    continue
                if isinstance(held, Spilled):
                    held = held.load()
                staged = (held, self.nbytes.get(key, 0))
            self._core.put_scattered(tid, key, *staged)

    def _remove_worker(self, msg: m.RemoveWorker, payload: memoryview) -> None:
        self._fetcher.peers.forget(msg.address)

    def _pace_heartbeats(self, msg: m.HeartbeatInterval, payload: memoryview) -> None:
        # The scheduler's answer to each heartbeat: it paces them by cluster size, and
        # the next sleep follows it; the round trip is the connection's latency.
        self._heartbeat_interval = msg.interval
        self.latency = time.monotonic() - self._heartbeat_sent

    def _restart(self, msg: m.Restart, payload: memoryview) -> None:
        logger.info("worker %s: restart requested by the scheduler", self.address)
        self.restart_requested = True
        self._spawn(self.close(abort=True))

    def _acquire_replicas(self, msg: m.AcquireReplicas, payload: memoryview) -> None:
        keys = decode_keys(bytes(payload))
        self._spawn(self._fetcher.acquire_replicas(msg.holder, msg.tasks, keys))

    def _close_requested(self, msg: m.Close, payload: memoryview) -> None:
        logger.info("worker %s: closed by the scheduler", self.address)
        self._spawn(self.close())

    def _refused(self, msg: m.Error, payload: memoryview) -> None:
        """The scheduler refuses this worker, then closes the connection."""
        logger.warning("worker %s: the scheduler says: %s", self.address, msg.message)

    def _registered_again(self, msg: m.WorkerRegistered, payload: memoryview) -> None:
        raise comm.ProtocolError("the scheduler sent a second registered")

    def _malformed(self, bad: m.Malformed) -> None:
        raise comm.ProtocolError(f"from the scheduler: {bad.error}")

    # ----- execution ------------------------------------------------------------------

    def _start_thread(self) -> None:
        self._core.add_thread()
        threading.Thread(target=self._run_tasks, name="squall-worker-task", daemon=True).start()

    def _run_tasks(self) -> None:
        """A task thread: the compiled loop runs tasks; it comes back to ask for the
        event loop to be woken when results are waiting, and to leave."""
        context.enter_thread(self)
        core, loop = self._core, self._loop
        assert loop is not None
        try:
            while True:
                answer = core.run()
                if answer == RunAnswer.EXIT:
                    return
                if answer == RunAnswer.SPILL:
                    assert self.memory is not None  # a spill target needs a monitor
                    self.memory.spill()
                    continue
                if answer in (RunAnswer.WAKE, RunAnswer.WAKE_LATER):
                    flush = self._flush_buffered if answer == RunAnswer.WAKE else self._flush_soon
                    try:
                        loop.call_soon_threadsafe(flush)
                    except RuntimeError:  # the loop closed under us: the worker is gone
                        core.close()
                        return
        except BaseException:
            # A bug in the compiled loop: leave, so the scheduler reruns this worker's
            # tasks elsewhere, rather than keep a worker that no longer runs anything.
            logger.exception("worker %s: task thread failed; closing", self.address)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._loop_close)
        finally:
            context.leave_thread()

    def _flush_soon(self) -> None:
        assert self._loop is not None
        self._loop.call_later(self._finished_delay, self._flush_buffered)

    def _secede(self, tid: int) -> bool:
        """``secede()`` from the task thread running ``tid``; whether it left the pool
        now (not if it had already seceded)."""
        answer = self._core.secede(tid)
        if answer is None:
            return False  # already seceded, or finished meanwhile
        run_id, need_thread = answer
        if run_id is not None:
            duration = self._core.elapsed(tid) or 0.0
            self._send(m.LongRunning(task=tid, run_id=run_id, duration=duration))
        if need_thread:  # the seceded task keeps its thread
            self._start_thread()
        return True

    def task_client(self, make: Callable[[], Client]) -> Client:
        """The client of tasks' ``get_client()``: one per worker, made by ``make`` on
        first use (and again if it closed), closed with the worker."""
        with self._client_lock:
            if self._client is None or self._client.status == "closed":
                self._client = make()
            return self._client

    def _flush_buffered(self) -> None:
        """Send the reports the core buffered. Task threads ask for this (``RunAnswer.WAKE``)
        once nothing else is ready or results have waited ``finished-delay``, so that
        completions close together share one ``finished`` message."""
        finished, erred, gained, dropped = self._core.take_reports()
        if self._transition_plugins:
            self._feed_transitions()
        if gained:  # fetched copies: the scheduler counts them as holders
            self._send(m.AddReplicas(), gained)
        if finished is not None:
            n, payload = finished
            self._send(m.Finished(n=n), payload)
        for tid, run_id, err in erred:
            self._send_erred(tid, run_id, err)
        if dropped:
            self._send(m.DropReplicas(), dropped)

    def _plugins_changed(self) -> None:
        if self._transition_plugins:
            self._feed_transitions()  # what happened before the change, to those then
        self._transition_plugins = [
            p for p in self.plugin_host.plugins.values() if overrides_transition(p)
        ]
        self._core.feed_transitions(bool(self._transition_plugins))

    def _feed_transitions(self) -> None:
        """Hand the recorded task state changes to the ``transition`` plugins; one
        that raises is logged, and the others still get the change."""
        for key, start, finish in self._core.take_transitions():
            for plugin in self._transition_plugins:
                try:
                    plugin.transition(key, start, finish)
                except Exception:
                    logger.exception("plugin %r: transition of %r failed", plugin, key)

    async def upload_file(
        self, filename: str, data: bytes | str, load: bool = True
    ) -> dict[str, Any]:
        """Write ``data`` as ``filename`` into ``local_directory`` (on sys.path) and,
        with ``load``, import it (a ``.py`` module, or the packages of a ``.zip`` or
        ``.egg``), reloading what an earlier upload imported, so that tasks use the
        new code (docs/runtime.md#uploading-code)."""
        path = os.path.join(self.local_directory, filename)
        blob = data.encode() if isinstance(data, str) else data
        await asyncio.get_running_loop().run_in_executor(None, _write, path, blob)
        if load:
            import_file(path)
            clear_function_cache()  # functions pickled by reference: look them up again
        return {"status": "OK", "nbytes": len(blob)}

    def _send_erred(self, tid: int, run_id: int, err: tuple[str, str, bytes, bytes]) -> None:
        if err is _RESCHEDULED:  # the scheduler frees the task here, then places it again
            self._send(m.Reschedule(task=tid))
            return
        exc_text, tb_text = err[0], err[1]
        key = self._core.task_key(tid)
        where = self.address
        logger.warning("worker %s: task %r failed: %s\n%s", where, key, exc_text, tb_text.rstrip())
        self._send(*error_fields(m.Erred(task=tid, run_id=run_id), err))

    def log_event(self, topic: str | Collection[str], msg: Any) -> None:
        """Log ``msg`` (a msgpack value) under ``topic`` (or each of several topics) at
        the scheduler, as ``Client.log_event`` does; a dict is tagged with this
        worker's address there. From any thread (tasks call it)."""
        self._send(log_event_message(topic, msg))

    def retire(self, *, restart: bool = False) -> None:
        """Ask the scheduler to retire this worker (``--lifetime``): once its results
        are copied elsewhere it is closed or, with ``restart``, replaced by a fresh
        process (docs/runtime.md#cluster-lifecycle)."""
        logger.info("worker %s: retiring (restart: %s)", self.address, restart)
        self._send(m.Retire(restart=restart))


#: What a task raising ``Reschedule`` reports in place of an error (by identity).
_RESCHEDULED = ("Reschedule()", "", b"", b"")


def _pack_task_error(e: BaseException) -> tuple[str, str, bytes, bytes]:
    """The compiled loop's hook for a task's exception: :func:`pack_error`'s report,
    or ``_RESCHEDULED`` for ``Reschedule`` (called on errors only)."""
    return _RESCHEDULED if isinstance(e, Reschedule) else pack_error(e)


def _write(path: str, blob: bytes) -> None:
    with open(path, "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())


def _contact(contact: str, bound: str) -> str:
    """``--contact-address`` as an address: given whole, or a host with the bound port."""
    if "://" in contact:
        return contact
    return comm.format_address(contact, comm.parse_address(bound)[1], comm.scheme_of(bound))


def default_address(scheduler_address: str) -> str:
    """Where a worker of ``scheduler_address`` serves peers: ``squall.worker.host`` (by
    default the interface that reaches the scheduler) and ``.port``."""
    host = comm.worker_host(scheduler_address)
    return comm.format_address(host, config.port("worker.port"))
