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
* ``erred``: the payload is ``cloudpickle(exception)`` (``n_exception`` bytes) followed by
  ``pickle(traceback)`` using tblib's traceback pickling, so a client with tblib can
  ``raise exc.with_traceback(pickle.loads(tb))`` and show the remote frames;
  ``exception_text`` is ``repr(exc)`` and ``traceback_text`` the formatted traceback.
* Dependencies are fetched from their holders (batched per holder, cached peer
  connections, next holder on failure). The ``compute`` payload names dependencies by key
  only, so fetched copies are *private replicas*: kept while a local task needs them,
  then dropped, and never announced with ``add-keys`` (the worker does not know their
  task ids). If no holder can provide a dependency, the dependents are given back with
  ``reschedule`` after ``squall.worker.missing-data-retry``, unless the scheduler has
  freed or re-sent them meanwhile.
* ``remove-worker`` names the departed worker's address: the cached connection to it is
  dropped, as are any other cached connections that have closed.
* Tasks run in a thread pool that grows as needed; the worker itself keeps at most
  ``nthreads`` tasks counted as running. ``secede()`` uncounts the calling task (and
  sends ``long-running``), ``rejoin()`` waits for a free slot; ``get_worker()`` and
  ``get_client()`` work inside tasks (``squall.context``).
* Scattered data (``update-data`` from a client, on the peer listener) is staged until
  the scheduler's ``scattered`` names its task ids (or refuses it, task id -1): only
  then is it served and freed like a task's result.
* ``run`` (peer message, ``Client.run``) calls a function on the event loop, as Dask.
* ``restart`` from the scheduler closes the worker at once; the ``squall worker``
  program then re-executes itself (same pid, fresh interpreter, abandoned task threads
  gone), so it comes back under any launcher: LocalCluster, ``--nworkers``, by hand.
* Heartbeats report the running tasks' elapsed times and the measured bandwidth: an
  average over transfers of at least 1 MB (smaller ones measure latency), weighted
  0.95/0.05 like Dask's; ``null`` until one happened.
* Not implemented yet: memory limits/spilling, actors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copyreg
import heapq
import inspect
import logging
import os
import pickle
import random
import signal
import subprocess
import sys
import threading
import time
import traceback
from array import array
from collections import deque
from collections.abc import Hashable
from types import TracebackType
from typing import TYPE_CHECKING, Any

import cloudpickle  # type: ignore[import-untyped]
from dask.sizeof import sizeof
from tblib import pickling_support  # type: ignore[import-untyped]

from squall import comm, config, context
from squall._core import decode_compute, decode_keys, encode_keys
from squall.spec import run_spec

if TYPE_CHECKING:
    from squall.client import Client

logger = logging.getLogger("squall.worker")

Key = Hashable

# Transfers smaller than this measure latency more than bandwidth.
BANDWIDTH_MIN_BYTES = 1_000_000

# Pickle tracebacks with tblib (as distributed does), so clients can re-raise remotely.
copyreg.pickle(TracebackType, pickling_support.pickle_traceback)

# Worker task states (docs/reference §2.3).
WAITING = "waiting"
READY = "ready"
CONSTRAINED = "constrained"
EXECUTING = "executing"
MEMORY = "memory"
ERROR = "error"
CANCELLED = "cancelled"

if sys.byteorder != "little":  # pragma: no cover
    raise ImportError("squall.worker packs little-endian arrays with array.array")


class WorkerTask:
    __slots__ = (
        "deps",
        "entry",
        "id",
        "key",
        "missing",
        "resources",
        "run_id",
        "spec",
        "start",
        "state",
    )

    def __init__(
        self,
        tid: int,
        run_id: int,
        key: Key,
        spec: bytes,
        resources: list[tuple[str, float]],
        deps: list[Key],
    ) -> None:
        self.id = tid
        self.run_id = run_id
        self.key = key
        self.spec = spec
        self.resources = resources
        self.deps = deps
        self.missing = 0
        self.state = WAITING
        self.entry: tuple[Any, ...] | None = None
        self.start = 0.0


ExecResult = tuple[bool, Any, int, float, float]


def _execute(spec: bytes, data: dict[Key, Any]) -> ExecResult:
    """Runs in a pool thread: (ok, value or (exc, exc_text, tb_text, exc_blob, tb_blob),
    nbytes, start, stop)."""
    start = time.monotonic()
    try:
        value = run_spec(spec, data)
    except BaseException as e:
        stop = time.monotonic()
        return False, _pack_error(e), 0, start, stop
    stop = time.monotonic()
    return True, value, _sizeof(value), start, stop


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


def _pack_error(e: BaseException) -> tuple[str, str, bytes, bytes]:
    exc_text = repr(e)
    tb_text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    try:
        exc_blob = cloudpickle.dumps(e)
        pickle.loads(exc_blob)
    except Exception:
        exc_blob = cloudpickle.dumps(RuntimeError(exc_text))
    try:
        tb_blob = pickle.dumps(e.__traceback__)
    except Exception:
        tb_blob = pickle.dumps(None)
    return exc_text, tb_text, exc_blob, tb_blob


class Worker:
    """A worker. ``await start()`` to join the scheduler, ``await close()`` to leave.

    ``nthreads`` and ``address`` default to ``squall.worker.nthreads``, ``.host`` and
    ``.port``; its timings come from ``squall.worker.*`` and ``squall.comm.*``."""

    def __init__(
        self,
        scheduler_address: str,
        *,
        nthreads: int | None = None,
        name: str | None = None,
        address: str | None = None,
        resources: dict[str, float] | None = None,
        memory_limit: int = 0,
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
        self.memory_limit = memory_limit
        self.worker_id: int | None = None
        self._batch_interval = config.seconds("comm.batch-interval.worker")
        self._heartbeat_interval = config.seconds("worker.heartbeat-interval")
        self._finished_delay = config.seconds("worker.finished-delay")
        self._missing_retry = config.seconds("worker.missing-data-retry")
        self._get_data_timeout = config.seconds("worker.get-data-timeout")
        self.status = "created"

        self.tasks: dict[int, WorkerTask] = {}
        self.key_to_id: dict[Key, int] = {}
        self.data: dict[Key, Any] = {}
        self.nbytes: dict[Key, int] = {}

        self._cancelled: dict[int, WorkerTask] = {}  # freed while executing
        self._users: dict[Key, int] = {}  # local unfinished tasks needing a dependency
        self._waiters: dict[Key, list[WorkerTask]] = {}
        self._holders: dict[Key, list[str]] = {}
        self._to_fetch: set[Key] = set()
        self._in_flight: set[Key] = set()
        self._ready: list[tuple[Any, ...]] = []
        self._counter = 0
        self._n_executing = 0
        self._executing: set[WorkerTask] = set()
        self._free_resources = dict(self.resources)

        self._fin_tasks = array("I")
        self._fin_runs = array("Q")
        self._fin_nbytes = array("q")
        self._fin_secs = array("d")
        self._flush_handle: asyncio.Handle | None = None

        self._peers: dict[str, comm.Comm] = {}
        self._peer_locks: dict[str, asyncio.Lock] = {}
        self._incoming: set[comm.Comm] = set()
        self._request_id = 0
        self._bg: set[asyncio.Task[Any]] = set()

        self._listener: comm.Listener | None = None
        self._scheduler: comm.Comm | None = None
        self._stream: comm.BatchedSend | None = None
        self._reader: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        # Task threads take ready tasks themselves and record results without a trip
        # through the event loop; one lock guards all task state on both sides.
        self._lock = threading.RLock()
        self._work = threading.Condition(self._lock)
        self._threads: list[threading.Thread] = []
        self._idle_threads = 0
        self._wake_pending = False
        self._loop_thread: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = asyncio.Event()
        self.bandwidth: float | None = None  # bytes/s, from transfers

        self._seceded: set[WorkerTask] = set()  # running, but not counted in nthreads
        self._rejoining: deque[tuple[WorkerTask, threading.Event]] = deque()
        self._staged: dict[Key, tuple[Any, int]] = {}  # scattered, not yet registered
        self._client: Client | None = None
        self._client_lock = threading.Lock()
        #: The scheduler asked for a restart (``squall worker`` re-executes itself).
        self.restart_requested = False

    # ----- lifecycle ------------------------------------------------------------------

    async def start(self) -> Worker:
        self._loop = asyncio.get_running_loop()
        self._listener = await comm.listen(
            self.address, self._serve_peer, roles=frozenset({"peer"})
        )
        self.address = self._listener.address
        info = {
            "address": self.address,
            "nthreads": self.nthreads,
            "name": self.name if self.name is not None else self.address,
            "memory_limit": self.memory_limit,
            "resources": self.resources,
        }
        try:
            self._scheduler = await comm.connect(self.scheduler_address, role="worker", info=info)
            reply, _ = await self._scheduler.read()
        except comm.CommError:
            await self._listener.close()
            raise
        if reply["op"] != "registered":
            await self._scheduler.close()
            await self._listener.close()
            raise comm.HandshakeError(
                f"scheduler {self.scheduler_address} refused worker {self.address}: "
                f"{reply.get('message', reply)}"
            )
        self.worker_id = int(reply["worker_id"])
        self._loop_thread = threading.get_ident()
        with self._lock:
            for _ in range(self.nthreads):
                self._start_thread()
        self._stream = comm.BatchedSend(self._scheduler, self._batch_interval)
        self._stream.start()
        self._reader = self._loop.create_task(self._read_scheduler())
        self._heartbeat = self._loop.create_task(self._heartbeat_forever())
        self.status = "running"
        context.register(self)
        logger.info(
            "worker %s (%s threads) registered with %s as %d",
            self.address,
            self.nthreads,
            self.scheduler_address,
            self.worker_id,
        )
        return self

    async def close(self, *, abort: bool = False) -> None:
        """Leave: stop reading, flush pending reports (unless ``abort``), close every
        connection. Tasks still running in threads finish, but their results are dropped."""
        if self.status in ("closing", "closed"):
            await self._closed.wait()
            return
        with self._lock:
            self.status = "closing"
            self._work.notify_all()
        context.unregister(self)
        me = asyncio.current_task()
        for t in (self._reader, self._heartbeat, *self._bg):
            if t is not None and t is not me:
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if not abort:
            self._flush_finished()
        if abort and self._scheduler is not None:
            await self._scheduler.close()  # nothing pending is sent
        if self._stream is not None:
            await self._stream.close()
        if self._scheduler is not None:
            await self._scheduler.close()
        for c in [*self._peers.values(), *self._incoming]:
            await c.close()
        self._peers.clear()
        if self._listener is not None:
            await self._listener.close()
        if self._client is not None:  # get_client()'s: its close blocks, not on this loop
            await asyncio.get_running_loop().run_in_executor(None, self._client.close)
        with self._lock:
            self.status = "closed"
            self._work.notify_all()
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
                msgs = await self._scheduler.read_messages()
                with self._lock:
                    for header, payload in msgs:
                        self._handle(header, payload)
                    self._fetch_missing()
                    self._ensure_executing()
                    self._schedule_flush()
        except comm.CommError as e:
            if self.status == "running":
                logger.warning("worker %s lost the scheduler: %s; closing", self.address, e)
                self._loop_close()
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
            now = time.monotonic()
            with self._lock:
                executing = [[ts.id, now - ts.start] for ts in self._executing]
            self._send({"op": "heartbeat", "executing": executing, "bandwidth": self.bandwidth})

    # ----- scheduler messages ---------------------------------------------------------

    def _handle(self, h: comm.Header, payload: memoryview) -> None:
        op = h["op"]
        logger.debug("worker %s: %s %s", self.address, op, h)
        if op == "compute":
            self._compute(bytes(payload), list(h["addresses"]))
        elif op == "free-keys":
            for t in array("I", bytes(payload)):  # bytes: array() would iterate a view
                self._free(t)
        elif op == "remove-replicas":
            for t in array("I", bytes(payload)):
                self._remove_replica(t)
        elif op == "steal-request":
            self._steal(int(h["task"]), h["stimulus"])
        elif op == "scattered":
            self._scattered([int(t) for t in h["tasks"]], decode_keys(bytes(payload)))
        elif op == "restart":
            logger.info("worker %s: restart requested by the scheduler", self.address)
            self.restart_requested = True
            self._spawn(self.close(abort=True))
        elif op == "remove-worker":
            gone = h.get("address")
            for addr, c in list(self._peers.items()):
                if c.closed or addr == gone:
                    del self._peers[addr]
        else:
            logger.warning("worker %s: unknown scheduler message %r ignored", self.address, op)

    def _compute(self, payload: bytes, addresses: list[str]) -> None:
        for tid, run_id, key, prio, spec, _actor, resources, deps in decode_compute(
            payload, addresses
        ):
            self._counter -= 1
            ts = self.tasks.get(tid)
            if ts is not None and ts.key == key and ts.state != ERROR:
                ts.run_id = run_id  # re-sent (e.g. after a failed steal): keep its state
                if ts.state == MEMORY:
                    self._report_finished(ts, self.nbytes.get(key, 0), 0.0)
                continue
            if ts is not None:  # retried after an error, or the id now names another key
                self._free(tid)
            old = self._cancelled.pop(tid, None)
            if old is not None and old.key == key:  # freed while executing, now wanted again
                old.run_id, old.state = run_id, EXECUTING
                self._track(old)
                continue
            dep_keys = [d[0] for d in deps] if deps else []
            ts = WorkerTask(tid, run_id, key, spec, resources, dep_keys)
            self._track(ts)
            if key in self.data:  # already held (a private replica): report it
                self._set_memory(ts, self.nbytes.get(key, 0), 0.0)
                continue
            ts.entry = (*prio, self._counter, tid)
            for dkey, _nbytes, holders in deps:
                self._users[dkey] = self._users.get(dkey, 0) + 1
                if dkey in self.data:
                    continue
                ts.missing += 1
                self._waiters.setdefault(dkey, []).append(ts)
                if dkey in self._in_flight or dkey in self._to_fetch:
                    continue
                local = self.key_to_id.get(dkey)
                if local is not None and self.tasks[local].state in (WAITING, READY, EXECUTING):
                    continue  # will be computed here
                others = [a for a in holders if a != self.address]
                self._holders[dkey] = others
                self._to_fetch.add(dkey)
            if ts.missing == 0:
                self._make_ready(ts)

    def _track(self, ts: WorkerTask) -> None:
        self.tasks[ts.id] = ts
        self.key_to_id[ts.key] = ts.id
        if ts.state == EXECUTING:
            self._executing.add(ts)

    def _untrack(self, ts: WorkerTask) -> None:
        del self.tasks[ts.id]
        if self.key_to_id.get(ts.key) == ts.id:
            del self.key_to_id[ts.key]

    def _release_deps(self, ts: WorkerTask) -> None:
        """``ts`` no longer needs its dependencies: drop private replicas nobody needs."""
        for dkey in ts.deps:
            n = self._users.get(dkey, 0) - 1
            if n > 0:
                self._users[dkey] = n
                continue
            self._users.pop(dkey, None)
            self._maybe_drop(dkey)

    def _maybe_drop(self, key: Key) -> None:
        tid = self.key_to_id.get(key)
        if tid is not None and self.tasks[tid].state == MEMORY:
            return  # a result the scheduler knows about
        if self._users.get(key, 0) > 0:
            return
        self.data.pop(key, None)
        self.nbytes.pop(key, None)

    def _free(self, tid: int) -> None:
        ts = self.tasks.get(tid)
        if ts is None:
            self._cancelled.pop(tid, None)
            return
        self._untrack(ts)
        state = ts.state
        if state == EXECUTING:
            ts.state = CANCELLED
            self._cancelled[tid] = ts
            self._executing.discard(ts)
            return  # finishes in its thread; the result is discarded then
        ts.state = "forgotten"
        if state in (WAITING, READY, CONSTRAINED):
            self._release_deps(ts)
        self._maybe_drop(ts.key)

    def _remove_replica(self, tid: int) -> None:
        ts = self.tasks.get(tid)
        if ts is None or ts.state != MEMORY:
            return
        self._untrack(ts)
        ts.state = "forgotten"
        self._maybe_drop(ts.key)  # kept (privately) while a local task still needs it

    def _steal(self, tid: int, stimulus: Any) -> None:
        ts = self.tasks.get(tid)
        state: str | None = None if ts is None else ts.state
        if ts is not None and state in (WAITING, READY, CONSTRAINED):
            self._untrack(ts)
            ts.state = "forgotten"
            self._release_deps(ts)
        self._send({"op": "steal-response", "task": tid, "state": state, "stimulus": stimulus})

    # ----- execution ------------------------------------------------------------------

    def _make_ready(self, ts: WorkerTask) -> None:
        ts.state = CONSTRAINED if ts.resources else READY
        assert ts.entry is not None
        heapq.heappush(self._ready, ts.entry)

    def _fits(self, ts: WorkerTask) -> bool:
        free = self._free_resources
        return all(free.get(name, 0.0) >= amount for name, amount in ts.resources)

    def _ensure_executing(self) -> None:
        """Wake idle task threads for the ready tasks (call with the lock held)."""
        self._grant_rejoins()
        if self._idle_threads and self._ready and self._n_executing < self.nthreads:
            self._work.notify(min(self._idle_threads, len(self._ready)))

    def _run_tasks(self) -> None:
        """A task thread: take the best ready task, run it without the lock, record the
        result, repeat; sleep while nothing is ready."""
        lock = self._lock
        lock.acquire()
        try:
            while self.status not in ("closing", "closed"):
                job = self._take_ready()
                if job is None:
                    if len(self._threads) > self.nthreads + len(self._seceded):
                        break  # an extra thread started for a seceded task: not needed now
                    self._idle_threads += 1
                    self._work.wait()
                    self._idle_threads -= 1
                    continue
                ts, args = job
                lock.release()
                try:
                    context.enter_task(self, ts)
                    result = _execute(ts.spec, args)
                finally:
                    context.leave_task()
                    lock.acquire()
                self._complete(ts, result)
        finally:
            self._threads.remove(threading.current_thread())
            lock.release()

    def _start_thread(self) -> None:
        t = threading.Thread(
            target=self._run_tasks, name=f"squall-worker-{len(self._threads)}", daemon=True
        )
        self._threads.append(t)
        t.start()

    def _take_ready(self) -> tuple[WorkerTask, dict[Key, Any]] | None:
        self._grant_rejoins()
        if self._n_executing >= self.nthreads or self.status != "running":
            return None
        ready, tasks = self._ready, self.tasks
        skipped: list[tuple[Any, ...]] = []
        try:
            while ready:
                entry = heapq.heappop(ready)
                ts = tasks.get(entry[-1])
                if ts is None or ts.entry is not entry or ts.state not in (READY, CONSTRAINED):
                    continue  # stale: stolen, freed or superseded
                if ts.resources:
                    if not self._fits(ts):
                        skipped.append(entry)
                        continue
                    for name, amount in ts.resources:
                        self._free_resources[name] -= amount
                try:
                    args = {k: self.data[k] for k in ts.deps}
                except KeyError as e:
                    exc = KeyError(f"dependency {e.args[0]!r} of {ts.key!r} is no longer held")
                    self._release_deps(ts)
                    self._erred(ts, _pack_error(exc))
                    continue
                ts.state = EXECUTING
                ts.start = time.monotonic()
                self._n_executing += 1
                self._executing.add(ts)
                return ts, args
            return None
        finally:
            for entry in skipped:
                heapq.heappush(ready, entry)

    def _complete(self, ts: WorkerTask, result: ExecResult) -> None:
        """Record a task's outcome (task thread, lock held)."""
        if ts in self._seceded:
            self._seceded.discard(ts)  # gave its slot up when it seceded
        else:
            self._n_executing -= 1
        self._executing.discard(ts)
        for name, amount in ts.resources:
            self._free_resources[name] += amount
        if self.status != "running":
            return
        ok, value, nbytes, start, stop = result
        if self._cancelled.get(ts.id) is ts:
            del self._cancelled[ts.id]
            ts.state = "forgotten"
            self._release_deps(ts)
        elif self.tasks.get(ts.id) is ts and ts.state == EXECUTING:
            self._release_deps(ts)
            if ok:
                self.data[ts.key] = value
                self.nbytes[ts.key] = nbytes
                self._set_memory(ts, nbytes, stop - start)
            else:
                self._erred(ts, value)
        self._ensure_executing()
        if self._fin_tasks and not self._wake_pending:
            self._wake_pending = True
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self._results_ready)

    def _results_ready(self) -> None:
        with self._lock:
            self._wake_pending = False
            self._schedule_flush()

    # ----- secede / rejoin (called on the loop by squall.context) ---------------------

    def _secede(self, ts: WorkerTask, duration: float) -> None:
        with self._lock:
            if ts in self._seceded or ts.state not in (EXECUTING, CANCELLED):
                return  # already seceded, or finished before this call came
            self._seceded.add(ts)
            self._n_executing -= 1
            if ts.state == EXECUTING:
                header = {"op": "long-running", "task": ts.id, "run_id": ts.run_id}
                self._send({**header, "duration": duration})
            if not self._idle_threads:  # the seceded task keeps its thread
                self._start_thread()
            self._ensure_executing()

    def _rejoin(self, ts: WorkerTask, granted: threading.Event) -> None:
        with self._lock:
            if ts not in self._seceded:
                granted.set()
                return
            self._rejoining.append((ts, granted))
            self._ensure_executing()

    def _grant_rejoins(self) -> None:
        """Rejoining tasks take free slots before queued tasks do, as in Dask."""
        while self._rejoining and self._n_executing < self.nthreads:
            ts, granted = self._rejoining.popleft()
            self._seceded.discard(ts)
            self._n_executing += 1
            granted.set()

    def _get_client(self, timeout: float | str | None = None) -> Client:
        """``get_client()`` inside tasks: one client per worker, made on first use."""
        from squall.client import Client

        with self._client_lock:
            if self._client is None or self._client.status == "closed":
                self._client = Client(
                    self.scheduler_address, timeout=10 if timeout is None else timeout
                )
            return self._client

    def _set_memory(self, ts: WorkerTask, nbytes: int, seconds: float) -> None:
        ts.state = MEMORY
        ts.spec = b""
        self._report_finished(ts, nbytes, seconds)
        waiters = self._waiters.pop(ts.key, None)
        if waiters:
            self._deps_arrived(waiters)

    def _erred(self, ts: WorkerTask, err: tuple[str, str, bytes, bytes]) -> None:
        exc_text, tb_text, exc_blob, tb_blob = err
        ts.state = ERROR
        ts.spec = b""
        header = {
            "op": "erred",
            "task": ts.id,
            "run_id": ts.run_id,
            "exception_text": exc_text,
            "traceback_text": tb_text,
            "n_exception": len(exc_blob),
        }
        self._send(header, exc_blob + tb_blob)

    def _report_finished(self, ts: WorkerTask, nbytes: int, seconds: float) -> None:
        self._fin_tasks.append(ts.id)
        self._fin_runs.append(ts.run_id)
        self._fin_nbytes.append(nbytes)
        self._fin_secs.append(seconds)

    def _schedule_flush(self) -> None:
        """Report buffered completions now if nothing else is running, else shortly, so
        that completions close together share one ``finished`` message."""
        if not self._fin_tasks:
            return
        if self._n_executing == 0:
            if self._flush_handle is not None:
                self._flush_handle.cancel()
            self._flush_buffered()
        elif self._flush_handle is None:
            assert self._loop is not None
            self._flush_handle = self._loop.call_later(self._finished_delay, self._flush_finished)

    def _flush_finished(self) -> None:
        with self._lock:
            self._flush_buffered()

    def _flush_buffered(self) -> None:
        self._flush_handle = None
        n = len(self._fin_tasks)
        if not n:
            return
        payload = b"".join(
            (
                self._fin_tasks.tobytes(),
                self._fin_runs.tobytes(),
                self._fin_nbytes.tobytes(),
                self._fin_secs.tobytes(),
            )
        )
        self._fin_tasks = array("I")
        self._fin_runs = array("Q")
        self._fin_nbytes = array("q")
        self._fin_secs = array("d")
        self._send({"op": "finished", "n": n}, payload)

    # ----- dependencies ---------------------------------------------------------------

    def _deps_arrived(self, waiters: list[WorkerTask]) -> None:
        for ts in waiters:
            if self.tasks.get(ts.id) is ts and ts.state == WAITING:
                ts.missing -= 1
                if ts.missing == 0:
                    self._make_ready(ts)

    def _live_waiters(self, key: Key) -> list[WorkerTask]:
        """Local tasks still waiting for ``key`` (freed ones are pruned lazily)."""
        waiters = self._waiters.get(key)
        if not waiters:
            return []
        live = [w for w in waiters if self.tasks.get(w.id) is w and w.state == WAITING]
        if live:
            self._waiters[key] = live
        else:
            del self._waiters[key]
        return live

    def _fetch_missing(self) -> None:
        """Start transfers for the dependencies queued in ``_to_fetch``, batched per holder."""
        if not self._to_fetch or self.status != "running":
            return
        by_holder: dict[str, list[Key]] = {}
        for key in self._to_fetch:
            if not self._live_waiters(key):
                self._holders.pop(key, None)
                continue
            holders = self._holders.get(key) or []
            if not holders:
                self._missing(key)
                continue
            cached = [h for h in holders if h in self._peers]
            holder = cached[0] if cached else random.choice(holders)
            by_holder.setdefault(holder, []).append(key)
        self._to_fetch.clear()
        for holder, keys in by_holder.items():
            self._in_flight.update(keys)
            self._spawn(self._gather_from(holder, keys))

    async def _gather_from(self, holder: str, keys: list[Key]) -> None:
        try:
            start = time.monotonic()
            sizes, payload = await self._get_data(holder, keys)
            self._measured(len(payload), time.monotonic() - start)
        except (comm.CommError, asyncio.TimeoutError, OSError) as e:
            logger.info(
                "worker %s: fetching %d keys from %s failed: %s",
                self.address,
                len(keys),
                holder,
                e,
            )
            self._drop_peer(holder)
            sizes, payload = [-1] * len(keys), memoryview(b"")
        with self._lock:
            self._got_data(holder, keys, sizes, payload)

    def _got_data(
        self, holder: str, keys: list[Key], sizes: list[int], payload: memoryview
    ) -> None:
        pos = 0
        for key, size in zip(keys, sizes, strict=True):
            self._in_flight.discard(key)
            if size < 0:
                holders = self._holders.get(key, [])
                if holder in holders:
                    holders.remove(holder)
                self._to_fetch.add(key)
                continue
            blob = payload[pos : pos + size]
            pos += size
            self._holders.pop(key, None)
            waiters = self._waiters.pop(key, None)
            if not waiters or key in self.data:
                continue
            try:
                value = pickle.loads(blob)
            except Exception as e:
                err = _pack_error(e)
                for ts in waiters:
                    if self.tasks.get(ts.id) is ts and ts.state == WAITING:
                        self._release_deps(ts)
                        self._erred(ts, err)
                continue
            self.data[key] = value
            self.nbytes[key] = size
            self._deps_arrived(waiters)
            self._maybe_drop(key)
        self._fetch_missing()
        self._ensure_executing()

    def _measured(self, nbytes: int, seconds: float) -> None:
        if nbytes >= BANDWIDTH_MIN_BYTES and seconds > 0:
            sample = nbytes / seconds
            prev = self.bandwidth
            self.bandwidth = sample if prev is None else 0.95 * prev + 0.05 * sample

    async def _get_data(self, holder: str, keys: list[Key]) -> tuple[list[int], memoryview]:
        lock = self._peer_locks.setdefault(holder, asyncio.Lock())
        async with lock:
            c = self._peers.get(holder)
            if c is None or c.closed:
                c = await comm.connect(holder, role="peer")
                self._peers[holder] = c
            self._request_id += 1
            rid = self._request_id
            await c.write({"op": "get-data", "id": rid, "n": len(keys)}, encode_keys(keys))
            h, payload = await asyncio.wait_for(c.read(), self._get_data_timeout)
        sizes = h.get("sizes")
        if h["op"] != "data" or h.get("id") != rid or not isinstance(sizes, list):
            raise comm.ProtocolError(f"{holder}: unexpected reply {h['op']!r} to get-data")
        if len(sizes) != len(keys) or sum(s for s in sizes if s > 0) != len(payload):
            raise comm.ProtocolError(f"{holder}: get-data reply sizes do not match")
        return [int(s) for s in sizes], payload

    def _drop_peer(self, holder: str) -> None:
        c = self._peers.pop(holder, None)
        if c is not None:
            self._spawn(c.close())

    def _missing(self, key: Key) -> None:
        """No holder could provide ``key``: give its dependents back to the scheduler
        soon, unless it frees or re-sends them first."""
        assert self._loop is not None
        self._holders.pop(key, None)
        waiters = [(ts, ts.run_id) for ts in self._waiters.get(key, [])]
        logger.info(
            "worker %s: no holder has %r; rescheduling %d tasks", self.address, key, len(waiters)
        )
        self._loop.call_later(self._missing_retry, self._give_back, key, waiters)

    def _give_back(self, key: Key, waiters: list[tuple[WorkerTask, int]]) -> None:
        with self._lock:
            self._give_back_locked(key, waiters)

    def _give_back_locked(self, key: Key, waiters: list[tuple[WorkerTask, int]]) -> None:
        if self.status != "running":
            return
        for ts, run_id in waiters:
            if self.tasks.get(ts.id) is ts and ts.state == WAITING and ts.run_id == run_id:
                self._untrack(ts)
                ts.state = "forgotten"
                self._release_deps(ts)
                self._send({"op": "reschedule", "task": ts.id})
        self._live_waiters(key)

    # ----- serving data ---------------------------------------------------------------

    async def _serve_peer(self, c: comm.Comm) -> None:
        self._incoming.add(c)
        try:
            while True:
                for h, payload in await c.read_messages():
                    op = h["op"]
                    if op == "get-data":
                        keys = decode_keys(bytes(payload))
                        with self._lock:
                            values = [self.data.get(k, _MISSING) for k in keys]
                        sizes, blobs = _pickle_values(values)
                        await c.write(
                            {"op": "data", "id": h.get("id"), "sizes": sizes}, b"".join(blobs)
                        )
                    elif op == "update-data":
                        await c.write(self._update_data(h, payload))
                    elif op == "run":
                        await c.write(*await self._run_function(h, payload))
                    else:
                        raise comm.ProtocolError(f"unknown peer message {op!r}")
        except comm.CommError as e:
            if not isinstance(e, comm.CommClosedError):
                logger.info("worker %s: peer %s: %s", self.address, c.peer, e)
        except (KeyError, TypeError, ValueError) as e:
            logger.info("worker %s: bad message from %s: %s", self.address, c.peer, e)
        finally:
            self._incoming.discard(c)

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
            return {"op": "data-updated", "id": h.get("id"), "error": repr(e)}
        return {"op": "data-updated", "id": h.get("id"), "nbytes": nbytes}

    def _scattered(self, tasks: list[int], keys: list[Key]) -> None:
        """The scheduler registered staged data as tasks in memory (-1: refused it)."""
        for tid, key in zip(tasks, keys, strict=True):
            staged = self._staged.pop(key, None)
            if tid < 0:
                continue
            if staged is not None:
                self.data[key], self.nbytes[key] = staged
            elif key not in self.data:  # its staging failed: not held here after all
                self._send({"op": "release-worker-data", "task": tid})
                continue
            ts = self.tasks.get(tid)
            if ts is not None and ts.key == key and ts.state == MEMORY:
                continue
            if ts is not None:
                self._free(tid)
            ts = WorkerTask(tid, 0, key, b"", [], [])
            ts.state = MEMORY
            self._track(ts)

    async def _run_function(
        self, h: comm.Header, payload: memoryview
    ) -> tuple[comm.Header, bytes]:
        """``Client.run``: call on the event loop (as Dask), awaiting coroutines."""
        reply: comm.Header = {"op": "run-result", "id": h.get("id")}
        try:
            func, args, kwargs = pickle.loads(payload)
            if _takes_arg(func, "dask_worker"):
                kwargs = {**kwargs, "dask_worker": self}
            result = func(*args, **kwargs)
            if inspect.isawaitable(result):
                if h.get("wait", True):
                    result = await result
                else:
                    task = asyncio.ensure_future(result)
                    self._bg.add(task)
                    task.add_done_callback(self._bg.discard)
                    result = None
            return {**reply, "status": "OK"}, cloudpickle.dumps(result)
        except Exception as e:
            exc_text, tb_text, exc_blob, tb_blob = _pack_error(e)
            reply.update(status="error", exception_text=exc_text, traceback_text=tb_text)
            return {**reply, "n_exception": len(exc_blob)}, exc_blob + tb_blob


_MISSING = object()


def _pickle_values(values: list[Any]) -> tuple[list[int], list[bytes]]:
    """``get-data`` sizes (-1 for a value this worker lacks) and pickles."""
    sizes: list[int] = []
    blobs: list[bytes] = []
    for value in values:
        if value is _MISSING:
            sizes.append(-1)
            continue
        blob = cloudpickle.dumps(value)
        sizes.append(len(blob))
        blobs.append(blob)
    return sizes, blobs


# ----- process entry point ----------------------------------------------------------------


async def run_worker(scheduler_address: str, **kwargs: Any) -> bool:
    """Run a worker until it closes (lost scheduler, SIGINT, SIGTERM or a restart);
    returns whether the scheduler asked it to restart."""
    worker = Worker(scheduler_address, **kwargs)
    await worker.start()
    loop = asyncio.get_running_loop()
    closing: set[asyncio.Task[None]] = set()

    def stop(sig: signal.Signals) -> None:
        logger.info("worker %s: received %s, closing", worker.address, sig.name)
        closing.add(loop.create_task(worker.close()))

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop, sig)
    try:
        await worker.finished()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
        await worker.close()
    return worker.restart_requested


def default_address() -> str:
    """Where a worker serves peers: ``squall.worker.host`` and ``.port``."""
    return comm.format_address(str(config.get("worker.host")), config.port("worker.port"))


def _parse_resources(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in text.replace(",", " ").split():
        name, sep, amount = item.partition("=")
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"invalid resource {item!r}: expected NAME=AMOUNT")
        try:
            out[name] = float(amount)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid amount in {item!r}") from None
    return out


def main(argv: list[str] | None = None) -> int:
    """``squall worker``. On a restart from the scheduler the program re-executes
    itself with the same arguments."""
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="squall worker", description="a squall worker")
    p.add_argument("scheduler", help="scheduler address, tcp://HOST:PORT")
    p.add_argument("--nthreads", type=int, help="default: squall.worker.nthreads")
    p.add_argument("--nworkers", type=int, default=1, help="worker processes to start")
    p.add_argument("--name", default=None)
    p.add_argument(
        "--listen", help="address to serve peers on (default: squall.worker.host and .port)"
    )
    p.add_argument("--resources", type=_parse_resources, default={}, help='e.g. "GPU=1 MEM=4e9"')
    p.add_argument("--memory-limit", type=int, default=0)
    p.add_argument("--log-level", help="default: squall.logging.level")
    args = p.parse_args(argv)
    try:
        level = config.log_level(args.log_level)
    except config.ConfigError as e:
        print(f"squall worker: {e}", file=sys.stderr)
        return 1
    if args.nworkers < 1:
        p.error("--nworkers must be at least 1")
    if args.nworkers > 1:
        if args.listen is not None and comm.parse_address(args.listen)[1] != 0:
            p.error("--listen with a fixed port needs --nworkers 1")
        return _run_workers(args)
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        restart = asyncio.run(
            run_worker(
                args.scheduler,
                nthreads=args.nthreads,
                name=args.name,
                address=args.listen,
                resources=args.resources,
                memory_limit=args.memory_limit,
            )
        )
    except (comm.CommError, ValueError) as e:
        logger.error("worker failed: %s", e)
        return 1
    if restart:
        # A fresh interpreter in this process: threads of abandoned tasks and anything
        # they leaked are gone, the pid (and whoever supervises it) stays.
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, "-m", "squall.worker", *argv])
    return 0


def _run_workers(args: argparse.Namespace) -> int:
    """``--nworkers M``: M single-worker processes; SIGINT/SIGTERM are passed on to
    them, and this process exits once all of them have."""
    procs: list[subprocess.Popen[bytes]] = []

    def forward(signum: int, _frame: object) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for i in range(args.nworkers):
            # Unset options stay unset, so each process reads the same config defaults.
            cmd = [sys.executable, "-m", "squall.worker", args.scheduler]
            cmd += ["--memory-limit", str(args.memory_limit)]
            for flag, value in (
                ("--nthreads", args.nthreads),
                ("--listen", args.listen),
                ("--log-level", args.log_level),
            ):
                if value is not None:
                    cmd += [flag, str(value)]
            if args.name is not None:
                cmd += ["--name", f"{args.name}-{i}"]
            if args.resources:
                cmd += ["--resources", " ".join(f"{k}={v}" for k, v in args.resources.items())]
            procs.append(subprocess.Popen(cmd))
        codes = [proc.wait() for proc in procs]
    except BaseException:
        forward(signal.SIGTERM, None)
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if all(code == 0 for code in codes) else 1


if __name__ == "__main__":
    sys.exit(main())
