"""Timeouts and event loops for the client's coroutines.

A blocking client runs them on its own loop thread, an asynchronous one on the
caller's loop.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from dask.utils import parse_timedelta

from squall.protocol.bounded import within
from squall.protocol.tracebacks import user_frames

T = TypeVar("T")


def timeout_seconds(timeout: float | str | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, str):
        return _parse_seconds(timeout)
    return float(parse_timedelta(timeout, default="s"))


@functools.lru_cache(maxsize=64)
def _parse_seconds(text: str) -> float:
    """A duration's text in seconds: cached, since every ``submit`` parses its
    ``fifo_timeout`` (``"100ms"``)."""
    return float(parse_timedelta(text, default="s"))


async def timed(aw: Awaitable[T], timeout: float | str | None) -> T:
    with user_frames():  # the outermost frame of an asynchronous client's calls
        return await within(aw, timeout_seconds(timeout))


def require_running_loop() -> None:
    """An asynchronous client runs on the caller's loop: like distributed's, it cannot
    be made outside one."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(
            "Constructing an asynchronous Client (asynchronous=True) without a running "
            "loop is not supported"
        ) from None


def sync(
    loop: Any,
    func: Callable[..., Awaitable[T]],
    *args: Any,
    callback_timeout: float | str | None = None,
    **kwargs: Any,
) -> T:
    """distributed's ``sync``: run coroutine function ``func(*args, **kwargs)`` on
    ``loop`` (an asyncio loop, or a tornado IOLoop: its ``asyncio_loop``), running in
    another thread, and block for its result; ``TimeoutError`` after
    ``callback_timeout``."""
    aio: asyncio.AbstractEventLoop = getattr(loop, "asyncio_loop", loop)
    if aio.is_closed():
        raise RuntimeError("the event loop is closed")
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is aio:
        raise RuntimeError("sync() called from the thread of the running loop")

    async def call() -> T:
        result: T = await timed(func(*args, **kwargs), callback_timeout)
        return result

    return asyncio.run_coroutine_threadsafe(call(), aio).result()
