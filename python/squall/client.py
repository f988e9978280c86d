"""The user-facing client: a drop-in for ``distributed.Client`` (docs/runtime.md).

A :class:`Client` owns one connection to the scheduler (role ``client``) and an asyncio
event loop. By default the loop runs in a background thread and the API blocks, as
Dask's synchronous client does; with ``asynchronous=True`` the client uses the running
loop and its coroutine methods (``gather``, ``result``, ``close``, …) return awaitables.

Protocol choices (see the message table in docs/runtime.md):

* ``submit`` and every batch of ``map`` send ONE ``update-graph`` (a ``map`` without
  ``batch_size`` sends chunks of ``MAP_CHUNK`` items while it builds the next ones, each
  chunk a new FIFO generation so they run in order). Dependencies are the
  futures found in the arguments (also nested in lists, tuples, sets and dicts); all of
  them are sent as *external* keys (indices ``>= n`` in ``deps``), appended after the
  ``n`` task keys in the keys payload. Keys this client already holds a future for are
  not resubmitted.
* Run specs are ``squall.spec`` call specs (the pickled function's bytes, then
  ``pickle((args, kwargs))`` with :class:`~squall.spec.Dep` markers). ``map`` pickles
  the function once and every per-item spec shares those bytes; workers unpickle the
  function once per process (cached by content).
* ``map`` keys are ``{funcname}-{token}-{i}`` (``i`` the item's index in the map); the
  token is one hash per batch over the pickled function and the batch's specs (pure) or
  a uuid (``pure=False``).
* Futures on the same key share one :class:`FutureState`, which counts them; when the
  last one is released or garbage collected the key goes into a ``release-keys``
  message, batched per event loop iteration, sent after the graphs queued before the
  release (they may name the key) and before any later message; ``submit`` and ``map``
  keep no reference to their futures, which die on ``del``.
  A ``map`` makes its futures and states in bulk, under one lock acquisition per batch
  and without cyclic GC runs while it does.
* Results: ``who-has`` to the scheduler, then ``get-data`` (role ``peer``) to one holder
  per key (connections cached per worker); a size of -1 or a failed worker makes the
  client ask again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import itertools
import logging
import numbers
import operator
import pickle
import random
import threading
import time
import types
import uuid
from array import array
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterable, Iterator
from typing import Any, ClassVar, Literal, NamedTuple

import cloudpickle  # type: ignore[import-untyped]
from dask._task_spec import TaskRef
from dask.base import is_dask_collection, tokenize
from dask.delayed import delayed
from dask.utils import funcname, parse_timedelta

from squall import comm, config, update_graph
from squall._core import decode_keys, encode_keys
from squall.gc_pause import gc_paused
from squall.graph import (
    compute_expr,
    expr_of_graph,
    flatten_keys,
    materialize,
    pack_data,
    persist_expr,
)
from squall.spec import call_prefix, make_spec
from squall.tracebacks import user_frames

logger = logging.getLogger("squall.client")

#: Items per ``update-graph`` of a ``map`` without ``batch_size``: sent as built, so the
#: scheduler and workers start early, and large enough that per-message costs vanish.
MAP_CHUNK = 20_000

Key = Hashable
Status = Literal["pending", "finished", "error", "cancelled", "lost"]

#: Scheduler replies to a request, matched to it by ``id``.
REPLIES = frozenset(
    {"who-has", "graph-accepted", "request-failed", "scheduler-info", "scattered", "restarted"}
)
RESTART_MESSAGE = "Scheduler has restarted. Please re-run your work."
ALL_COMPLETED = "ALL_COMPLETED"
FIRST_COMPLETED = "FIRST_COMPLETED"
FIRST_EXCEPTION = "FIRST_EXCEPTION"

__all__ = [
    "ALL_COMPLETED",
    "FIRST_COMPLETED",
    "FIRST_EXCEPTION",
    "CancelledError",
    "Client",
    "Future",
    "FutureCancelledError",
    "KilledWorker",
    "as_completed",
    "default_client",
    "fire_and_forget",
    "futures_of",
    "wait",
]

CancelledError = concurrent.futures.CancelledError


class FutureCancelledError(CancelledError):
    """Raised by ``result()`` of a cancelled future (as distributed's)."""

    def __init__(self, key: Key, reason: str | None = None, msg: str | None = None) -> None:
        super().__init__(key, reason, msg)
        self.key = key
        self.reason = reason or "unknown"
        self.msg = msg

    def __str__(self) -> str:
        text = f"{self.key} cancelled for reason: {self.reason}."
        return f"{text}\n{self.msg}" if self.msg else text


class KilledWorker(Exception):
    """A task was running on too many workers that died (``error_kind`` KilledWorker).

    The scheduler sends only text for this error; it is ``str(exc)``."""

    def __init__(self, text: str, key: Key = None) -> None:
        super().__init__(text)
        self.key = key


class RemoteError(Exception):
    """A task failed remotely and its exception could not be unpickled here."""


# ----- run specs ------------------------------------------------------------------------


# ----- futures --------------------------------------------------------------------------


class FutureState:
    """State shared by all futures of one key in one client; mutated on the loop.

    ``refs`` counts those futures (under the client's refcount lock); ``generation`` is
    the client's restart count when the state was made: a restart forgets every key, so
    futures from before it release nothing after."""

    __slots__ = ("_event", "exception", "generation", "key", "refs", "status", "traceback", "type")

    def __init__(self, key: Key, generation: int) -> None:
        self.key = key
        self.generation = generation
        self.refs = 1
        self.status: Status = "pending"
        self.exception: BaseException | None = None
        self.traceback: types.TracebackType | None = None
        self.type: type | None = None
        self._event: asyncio.Event | None = None

    def _get_event(self) -> asyncio.Event:
        # Made on first wait: most futures of a large map are never awaited one by one.
        if self._event is None:
            self._event = asyncio.Event()
            if self.done():
                self._event.set()
        return self._event

    def _signal(self) -> None:
        if self._event is not None:
            if self.done():
                self._event.set()
            else:
                self._event.clear()

    def finish(self) -> None:
        self.status = "finished"
        self._signal()

    @staticmethod
    def finish_all(states: Iterable[FutureState]) -> None:
        """``finish()`` each of many states (a ``key-in-memory`` notice) in one loop."""
        for st in states:
            st.status = "finished"
            if st._event is not None:
                st._event.set()

    def lose(self) -> None:
        self.status = "lost"
        self._signal()

    def retry(self) -> None:
        self.status = "pending"
        self.exception = self.traceback = None
        self._signal()

    def cancel(self, reason: str | None = None, msg: str | None = None) -> None:
        self.status = "cancelled"
        self.exception = FutureCancelledError(self.key, reason, msg)
        self._signal()

    def set_error(self, exception: BaseException, tb: types.TracebackType | None) -> None:
        self.status = "error"
        self.exception = exception
        self.traceback = tb
        self._signal()

    def done(self) -> bool:
        return self.status in ("finished", "error", "cancelled")

    async def wait(self) -> None:
        await self._get_event().wait()

    def __repr__(self) -> str:
        return f"<FutureState: {self.status}>"


class Future(TaskRef):
    """A remotely running computation (``distributed.Future``). Like dask's futures it
    is a ``TaskRef``, so dask collections built on futures depend on their keys."""

    # Slots: a map makes one future per item (faster to build, a third of the memory).
    __slots__ = ("__weakref__", "_cleared", "_client", "_state")
    _cb_executor: ClassVar[concurrent.futures.ThreadPoolExecutor | None] = None

    def __init__(self, key: Key, client: Client | None = None) -> None:
        self._cleared = True
        client = client if client is not None else default_client()
        with client._refcount_lock:
            self._bind(key, client, client._inc_ref(key))

    def _bind(self, key: Key, client: Client, state: FutureState) -> None:
        """Set up a future whose reference to ``key`` the caller has counted (holding
        the refcount lock)."""
        self.key = key  # type: ignore[assignment]  # dask types keys narrower than Hashable
        self._client = client
        self._state = state
        self._cleared = False

    @property
    def client(self) -> Client:
        return self._client

    @property
    def executor(self) -> Client:
        return self._client

    @property
    def status(self) -> Status:
        return self._state.status

    @property
    def type(self) -> type | None:
        return self._state.type

    def done(self) -> bool:
        return self._state.done()

    def cancelled(self) -> bool:
        return self._state.status == "cancelled"

    def result(self, timeout: float | str | None = None) -> Any:
        """The value (fetched from a worker); re-raises the task's exception;
        ``TimeoutError`` after ``timeout`` seconds."""
        with user_frames():
            return self._client.sync(self._result, callback_timeout=timeout)

    async def _result(self, raiseit: bool = True) -> Any:
        st = self._state
        with user_frames():  # the outermost frame when awaited
            while True:
                await st.wait()
                if st.status == "error" or st.status == "cancelled":
                    assert st.exception is not None
                    if raiseit:
                        raise st.exception.with_traceback(st.traceback)
                    return st.exception
                if st.status == "finished":
                    data = await self._client._gather_keys([self.key], [st], "raise")
                    if self.key in data:
                        return data[self.key]

    async def _exception(self) -> BaseException | None:
        await self._state.wait()
        return self._state.exception if self._state.status == "error" else None

    def exception(self, timeout: float | str | None = None) -> Any:
        return self._client.sync(self._exception, callback_timeout=timeout)

    async def _traceback(self) -> types.TracebackType | None:
        await self._state.wait()
        return self._state.traceback if self._state.status == "error" else None

    def traceback(self, timeout: float | str | None = None) -> Any:
        return self._client.sync(self._traceback, callback_timeout=timeout)

    def cancel(self, reason: str | None = None, msg: str | None = None, **kwargs: Any) -> Any:
        return self._client.cancel([self], reason=reason, msg=msg, **kwargs)

    def retry(self, **kwargs: Any) -> Any:
        return self._client.retry([self], **kwargs)

    def add_done_callback(self, fn: Callable[[Future], Any]) -> None:
        """Call ``fn(self)`` in a separate thread once the future is finished, erred or
        cancelled."""
        cls = Future
        if cls._cb_executor is None:
            cls._cb_executor = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="squall-callback"
            )
        executor = cls._cb_executor

        def run(fut: Future) -> None:
            try:
                fn(fut)
            except BaseException:
                logger.exception("error in callback %s of %s", fn, fut)

        self._client._call_soon(self._client._watch, self, lambda f: executor.submit(run, f))

    def release(self) -> None:
        if not self._cleared:
            self._cleared = True
            self._client._release_soon(self._state)

    def __del__(self) -> None:
        # try rather than contextlib.suppress: this runs once per future of a map.
        try:  # noqa: SIM105
            self.release()
        except Exception:
            pass

    def __reduce__(self) -> Any:
        # By key, as distributed's: a future inside scattered data, or inside an
        # object a task receives, arrives as a reference bound to no client.
        return _FutureRef, (self.key,)

    def __dask_tokenize__(self) -> Any:
        return ("Future", self.key)

    def __await__(self) -> Any:
        return self._result().__await__()

    def __repr__(self) -> str:
        return f"<Future: {self.status}, key: {self.key}>"


class _FutureRef(Future):
    """An unpickled future: it names its key but belongs to no client (its status and
    type are None, as distributed's unbound futures); its other methods raise."""

    __slots__ = ()

    def __init__(self, key: Key) -> None:
        self.key = key  # type: ignore[assignment]  # dask types keys narrower than Hashable
        self._cleared = True  # nothing to release

    @property
    def client(self) -> Any:
        return None

    @property
    def executor(self) -> Any:
        return None

    @property
    def status(self) -> Any:
        return None

    @property
    def type(self) -> Any:
        return None

    def __getattr__(self, name: str) -> Any:
        if name in ("_client", "_state"):  # unset: what a bound future's methods use
            raise RuntimeError(f"{self!r} was unpickled and is bound to no client")
        raise AttributeError(name)


# ----- the client -----------------------------------------------------------------------

# Clients made with ``set_as_default=True``, latest last (``default_client()``), and the
# dask config they replaced, restored when the last of them closes.
_defaults: list[Client] = []
_config_before_defaults: Any = None


def default_client() -> Client:
    """The latest client made with ``set_as_default=True`` that is not closed."""
    for c in reversed(_defaults):
        if c.status != "closed":
            return c
    raise ValueError("no squall Client is running: create one with Client(address)")


def _become_default(client: Client) -> None:
    """As ``distributed.Client(set_as_default=True)``: plain ``compute()``/``persist()``
    calls run on the latest such client until it closes."""
    global _config_before_defaults
    import dask

    _defaults.append(client)
    if _config_before_defaults is None:
        _config_before_defaults = dask.config.set(scheduler="squall")


def _stop_being_default(client: Client) -> None:
    global _config_before_defaults
    if client in _defaults:
        _defaults.remove(client)
    if _config_before_defaults is not None and not any(c.status != "closed" for c in _defaults):
        _defaults.clear()
        _config_before_defaults.__exit__(None, None, None)
        _config_before_defaults = None


class _DefaultClient:
    """``scheduler="squall"`` in dask: the default client's ``get``, as a bound method
    so that ``dask.persist`` finds ``persist`` beside it (and persists to futures)."""

    def get(self, dsk: Any, keys: Any, **kwargs: Any) -> Any:
        return default_client().get(dsk, keys, **kwargs)

    def persist(self, collections: Any, **kwargs: Any) -> Any:
        return default_client().persist(collections, **kwargs)


def _register_scheduler_name() -> None:
    from dask.base import named_schedulers

    named_schedulers["squall"] = _DefaultClient().get


_register_scheduler_name()


def _prefer_task_shuffle() -> None:
    """Dataframe shuffles default to dask's "disk" method when no distributed client
    exists, which needs one shared machine; squall has no shuffle service, so the
    default becomes the task-based method (an explicit user setting still wins)."""
    import dask

    dask.config.update_defaults({"dataframe": {"shuffle": {"method": "tasks"}}})


def _timeout_seconds(timeout: float | str | None) -> float | None:
    if timeout is None:
        return None
    return float(parse_timedelta(timeout, default="s"))


async def _timed(aw: Awaitable[Any], timeout: float | str | None) -> Any:
    seconds = _timeout_seconds(timeout)
    with user_frames():  # the outermost frame of an asynchronous client's calls
        if seconds is None:
            return await aw
        # Not wait_for: a TimeoutError raised by ``aw`` itself (a task's error) is not
        # ours.
        task = asyncio.ensure_future(aw)
        try:
            done, _ = await asyncio.wait({task}, timeout=seconds)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not done:
            task.cancel()
            raise TimeoutError(f"timed out after {seconds} s")
        return task.result()


def _require_running_loop() -> None:
    """An asynchronous client runs on the caller's loop: like distributed's, it cannot
    be made outside one."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(
            "Constructing an asynchronous Client (asynchronous=True) without a running "
            "loop is not supported"
        ) from None


class _WhoHas(NamedTuple):
    keys: list[Key]
    holders: list[list[str]]


class Client:
    """Connect to a squall scheduler: ``Client("tcp://host:8786")``.

    ``Client()`` without an address starts a :class:`~squall.cluster.LocalCluster`
    sized to the machine and stops it on ``close()`` (awaited, or leaving ``async with``,
    for an asynchronous client, which is made on a running event loop, as
    distributed's). ``timeout`` (for connecting) defaults to
    ``squall.comm.timeouts.connect``."""

    def __init__(
        self,
        address: str | Any = None,
        loop: Any = None,
        timeout: float | str | None = None,
        set_as_default: bool = True,
        asynchronous: bool = False,
        name: str | None = None,
        direct_to_workers: bool | None = None,
        **kwargs: Any,
    ) -> None:
        if asynchronous:
            _require_running_loop()  # before starting a cluster nothing would close
        self._own_cluster: Any = None
        if address is None:
            from squall.cluster import LocalCluster

            self._own_cluster = address = LocalCluster()
        if not isinstance(address, str):
            address = getattr(address, "scheduler_address", None) or getattr(
                address, "address", None
            )
            if not isinstance(address, str):
                raise TypeError("address must be a string like 'tcp://host:port'")
        if loop is not None:
            raise NotImplementedError("squall.Client does not accept an external loop")
        self.address = address
        self.asynchronous = asynchronous
        self.id = name or f"Client-{uuid.uuid4()}"
        self.status = "newly-created"
        self.futures: dict[Key, FutureState] = {}
        self.generation = 0  # restarts so far
        self._refcount_lock = threading.RLock()
        self._timeout = _timeout_seconds(timeout) or config.seconds("comm.timeouts.connect")
        self._comm: comm.Comm | None = None
        self._stream: comm.BatchedSend | None = None
        self._reader: asyncio.Task[None] | None = None
        self._requests: dict[int, asyncio.Future[comm.Message]] = {}
        self._graphs: dict[int, list[Key]] = {}
        self._ids = itertools.count(1)
        self._to_release: list[Key] = []
        self._release_scheduled = False
        # Futures released from any thread, waiting for the loop (one wake-up per batch).
        self._releasing: deque[FutureState] = deque()
        self._drain_scheduled = False
        self._peers: dict[str, tuple[asyncio.Lock, list[comm.Comm]]] = {}
        self._thread: threading.Thread | None = None
        self._thread_id: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started: asyncio.Future[None] | None = None
        self._kwargs = kwargs
        if asynchronous:
            self._loop = asyncio.get_running_loop()
            self._started = asyncio.ensure_future(self._start())
        else:
            self._loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run_loop() -> None:
                assert self._loop is not None
                asyncio.set_event_loop(self._loop)
                self._thread_id = threading.get_ident()
                self._loop.call_soon(ready.set)
                self._loop.run_forever()

            self._thread = threading.Thread(target=run_loop, name="squall-client", daemon=True)
            self._thread.start()
            ready.wait()
            try:
                self._run_sync(self._start())
            except BaseException:
                self._stop_loop()
                raise
        if set_as_default:
            _become_default(self)
        _prefer_task_shuffle()

    # ----- lifecycle ------------------------------------------------------------------

    async def _start(self) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        if self._thread is None:
            self._thread_id = threading.get_ident()
        c = await comm.connect(
            self.address, role="client", info={"client": self.id}, timeout=self._timeout
        )
        header, _ = await c.read()
        if header["op"] != "registered":
            await c.close()
            raise comm.HandshakeError(
                f"scheduler {self.address} refused the client: {header.get('message')}"
            )
        self._comm = c
        self._stream = comm.BatchedSend(c, config.seconds("comm.batch-interval.client"))
        self._stream.start()
        self._reader = asyncio.get_running_loop().create_task(self._read_forever())
        self.status = "running"

    def __await__(self) -> Any:
        async def start() -> Client:
            if self._started is None:
                self._started = asyncio.ensure_future(self._start())
            await self._started
            return self

        return start().__await__()

    async def __aenter__(self) -> Client:
        if self._started is None:
            self._started = asyncio.ensure_future(self._start())
        await self._started
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._close_async(None)

    def __enter__(self) -> Client:
        if self.asynchronous:
            raise RuntimeError("use 'async with' with an asynchronous client")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, timeout: float | str | None = None) -> Any:
        """Close the connection (the scheduler releases this client's keys) and the
        LocalCluster the client started, if any."""
        if self.asynchronous:
            return self._close_async(timeout)
        if self.status == "closed" or self._loop is None or self._loop.is_closed():
            return None
        try:
            self._run_sync(_timed(self._close(), timeout))
        finally:
            self._stop_loop()
            if self._own_cluster is not None:
                self._own_cluster.close()
        return None

    async def _close_async(self, timeout: float | str | None) -> None:
        try:
            await _timed(self._close(), timeout)
        finally:
            cluster, self._own_cluster = self._own_cluster, None
            if cluster is not None:  # its close blocks while the processes stop
                await asyncio.get_running_loop().run_in_executor(None, cluster.close)

    async def _close(self) -> None:
        if self.status == "closed":
            return
        self.status = "closing"
        self._flush_releases()
        if self._stream is not None:
            await self._stream.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._comm is not None:
            await self._comm.close()
        for _, conns in self._peers.values():
            for c in conns:
                await c.close()
        self._peers.clear()
        self._fail_everything("client closed")
        self.status = "closed"
        await asyncio.sleep(0)  # let watchers of the now-cancelled futures finish
        _stop_being_default(self)

    def _stop_loop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or loop.is_closed():
            return

        async def cancel_tasks() -> None:
            me = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(cancel_tasks(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
        self.status = "closed"

    def __repr__(self) -> str:
        return f"<Client: {self.address!r} status={self.status}>"

    # ----- running things on the loop -------------------------------------------------

    def _run_sync(self, coro: Coroutine[Any, Any, Any]) -> Any:
        loop = self._loop
        if loop is None or loop.is_closed():
            coro.close()
            raise RuntimeError("the client is closed")
        if threading.get_ident() == self._thread_id:
            coro.close()
            raise RuntimeError(
                "blocking client call from the client's own event loop; "
                "use Client(..., asynchronous=True) and await"
            )
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def sync(
        self,
        func: Callable[..., Awaitable[Any]],
        *args: Any,
        asynchronous: bool | None = None,
        callback_timeout: float | str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run coroutine function ``func``: returns an awaitable on an asynchronous
        client, otherwise blocks for its result."""
        coro = _timed(func(*args, **kwargs), callback_timeout)
        if asynchronous if asynchronous is not None else self.asynchronous:
            return coro
        with user_frames():
            return self._run_sync(coro)

    def _call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop, after everything scheduled before (any thread)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(fn, *args)

    def _send(self, header: comm.Header, payload: bytes = b"") -> None:
        """On the loop: send one message (pending releases go first)."""
        self._drain_releasing()
        self._flush_releases()
        if self._stream is None or self.status not in ("running",):
            return
        try:
            self._stream.comm.check(header, payload)
            self._stream.send(header, payload)
        except comm.CommClosedError:
            logger.debug("dropped %s: the scheduler connection is closed", header["op"])
        except comm.MessageTooLarge as e:
            # That call fails alone; the connection and other futures are unharmed.
            rid = header.get("id")
            keys = self._graphs.pop(rid, None) if isinstance(rid, int) else None
            if keys is None:
                raise
            self._graph_failed(keys, f"the graph was not sent: {e}")

    #: Messages naming futures (graphs, fire-and-forget) queued for the loop but not on
    #: the stream yet, counted under the refcount lock. While there are any, released
    #: futures wait in ``_releasing``: a release sent first could reach the scheduler
    #: before the message naming its key, which would then ignore the release of a key
    #: it does not know yet (and keep it, wanted, forever) or forget a dependency the
    #: graph needs. The futures themselves are not held, so they die on ``del``.
    _unsent = 0

    def _send_soon(self, header: comm.Header, payload: bytes = b"", keep: object = None) -> None:
        """Any thread: send from the loop, after everything queued before; futures
        released meanwhile are released after it. ``keep`` stays referenced until then."""
        with self._refcount_lock:
            self._unsent += 1
        self._call_soon(self._send_queued, header, payload, keep)

    def _send_queued(self, header: comm.Header, payload: bytes, _keep: object) -> None:
        try:
            self._send(header, payload)
        finally:
            with self._refcount_lock:
                self._unsent -= 1
        self._drain_releasing()

    async def _request(self, header: comm.Header, payload: bytes = b"") -> comm.Message:
        rid = next(self._ids)
        fut: asyncio.Future[comm.Message] = asyncio.get_running_loop().create_future()
        self._requests[rid] = fut
        try:
            self._send({**header, "id": rid}, payload)
            if self.status != "running":
                raise comm.CommClosedError("the client is not connected")
            return await fut
        finally:
            self._requests.pop(rid, None)

    # ----- reference counting -----------------------------------------------------------

    @property
    def refcount(self) -> dict[Key, int]:
        """How many futures this client holds per key."""
        with self._refcount_lock:
            return {k: st.refs for k, st in self.futures.items()}

    def _inc_ref(self, key: Key) -> FutureState:
        with self._refcount_lock:
            st = self.futures.get(key)
            if st is None:
                st = self.futures[key] = FutureState(key, self.generation)
            else:
                st.refs += 1
            return st

    def _acquire_many(self, keys: list[Key]) -> tuple[list[Future], list[int] | None]:
        """Futures for ``keys`` (a bulk ``Future(key)``, one lock acquisition) and the
        indices of the keys this client did not hold before (None: all of them)."""
        futures = list(map(Future.__new__, itertools.repeat(Future, len(keys))))
        with self._refcount_lock:
            made = list(map(FutureState, keys, itertools.repeat(self.generation)))
            # One C loop and one lookup per key: a held key (or one earlier in ``keys``)
            # keeps its state and the state made for it is dropped.
            states = list(map(self.futures.setdefault, keys, made))
            fresh: list[int] | None = None
            if not all(map(operator.is_, states, made)):
                fresh = []
                for i, (st, new) in enumerate(zip(states, made, strict=True)):
                    if st is new:
                        fresh.append(i)
                    else:
                        st.refs += 1
            for f, k, st in zip(futures, keys, states, strict=True):
                f._bind(k, self, st)
        return futures, fresh

    def _release_soon(self, state: FutureState) -> None:
        """Any thread: drop one reference to ``state`` on the loop. Lock-free (a future's
        ``__del__``): appending to and popping from a deque are atomic, and a drain is
        scheduled whenever none is pending after the append."""
        self._releasing.append(state)
        if not self._drain_scheduled:
            self._drain_scheduled = True
            self._call_soon(self._drain_releasing)

    def _drain_releasing(self) -> None:
        """On the loop: apply the queued releases and send the keys they free."""
        self._drain_scheduled = False
        settled = self._settle_releases()
        if settled is None:
            # A message naming futures waits to be sent: sending it drains, so until
            # then no release needs a wake-up.
            self._drain_scheduled = True
        elif settled and not self._release_scheduled:
            self._release_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_releases)

    def _settle_releases(self) -> bool | None:
        """Any thread: drop the references queued by released futures now; the keys
        they free join the next ``release-keys``. True if any did; None (and nothing
        done) while a message naming futures is unsent (``_unsent``)."""
        with self._refcount_lock:
            if self._unsent:
                return None
            releasing = self._releasing
            states = [releasing.popleft() for _ in range(len(releasing))]
            generation, futures = self.generation, self.futures
            gone = []
            for st in states:
                if st.generation != generation:
                    continue
                st.refs -= 1
                if st.refs:
                    continue
                # The key is released unless another state holds it (``cancel`` drops a
                # key's state; a future made after that makes a new one).
                held = futures.get(st.key)
                if held is st:
                    del futures[st.key]
                elif held is not None:
                    continue
                gone.append(st.key)
            self._to_release.extend(gone)
        return bool(gone)

    def _flush_releases(self) -> None:
        self._release_scheduled = False
        with self._refcount_lock:
            keys, self._to_release = self._to_release, []
        if keys and self._stream is not None and self.status == "running":
            with contextlib.suppress(comm.CommClosedError):
                self._stream.send({"op": "release-keys"}, encode_keys(keys))

    # ----- scheduler messages -----------------------------------------------------------

    async def _read_forever(self) -> None:
        assert self._comm is not None
        try:
            while True:
                for header, payload in await self._comm.read_messages():
                    try:
                        self._handle(header, payload)
                    except Exception:
                        logger.exception("client: cannot handle %s", header.get("op"))
        except comm.CommError as e:
            if self.status == "running":
                logger.warning("lost the connection to the scheduler: %s", e)
                self.status = "closed"
                self._fail_everything(f"lost the connection to the scheduler: {e}")

    def _fail_everything(self, reason: str) -> None:
        for fut in self._requests.values():
            if not fut.done():
                fut.set_exception(comm.CommClosedError(reason))
        with self._refcount_lock:
            states = list(self.futures.values())
        for st in states:
            if not st.done():
                st.cancel(reason)

    def _states(self, payload: memoryview) -> list[FutureState]:
        keys = decode_keys(bytes(payload))
        with self._refcount_lock:
            return list(filter(None, map(self.futures.get, keys)))

    def _handle(self, h: comm.Header, payload: memoryview) -> None:
        op = h["op"]
        if op == "key-in-memory":
            FutureState.finish_all(self._states(payload))
        elif op == "task-erred":
            key, exc, tb = _parse_erred(h, payload)
            with self._refcount_lock:
                erred = self.futures.get(key)
            if erred is not None:
                erred.set_error(exc, tb)
        elif op == "lost-data":
            for st in self._states(payload):
                st.lose()
        elif op == "task-retried":
            for st in self._states(payload):
                st.retry()
        elif op == "cancelled-keys":
            for st in self._states(payload):
                if st.status != "cancelled":
                    st.cancel("cancelled by the scheduler")
        elif op == "restart":
            self._restarted()
        elif op in REPLIES:
            rid = h.get("id")
            keys = self._graphs.pop(rid, None) if isinstance(rid, int) else None
            if op == "request-failed" and keys is not None:
                self._graph_failed(keys, f"the scheduler refused the graph: {h.get('error')}")
            fut = self._requests.get(rid) if isinstance(rid, int) else None
            if fut is not None and not fut.done():
                if op == "request-failed":
                    fut.set_exception(RuntimeError(f"scheduler: {h.get('error')}"))
                else:
                    fut.set_result((h, payload))
            elif op == "request-failed" and keys is None:
                logger.debug("scheduler refused a request: %s", h.get("error"))
        else:
            logger.debug("client: ignoring %r from the scheduler", op)

    def _graph_failed(self, keys: list[Key], message: str) -> None:
        exc = RuntimeError(message)
        with self._refcount_lock:
            states = [st for st in map(self.futures.get, keys) if st is not None]
        for st in states:
            if st.status == "pending":
                st.set_error(exc, None)

    # ----- submitting -------------------------------------------------------------------

    def _send_graph(
        self,
        keys: list[Key],
        specs: list[bytes],
        deps: list[list[Key]] | None,
        *,
        priority: int,
        fifo_timeout: float | str,
        workers: Any,
        resources: dict[str, float] | None,
        retries: int | None,
        allow_other_workers: bool,
        order: str = "sequential",
        wanted: list[Key] | None = None,
        task_options: list[tuple[dict[str, Any], list[int]]] | None = None,
        data_producers: list[int] | None = None,
        keep: object = None,
    ) -> None:
        """Queue one ``update-graph`` (``_send_soon``: releases of the futures it
        defines or depends on follow it, however soon they are dropped)."""
        if allow_other_workers not in (True, False):
            raise TypeError("allow_other_workers= must be True or False")
        if allow_other_workers and workers is None:
            raise ValueError("Only use allow_other_workers= if using workers=")
        if isinstance(workers, str):
            workers = [workers]
        if workers is not None:
            workers = list(workers)
        header, payload, index = update_graph.encode(keys, specs, deps)
        rid = next(self._ids)
        header |= {
            "id": rid,
            "order": order,
            # Indices of the keys the client holds futures for (default: all).
            "wanted": None if wanted is None else [index[k] for k in wanted if k in index],
            "task_options": task_options or None,
            "data_producers": data_producers or None,
            "priority": int(priority),
            "fifo_timeout": _timeout_seconds(fifo_timeout) or 0.0,
            "retries": retries,
            "workers": workers,
            "resources": [[k, float(v)] for k, v in resources.items()] if resources else None,
            "allow_other_workers": allow_other_workers,
        }

        self._graphs[rid] = keys
        self._send_soon(header, payload, keep)

    def _check_running(self) -> None:
        if self.status != "running":
            hint = " (await the client first)" if self.status == "newly-created" else ""
            raise RuntimeError(f"the client is {self.status}{hint}")

    def submit(
        self,
        func: Callable[..., Any],
        *args: Any,
        key: Key | None = None,
        workers: Any = None,
        resources: dict[str, float] | None = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: float | str = "100 ms",
        allow_other_workers: bool = False,
        actor: bool = False,
        actors: bool = False,
        pure: bool = True,
        **kwargs: Any,
    ) -> Future:
        """Run ``func(*args, **kwargs)`` on the cluster; futures among the arguments
        are replaced by their values."""
        if not callable(func):
            raise TypeError("First input to submit must be a callable function")
        if actor or actors:
            raise NotImplementedError("actors are not supported yet")
        self._check_running()
        if key is None:
            if pure:
                key = f"{funcname(func)}-{tokenize(func, kwargs, *args)}"
            else:
                key = f"{funcname(func)}-{uuid.uuid4()}"
        with self._refcount_lock:
            if key in self.futures:
                return Future(key, self)
            future = Future(key, self)
        spec, deps = make_spec(call_prefix(cloudpickle.dumps(func)), args, kwargs, _to_dep)
        self._send_graph(
            [key],
            [spec],
            [deps],
            priority=priority,
            fifo_timeout=fifo_timeout,
            workers=workers,
            resources=resources,
            retries=retries,
            allow_other_workers=allow_other_workers,
        )
        return future

    def map(
        self,
        func: Callable[..., Any],
        *iterables: Iterable[Any],
        key: str | list[Key] | None = None,
        workers: Any = None,
        retries: int | None = None,
        resources: dict[str, float] | None = None,
        priority: int = 0,
        allow_other_workers: bool = False,
        fifo_timeout: float | str = "100 ms",
        actor: bool = False,
        actors: bool = False,
        pure: bool = True,
        batch_size: int | None = None,
        **kwargs: Any,
    ) -> list[Future]:
        """``[submit(func, *items) for items in zip(*iterables)]`` as one graph per
        batch of ``batch_size`` items. Without ``batch_size`` the items are sent in
        chunks of ``MAP_CHUNK`` as they are built, so the cluster starts on the first
        ones while the client still builds the rest."""
        if not callable(func):
            raise TypeError("First input to map must be a callable function")
        if actor or actors:
            raise NotImplementedError("actors are not supported yet")
        if iterables and all(isinstance(it, Iterator) for it in iterables):
            raise TypeError(
                "Dask no longer supports mapping over Iterators or Queues."
                "Consider using a normal for loop and Client.submit"
            )
        self._check_running()
        # Batches are columns (a list per iterable): no tuple per item to allocate.
        sources = [iter(it) for it in iterables]
        keys_given = list(key) if isinstance(key, list) else None
        if keys_given is not None:
            lists = [list(it) for it in sources]
            if len(keys_given) != min(map(len, lists), default=0):
                raise ValueError("key= list must have one key per item")
            set(keys_given)  # an unhashable key raises TypeError before anything is held
            sources = [iter(x) for x in lists]
        size = batch_size if batch_size and batch_size > 0 else MAP_CHUNK
        blob = cloudpickle.dumps(func)
        prefix_spec = call_prefix(blob)
        prefix = key if isinstance(key, str) else funcname(func)
        out: list[Future] = []
        with gc_paused():
            while sources:
                columns = [list(itertools.islice(it, size)) for it in sources]
                n = min(map(len, columns))
                if n < size:  # the shortest iterable ends here, as zip's items do
                    columns = [c[:n] for c in columns]
                    sources = []
                if not n:
                    break
                start = len(out)
                specs, deps = update_graph.call_specs(prefix_spec, columns, kwargs, _to_dep)
                if keys_given is not None:
                    keys = keys_given[start : start + n]
                else:
                    if pure:
                        # The digest of the function then every spec, in one update.
                        h = hashlib.sha1(blob, usedforsecurity=False)
                        h.update(b"".join(specs))
                        token = h.hexdigest()
                    else:
                        token = uuid.uuid4().hex
                    head = f"{prefix}-{token}-"
                    keys = list(map(head.__add__, map(str, range(start, start + n))))
                futures, fresh = self._acquire_many(keys)
                out += futures
                if fresh is not None:
                    keys = [keys[i] for i in fresh]
                    specs = [specs[i] for i in fresh]
                    deps = None if deps is None else [deps[i] for i in fresh]
                if keys:
                    self._send_graph(
                        keys,
                        specs,
                        deps,
                        priority=priority,
                        # Chunks of one map run in order: each after the previous one
                        # (a new FIFO generation), as the tasks of a single graph would.
                        fifo_timeout=fifo_timeout if batch_size or not start else 0,
                        workers=workers,
                        resources=resources,
                        retries=retries,
                        allow_other_workers=allow_other_workers,
                    )
        return out

    # ----- dask collections -------------------------------------------------------------

    def _graph_to_futures(
        self,
        expr: Any,
        keys: Iterable[Key],
        *,
        cull: bool = False,
        workers: Any = None,
        allow_other_workers: bool | None = None,
        resources: dict[str, float] | None = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: float | str = "60s",
        actors: Any = None,
    ) -> dict[Key, Future]:
        """Submit a dask expression's tasks; futures for ``keys``."""
        if actors:
            raise NotImplementedError("actors are not supported yet")
        self._check_running()
        keys = list(dict.fromkeys(keys))
        g = materialize(expr, keys, cull=cull)
        # A key whose last future was dropped is released now, as in distributed (its
        # release still queued for the loop would otherwise make it look held): the
        # graph defines it again, and the release reaches the scheduler before it.
        self._settle_releases()
        with self._refcount_lock:
            futures = {k: Future(k, self) for k in keys}
            # Keys this client holds are known to the scheduler: depend on them instead
            # of defining them again, and hold them until the graph is queued (from
            # then on ``_unsent`` orders their releases after it), so that a future
            # dropped meanwhile by another thread cannot release them first.
            held = [k in self.futures and k not in futures for k in g.keys]
            holds = [Future(k, self) for k, h in zip(g.keys, held, strict=True) if h]
        if holds:
            g = g.without([i for i, h in enumerate(held) if h])
        if g.keys:
            self._send_graph(
                g.keys,
                g.specs,
                g.deps,
                priority=priority,
                fifo_timeout=fifo_timeout,
                workers=workers,
                resources=resources,
                retries=retries,
                allow_other_workers=bool(allow_other_workers),
                order="compute",
                wanted=keys,
                task_options=g.task_options,
                data_producers=g.data_producers,
                keep=holds,
            )
        return futures

    def get(
        self,
        dsk: Any,
        keys: Any,
        workers: Any = None,
        allow_other_workers: bool | None = None,
        resources: dict[str, float] | None = None,
        sync: bool = True,
        asynchronous: bool | None = None,
        direct: bool | None = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: float | str = "60s",
        actors: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Compute a dask graph (a dict, a HighLevelGraph or an expression) for ``keys``;
        the scheduler function behind ``dask.compute(..., scheduler=client)``."""
        expr, cull = expr_of_graph(dsk)
        futures = self._graph_to_futures(
            expr,
            flatten_keys([keys]),
            cull=cull,
            workers=workers,
            allow_other_workers=allow_other_workers,
            resources=resources,
            retries=retries,
            priority=priority,
            fifo_timeout=fifo_timeout,
            actors=actors,
        )
        packed = pack_data(keys, futures)
        if not sync:
            return packed
        try:
            with user_frames():
                return self.gather(packed, asynchronous=asynchronous)
        finally:
            for f in futures.values():
                f.release()

    def compute(
        self,
        collections: Any,
        sync: bool = False,
        optimize_graph: bool = True,
        workers: Any = None,
        allow_other_workers: bool = False,
        resources: dict[str, float] | None = None,
        retries: int | None = 0,
        priority: int = 0,
        fifo_timeout: float | str = "60s",
        actors: Any = None,
        traverse: bool = True,
        **kwargs: Any,
    ) -> Any:
        """Start computing dask collections: a future per collection (values with
        ``sync=True``); a single collection gives a single future."""
        singleton = not isinstance(collections, (list, tuple, set, frozenset))
        items = [collections] if singleton else list(collections)
        if traverse:
            items = [
                delayed(a) if isinstance(a, (list, set, tuple, dict, Iterator)) else a
                for a in items
            ]
        variables = [a for a in items if is_dask_collection(a)]
        futures: dict[Key, Future] = {}
        names: list[Key] = []
        if variables:
            expr = compute_expr(variables, optimize_graph, **kwargs)
            names = flatten_keys(expr.__dask_keys__())
            futures = self._graph_to_futures(
                expr,
                names,
                workers=workers,
                allow_other_workers=allow_other_workers,
                resources=resources,
                retries=retries,
                priority=priority,
                fifo_timeout=fifo_timeout,
                actors=actors,
            )
        found = iter(names)
        out = [futures[next(found)] if is_dask_collection(a) else a for a in items]
        with user_frames():
            result = self.gather(out) if sync else out
        return result[0] if singleton else result

    def persist(
        self,
        collections: Any,
        optimize_graph: bool = True,
        workers: Any = None,
        allow_other_workers: bool | None = None,
        resources: dict[str, float] | None = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: float | str = "60s",
        actors: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Start computing dask collections and return equivalent collections backed by
        the futures (a single collection gives a single collection)."""
        singleton = not isinstance(collections, (tuple, list, set, frozenset))
        items = [collections] if singleton else list(collections)
        if not all(map(is_dask_collection, items)):
            raise TypeError("persist takes dask collections")
        expr = persist_expr(items, optimize_graph)
        keys = expr.__dask_keys__()
        futures = self._graph_to_futures(
            expr,
            flatten_keys(keys),
            workers=workers,
            allow_other_workers=allow_other_workers,
            resources=resources,
            retries=retries,
            priority=priority,
            fifo_timeout=fifo_timeout,
            actors=actors,
        )
        result = [
            rebuild({k: futures[k] for k in flatten_keys(ks)}, *args)
            for (rebuild, args), ks in zip(
                (c.__dask_postpersist__() for c in items), keys, strict=True
            )
        ]
        return result[0] if singleton else result

    # ----- results ----------------------------------------------------------------------

    def gather(
        self,
        futures: Any,
        errors: str = "raise",
        direct: bool | None = None,
        asynchronous: bool | None = None,
    ) -> Any:
        """Values of futures, in the same (nested list/tuple/set/dict) structure."""
        if errors not in ("raise", "skip"):
            raise ValueError(f"errors must be 'raise' or 'skip', not {errors!r}")
        if isinstance(futures, Iterator):
            return (self.gather(f, errors=errors, asynchronous=asynchronous) for f in futures)
        with user_frames():
            return self.sync(self._gather, futures, errors, asynchronous=asynchronous)

    async def _gather(self, futures: Any, errors: str = "raise") -> Any:
        found = futures_of(futures)
        for f in found:
            if f.client is not self:
                raise ValueError("Cannot gather Futures created by another client")
        states: dict[Key, FutureState] = {f.key: f._state for f in found}
        data = await self._gather_keys(list(states), list(states.values()), errors)
        return _pack(futures, data)

    async def _gather_keys(
        self, keys: list[Key], states: list[FutureState], errors: str
    ) -> dict[Key, Any]:
        """Wait for the keys, then fetch the finished ones from workers."""
        data: dict[Key, Any] = {}
        todo = list(zip(keys, states, strict=True))
        while todo:
            for _, st in todo:
                if not st.done():
                    await st.wait()
                if st.status in ("error", "cancelled") and errors == "raise":
                    assert st.exception is not None
                    raise st.exception.with_traceback(st.traceback)
            want = [k for k, st in todo if st.status == "finished"]
            if want:
                data.update(await self._fetch(want))
            todo = [(k, st) for k, st in todo if k not in data and st.status != "error"]
            todo = [(k, st) for k, st in todo if st.status != "cancelled"]
            if todo:
                await asyncio.sleep(0.02)
        return data

    async def _who_has(self, keys: list[Key]) -> _WhoHas:
        h, payload = await self._request({"op": "who-has"}, encode_keys(keys))
        return _WhoHas(keys, _holders(list(h["addresses"]), bytes(payload), len(keys)))

    async def _fetch(self, keys: list[Key]) -> dict[Key, Any]:
        """One round: ask who has the keys and get them; missing keys are left out."""
        answer = await self._who_has(keys)
        by_worker: dict[str, list[Key]] = {}
        for k, holders in zip(answer.keys, answer.holders, strict=False):
            if holders:
                by_worker.setdefault(random.choice(holders), []).append(k)
        data: dict[Key, Any] = {}
        results = await asyncio.gather(
            *(self._get_data(w, ks) for w, ks in by_worker.items()), return_exceptions=True
        )
        for (w, _), r in zip(by_worker.items(), results, strict=True):
            if isinstance(r, BaseException):
                if not isinstance(r, comm.CommError):
                    raise r
                logger.info("could not get data from %s: %s", w, r)
            else:
                data.update(r)
        return data

    async def _get_data(self, address: str, keys: list[Key]) -> dict[Key, Any]:
        lock, conns = self._peers.setdefault(address, (asyncio.Lock(), []))
        async with lock:
            if not conns:
                conns.append(await comm.connect(address, role="peer", timeout=self._timeout))
            c = conns[0]
            rid = next(self._ids)
            try:
                await c.write({"op": "get-data", "id": rid, "n": len(keys)}, encode_keys(keys))
                while True:
                    reply = [m for m in await c.read_messages() if m[0].get("id") == rid]
                    if reply:
                        break
            except comm.CommError:
                conns.clear()
                await c.close()
                raise
        h, payload = reply[0]
        if h["op"] != "data":
            raise comm.ProtocolError(f"{address} answered get-data with {h['op']!r}")
        data: dict[Key, Any] = {}
        pos = 0
        for k, size in zip(keys, h["sizes"], strict=False):
            if size < 0:
                continue
            data[k] = pickle.loads(payload[pos : pos + size])
            pos += size
        return data

    def who_has(self, futures: Any = None, **kwargs: Any) -> Any:
        """``{key: [worker address, …]}`` for the given futures (default: all)."""

        async def run() -> dict[Key, list[str]]:
            if futures is None:
                with self._refcount_lock:
                    keys = list(self.futures)
            else:
                keys = list(dict.fromkeys(f.key for f in futures_of(futures)))
            if not keys:
                return {}
            answer = await self._who_has(keys)
            return dict(zip(answer.keys, answer.holders, strict=False))

        return self.sync(run, **kwargs)

    # ----- scatter -----------------------------------------------------------------------

    def scatter(
        self,
        data: Any,
        workers: Any = None,
        broadcast: bool | int = False,
        direct: bool | None = None,
        hash: bool = True,
        timeout: float | str | None = None,
        asynchronous: bool | None = None,
    ) -> Any:
        """Put local data on workers; returns futures in the shape of ``data`` (a list,
        tuple, set or dict of futures, or one future for any other object).

        Keys are ``{type}-{token}`` (``hash=False``: a random token; a dict's keys are
        kept). Items go round robin to the ``workers`` (addresses, names or hosts;
        default all), or each to every one of them with ``broadcast=True`` (to that
        many with an int). Data always goes straight to the workers, whatever
        ``direct``. ``timeout`` (default the client's) bounds the wait for workers."""
        seconds = self._timeout if timeout is None else _timeout_seconds(timeout)
        return self.sync(
            self._scatter, data, workers, broadcast, hash, seconds, asynchronous=asynchronous
        )

    async def _scatter(
        self, data: Any, workers: Any, broadcast: bool | int, hash: bool, timeout: float | None
    ) -> Any:
        if isinstance(data, range | Iterator):
            data = list(data)
        is_namedtuple = isinstance(data, tuple) and hasattr(data, "_fields")
        unpack = type(data) not in (dict, list, tuple, set, frozenset) and not is_namedtuple
        seq: list[Any] = [data] if unpack else list(data)
        if type(data) is dict:
            items: dict[Key, Any] = data
        else:
            names = [
                f"{type(x).__name__}-{tokenize(x) if hash else uuid.uuid4().hex}" for x in seq
            ]
            items = dict(zip(names, seq, strict=True))
        blobs = {k: cloudpickle.dumps(v) for k, v in items.items()}
        targets = await self._running_workers(workers, timeout)
        keys = list(items)
        holders = [_place(targets, broadcast) for _ in keys]
        by_worker: dict[str, list[Key]] = {}
        for k, hs in zip(keys, holders, strict=True):
            for a in hs:
                by_worker.setdefault(a, []).append(k)
        replies = await asyncio.gather(
            *(self._update_data(a, ks, blobs) for a, ks in by_worker.items()),
            return_exceptions=True,
        )
        nbytes: dict[Key, int] = {}
        errors = []
        for a, r in zip(by_worker, replies, strict=True):
            if isinstance(r, BaseException):
                errors.append(f"{a}: {r!r}")
            else:
                nbytes.update(r)
        header = {"op": "scatter", "holders": holders, "nbytes": [nbytes.get(k, -1) for k in keys]}
        if errors:
            # Still tell the scheduler: it has the workers drop what they staged.
            with contextlib.suppress(RuntimeError, comm.CommError):
                await self._request({**header, "error": "; ".join(errors)}, encode_keys(keys))
            raise RuntimeError(f"could not scatter to {'; '.join(errors)}")
        await self._request(header, encode_keys(keys))
        futures = {k: Future(k, self) for k in keys}
        for k, f in futures.items():
            f._state.type = type(items[k])
            f._state.finish()
        if unpack:
            return futures[keys[0]]
        if type(data) is dict:
            return futures
        out = [futures[k] for k in names]
        return type(data)(*out) if is_namedtuple else type(data)(out)

    async def _update_data(
        self, address: str, keys: list[Key], blobs: dict[Key, bytes]
    ) -> dict[Key, int]:
        """Stage values on a worker (``update-data``); returns their sizes there."""
        kb = encode_keys(keys)
        header = {
            "op": "update-data",
            "keys_bytes": len(kb),
            "sizes": [len(blobs[k]) for k in keys],
        }
        h, _ = await self._peer_request(address, header, b"".join([kb, *(blobs[k] for k in keys)]))
        if "error" in h:
            raise RuntimeError(h["error"])
        return dict(zip(keys, h["nbytes"], strict=True))

    async def _peer_request(
        self, address: str, header: comm.Header, payload: bytes = b""
    ) -> comm.Message:
        """One request to a worker's peer listener, on the cached connection."""
        lock, conns = self._peers.setdefault(address, (asyncio.Lock(), []))
        async with lock:
            if not conns:
                conns.append(await comm.connect(address, role="peer", timeout=self._timeout))
            c = conns[0]
            rid = next(self._ids)
            try:
                await c.write({**header, "id": rid}, payload)
                while True:
                    for m in await c.read_messages():
                        if m[0].get("id") == rid:
                            return m
            except comm.CommError:
                conns.clear()
                await c.close()
                raise

    # ----- the cluster ------------------------------------------------------------------

    async def _identity(self) -> comm.Header:
        h, _ = await self._request({"op": "scheduler-info"})
        return h

    async def _running_workers(self, workers: Any, timeout: float | None) -> list[str]:
        """Addresses of the running workers among ``workers`` (default all), sorted;
        waits up to ``timeout`` for one."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            info = await self._identity()
            found = [w["address"] for w in _select(info["workers"], workers)]
            if found:
                return sorted(found)
            if deadline is not None and loop.time() > deadline:
                raise TimeoutError("No valid workers found")
            await asyncio.sleep(0.1)

    def scheduler_info(self, n_workers: int = -1, **kwargs: Any) -> Any:
        """The scheduler and its workers, in ``distributed``'s shape: ``{"type",
        "id", "address", "services", "started", "n_workers", "total_threads",
        "total_memory", "workers": {address: {"nthreads", "name", "memory_limit",
        "resources", …}}}`` (``n_workers`` ≥ 0 limits the workers listed)."""

        async def run() -> dict[str, Any]:
            h = await self._identity()
            listed = h["workers"] if n_workers < 0 else h["workers"][:n_workers]
            return {
                "type": "Scheduler",
                "id": h["scheduler_id"],
                "address": h["address"],
                "services": {},
                "started": h["started"],
                "n_workers": len(h["workers"]),
                "total_threads": h["total_threads"],
                "total_memory": h["total_memory"],
                "n_tasks": h["n_tasks"],  # squall's addition: tasks the scheduler holds
                "workers": {w["address"]: _worker_identity(w) for w in listed},
            }

        return self.sync(run, **kwargs)

    def nthreads(self, workers: Any = None, **kwargs: Any) -> Any:
        """``{worker address: number of threads}`` (of ``workers``, default all)."""

        async def run() -> dict[str, int]:
            h = await self._identity()
            return {w["address"]: int(w["nthreads"]) for w in _select(h["workers"], workers)}

        return self.sync(run, **kwargs)

    ncores = nthreads

    def run(
        self,
        function: Callable[..., Any],
        *args: Any,
        workers: Any = None,
        wait: bool = True,
        nanny: bool = False,
        on_error: Literal["raise", "return", "ignore"] = "raise",
        **kwargs: Any,
    ) -> Any:
        """Call ``function(*args, **kwargs)`` on every worker (or ``workers``), outside
        the task system, on the worker's event loop: ``{address: result}``. A
        ``dask_worker`` parameter receives the worker; coroutine functions are awaited
        (not with ``wait=False``, which returns None). Failures raise, or with
        ``on_error="return"``/``"ignore"`` are returned/left out."""
        if nanny:
            raise ValueError("squall workers have no nanny")
        if on_error not in ("raise", "return", "ignore"):
            raise ValueError(f"on_error must be 'raise', 'return', or 'ignore'; got {on_error!r}")
        blob = cloudpickle.dumps((function, args, kwargs))

        async def one(address: str) -> Any:
            h, payload = await self._peer_request(address, {"op": "run", "wait": wait}, blob)
            if h.get("status") == "OK":
                return pickle.loads(payload)
            raise _remote_exception(h, payload, f"run on {address}")

        async def run_all() -> dict[str, Any] | None:
            info = await self._identity()
            addresses = [w["address"] for w in _select(info["workers"], workers)]
            replies = await asyncio.gather(*map(one, addresses), return_exceptions=True)
            results: dict[str, Any] = {}
            for address, r in zip(addresses, replies, strict=True):
                if isinstance(r, BaseException):
                    if on_error == "raise":
                        raise r
                    if on_error == "return":
                        results[address] = r
                else:
                    results[address] = r
            return results if wait else None

        return self.sync(run_all)

    def restart(self, timeout: float | str | None = None, wait_for_workers: bool = True) -> Any:
        """Restart every worker and forget every task: all futures (of every client)
        are cancelled. Waits for the workers to come back (unless not
        ``wait_for_workers``), ``TimeoutError`` after ``timeout`` (default four times
        the client's timeout)."""
        seconds = 4 * self._timeout if timeout is None else _timeout_seconds(timeout)

        async def run() -> None:
            header = {"op": "restart", "timeout": seconds, "wait_for_workers": wait_for_workers}
            h, _ = await self._request(header)
            if h.get("error"):
                raise TimeoutError(h["error"])

        return self.sync(run)

    def _restarted(self) -> None:
        """On the loop: the scheduler forgot every task."""
        with self._refcount_lock:
            states = list(self.futures.values())
            self.futures.clear()
            self._to_release.clear()
            self.generation += 1
        for st in states:
            st.cancel("scheduler-restart", RESTART_MESSAGE)

    # ----- cancel / retry ---------------------------------------------------------------

    def cancel(
        self,
        futures: Any,
        asynchronous: bool | None = None,
        force: bool = False,
        reason: str | None = None,
        msg: str | None = None,
    ) -> Any:
        """Stop computing the futures; their ``result()`` raises CancelledError."""
        keys = list(dict.fromkeys(f.key for f in futures_of(futures)))

        async def run() -> None:
            self._send({"op": "cancel", "force": force}, encode_keys(keys))
            for k in keys:
                with self._refcount_lock:
                    st = self.futures.pop(k, None)
                if st is not None:
                    st.cancel(reason or "cancelled by the client", msg)

        return self.sync(run, asynchronous=asynchronous)

    def retry(self, futures: Any, asynchronous: bool | None = None) -> Any:
        """Run erred futures (and erred dependencies) again."""
        keys = list(dict.fromkeys(f.key for f in futures_of(futures)))

        async def run() -> None:
            with self._refcount_lock:
                states = [st for st in map(self.futures.get, keys) if st is not None]
            for st in states:
                if st.status == "error":
                    st.retry()
            self._send({"op": "retry"}, encode_keys(keys))

        return self.sync(run, asynchronous=asynchronous)

    # ----- waiting ----------------------------------------------------------------------

    async def _watch_done(self, future: Future, callback: Callable[[Future], Any]) -> None:
        st = future._state
        while not st.done():
            await st.wait()
        callback(future)

    def _watch(self, future: Future, callback: Callable[[Future], Any]) -> None:
        """On the loop: call ``callback(future)`` on the loop once it is done."""
        if future._state.done():
            callback(future)
        else:
            asyncio.get_running_loop().create_task(self._watch_done(future, callback))


def _holders(addresses: list[str], packed: bytes, n: int) -> list[list[str]]:
    """A ``who-has`` reply's holders per key: per key a u16 count, then that many u16
    indices into ``addresses``."""
    table = array("H", packed)
    out: list[list[str]] = []
    pos = 0
    for _ in range(n):
        count = table[pos]
        out.append([addresses[i] for i in table[pos + 1 : pos + 1 + count]])
        pos += 1 + count
    if pos != len(table):
        raise comm.ProtocolError("who-has reply does not match the keys asked for")
    return out


def _place(targets: list[str], broadcast: bool | int) -> list[str]:
    """The workers for one scattered item: round robin, as Dask, or a broadcast."""
    if broadcast is True:
        return list(targets)
    n = min(max(int(broadcast), 1), len(targets))
    start = next(_round_robin)
    return [targets[(start + i) % len(targets)] for i in range(n)]


_round_robin = itertools.count()


def _select(infos: list[dict[str, Any]], workers: Any) -> list[dict[str, Any]]:
    """The running workers named by ``workers``: addresses (``host:port`` too, or
    ``(host, port)``), names or hosts; None means all."""
    running = [w for w in infos if w.get("status") == "running"]
    if workers is None:
        return running
    if isinstance(workers, str | numbers.Number) or (
        isinstance(workers, tuple) and len(workers) == 2 and isinstance(workers[1], int)
    ):
        workers = [workers]
    wanted: set[Any] = set()
    for w in workers:
        if isinstance(w, tuple):
            w = comm.format_address(str(w[0]), int(w[1]))
        wanted.update((w, f"tcp://{w}") if isinstance(w, str) and "://" not in w else (w,))
    return [w for w in running if wanted & {w["address"], w.get("name"), w.get("host")}]


def _worker_identity(w: dict[str, Any]) -> dict[str, Any]:
    """One worker of ``scheduler_info()``, as ``distributed``'s ``WorkerState.identity``."""
    return {
        "type": "Worker",
        "id": w["name"],
        "host": w["host"],
        "name": w["name"],
        "nthreads": w["nthreads"],
        "memory_limit": w["memory_limit"],
        "resources": w["resources"],
        "status": w["status"],
        "services": {},
        "nanny": None,
        "metrics": {
            "memory": w["nbytes"],
            "in_memory": w["has_what"],
            "processing": w["processing"],
        },
    }


def _remote_exception(h: comm.Header, payload: memoryview, where: str) -> BaseException:
    """The exception of an ``erred``-style reply: pickled exception, then traceback."""
    n_exc = int(h.get("n_exception", 0))
    try:
        loaded: Any = pickle.loads(payload[:n_exc])
    except Exception:
        loaded = None
    exc: BaseException = (
        loaded
        if isinstance(loaded, BaseException)
        else RemoteError(str(h.get("exception_text", "")) or f"{where} failed")
    )
    with contextlib.suppress(Exception):
        tb = pickle.loads(payload[n_exc:])
        if isinstance(tb, types.TracebackType):
            exc = exc.with_traceback(tb)
    add_note = getattr(exc, "add_note", None)
    if add_note is not None and h.get("traceback_text"):
        add_note(f"Remote traceback ({where}):\n{str(h['traceback_text']).rstrip()}")
    return exc


def fire_and_forget(obj: Any) -> None:
    """Run the futures in ``obj`` to completion even once they are released (their
    results are not kept): for tasks run for their side effects."""
    by_client: dict[int, tuple[Client, list[Future]]] = {}
    for f in futures_of(obj):
        by_client.setdefault(id(f.client), (f.client, []))[1].append(f)
    for client, futures in by_client.values():
        # After the graph that made them (loop order) and before any release of them.
        client._send_soon({"op": "fire-and-forget"}, encode_keys([f.key for f in futures]))


def _to_dep(obj: Any) -> Key | None:
    return obj.key if isinstance(obj, Future) else None


def _parse_erred(
    h: comm.Header, payload: memoryview
) -> tuple[Key, BaseException, types.TracebackType | None]:
    """``task-erred`` → (key, exception to raise, traceback)."""
    n_key, n_exc = int(h["n_key"]), int(h.get("n_exception", 0))
    [key] = decode_keys(bytes(payload[:n_key]))
    text, tb_text = str(h.get("exception_text", "")), str(h.get("traceback_text", ""))
    exc: BaseException
    if h.get("error_kind") == "KilledWorker":
        return key, KilledWorker(text or f"task {key!r} killed too many workers", key), None
    try:
        loaded = pickle.loads(payload[n_key : n_key + n_exc]) if n_exc else None
    except Exception:
        loaded = None
    exc = loaded if isinstance(loaded, BaseException) else RemoteError(text or repr(loaded))
    tb: types.TracebackType | None = None
    with contextlib.suppress(Exception):
        rest = payload[n_key + n_exc :]
        obj: Any = pickle.loads(rest) if len(rest) else None
        if hasattr(obj, "as_traceback"):
            obj = obj.as_traceback()
        if isinstance(obj, types.TracebackType):
            tb = obj
    add_note = getattr(exc, "add_note", None)
    if tb_text and add_note is not None:
        add_note(f"Remote traceback (task {key!r}):\n{tb_text.rstrip()}")
    return key, exc, tb


def _flat_futures(obj: Any) -> bool:
    """Whether ``obj`` is a list, tuple or set of futures only."""
    return type(obj) in (list, tuple, set, frozenset) and all(
        map(isinstance, obj, itertools.repeat(Future))
    )


def futures_of(obj: Any) -> list[Future]:
    """The futures inside ``obj``: a future, lists/tuples/sets/dicts of them, or a
    persisted dask collection."""
    if _flat_futures(obj):
        # A map's futures: C loops, each future once.
        return list(dict(zip(map(id, obj), obj, strict=True)).values())
    out: list[Future] = []
    seen: set[int] = set()

    def walk(o: Any) -> None:
        if isinstance(o, Future):
            if id(o) not in seen:
                seen.add(id(o))
                out.append(o)
        elif type(o) in (list, tuple, set, frozenset):
            for x in o:
                walk(x)
        elif type(o) is dict:
            for x in o.values():
                walk(x)
        elif is_dask_collection(o):  # a persisted collection: its graph holds futures
            for x in dict(o.__dask_graph__()).values():
                walk(x)

    walk(obj)
    return out


_SKIP = object()


def _pack(o: Any, data: dict[Key, Any]) -> Any:
    if isinstance(o, Future):
        return data.get(o.key, _SKIP)
    if type(o) in (list, tuple, set, frozenset):
        return type(o)(x for x in (_pack(x, data) for x in o) if x is not _SKIP)
    if type(o) is dict:
        return {k: v for k, v in ((k, _pack(v, data)) for k, v in o.items()) if v is not _SKIP}
    return o


# ----- wait / as_completed ----------------------------------------------------------------


class DoneAndNotDoneFutures(NamedTuple):
    done: set[Future]
    not_done: set[Future]


def _client_of(fs: list[Future]) -> Client:
    return fs[0].client if fs else default_client()


def wait(fs: Any, timeout: float | str | None = None, return_when: str = ALL_COMPLETED) -> Any:
    """Wait until all (or the first, or the first erred) of the futures are done;
    returns ``(done, not_done)``; ``TimeoutError`` after ``timeout``."""
    if not isinstance(timeout, (int, float, str, type(None))):
        raise TypeError(
            "timeout= keyword received a non-numeric value.\n"
            "Beware that wait expects a list of values\n"
            "  Bad:  wait(x, y, z)\n"
            "  Good: wait([x, y, z])"
        )
    # A future listed twice is harmless here: no need for futures_of's pass over them.
    futures = list(fs) if _flat_futures(fs) else futures_of(fs)
    with user_frames():
        return _client_of(futures).sync(_wait, futures, return_when, callback_timeout=timeout)


_STATE = operator.attrgetter("_state")
_STATUS = operator.attrgetter("status")
_DONE = frozenset({"finished", "error", "cancelled"})


def _not_done(states: list[FutureState]) -> list[FutureState]:
    """The states not done yet (``not st.done()``, in C loops)."""
    return list(itertools.compress(states, map(operator.not_, _done_flags(states))))


def _done_flags(states: list[FutureState]) -> Iterator[bool]:
    return map(_DONE.__contains__, map(_STATUS, states))


async def _wait(fs: list[Future], return_when: str) -> DoneAndNotDoneFutures:
    states = list(map(_STATE, fs))  # a future's state never changes
    if return_when == ALL_COMPLETED:
        pending = states
        while pending:
            # The last one tends to finish last (tasks run in order): one wake-up, and
            # one pass over the others, for most waits.
            await pending[-1].wait()
            pending = _not_done(pending)
    elif return_when in (FIRST_COMPLETED, FIRST_EXCEPTION):
        first = return_when == FIRST_COMPLETED

        def stop() -> bool:
            if first:
                return any(f._state.done() for f in fs)
            return any(f.status == "error" for f in fs) or all(f._state.done() for f in fs)

        while fs and not stop():
            waiting = {f._state for f in fs if not f._state.done()}
            tasks = [asyncio.ensure_future(st.wait()) for st in waiting]
            try:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in tasks:
                    t.cancel()
    else:
        raise ValueError(f"unknown return_when {return_when!r}")
    if "cancelled" in map(_STATUS, states):
        exc = next(st.exception for st in states if st.status == "cancelled")
        assert exc is not None
        raise exc
    if return_when == ALL_COMPLETED:
        return DoneAndNotDoneFutures(set(fs), set())
    flags = list(_done_flags(states))
    return DoneAndNotDoneFutures(
        set(itertools.compress(fs, flags)),
        set(itertools.compress(fs, map(operator.not_, flags))),
    )


class as_completed:
    """Iterate over futures in the order they complete (sync ``for`` or ``async for``).

    As distributed's: a future is yielded once per time it was added (two futures of one
    key are two futures); ``with_results=True`` yields ``(future, result)``, the result
    of an erred future being ``(type, exception, traceback)`` with ``raise_errors=False``
    (otherwise its exception is raised) and that of a cancelled one its CancelledError;
    ``count()`` is the futures not completed yet plus the completions not yielded yet;
    ``timeout`` counts from the construction."""

    def __init__(
        self,
        futures: Iterable[Future] | None = None,
        loop: Any = None,
        with_results: bool = False,
        raise_errors: bool = True,
        *,
        timeout: float | str | None = None,
    ) -> None:
        self.with_results = with_results
        self.raise_errors = raise_errors
        self._cond = threading.Condition()
        self._queue: deque[Future] = deque()
        # Futures not completed yet by identity, with how many times each was added.
        self._pending: dict[int, tuple[Future, int]] = {}
        self._event: asyncio.Event | None = None
        seconds = _timeout_seconds(timeout)
        self._deadline = None if seconds is None else time.monotonic() + seconds
        if futures is not None:
            self.update(futures)

    def add(self, future: Future) -> None:
        self.update((future,))

    def update(self, futures: Iterable[Future]) -> None:
        fs = list(futures)
        for f in fs:
            if not isinstance(f, Future):
                raise TypeError(f"Input must be a future, got {f}")
        by_client: dict[int, tuple[Client, list[Future]]] = {}
        with self._cond:
            for f in fs:
                self._pending[id(f)] = (f, self._pending.get(id(f), (f, 0))[1] + 1)
                by_client.setdefault(id(f.client), (f.client, []))[1].append(f)
        for client, group in by_client.values():
            client._call_soon(self._watch, client, group)

    def _watch(self, client: Client, fs: list[Future]) -> None:
        for f in fs:  # one watch per addition: each completes one of them
            client._watch(f, self._notify)

    def _notify(self, future: Future) -> None:
        with self._cond:
            entry = self._pending.get(id(future))
            if entry is None:  # cleared
                return
            if entry[1] > 1:
                self._pending[id(future)] = (future, entry[1] - 1)
            else:
                del self._pending[id(future)]
            self._queue.append(future)
            self._cond.notify_all()
        if self._event is not None:
            self._event.set()

    def count(self) -> int:
        with self._cond:
            return len(self._pending) + len(self._queue)

    def is_empty(self) -> bool:
        return not self.count()

    def has_ready(self) -> bool:
        with self._cond:
            return bool(self._queue)

    def clear(self) -> None:
        with self._cond:
            self._pending.clear()
            self._queue.clear()

    def _remaining(self) -> float | None:
        if self._deadline is None:
            return None
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("as_completed timed out")
        return remaining

    def __iter__(self) -> as_completed:
        return self

    def _next_future(self) -> Future:
        with self._cond:
            while not self._queue:
                if not self._pending:
                    raise StopIteration
                self._cond.wait(self._remaining())
            return self._queue.popleft()

    def _yielded(self, f: Future, outcome: tuple[bool, Any]) -> Any:
        erred, result = outcome
        if erred and self.raise_errors:
            _, exc, tb = result
            raise exc.with_traceback(tb)
        return f, result

    def __next__(self) -> Any:
        f = self._next_future()
        if not self.with_results:
            return f
        with user_frames():
            return self._yielded(f, f.client.sync(_outcome, f))

    def next_batch(self, block: bool = True) -> list[Any]:
        batch = [next(self)] if block else []
        while self.has_ready():
            batch.append(next(self))
        return batch

    def batches(self) -> Iterator[list[Any]]:
        while True:
            try:
                yield self.next_batch(block=True)
            except StopIteration:
                return

    def __aiter__(self) -> as_completed:
        return self

    async def __anext__(self) -> Any:
        if self._event is None:
            self._event = asyncio.Event()
        while True:
            with self._cond:
                if self._queue:
                    f = self._queue.popleft()
                    break
                if not self._pending:
                    raise StopAsyncIteration
                self._event.clear()
            await _timed(self._event.wait(), self._remaining())
        if not self.with_results:
            return f
        with user_frames():
            return self._yielded(f, await _outcome(f))


async def _outcome(f: Future) -> tuple[bool, Any]:
    """``(erred, result)`` of a done future for ``as_completed``: its value, its
    CancelledError, or if it erred ``(type, exception, traceback)`` (distributed's)."""
    value = await f._result(raiseit=False)
    st = f._state
    if st.status == "error":  # checked with no await since: the status it ended with
        return True, (type(value), value, st.traceback)
    return False, value
