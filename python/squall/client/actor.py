"""Actors (docs/actors.md): ``Actor`` handles, ``ActorFuture``, and the task that
builds an actor on its worker.

An actor task runs :func:`build_actor` around the user's constructor call: the instance
stays in the worker's :class:`~squall.worker.actors.ActorHost`, and the task's result —
what ``Future.result()`` returns and what dependent tasks receive — is an
:class:`Actor` handle naming the class, the key and the worker's address. A handle's
method calls and attribute reads go straight to that worker's peer listener
(``actor-call``, ``actor-attribute``), from a client or from a task on any worker, over
one connection per worker and event loop on which calls overlap; the scheduler never
sees them.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import functools
import inspect
import pickle
import threading
from collections.abc import Awaitable, Generator, Hashable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import cloudpickle  # type: ignore[import-untyped]
from dask._task_spec import TaskRef

from squall._core import encode_keys
from squall.client.default import default_client
from squall.client.futures import Future
from squall.client.loop import timeout_seconds
from squall.errors import TimeoutError
from squall.protocol import comm
from squall.protocol import messages as m
from squall.protocol.actor_links import link
from squall.protocol.remote_errors import unpack_error
from squall.protocol.specs import Dep, call_prefix, run_spec
from squall.security import Security
from squall.worker import context
from squall.worker.actors import in_actor_thread

if TYPE_CHECKING:
    from squall.client.client import Client
    from squall.worker.worker import Worker

__all__ = ["Actor", "ActorFuture", "BaseActorFuture"]

Key = Hashable
T = TypeVar("T")

#: How long a call that lost its connection waits for the scheduler to say whether the
#: actor's worker is gone (seconds), before reporting the worker unreachable.
LOST_GRACE = 5.0


class Actor(TaskRef):
    """A handle to an object living on a worker (``distributed.Actor``).

    ``client.submit(Cls, *args, actor=True)`` builds ``Cls(*args)`` on a worker; its
    future's result is this handle. Calling a method returns an :class:`ActorFuture`
    at once, the call running on the actor's worker; reading another attribute
    returns its value (an awaitable on an asynchronous client or the worker's loop).
    """

    def __init__(self, cls: type, address: str, key: Key, worker: Worker | None = None) -> None:
        super().__init__(key)  # type: ignore[arg-type]  # dask types keys narrowly
        self._cls = cls
        self._address = address
        self._key = key
        self._worker = worker
        self._client: Client | None = None
        self._future: Future | None = None
        self._bound = worker is not None
        if worker is None and context.task_worker() is None:
            # On a client, hold the key from the start (the handle arrives while the
            # future it came from is alive): the actor lives while a handle does.
            try:
                self._client = default_client()
            except ValueError:
                pass
            else:
                self._future = Future(key, self._client)
                self._bound = True

    def __repr__(self) -> str:
        return f"<Actor: {self._cls.__name__}, key={self._key}>"

    def __reduce__(self) -> Any:
        return (Actor, (self._cls, self._address, self._key))

    def __dir__(self) -> list[str]:
        names = set(dir(type(self)))
        names.update(a for a in dir(self._cls) if not a.startswith("_"))
        return sorted(names)

    @property
    def client(self) -> Client:
        """The client whose future keeps the actor alive (on a client only)."""
        self._bind()
        if self._client is None:
            raise ValueError("this Actor handle is used on a worker, not through a client")
        return self._client

    def _bind(self) -> None:
        """On first use without a client: use the worker running this task, else this
        process's worker."""
        if self._bound:
            return
        worker = context.task_worker()
        if worker is None:
            worker = context.get_worker()  # ValueError: neither a client nor a worker
        self._worker = worker
        self._bound = True

    def _where(self) -> tuple[asyncio.AbstractEventLoop, Security | None, bool]:
        """The event loop calls run on, the security to connect with, and whether the
        caller is on that loop (then calls return awaitables)."""
        if self._client is not None:
            conn = self._client.connection
            assert conn.loop is not None
            return conn.loop, conn.security, self._client.asynchronous
        worker = self._worker
        assert worker is not None and worker._loop is not None
        return worker._loop, worker.security, threading.get_ident() == worker._loop_thread

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in _SLOTS:
            raise AttributeError(name)
        self._bind()
        if self._future is not None and self._future.status not in ("finished", "pending"):
            raise RuntimeError(f"Worker holding Actor was lost.  Status: {self._future.status}")
        worker = self._worker
        if (
            worker is not None
            and worker.address == self._address
            and in_actor_thread(self._address)
        ):
            # An actor method calling an actor of its own worker: at once, on this thread.
            attr = getattr(worker.actors.instances[self._key], name)
            if inspect.iscoroutinefunction(attr):
                return attr
            if callable(attr):
                return lambda *args, **kwargs: EagerActorFuture(attr(*args, **kwargs))
            return attr
        if callable(getattr(self._cls, name, None)):
            return self._method(name)
        return self._read(name)

    def _method(self, name: str) -> Any:
        loop, _, _ = self._where()

        @functools.wraps(getattr(self._cls, name))
        def call(*args: Any, **kwargs: Any) -> ActorFuture[Any]:
            payload = cloudpickle.dumps((args, kwargs), protocol=5)
            msg = m.ActorCall(key=encode_keys([self._key]), method=name)
            done = asyncio.run_coroutine_threadsafe(self._ask(msg, payload), loop)
            return ActorFuture(done, loop)

        return call

    def _read(self, name: str) -> Any:
        loop, _, on_loop = self._where()
        msg = m.ActorAttribute(key=encode_keys([self._key]), attribute=name)
        ask = self._ask(msg)
        if on_loop:
            return ask
        return asyncio.run_coroutine_threadsafe(ask, loop).result()

    async def _ask(self, msg: m.ActorCall | m.ActorAttribute, payload: bytes = b"") -> Any:
        _, security, _ = self._where()
        try:
            answer, data = await link(self._address, security).request(msg, payload)
        except (OSError, comm.CommError) as e:
            raise await self._lost() from e
        if answer.status == "OK":
            return pickle.loads(data)
        if answer.status == "missing":
            raise await self._lost() from LookupError(answer.exception_text)
        exc, tb = unpack_error(answer, data, f"actor {self._key!r}")
        raise exc.with_traceback(tb)

    async def _lost(self) -> Exception:
        """What a call on an unreachable actor raises: the scheduler's verdict
        (``Worker holding Actor was lost``) once its future says so, else OSError."""
        future = self._future
        if future is not None:
            deadline = asyncio.get_running_loop().time() + LOST_GRACE
            while future.status == "finished" and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
            if future.status == "error":
                return RuntimeError("Worker holding Actor was lost")
        return OSError("Unable to contact Actor's worker")


_SLOTS = frozenset({"_cls", "_address", "_key", "_worker", "_client", "_future", "_bound", "key"})


class BaseActorFuture(abc.ABC, Awaitable[T]):
    """The result of an actor's method call, to wait for with ``result()`` or
    ``await`` (``distributed.BaseActorFuture``)."""

    __slots__ = ()

    @abc.abstractmethod
    def result(self, timeout: str | timedelta | float | None = None) -> T: ...

    @abc.abstractmethod
    def done(self) -> bool: ...

    def __repr__(self) -> Literal["<ActorFuture>"]:
        return "<ActorFuture>"


class ActorFuture(BaseActorFuture[T]):
    """A method call running on the actor's worker."""

    __slots__ = ("_done", "_loop")

    def __init__(
        self, done: concurrent.futures.Future[T], loop: asyncio.AbstractEventLoop
    ) -> None:
        self._done = done
        self._loop = loop

    def __await__(self) -> Generator[Any, None, T]:
        return asyncio.wrap_future(self._done, loop=self._loop).__await__()

    def done(self) -> bool:
        return self._done.done()

    def result(self, timeout: str | timedelta | float | None = None) -> T:
        """The method's return value (or its exception, raised); TimeoutError after
        ``timeout``."""
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        try:
            return self._done.result(timeout_seconds(seconds))
        except concurrent.futures.TimeoutError:
            if self._done.done():
                raise
            raise TimeoutError(f"actor call not done within {timeout}") from None


@dataclass(frozen=True, eq=False, slots=True)
class EagerActorFuture(BaseActorFuture[T]):
    """A call made by an actor method on an actor of its own worker: already done."""

    _result: T

    def __await__(self) -> Generator[Any, None, T]:
        return self._result
        yield  # a generator that returns at once

    def result(self, timeout: object = None) -> T:
        return self._result

    def done(self) -> Literal[True]:
        return True


# ----- building an actor on its worker ---------------------------------------------------


def build_actor(spec: bytes, keys: list[Key], *values: Any) -> Actor:
    """The actor task itself: run the user's constructor call (``spec``, with the values
    of its dependencies ``keys``), keep the instance in this worker's actor table
    under the task's key, and return the handle that stands for it."""
    worker, tid, key = context.running_task("an actor task")
    instance = run_spec(spec, dict(zip(keys, values, strict=True)))
    worker.actors.add(tid, key, instance)
    return Actor(type(instance), worker.address, key, worker=worker)


_BUILD = call_prefix(cloudpickle.dumps(build_actor))


def actor_spec(spec: bytes, deps: list[Key]) -> bytes:
    """The spec of an actor task whose constructor call is ``spec`` depending on
    ``deps``: :func:`build_actor` around it (the dependencies' values fill its
    markers on the worker)."""
    args = (spec, list(deps), *map(Dep, deps))
    blob: bytes = cloudpickle.dumps((args, {}), protocol=5)
    return _BUILD + blob
