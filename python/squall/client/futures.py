"""Futures: handles of remote results, and finding them inside containers.

Futures on the same key in one client share one :class:`FutureState`, which counts
them (:mod:`squall.client.connection` releases the key after the last one). A ``map``
makes its futures and states in bulk; slots keep them small.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import operator
import types
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar, overload

from dask._task_spec import TaskRef
from dask.base import is_dask_collection

from squall._core import encode_keys, gc_track
from squall.client.default import default_client
from squall.errors import FutureCancelledError
from squall.protocol import messages as m
from squall.protocol.nested import DESCEND, DROP, rebuild
from squall.protocol.tracebacks import user_frames

if TYPE_CHECKING:
    from squall.client.client import Client

logger = logging.getLogger("squall.client")

Key = Hashable
Status = Literal["pending", "finished", "error", "cancelled", "lost"]

_KEY = operator.attrgetter("key")
#: The statuses of a done future (``Future.done()``).
DONE: frozenset[Status] = frozenset({"finished", "error", "cancelled"})
T = TypeVar("T")


class _Rare:
    """What few of a map's futures ever need: an event to await one alone, and an
    error; and then the count of the state's futures. Kept apart so that each state of
    a large map is smaller by their slots."""

    __slots__ = ("event", "exception", "refs", "traceback", "type")

    def __init__(self, refs: int) -> None:
        self.refs = refs
        self.event: asyncio.Event | None = None
        self.exception: BaseException | None = None
        self.traceback: types.TracebackType | None = None
        self.type: type | None = None


class _RareField(Generic[T]):
    """An attribute of a state kept in its :class:`_Rare` (None until first set)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, st: None, owner: type) -> _RareField[T]: ...
    @overload
    def __get__(self, st: FutureState, owner: type) -> T | None: ...
    def __get__(self, st: FutureState | None, owner: type) -> T | _RareField[T] | None:
        if st is None:
            return self
        x = st._x
        return getattr(x, self.name) if isinstance(x, _Rare) else None

    def __set__(self, st: FutureState, value: T | None) -> None:
        if value is not None or isinstance(st._x, _Rare):
            setattr(st._more(), self.name, value)


# The ids of the futures released (``Future.release``) and not yet collected, whose
# ``__del__`` must not release them again.
_RELEASED: set[int] = set()


class FutureState:
    """State shared by all futures of one key in one client; mutated on the loop.

    Two slots, 48 bytes: its status, and ``_x``, the count of those futures (under the
    client's refcount lock) until the state needs more, then its :class:`_Rare` (the
    event, the error and the type, made when first set), which holds the count. The key
    is not repeated here: the table and the futures hold it. A restart forgets every
    key: the client then sets the count of each state it held to 0, so the futures
    from before it, counting down past 0, release nothing after."""

    __slots__ = ("_x", "status")

    def __init__(self) -> None:
        self.status: Status = "pending"
        self._x: int | _Rare = 1

    @property
    def refs(self) -> int:
        x = self._x
        return x.refs if isinstance(x, _Rare) else x

    @refs.setter
    def refs(self, n: int) -> None:
        x = self._x
        if isinstance(x, _Rare):
            x.refs = n
        else:
            self._x = n

    def _more(self) -> _Rare:
        x = self._x
        if not isinstance(x, _Rare):
            # A map's state is left untracked by the cyclic collector while it holds
            # only atoms (``hold_keys``); its rare part may close a cycle (an exception
            # whose traceback holds a future), so from now it is tracked.
            gc_track(self)
            x = self._x = _Rare(x)
        return x

    exception: _RareField[BaseException] = _RareField()
    traceback: _RareField[types.TracebackType] = _RareField()
    type: _RareField[type] = _RareField()

    def _get_event(self) -> asyncio.Event:
        # Made on first wait: most futures of a large map are never awaited one by one.
        rare = self._more()
        if rare.event is None:
            rare.event = asyncio.Event()
            if self.done():
                rare.event.set()
        return rare.event

    def _signal(self) -> None:
        x = self._x
        if isinstance(x, _Rare) and x.event is not None:
            if self.done():
                x.event.set()
            else:
                x.event.clear()

    def finish(self) -> None:
        self.status = "finished"
        self._signal()

    def lose(self) -> None:
        self.status = "lost"
        self._signal()

    def retry(self) -> None:
        self.status = "pending"
        self.exception = self.traceback = None
        self._signal()

    def cancel(self, key: Key, reason: str | None = None, msg: str | None = None) -> None:
        self.status = "cancelled"
        self.exception = FutureCancelledError(key, reason, msg)
        self._signal()

    def set_error(self, exception: BaseException, tb: types.TracebackType | None) -> None:
        self.status = "error"
        self.exception = exception
        self.traceback = tb
        self._signal()

    def done(self) -> bool:
        return self.status in DONE

    async def wait(self) -> None:
        await self._get_event().wait()

    def __repr__(self) -> str:
        return f"<FutureState: {self.status}>"


class Future(TaskRef):
    """A remotely running computation (``distributed.Future``). Like dask's futures it
    is a ``TaskRef``, so dask collections built on futures depend on their keys."""

    # Slots: a map makes one future per item (faster to build, a third of the memory).
    # No flag for "released": the few futures released before they are dropped are
    # listed in ``_RELEASED`` instead, which keeps each future at 64 bytes, not 80.
    __slots__ = ("__weakref__", "_client", "_state")
    _cb_executor: ClassVar[concurrent.futures.ThreadPoolExecutor | None] = None

    # As distributed's, a future equals only itself (two futures of one key are two
    # members of a set), not its key as a TaskRef does; hashed by identity, in C.
    __hash__ = object.__hash__
    __eq__ = object.__eq__

    def __init__(self, key: Key, client: Client | None = None) -> None:
        client = client if client is not None else default_client()
        connection = client.connection
        with connection.refcount_lock:
            self._bind(key, client, connection.hold(key))

    def _bind(self, key: Key, client: Client, state: FutureState) -> None:
        """Set up a future whose reference to ``key`` the caller has counted (holding
        the refcount lock)."""
        self.key = key  # type: ignore[assignment]  # dask types keys narrower than Hashable
        self._client = client
        self._state = state

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
                    data = await self._client.data.gather_keys([self.key], [st], "raise")
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

        connection = self._client.connection
        connection.call_soon(connection.watch, self, lambda f: executor.submit(run, f))

    def release(self) -> None:
        if id(self) not in _RELEASED:
            _RELEASED.add(id(self))
            self._client.connection.release_soon(self._state, self.key)

    def __del__(self) -> None:
        if _RELEASED and id(self) in _RELEASED:
            _RELEASED.discard(id(self))  # released already; its id may be reused now
            return
        # try rather than contextlib.suppress: this runs once per future of a map. A
        # future whose __init__ failed, or an unpickled one, has nothing to release.
        try:  # noqa: SIM105
            self._client.connection.release_soon(self._state, self.key)
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

    def release(self) -> None:
        pass  # nothing to release

    client = executor = status = type = property(lambda self: None)

    def __getattr__(self, name: str) -> Any:
        if name in ("_client", "_state"):  # unset: what a bound future's methods use
            raise RuntimeError(f"{self!r} was unpickled and is bound to no client")
        raise AttributeError(name)


def fire_and_forget(obj: Any) -> None:
    """Run the futures in ``obj`` to completion even once they are released (their
    results are not kept): for tasks run for their side effects."""
    by_client: dict[int, tuple[Client, list[Future]]] = {}
    for f in futures_of(obj):
        by_client.setdefault(id(f.client), (f.client, []))[1].append(f)
    for client, futures in by_client.values():
        # After the graph that made them (loop order) and before any release of them.
        client.connection.send_soon(m.FireAndForget(), encode_keys([f.key for f in futures]))


def dep_key(obj: Any) -> Key | None:
    """The key a task argument stands for: a future's or an actor handle's (both task
    references), or None."""
    return obj.key if isinstance(obj, TaskRef) else None


def flat_futures(obj: Any) -> bool:
    """Whether ``obj`` is a list, tuple or set of futures only."""
    return type(obj) in (list, tuple, set, frozenset) and all(
        map(isinstance, obj, itertools.repeat(Future))
    )


def futures_of(obj: Any, client: Client | None = None) -> list[Future]:
    """The futures inside ``obj``: a future, lists/tuples/sets/dicts of them, or a
    persisted dask collection, each once. Given a ``client`` (as distributed's), a
    cancelled one among them raises its CancelledError."""
    found = _futures_in(obj)
    if client is not None:
        for f in found:
            if type(f) is not _FutureRef and f.cancelled():
                assert f._state.exception is not None
                raise f._state.exception
    return found


def _futures_in(obj: Any) -> list[Future]:
    if flat_futures(obj):
        # A map's futures: C loops, each future once.
        return list(dict(zip(map(id, obj), obj, strict=True)).values())
    out: list[Future] = []
    seen: set[int] = set()
    # Persisted collections, their graphs walked after: ``collect`` must not refer to
    # itself, or the cycle would keep the futures found alive until a garbage collection.
    collections: list[Any] = []

    def collect(o: Any) -> Any:
        if isinstance(o, Future):
            if id(o) not in seen:
                seen.add(id(o))
                out.append(o)
            return o
        if is_dask_collection(o):  # a persisted collection: its graph holds futures
            collections.append(o)
            return o
        return DESCEND

    rebuild(obj, collect)
    while collections:
        rebuild(list(dict(collections.pop().__dask_graph__()).values()), collect)
    return out


def pack_results(o: Any, data: dict[Key, Any]) -> Any:
    """``o`` with each future in it replaced by its value in ``data`` (left out if
    ``data`` lacks it): ``gather``'s result."""
    if flat_futures(o):
        # A map's futures: C loops.
        values = list(map(data.get, map(_KEY, o), itertools.repeat(DROP)))
        if any(map(operator.is_, values, itertools.repeat(DROP))):
            values = [v for v in values if v is not DROP]
        return values if type(o) is list else type(o)(values)

    def value(x: Any) -> Any:
        return data.get(x.key, DROP) if isinstance(x, Future) else DESCEND

    return rebuild(o, value)
