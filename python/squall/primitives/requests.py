"""What every primitive shares: the client it talks through, bound lazily (inside a task,
the worker's task client), its requests and their answers, timeouts, and values with
the futures inside them (docs/primitives.md)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from squall._core import encode_keys
from squall.client.client import Client, get_client
from squall.client.handover import pickle_value, unpickle_values
from squall.client.loop import timeout_seconds
from squall.protocol import messages as m

#: A reply and its payload.
Answer = tuple[m.CoordReply, memoryview]


class Bound:
    """A primitive's client: the one given, or ``get_client()`` when first needed, so
    that a primitive unpickled in a task uses its worker's client."""

    def __init__(self, client: Client | None) -> None:
        self._client = client

    @property
    def client(self) -> Client:
        if self._client is None:
            try:
                self._client = get_client()
            except ValueError:
                raise RuntimeError(
                    f"{type(self).__name__} needs a client: make one, or use it in a task"
                ) from None
        return self._client

    async def ask(self, msg: m.Request, payload: bytes = b"") -> Answer:
        """Send a request, at once (its caller blocks on it); its answer
        (``request-failed`` raises RuntimeError)."""
        return await self.client.connection.request(msg, m.CoordReply, payload, urgent=True)

    def call(self, func: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Any:
        """``func(*args)`` on the client's loop: an awaitable on an asynchronous client,
        else its result."""
        return self.client.sync(func, *args)

    def tell(self, msg: m.Request) -> None:
        """Send a request whose answer nobody waits for (any thread)."""
        self.client.connection.send_soon(msg)

    def pack(self, value: Any) -> tuple[bytes, int]:
        """The payload of a set or a put: ``value`` pickled, futures inside it by key,
        then those keys; and the pickle's length."""
        data, keys = pickle_value(value)
        return data + (encode_keys(keys) if keys else b""), len(data)

    def unpack(self, reply: m.CoordReply, payload: memoryview) -> list[Any]:
        """The values of a reply; futures inside them are this client's (the reply
        handed their keys over, docs/protocol.md#futures-handed-over)."""
        return unpickle_values(self.client, reply.id or 0, reply.sizes, payload)


class Primitive:
    """What every primitive has: its client (``Bound``), and ``await``, which returns
    the primitive itself (it needs no setup on the scheduler)."""

    _bound: Bound

    @property
    def client(self) -> Client:
        return self._bound.client

    def __await__(self) -> Any:
        async def ready() -> Primitive:
            return self

        return ready().__await__()


class _Takes(Protocol):
    def acquire(self) -> Any: ...
    def release(self) -> Any: ...


_T = TypeVar("_T", bound=_Takes)


class Taken:
    """A primitive used as a context manager, plain or ``async``: ``acquire`` on the
    way in, ``release`` on the way out."""

    def __enter__(self: _T) -> _T:
        self.acquire()
        return self

    def __exit__(self: _Takes, *exc: object) -> None:
        self.release()

    async def __aenter__(self: _T) -> _T:
        await self.acquire()
        return self

    async def __aexit__(self: _Takes, *exc: object) -> None:
        await self.release()


def seconds(timeout: float | str | None) -> float | None:
    """A timeout in seconds (a number, or a string like ``"200ms"``); None: forever."""
    return timeout_seconds(timeout)


def non_blocking(blocking: bool, timeout: float | str | None) -> float | str | None:
    """The timeout of a lock's ``acquire(blocking=, timeout=)``, as distributed's."""
    if blocking:
        return timeout
    if timeout is not None:
        raise ValueError("can't specify a timeout for a non-blocking call")
    return 0
