"""The client's connection to the scheduler, and its futures' reference counts.

The connection's lifecycle, the event loop it runs on and the messages both ways
(docs/runtime.md). Futures on the same key share one
:class:`~squall.client.futures.FutureState`, which counts them; when the last one is
released or garbage collected the key goes into a ``release-keys`` message, batched per
event loop iteration, sent after the graphs queued before the release (they may name
the key) and before any later message.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import threading
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from squall import config
from squall._core import (
    FutureTable,
    decode_keys,
    encode_keys,
    finish_keys,
    hold_keys,
    release_states,
)
from squall.client.events import DEFAULT_HANDLERS, Handler
from squall.client.futures import Future, FutureState, Key
from squall.client.loop import require_running_loop, timed, timeout_seconds
from squall.protocol import comm, liveness
from squall.protocol import messages as m
from squall.protocol.actor_links import close_links
from squall.protocol.dispatch import Handlers
from squall.protocol.peers import Peers
from squall.protocol.remote_errors import parse_task_erred
from squall.protocol.tracebacks import user_frames
from squall.security import Security
from squall.worker.context import task_worker_address

if TYPE_CHECKING:
    from squall.client.client import Client

logger = logging.getLogger("squall.client")

R = TypeVar("R", bound=m.Message)

#: What ``Client()`` without an address starts: ``LocalCluster``, which registers itself
#: here when imported (``import squall`` does): the deployers sit above the client.
start_local_cluster: Callable[..., Any] | None = None
RESTART_MESSAGE = "Scheduler has restarted. Please re-run your work."
#: The reason futures are cancelled with when the scheduler is lost (as distributed's).
CONNECTION_LOST = "scheduler-connection-lost"
#: The least time one connection attempt is given, near the client's deadline (seconds).
MIN_CONNECT_TIMEOUT = 0.1


#: The most payload bytes one ``call_soon_batched`` batch gathers (a larger item goes
#: alone): far below a frame, so a batch is never refused for its size.
BATCH_BYTES = 1 << 20
#: Payload bytes queued for the scheduler and not yet written beyond which a thread
#: sending a large graph in pieces (a ``map``) waits: what the client holds of a graph
#: the scheduler has not taken yet is bounded, not a share of every task.
MAX_BACKLOG = 32 << 20
#: How long one wait for room lasts before the connection's state is checked again.
ROOM_RECHECK = 1.0


class _Batch:
    """Items queued for one call of ``flush(tag, items)`` on the loop."""

    __slots__ = ("flush", "items", "size", "tag")

    def __init__(self, flush: Callable[[Any, list[Any]], None], tag: Any) -> None:
        self.flush = flush
        self.tag = tag
        self.items: list[Any] = []
        self.size = 0


class ClientConnection:
    """A client's connection to the scheduler and the event loop it runs on; the
    reference counts of the client's futures and the messages that change their
    states. :class:`~squall.client.client.Client` and its other collaborators build
    the API on it (requests, ``sync``, the refcount lock around ``futures``).

    Connects on construction (a blocking client) or when first awaited (an
    asynchronous one, :meth:`started`); ``on_closed`` runs on the loop once closed."""

    def __init__(
        self,
        address: str | Any,
        loop: Any,
        timeout: float | str | None,
        asynchronous: bool,
        name: str | None,
        security: Security | bool | None,
        on_closed: Callable[[], None],
        **kwargs: Any,
    ) -> None:
        # Without an address, ``kwargs`` go to the LocalCluster started (``n_workers=``,
        # ``processes=``, ...), which ignores distributed's options it does not know, as
        # it does otherwise.
        if asynchronous:
            require_running_loop()  # before starting a cluster nothing would close
        self.own_cluster: Any = None
        if address is None:
            if start_local_cluster is None:
                raise RuntimeError("Client() needs an address: squall.deploy is not imported")
            self.own_cluster = address = start_local_cluster(security=security, **kwargs)
        #: The cluster object this client was given or started (``Client(cluster)``,
        #: ``Client()``), as distributed's ``Client.cluster``; None for an address.
        self.cluster: Any = None if isinstance(address, str) else address
        if not isinstance(security, Security):  # True: distributed's "make one"
            cluster_security: Security | None = getattr(self.cluster, "security", None)
            security = cluster_security or (Security.temporary() if security else None)
        #: TLS and token for the scheduler and workers (docs/security.md); None: the
        #: process's, from config.
        self.security: Security | None = security
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
        #: The worker this client was made on by a task, which the scheduler is told:
        #: what it holds of the primitives comes back when that worker is removed.
        self.on_worker = task_worker_address()
        self.status = "newly-created"
        #: The state of every key this client holds futures for, under ``refcount_lock``
        #: (a map's keys in runs, docs/runtime.md#the-table-of-states).
        self.futures = FutureTable()
        self.generation = 0  # restarts so far
        self.refcount_lock = threading.RLock()
        self._on_closed = on_closed
        #: Seconds to connect (to the scheduler, and to workers for data and ``run``).
        self.timeout = timeout_seconds(timeout) or config.seconds("comm.timeouts.connect")
        self._comm: comm.Comm | None = None
        #: The port of the scheduler's dashboard (None: it serves none), told on connecting.
        self.dashboard_port: int | None = None
        self.dashboard_scheme = "http"
        self._stream: comm.BatchedSend | None = None
        self._reader: asyncio.Task[None] | None = None
        self._watchdog: liveness.Watchdog | None = None
        self._requests: dict[int, asyncio.Future[tuple[m.Message, memoryview]]] = {}
        #: Futures' states a reply handed over, held for its request until taken.
        self._handed: dict[int, list[tuple[Key, FutureState]]] = {}
        self._graphs: dict[int, list[Key]] = {}
        #: ``{topic: handler}`` of the topics subscribed to (``subscribe_topic``).
        self.event_handlers: dict[str, Handler] = dict(DEFAULT_HANDLERS)
        self._handler_tasks: set[asyncio.Task[Any]] = set()
        self._handlers = self._scheduler_handlers()
        self._ids = itertools.count(1)
        self._to_release: list[Key] = []
        self._release_scheduled = False
        # Payload bytes of ``send_soon`` calls the loop has not handed to the stream yet,
        # and the condition a thread waiting for room (``wait_for_room``) waits on.
        self._queued_bytes = 0
        self._room = threading.Condition()
        # Futures released from any thread, waiting for the loop (one wake-up per batch):
        # a state, then its key, for each.
        self._releasing: deque[FutureState | Key] = deque()
        self._drain_scheduled = False
        # Calls queued for the loop by ``call_soon`` (any thread), run in order by one
        # callback: a burst of submits wakes the loop once, not once each.
        self._soon: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._soon_scheduled = False
        #: The batch ``call_soon_batched`` adds to, until another call is queued or the
        #: loop takes it (under ``refcount_lock``).
        self._open_batch: _Batch | None = None
        #: What to do when the scheduler refuses a batch's message: send its parts
        #: again one by one, so that only those at fault fail (by request id).
        self._apart: dict[int, Callable[[], None]] = {}
        self.peers = Peers(connect_timeout=self.timeout, security=self.security)
        self._thread: threading.Thread | None = None
        self._thread_id: int | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._started: asyncio.Future[None] | None = None
        if asynchronous:
            self.loop = asyncio.get_running_loop()
            self._started = asyncio.ensure_future(self._start())
        else:
            self.loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run_loop() -> None:
                assert self.loop is not None
                asyncio.set_event_loop(self.loop)
                self._thread_id = threading.get_ident()
                self.loop.call_soon(ready.set)
                self.loop.run_forever()

            self._thread = threading.Thread(target=run_loop, name="squall-client", daemon=True)
            self._thread.start()
            ready.wait()
            try:
                self._run_sync(self._start())
            except BaseException:
                self._stop_loop()
                raise

    # ----- lifecycle ------------------------------------------------------------------

    async def started(self) -> None:
        """Connect if not yet connected (an asynchronous client's first await)."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._start())
        await self._started

    async def _connect(self) -> comm.Comm:
        """The scheduler connection. A scheduler not listening yet (a script that starts
        it and its client together) is tried again until the client's timeout, as
        distributed's client does; a refused handshake fails at once."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        delay = liveness.FIRST_RETRY
        while True:
            try:
                return await comm.connect(
                    self.address,
                    role="client",
                    info={"client": self.id, "worker": self.on_worker},
                    timeout=max(deadline - loop.time(), MIN_CONNECT_TIMEOUT),
                    security=self.security,
                )
            except comm.ConnectError as e:
                if loop.time() + delay >= deadline:
                    raise comm.ConnectError(
                        f"no scheduler at {self.address} within the timeout of "
                        f"{self.timeout}s: {e}"
                    ) from None
            await asyncio.sleep(delay)
            delay = min(2 * delay, liveness.MAX_RETRY)

    async def _start(self) -> None:
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        if self._thread is None:
            self._thread_id = threading.get_ident()
        c = await self._connect()
        reply, _ = await c.read()
        if not isinstance(reply, m.ClientRegistered):
            await c.close()
            why = reply.message if isinstance(reply, m.Error) else reply
            raise comm.HandshakeError(f"scheduler {self.address} refused the client: {why}")
        self._comm = c
        self.dashboard_port = reply.dashboard
        self.dashboard_scheme = "https" if reply.dashboard_scheme == "https" else "http"
        self._stream = comm.BatchedSend(c, config.seconds("comm.batch-interval.client"))
        self._stream.on_written = self._room_made
        self._stream.start()
        self._reader = asyncio.get_running_loop().create_task(self._read_forever())
        self._watchdog = liveness.Watchdog(
            liveness.silence_timeout(),
            lambda: self.send(m.HeartbeatClient()),
            self._scheduler_silent,
            keep_alive=True,
        )
        self.status = "running"
        for topic in self.event_handlers:
            self.send(m.SubscribeTopic(topic=topic))

    def close(self, timeout: float | str | None = None) -> Any:
        """``Client.close``: awaitable on an asynchronous client, else blocking."""
        if self.asynchronous:
            return self.close_async(timeout)
        # Not on status: a client that lost its scheduler is "closed" already, but its
        # loop and the cluster it started still run until this.
        if self.loop is None or self.loop.is_closed():
            return None
        try:
            self._run_sync(timed(self._close(), timeout))
        finally:
            self._stop_loop()
            if self.own_cluster is not None:
                self.own_cluster.close()
        return None

    async def close_async(self, timeout: float | str | None) -> None:
        try:
            await timed(self._close(), timeout)
        finally:
            cluster, self.own_cluster = self.own_cluster, None
            if cluster is not None:  # its close blocks while the processes stop
                await asyncio.get_running_loop().run_in_executor(None, cluster.close)

    async def _close(self) -> None:
        if self.status == "closed":
            return
        self.status = "closing"
        if self._watchdog is not None:
            self._watchdog.stop()
        self._flush_releases()
        if self._stream is not None:
            await self._stream.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._comm is not None:
            await self._comm.close()
        await self.peers.close()
        await close_links()
        self._fail_everything("client closed")
        self.status = "closed"
        self._room_made()
        await asyncio.sleep(0)  # let watchers of the now-cancelled futures finish
        self._on_closed()

    def _stop_loop(self) -> None:
        loop, thread = self.loop, self._thread
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

    # ----- running things on the loop -------------------------------------------------

    def _run_sync(self, coro: Coroutine[Any, Any, Any]) -> Any:
        loop = self.loop
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
        """``Client.sync``; the traceback of what it raises shows the user's frames."""
        coro = timed(func(*args, **kwargs), callback_timeout)
        if asynchronous if asynchronous is not None else self.asynchronous:
            return coro
        with user_frames():
            return self._run_sync(coro)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop, after everything queued before (any thread).
        Lock-free: the queue is a deque, and the loop is woken only when no run of the
        queue is pending, since each wake-up is a system call that hands the GIL over."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        self._open_batch = None  # what is batched after this call runs after it
        self._soon.append((fn, args))
        if not self._soon_scheduled:
            self._soon_scheduled = True
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._run_soon)

    def call_soon_batched(
        self, flush: Callable[[Any, list[Any]], None], tag: Any, item: Any, size: int
    ) -> None:
        """Any thread: queue ``flush(tag, [item])`` as :meth:`call_soon` would, except
        that items queued back to back for the same ``flush`` with an equal ``tag`` (no
        other call queued between them, the loop not at them yet, at most
        ``BATCH_BYTES`` of their ``size``) share one call. ``flush`` sends a message
        naming futures: as after :meth:`send_soon`, their releases follow it."""
        with self.refcount_lock:
            batch = self._open_batch
            if (
                batch is None
                or batch.flush != flush
                or batch.tag != tag
                or batch.size + size > BATCH_BYTES
            ):
                batch = _Batch(flush, tag)
                self._unsent += 1
                self.call_soon(self._flush_batch, batch)
                self._open_batch = batch
            batch.items.append(item)
            batch.size += size

    def _flush_batch(self, batch: _Batch) -> None:
        with self.refcount_lock:
            if self._open_batch is batch:
                self._open_batch = None  # closed: nothing joins it from here on
        try:
            batch.flush(batch.tag, batch.items)
        finally:
            with self.refcount_lock:
                self._unsent -= 1
        self._drain_releasing()

    def refused_apart(self, rid: int, again: Callable[[], None]) -> None:
        """On the loop: if the scheduler refuses the graph of request ``rid`` (or it
        cannot be sent), call ``again`` rather than failing all its futures."""
        self._apart[rid] = again

    def _run_soon(self) -> None:
        """On the loop: run the calls queued so far, in order. One queued meanwhile
        (after the flag is cleared) schedules the next run: a thread submitting
        without pause cannot keep the loop from its reads and writes."""
        self._soon_scheduled = False
        soon = self._soon
        for _ in range(len(soon)):
            fn, args = soon.popleft()
            try:
                fn(*args)
            except Exception as e:  # as asyncio treats a failed callback: logged
                assert self.loop is not None
                self.loop.call_exception_handler(
                    {"message": f"Exception in client callback {fn!r}", "exception": e}
                )

    def send(self, msg: m.Message, payload: bytes = b"", urgent: bool = False) -> None:
        """On the loop: send one message (pending releases go first); ``urgent``: see
        :meth:`squall.protocol.comm.BatchedSend.send`."""
        self._drain_releasing()
        self._flush_releases()
        if self._stream is None or self.status not in ("running",):
            return
        try:
            self._stream.comm.check(msg, payload)
            self._stream.send(msg, payload, urgent)
        except comm.CommClosedError:
            logger.debug("dropped %s: the scheduler connection is closed", msg.op())
        except comm.MessageTooLarge as e:
            # That call fails alone; the connection and other futures are unharmed.
            rid = msg.id if isinstance(msg, m.Request) else None
            keys = self._graphs.pop(rid, None) if rid is not None else None
            if keys is None or rid is None:
                raise
            again = self._apart.pop(rid, None)
            if again is not None:
                again()
            else:
                self._graph_failed(keys, f"the graph was not sent: {e}")

    #: Messages naming futures (graphs, fire-and-forget) queued for the loop but not on
    #: the stream yet, counted under the refcount lock. While there are any, released
    #: futures wait in ``_releasing``: a release sent first could reach the scheduler
    #: before the message naming its key, which would then ignore the release of a key
    #: it does not know yet (and keep it, wanted, forever) or forget a dependency the
    #: graph needs. The futures themselves are not held, so they die on ``del``.
    _unsent = 0

    def send_soon(self, msg: m.Message, payload: bytes = b"", keep: object = None) -> None:
        """Any thread: send from the loop, after everything queued before; futures
        released meanwhile are released after it. ``keep`` stays referenced until then."""
        with self.refcount_lock:
            self._unsent += 1
            self._queued_bytes += len(payload)
        self.call_soon(self._send_queued, msg, payload, keep)

    def _send_queued(self, msg: m.Message, payload: bytes, _keep: object) -> None:
        try:
            self.send(msg, payload)
        finally:
            with self.refcount_lock:
                self._unsent -= 1
                self._queued_bytes -= len(payload)
        self._drain_releasing()

    def wait_for_room(self) -> None:
        """A thread other than the loop's: wait while more than ``MAX_BACKLOG`` payload
        bytes queued for the scheduler are unwritten (a producer faster than the
        scheduler takes its graph). Returns at once on the loop's thread, and once the
        connection is no longer running."""
        if threading.get_ident() == self._thread_id:
            return
        with self._room:
            while self.status == "running" and self._backlog() > MAX_BACKLOG:
                self._room.wait(ROOM_RECHECK)

    def _backlog(self) -> int:
        stream = self._stream
        return self._queued_bytes + (stream.backlog if stream is not None else 0)

    def _room_made(self) -> None:
        """A frame was written, or the connection stopped: waiters look again."""
        with self._room:
            self._room.notify_all()

    def track_graph(self, keys: list[Key]) -> int:
        """A request id for an ``update-graph`` defining ``keys``: if the scheduler
        refuses it, or it cannot be sent, their pending futures err."""
        rid = next(self._ids)
        self._graphs[rid] = keys
        return rid

    async def request(
        self, msg: m.Request, reply: type[R], payload: bytes = b"", urgent: bool = False
    ) -> tuple[R, memoryview]:
        """Send a request (any thread's coroutine on the loop) and wait for its
        ``reply``; ``request-failed`` raises RuntimeError with the scheduler's reason."""
        rid = msg.id = next(self._ids)
        fut: asyncio.Future[tuple[m.Message, memoryview]] = (
            asyncio.get_running_loop().create_future()
        )
        self._requests[rid] = fut
        try:
            self.send(msg, payload, urgent)
            if self.status != "running":
                raise comm.CommClosedError("the client is not connected")
            answer, data = await fut
        finally:
            self._requests.pop(rid, None)
        if not isinstance(answer, reply):
            raise comm.ProtocolError(f"{msg.op()!r} answered with {answer.op()!r}")
        return answer, data

    # ----- reference counting -----------------------------------------------------------

    @property
    def refcount(self) -> dict[Key, int]:
        """How many futures this client holds per key."""
        with self.refcount_lock:
            return {k: st.refs for k, st in self.futures.items()}

    def hold(self, key: Key) -> FutureState:
        with self.refcount_lock:
            st: FutureState | None = self.futures.get(key)
            if st is None:
                st = self.futures[key] = FutureState()
            else:
                st.refs += 1
            return st

    def acquire_many(
        self, keys: list[Key], client: Client, run: tuple[str, int] | None = None
    ) -> tuple[list[Future], list[int] | None]:
        """Futures of ``client`` for ``keys`` (a bulk ``Future(key, client)``, one lock
        acquisition and one compiled loop) and the indices of the keys it did not hold
        before (None: all). A held key (or one earlier in ``keys``) keeps its state.
        ``run``, ``(head, start)``: key ``i`` is ``f"{head}{start + i:08x}"`` (a map's)."""
        with self.refcount_lock:
            return hold_keys(self.futures, keys, Future, FutureState, client, run)

    def release_soon(self, state: FutureState, key: Key) -> None:
        """Any thread: drop one reference to ``state`` (of ``key``) on the loop.
        Lock-free (a future's ``__del__``): extending a deque by a pair and popping from
        it are atomic, and a drain is scheduled whenever none is pending after it."""
        self._releasing.extend((state, key))
        if not self._drain_scheduled:
            self._drain_scheduled = True
            self.call_soon(self._drain_releasing)

    def _drain_releasing(self) -> None:
        """On the loop: apply the queued releases and send the keys they free."""
        self._drain_scheduled = False
        settled = self.settle_releases()
        if settled is None:
            # A message naming futures waits to be sent: sending it drains, so until
            # then no release needs a wake-up.
            self._drain_scheduled = True
        elif settled and not self._release_scheduled:
            self._release_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_releases)

    def settle_releases(self) -> bool | None:
        """Any thread: drop the references queued by released futures now; the keys
        they free join the next ``release-keys``. True if any did; None (and nothing
        done) while a message naming futures is unsent (``_unsent``)."""
        with self.refcount_lock:
            if self._unsent:
                return None
            releasing = self._releasing
            # Pairs: the deque only ever grows by whole ones.
            pairs = [releasing.popleft() for _ in range(len(releasing))]
            # A key is released unless another state holds it (``cancel`` drops a key's
            # state; a future made after that makes a new one): one compiled loop.
            gone = release_states(self.futures, pairs, FutureState)
            self._to_release.extend(gone)
        return bool(gone)

    def _flush_releases(self) -> None:
        self._release_scheduled = False
        with self.refcount_lock:
            keys, self._to_release = self._to_release, []
        if keys and self._stream is not None and self.status == "running":
            with contextlib.suppress(comm.CommClosedError):
                self._stream.send(m.ReleaseKeys(), encode_keys(keys))

    # ----- scheduler messages -----------------------------------------------------------

    async def _read_forever(self) -> None:
        assert self._comm is not None
        try:
            while True:
                messages = await self._comm.read_messages()
                if self._watchdog is not None:
                    self._watchdog.heard()
                for msg, payload in messages:
                    try:
                        self._handlers(msg, payload)
                    except Exception:
                        logger.exception("client: cannot handle %s", msg)
        except comm.CommError as e:
            self._lost_scheduler(str(e))

    def _scheduler_silent(self, seconds: float) -> None:
        """On the loop: the scheduler answered nothing, not even keep-alives, for the
        whole ``squall.comm.timeouts.tcp``: it hangs or is cut off."""
        timeout = self._watchdog.timeout if self._watchdog is not None else seconds
        self._lost_scheduler(
            f"no message from it for {seconds:.1f}s (squall.comm.timeouts.tcp = {timeout}s)"
        )
        if self._reader is not None:
            self._reader.cancel()
        if self._comm is not None:
            self._comm.abort()

    def _lost_scheduler(self, why: str) -> None:
        """The connection is gone: every pending call and future fails, naming the
        scheduler and why (futures are cancelled as distributed's are)."""
        if self.status != "running":
            return
        msg = (
            f"Client lost the connection to the scheduler at {self.address}: {why}. "
            "Please check your connection and re-run your work."
        )
        logger.warning("%s", msg)
        self.status = "closed"
        if self._watchdog is not None:
            self._watchdog.stop()
        self._room_made()
        self._fail_everything(CONNECTION_LOST, msg)

    def _fail_everything(self, reason: str, msg: str | None = None) -> None:
        for fut in self._requests.values():
            if not fut.done():
                fut.set_exception(comm.CommClosedError(msg or reason))
        with self.refcount_lock:
            held = self.futures.items()
        for key, st in held:
            if not st.done():
                st.cancel(key, reason, msg)

    def _states(self, payload: memoryview) -> list[FutureState]:
        keys = decode_keys(bytes(payload))
        with self.refcount_lock:
            return list(filter(None, map(self.futures.get, keys)))

    def _scheduler_handlers(self) -> Handlers[None]:
        """The handlers of the scheduler's messages (docs/protocol.md#scheduler--client)."""
        replies = [c for c in m.messages(m.Route.SCHEDULER_TO_CLIENT) if issubclass(c, m.Reply)]
        table: dict[type[m.Message], Callable[[Any, memoryview], None]] = {
            m.KeyInMemory: self._in_memory,
            m.TaskErred: self._task_erred,
            m.LostData: lambda _, p: self._each(p, FutureState.lose),
            m.TaskRetried: lambda _, p: self._each(p, FutureState.retry),
            m.CancelledKeys: self._cancelled,
            m.Restart: lambda _, __: self._restarted(),
            m.Event: self._event,
            m.HeartbeatClient: lambda _, __: None,  # the keep-alive's answer
            m.ClientRegistered: self._unexpected,
            m.Error: self._unexpected,
            **dict.fromkeys(replies, self._reply),
            m.RunResult: self._reply,  # run_on_scheduler's answer
            m.SchedulerPluginResult: self._reply,
            m.PluginReply: self._reply,
            m.CoordReply: self._reply_handing_over,
            m.GetDatasetsReply: self._reply_handing_over,
        }
        return Handlers(m.Route.SCHEDULER_TO_CLIENT, table, malformed=self._malformed)

    def _in_memory(self, msg: m.KeyInMemory, payload: memoryview) -> None:
        """Finishes the states of the keys (one compiled loop); only those awaited one
        by one (with an event) are signalled from here."""
        with self.refcount_lock:
            awaited = finish_keys(self.futures, bytes(payload), FutureState)
        for st in awaited:
            st._signal()

    def _each(self, payload: memoryview, change: Callable[[FutureState], None]) -> None:
        for st in self._states(payload):
            change(st)

    def _task_erred(self, msg: m.TaskErred, payload: memoryview) -> None:
        key, exc, tb = parse_task_erred(msg, payload)
        with self.refcount_lock:
            erred = self.futures.get(key)
        if erred is not None:
            erred.set_error(exc, tb)

    def _cancelled(self, msg: m.CancelledKeys, payload: memoryview) -> None:
        keys = decode_keys(bytes(payload))
        with self.refcount_lock:
            held = [(k, st) for k in keys if (st := self.futures.get(k)) is not None]
        for key, st in held:
            if st.status != "cancelled":
                st.cancel(key, "cancelled by the scheduler")

    def _reply(
        self,
        msg: m.Reply | m.RunResult | m.SchedulerPluginResult | m.PluginReply,
        payload: memoryview,
    ) -> None:
        """A reply to a request, matched by ``id``; a refused graph errs its futures."""
        rid = msg.id
        keys = self._graphs.pop(rid, None) if rid is not None else None
        again = self._apart.pop(rid, None) if rid is not None else None
        if isinstance(msg, m.RequestFailed) and keys is not None:
            if again is not None:
                again()
            else:
                self._graph_failed(keys, f"the scheduler refused the graph: {msg.error}")
        fut = self._requests.get(rid) if rid is not None else None
        if fut is not None and not fut.done():
            if isinstance(msg, m.RequestFailed):
                fut.set_exception(RuntimeError(f"scheduler: {msg.error}"))
            else:
                fut.set_result((msg, payload))
        elif isinstance(msg, m.RequestFailed) and keys is None:
            logger.debug("scheduler refused a request: %s", msg.error)

    def _event(self, msg: m.Event, payload: memoryview) -> None:
        """An event of a subscribed topic: its handler is called on the loop (a
        coroutine's awaited); one of a topic no longer handled unsubscribes it."""
        handler = self.event_handlers.get(msg.topic)
        if handler is None:
            self.send(m.UnsubscribeTopic(topic=msg.topic))
            return
        result = handler((msg.time, msg.msg))
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._handler_tasks.add(task)
            task.add_done_callback(self._handler_done)

    def _handler_done(self, task: asyncio.Task[Any]) -> None:
        self._handler_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("an event handler failed", exc_info=task.exception())

    def _reply_handing_over(
        self, msg: m.CoordReply | m.GetDatasetsReply, payload: memoryview
    ) -> None:
        """A reply that may hand over futures (a variable's, a queue's or a dataset's
        values, docs/protocol.md#futures-handed-over): their states are held from now,
        before the notices about their keys that follow it, until the caller made its
        futures (``take_handed``)."""
        if sum(msg.n_keys) and msg.id is not None:
            values_end = sum(size for size in msg.sizes if size > 0)
            keys = decode_keys(bytes(payload[values_end:]))
            with self.refcount_lock:
                held = [(k, self.hold(k)) for k in keys]
            if msg.id in self._requests:
                self._handed[msg.id] = held
            else:  # its caller gave up: nothing will make futures of them
                for k, st in held:
                    self.release_soon(st, k)
        self._reply(msg, payload)

    def take_handed(self, rid: int) -> list[tuple[Key, FutureState]]:
        """The keys and states a reply to request ``rid`` handed over (release each
        once)."""
        return self._handed.pop(rid, [])

    def _unexpected(self, msg: m.Message, payload: memoryview) -> None:
        logger.warning("client: unexpected %r from the scheduler", msg.op())

    def _malformed(self, msg: m.Malformed) -> None:
        logger.warning("client: %s from the scheduler", msg.error)

    def _graph_failed(self, keys: list[Key], message: str) -> None:
        exc = RuntimeError(message)
        with self.refcount_lock:
            states = [st for st in map(self.futures.get, keys) if st is not None]
        for st in states:
            if st.status == "pending":
                st.set_error(exc, None)

    def _restarted(self) -> None:
        """On the loop: the scheduler forgot every task."""
        with self.refcount_lock:
            held = self.futures.items()
            self.futures.clear()
            self._to_release.clear()
            self.generation += 1
            for _, st in held:  # their futures release nothing now (see FutureState)
                st.refs = 0
        for key, st in held:
            st.cancel(key, "scheduler-restart", RESTART_MESSAGE)

    # ----- waiting ----------------------------------------------------------------------

    async def _watch_done(self, future: Future, callback: Callable[[Future], Any]) -> None:
        st = future._state
        while not st.done():
            await st.wait()
        callback(future)

    def watch(self, future: Future, callback: Callable[[Future], Any]) -> None:
        """On the loop: call ``callback(future)`` on the loop once it is done."""
        if future._state.done():
            callback(future)
        else:
            asyncio.get_running_loop().create_task(self._watch_done(future, callback))
