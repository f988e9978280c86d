"""The worker process: runs tasks the scheduler assigns and serves their results.

A worker listens for peers (role ``peer``: other workers and clients fetching data),
connects to the scheduler as role ``worker`` and then speaks the messages of
docs/runtime.md. Choices the protocol table leaves open:

* ``get-data`` replies: ``{"op": "data", "id", "sizes"}`` where ``sizes[i]`` is the
  length of key i's cloudpickled value in the payload, or **-1 if this worker does not
  hold the key** (nothing is in the payload for it). Requests on one connection are
  answered in order.
* ``finished``: completions are buffered and flushed as one packed message (the four
  little-endian arrays) when the worker has nothing executing, otherwise at most
  ``squall.worker.finished-delay`` later.
* ``erred``: the task's exception and traceback as :mod:`squall.protocol.remote_errors`
  packs them (the user's frames only, as distributed's workers send them).
* Dependencies are fetched from their holders (batched per holder, cached peer
  connections of :mod:`squall.protocol.peers`, next holder on failure). Fetched copies
  are kept while a local task needs them, then dropped; both are told to the scheduler
  by key (``add-replicas``, ``drop-replicas``), so it counts the copies as holders
  meanwhile. If no holder can provide a dependency, the dependents are given back with
  ``reschedule`` after ``squall.worker.missing-data-retry``, unless the scheduler has
  freed or re-sent them meanwhile (a re-sent task fetches from the holders named then).
* ``remove-worker`` names the departed worker's address: the cached connection to it is
  dropped, as are any other cached connections that have closed.
* Task state lives in a compiled machine (``squall._core.WorkerCore``, the
  ``squall-worker`` crate): ``compute`` payloads go into it whole, and task threads run
  its loop, which takes the best ready task, calls it and records the result with no
  Python code of squall's per task. The event loop only moves messages and flushes the
  buffered reports.
* Tasks run in a thread pool that grows as needed; the worker itself keeps at most
  ``nthreads`` tasks counted as running. ``secede()`` uncounts the calling task (and
  sends ``long-running``), ``rejoin()`` waits for a free slot; ``get_worker()`` and
  ``get_client()`` work inside tasks (:mod:`squall.worker.context`).
* Scattered data (``update-data`` from a client, on the peer listener) is staged until
  the scheduler's ``scattered`` names its task ids (or refuses it, task id -1): only
  then is it served and freed like a task's result.
* ``run`` (peer message, ``Client.run``) calls a function on the event loop, as Dask.
* ``restart`` from the scheduler (to workers without a nanny; see
  :mod:`squall.worker.nanny`) closes the worker at once; the ``squall worker`` program
  then re-executes itself (same pid, fresh interpreter, abandoned task threads
  gone), so it comes back under any launcher: LocalCluster, ``--nworkers``, by hand.
* ``acquire-replicas`` (a worker retiring elsewhere) fetches the named results from
  it and keeps them as those tasks' results, announced with ``add-replicas``; ``close``
  closes the worker for good; ``retire`` (``--lifetime``) asks the scheduler to retire
  it (docs/runtime.md#cluster-lifecycle).
* Heartbeats report the running tasks' elapsed times and the measured bandwidth: an
  average over transfers of at least 1 MB (smaller ones measure latency), weighted
  0.95/0.05 like Dask's; ``null`` until one happened. They also carry the worker's
  load and the task stream sampled since the last one (:mod:`squall.worker.load`,
  docs/runtime.md#task-stream).
* A lost scheduler (the connection closed, or silent for ``squall.comm.timeouts.tcp``)
  does not end the worker: it forgets the tasks it was given (running ones finish,
  their results dropped), keeps the results it holds, and registers again with backoff
  for ``death_timeout`` (:mod:`squall.protocol.liveness`); the held keys then go in
  ``held-keys`` and come back like scattered data (``scattered``: kept as a task, or
  dropped). docs/runtime.md#reconnection-and-liveness.
* Memory (:mod:`squall.worker.memory`, docs/runtime.md#memory): with a memory limit,
  a monitor spills least recently used results to disk (:mod:`squall.worker.spill`)
  and pauses the worker (``worker-status-change``) when memory is short; heartbeats
  carry the process's and the results' memory. ``data`` shows spilled values as their
  ``Spilled`` handles.
* Not implemented yet: actors.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import pickle
import struct
import sys
import threading
import time
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, NamedTuple

import cloudpickle  # type: ignore[import-untyped]
import psutil  # type: ignore[import-untyped]
from dask.sizeof import sizeof

from squall import config, log_ring
from squall._core import RunAnswer, WorkerCore, decode_keys, encode_keys
from squall.protocol import comm, liveness, ops
from squall.protocol.peers import MISSING, UNPICKLABLE, Peers
from squall.protocol.remote_errors import error_fields, pack_error
from squall.protocol.specs import fill_call, run_spec
from squall.security import Security
from squall.worker import context
from squall.worker.load import LoadMeter, Transfers, add_task_stream
from squall.worker.memory import (
    MemoryMonitor,
    local_directory,
    parse_memory_limit,
    thresholds,
)
from squall.worker.spill import Spilled, SpillStore, dumps

if TYPE_CHECKING:
    from squall.client.client import Client
    from squall.http.server import HttpServer

logger = logging.getLogger("squall.worker")

Key = Hashable

# Transfers smaller than this measure latency more than bandwidth.
BANDWIDTH_MIN_BYTES = 1_000_000


class TaskView(NamedTuple):
    """A task as ``Worker.tasks`` shows it (a snapshot)."""

    key: Key
    state: str


# dask's sizeof answers sys.getsizeof for these; skip its dispatch on the hot path.
_SCALARS = frozenset({int, float, bool, type(None)})


def _sizeof(value: Any) -> int:
    if type(value) in _SCALARS:
        return sys.getsizeof(value)
    try:
        return int(sizeof(value))
    except Exception:
        return sys.getsizeof(value)


def _takes_arg(func: Any, name: str) -> bool:
    try:
        return name in inspect.signature(func).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return False


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
    ``squall.comm.*``."""

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
    ) -> None:
        if nthreads is None:
            nthreads = config.integer("worker.nthreads", minimum=1)
        if address is None:
            address = default_address()
        if nthreads < 1:
            raise ValueError(f"nthreads must be at least 1, not {nthreads}")
        self.scheduler_address = scheduler_address
        self.nthreads = nthreads
        self.name = name
        self.address = address
        self.resources = {str(k): float(v) for k, v in (resources or {}).items()}
        #: Bytes; 0 = none.
        self.memory_limit = parse_memory_limit(memory_limit, nthreads)
        self._local_directory = local_directory
        self._process = psutil.Process()
        #: The address of the nanny supervising this worker (squall.worker.nanny), if any.
        self.nanny = nanny
        self.worker_id: int | None = None
        self._batch_interval = config.seconds("comm.batch-interval.worker")
        self._heartbeat_interval = config.seconds("worker.heartbeat-interval")
        self._finished_delay = config.seconds("worker.finished-delay")
        self._missing_retry = config.seconds("worker.missing-data-retry")
        #: Seconds to keep trying to reach the scheduler (None: forever, as Dask).
        self.death_timeout = liveness.death_timeout(death_timeout)
        self._silence_timeout = liveness.silence_timeout()
        self._watchdog: liveness.Watchdog | None = None
        #: Results kept from before a reconnection, announced with ``held-keys`` (staged
        #: until the answer, ``scattered``, takes them out of ``_staged``).
        self._held: list[Key] = []
        self.status = "created"

        self._core = WorkerCore(
            address,
            nthreads,
            list(self.resources.items()),
            self._finished_delay,
            run_spec,
            fill_call,
            pack_error,
            _sizeof,
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

        self._peers = Peers(
            reply_timeout=config.seconds("worker.get-data-timeout"), security=security
        )
        self._incoming: set[comm.Comm] = set()
        self._bg: set[asyncio.Task[Any]] = set()

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
    def nbytes(self) -> dict[Key, int]:
        return self._core.nbytes()

    @property
    def tasks(self) -> dict[int, TaskView]:
        """The tasks this worker knows, by the scheduler's task id."""
        return {t: TaskView(*kv) for t, kv in self._core.tasks().items()}

    def task_counts(self) -> dict[str, int]:
        """How many of those tasks are in each state (for /metrics; no key is read)."""
        return self._core.task_counts()

    # ----- lifecycle ------------------------------------------------------------------

    async def start(self) -> Worker:
        log_ring.install()
        self._loop = asyncio.get_running_loop()
        self._listener = await comm.listen(
            self.address, self._serve_peer, roles=frozenset({"peer"}), security=self.security
        )
        self.address = self._listener.address
        if self.contact_address is not None:
            self.address = _contact(self.contact_address, self.address)
        self._core.set_address(self.address)
        if self.dashboard_address is not None:
            await self._serve_http(self.dashboard_address)
        self._loop_thread = threading.get_ident()
        what = f"worker {self.address} joining {self.scheduler_address}"
        if not await liveness.retry(self._register, self.death_timeout, what):
            await self._listener.close()
            raise comm.CommError(
                f"worker {self.address}: no scheduler at {self.scheduler_address} "
                f"within the death timeout of {self.death_timeout}s"
            )
        for _ in range(self.nthreads):
            self._start_thread()
        self._heartbeat = self._loop.create_task(self._heartbeat_forever())
        if self.memory is not None:
            self._monitor = self._loop.create_task(self.memory.run())
        context.register(self)
        return self

    async def _serve_http(self, address: str | int) -> None:
        """``/health`` and ``/metrics`` on the interface the worker binds unless the
        address names another, over HTTPS with the scheduler's dashboard certificate
        (as Dask's workers). Imported here: tornado is needed only then."""
        from squall.http.server import HttpServer, dashboard_tls, parse_http_address
        from squall.http.worker_routes import worker_routes

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
        c, reply = await liveness.register(self.scheduler_address, "worker", info, self.security)
        assert self._loop is not None
        self._scheduler = c
        self.worker_id = int(reply["worker_id"])
        self._stream = comm.BatchedSend(c, self._batch_interval)
        self._stream.start()
        if self._held:  # first, before any report of this connection
            self._stream.send({"op": ops.HELD_KEYS}, encode_keys(self._held))
        self._reader = self._loop.create_task(self._read_scheduler())
        self._watchdog = liveness.Watchdog(
            self._silence_timeout, self._send_heartbeat, self._scheduler_silent
        )
        self.status = "running"
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
        context.unregister(self)
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
        if abort and self._scheduler is not None:
            await self._scheduler.close()  # nothing pending is sent
        if self._stream is not None:
            await self._stream.close()
        if self._scheduler is not None:
            await self._scheduler.close()
        await self._peers.close()
        for c in list(self._incoming):
            await c.close()
        if self._listener is not None:
            await self._listener.close()
        if self.http is not None:
            await self.http.close()
        if self._client is not None:  # get_client()'s: its close blocks, not on this loop
            await asyncio.get_running_loop().run_in_executor(None, self._client.close)
        if self.memory is not None:
            await self.memory.close()
        self.status = "closed"
        self._closed.set()
        logger.info("worker %s closed", self.address)

    async def finished(self) -> None:
        """Wait until the worker has closed."""
        await self._closed.wait()

    async def __aenter__(self) -> Worker:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _spawn(self, coro: Any) -> None:
        assert self._loop is not None
        t = self._loop.create_task(coro)
        self._bg.add(t)
        t.add_done_callback(self._bg.discard)

    def _send(self, header: comm.Header, payload: bytes = b"") -> None:
        if threading.get_ident() != self._loop_thread:  # from a task thread
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self._send, header, payload)
            return
        if self._stream is None or self.status != "running":
            return
        with contextlib.suppress(comm.CommClosedError):  # the reader notices, closes
            self._stream.send(header, payload)

    async def _read_scheduler(self) -> None:
        assert self._scheduler is not None
        try:
            while True:
                messages = await self._scheduler.read_messages()
                if self._watchdog is not None:
                    self._watchdog.heard()
                for header, payload in messages:
                    self._handle(header, payload)
                self._fetch_missing()
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
        executing = [[t, elapsed] for t, elapsed in self._core.executing()]
        header = {
            "op": ops.HEARTBEAT,
            "executing": executing,
            "bandwidth": self.bandwidth,
            "memory": self.memory_metrics(),
            "load": self._load.figures(self._core),
        }
        self._heartbeat_sent = time.monotonic()
        self._send(header, add_task_stream(header, self._core))

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
        self._core.take_reports()  # of tasks the next scheduler never gave

    def memory_metrics(self) -> dict[str, int]:
        """The process's RSS and the results' bytes in memory and spilled."""
        managed, spilled_memory, spilled_disk, spilled_count = self._core.memory()
        return {
            "process": int(self._process.memory_info().rss),
            "managed": managed,
            "spilled_memory": spilled_memory,
            "spilled_disk": spilled_disk,
            "spilled_count": spilled_count,
        }

    def _spill_store(self) -> SpillStore:
        return SpillStore(local_directory(self._local_directory))

    def _paused(self, paused: bool) -> None:
        """The memory monitor paused or resumed the worker: tell the scheduler."""
        status = "paused" if paused else "running"
        self._send({"op": ops.WORKER_STATUS_CHANGE, "status": status})

    # ----- scheduler messages ---------------------------------------------------------

    def _handle(self, h: comm.Header, payload: memoryview) -> None:
        op = h["op"]
        logger.debug("worker %s: %s %s", self.address, op, h)
        if op == ops.COMPUTE:
            self._core.compute(bytes(payload), list(h["addresses"]))
        elif op == ops.FREE_KEYS:
            self._core.free(bytes(payload))
        elif op == ops.REMOVE_REPLICAS:
            self._core.remove_replicas(bytes(payload))
        elif op == ops.STEAL_REQUEST:
            tid = int(h["task"])
            state = self._core.steal(tid)
            self._send(
                {"op": ops.STEAL_RESPONSE, "task": tid, "state": state, "stimulus": h["stimulus"]}
            )
        elif op == ops.SCATTERED:
            self._scattered([int(t) for t in h["tasks"]], decode_keys(bytes(payload)))
        elif op == ops.RESTART:
            logger.info("worker %s: restart requested by the scheduler", self.address)
            self.restart_requested = True
            self._spawn(self.close(abort=True))
        elif op == ops.ACQUIRE_REPLICAS:
            keys = decode_keys(bytes(payload))
            self._spawn(self._acquire_replicas(str(h["holder"]), list(h["tasks"]), keys))
        elif op == ops.CLOSE:
            logger.info("worker %s: closed by the scheduler", self.address)
            self._spawn(self.close())
        elif op == ops.REMOVE_WORKER:
            self._peers.forget(h.get("address"))
        elif op == ops.HEARTBEAT_INTERVAL:
            # The scheduler's answer to each heartbeat: it paces them by cluster size,
            # and the next sleep follows it; the round trip is the connection's latency.
            self._heartbeat_interval = float(h["interval"])
            self.latency = time.monotonic() - self._heartbeat_sent
        else:
            logger.warning("worker %s: unknown scheduler message %r ignored", self.address, op)

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

    def _secede(self, tid: int) -> None:
        """``secede()`` from the task thread running ``tid``."""
        answer = self._core.secede(tid)
        if answer is None:
            return  # already seceded, or finished meanwhile
        run_id, need_thread = answer
        if run_id is not None:
            duration = self._core.elapsed(tid) or 0.0
            self._send(
                {"op": ops.LONG_RUNNING, "task": tid, "run_id": run_id, "duration": duration}
            )
        if need_thread:  # the seceded task keeps its thread
            self._start_thread()

    def _get_client(self, timeout: float | str | None = None) -> Client:
        """``get_client()`` inside tasks: one client per worker, made on first use."""
        from squall.client.client import Client

        with self._client_lock:
            if self._client is None or self._client.status == "closed":
                self._client = Client(
                    self.scheduler_address,
                    timeout=10 if timeout is None else timeout,
                    security=self.security,
                )
            return self._client

    def _flush_buffered(self) -> None:
        """Send the reports the core buffered. Task threads ask for this (``RunAnswer.WAKE``)
        once nothing else is ready or results have waited ``finished-delay``, so that
        completions close together share one ``finished`` message."""
        finished, erred, gained, dropped = self._core.take_reports()
        if gained:  # fetched copies: the scheduler counts them as holders
            self._send({"op": ops.ADD_REPLICAS}, gained)
        if finished is not None:
            n, payload = finished
            self._send({"op": ops.FINISHED, "n": n}, payload)
        for tid, run_id, err in erred:
            self._send_erred(tid, run_id, err)
        if dropped:
            self._send({"op": ops.DROP_REPLICAS}, dropped)

    def _send_erred(self, tid: int, run_id: int, err: tuple[str, str, bytes, bytes]) -> None:
        exc_text, tb_text = err[0], err[1]
        key = self._core.task_key(tid)
        where = self.address
        logger.warning("worker %s: task %r failed: %s\n%s", where, key, exc_text, tb_text.rstrip())
        fields, payload = error_fields(err)
        self._send({"op": ops.ERRED, "task": tid, "run_id": run_id, **fields}, payload)

    # ----- dependencies ---------------------------------------------------------------

    def _fetch_missing(self) -> None:
        """Start the transfers the core asks for, one request per holder, and give
        back (after ``missing-data-retry``) tasks whose dependency nobody has."""
        if self.status != "running":
            return
        fetches, missing = self._core.take_fetches(self._peers.addresses())
        assert self._loop is not None
        for key, waiters in missing:
            logger.info(
                "worker %s: no holder has %r; rescheduling %d tasks",
                self.address,
                key,
                len(waiters),
            )
            self._loop.call_later(self._missing_retry, self._give_back, waiters)
        for holder, keys, ids in fetches:
            self._spawn(self._gather_from(holder, keys, ids))

    async def _get_data(
        self, holder: str, keys: list[Key]
    ) -> list[memoryview | tuple[str, bytes] | None]:
        """``get-data`` from ``holder``, measuring the bandwidth: each key's pickle, its
        error where its value cannot be pickled, or None where the holder lacks it or
        the request failed (logged, and the connection dropped)."""
        try:
            start = time.monotonic()
            with self.transfers.incoming():
                reply = await self._peers.get_data(holder, keys)
            self.transfers.received(len(reply.payload))
            self._measured(len(reply.payload), time.monotonic() - start)
        except (comm.CommError, asyncio.TimeoutError, OSError) as e:
            logger.info(
                "worker %s: fetching %d keys from %s failed: %s",
                self.address,
                len(keys),
                holder,
                e,
            )
            self._spawn(self._peers.drop(holder))
            return [None] * len(keys)
        return reply.values()

    async def _gather_from(self, holder: str, keys: list[Key], ids: list[int]) -> None:
        for kid, blob in zip(ids, await self._get_data(holder, keys), strict=True):
            if blob is None:
                self._core.not_fetched(holder, kid)
                continue
            if isinstance(blob, tuple):  # the holder cannot pickle it: their error
                exc_text, exc_blob = blob
                err = (exc_text, "", exc_blob, pickle.dumps(None))
                for tid, run_id in self._core.fetch_failed(holder, kid):
                    self._send_erred(tid, run_id, err)
                continue
            try:
                value = pickle.loads(blob)
            except Exception as e:
                err = pack_error(e)
                for tid, run_id in self._core.fetch_failed(holder, kid):
                    self._send_erred(tid, run_id, err)
                continue
            self._core.fetched(holder, kid, value, len(blob))
        self._fetch_missing()
        self._flush_buffered()  # announce the copies

    async def _acquire_replicas(self, holder: str, tasks: list[int], keys: list[Key]) -> None:
        """``acquire-replicas``: copy results from a retiring worker and hold them as
        those tasks' results; the copies are announced with ``add-replicas``
        (docs/runtime.md#retiring-workers). A copy that fails is left to the
        scheduler's bounded wait."""
        got = []
        blobs = await self._get_data(holder, keys)
        for tid, key, blob in zip(tasks, keys, blobs, strict=True):
            if not isinstance(blob, memoryview):  # not there, or cannot be pickled
                continue
            try:
                value = pickle.loads(blob)
            except Exception as e:
                logger.warning("worker %s: cannot load a copy of %r: %r", self.address, key, e)
                continue
            self._core.put_scattered(int(tid), key, value, _sizeof(value))
            got.append(key)
        if got:
            self._send({"op": ops.ADD_REPLICAS}, encode_keys(got))

    def retire(self, *, restart: bool = False) -> None:
        """Ask the scheduler to retire this worker (``--lifetime``): once its results
        are copied elsewhere it is closed or, with ``restart``, replaced by a fresh
        process (docs/runtime.md#cluster-lifecycle)."""
        logger.info("worker %s: retiring (restart: %s)", self.address, restart)
        self._send({"op": ops.RETIRE, "restart": restart})

    def _measured(self, nbytes: int, seconds: float) -> None:
        if nbytes >= BANDWIDTH_MIN_BYTES and seconds > 0:
            sample = nbytes / seconds
            prev = self.bandwidth
            self.bandwidth = sample if prev is None else 0.95 * prev + 0.05 * sample

    def _give_back(self, waiters: list[tuple[int, int]]) -> None:
        """Tasks still waiting for a dependency nobody had go back to the scheduler,
        unless it freed or re-sent them meanwhile."""
        if self.status != "running":
            return
        for tid in self._core.give_back(waiters):
            self._send({"op": ops.RESCHEDULE, "task": tid})

    # ----- serving data ---------------------------------------------------------------

    async def _serve_peer(self, c: comm.Comm) -> None:
        self._incoming.add(c)
        try:
            async with contextlib.aclosing(liveness.read_batches(c, f"peer {c.peer}")) as batches:
                async for messages in batches:
                    for h, payload in messages:
                        await self._peer_request(c, h, payload)
        except comm.CommError as e:
            if not isinstance(e, comm.CommClosedError):
                logger.info("worker %s: peer %s: %s", self.address, c.peer, e)
        except comm.MALFORMED as e:
            logger.info("worker %s: bad message from %s: %s", self.address, c.peer, e)
        finally:
            self._incoming.discard(c)

    async def _peer_request(self, c: comm.Comm, h: comm.Header, payload: memoryview) -> None:
        op = h["op"]
        if op == ops.GET_DATA:
            # In a call of its own: this frame outlives the request, and must keep
            # neither what the worker frees later nor the bytes.
            await self._serve_get_data(c, h, payload)
        elif op == ops.UPDATE_DATA:
            await c.write(self._update_data(h, payload))
        elif op == ops.RUN:
            await c.write(*await run_function(self, h, payload, self._bg))
        else:
            raise comm.ProtocolError(f"unknown peer message {op!r}")

    async def _serve_get_data(self, c: comm.Comm, h: comm.Header, payload: memoryview) -> None:
        sizes, blobs, failed = await _pickle_values(self._core.get_data(bytes(payload), _MISSING))
        for text, _ in failed.values():
            logger.warning("worker %s: a result cannot be pickled: %s", self.address, text)
        # One value is sent as it is: no copy (docs/runtime.md#memory).
        data = memoryview(blobs[0]) if len(blobs) == 1 else b"".join(blobs)
        reply = {"op": ops.DATA, "id": h.get("id"), "sizes": sizes}
        if failed:
            reply["failed"] = {str(i): list(err) for i, err in failed.items()}
        with self.transfers.outgoing(len(data)):
            await c.write(reply, data)

    def _update_data(self, h: comm.Header, payload: memoryview) -> comm.Header:
        """Stage scattered values; the reply gives their sizes (``sizeof``)."""
        n_keys = int(h["keys_bytes"])
        keys = decode_keys(bytes(payload[:n_keys]))
        pos, nbytes = n_keys, []
        try:
            for key, size in zip(keys, h["sizes"], strict=True):
                value = pickle.loads(payload[pos : pos + size])
                pos += size
                self._staged[key] = (value, _sizeof(value))
                nbytes.append(self._staged[key][1])
        except Exception as e:
            for key in keys:
                self._staged.pop(key, None)
            return {"op": ops.DATA_UPDATED, "id": h.get("id"), "error": repr(e)}
        return {"op": ops.DATA_UPDATED, "id": h.get("id"), "nbytes": nbytes}

    def _scattered(self, tasks: list[int], keys: list[Key]) -> None:
        """The scheduler registered staged data as tasks in memory (-1: refused it)."""
        for tid, key in zip(tasks, keys, strict=True):
            staged = self._staged.pop(key, None)
            if tid < 0:
                continue
            if staged is None:  # its staging failed; unless held already, it is not here
                [held] = self._core.get_data(encode_keys([key]), _MISSING)
                if held is _MISSING:
                    self._send({"op": ops.RELEASE_WORKER_DATA, "task": tid})
                    continue
                if isinstance(held, Spilled):
                    held = held.load()
                staged = (held, self.nbytes.get(key, 0))
            self._core.put_scattered(tid, key, *staged)


_MISSING = object()


Blob = bytes | bytearray | memoryview


_Pickled = tuple[list[int], list[Blob], dict[int, tuple[str, bytes]]]


async def _pickle_values(values: list[Any]) -> _Pickled:
    """``get-data`` sizes (``MISSING`` for a value this worker lacks, ``UNPICKLABLE``
    for one that cannot be pickled), the pickles, and the errors of those that cannot
    (their repr and pickled exception, which the asking side raises or reports for the
    tasks that needed them); spilled values are served as stored, read in a thread
    (blocking IO)."""
    if any(type(v) is Spilled for v in values):
        return await asyncio.to_thread(_pickle_now, values)
    return _pickle_now(values)


def _pickle_now(values: list[Any]) -> _Pickled:
    sizes: list[int] = []
    blobs: list[Blob] = []
    failed: dict[int, tuple[str, bytes]] = {}
    for i, value in enumerate(values):
        if value is _MISSING:
            sizes.append(MISSING)
            continue
        try:
            blob: Blob = value.raw() if type(value) is Spilled else dumps(value)
        except Exception as e:
            exc_text, _, exc_blob, _ = pack_error(e)
            failed[i] = (exc_text, exc_blob)
            sizes.append(UNPICKLABLE)
            continue
        sizes.append(len(blob))
        blobs.append(blob)
    return sizes, blobs, failed


async def run_function(
    server: object, h: comm.Header, payload: memoryview, background: set[asyncio.Task[Any]]
) -> tuple[comm.Header, bytes]:
    """``Client.run`` on a worker or a nanny (``server``, given to a ``dask_worker``
    parameter): call on the event loop (as Dask), awaiting coroutines unless not
    ``wait`` (then kept in ``background``)."""
    reply: comm.Header = {"op": ops.RUN_RESULT, "id": h.get("id")}
    try:
        func, args, kwargs = pickle.loads(payload)
        if _takes_arg(func, "dask_worker"):
            kwargs = {**kwargs, "dask_worker": server}
        result = func(*args, **kwargs)
        if inspect.isawaitable(result):
            if h.get("wait", True):
                result = await result
            else:
                task = asyncio.ensure_future(result)
                background.add(task)
                task.add_done_callback(background.discard)
                result = None
        return {**reply, "status": "OK"}, cloudpickle.dumps(result)
    except Exception as e:
        fields, blob = error_fields(pack_error(e))
        return {**reply, "status": "error", **fields}, blob


def _contact(contact: str, bound: str) -> str:
    """``--contact-address`` as an address: given whole, or a host with the bound port."""
    if "://" in contact:
        return contact
    return comm.format_address(contact, comm.parse_address(bound)[1], comm.scheme_of(bound))


def default_address() -> str:
    """Where a worker serves peers: ``squall.worker.host`` and ``.port``."""
    return comm.format_address(str(config.get("worker.host")), config.port("worker.port"))
