"""Noticing a scheduler that went silent, and reconnecting to one that went away
(docs/runtime.md#reconnection-and-liveness).

A TCP connection to a process that hangs (SIGSTOP, a long partition) stays open: the
kernel keeps acknowledging, nothing ever fails. So workers, nannies and clients expect
to hear from the scheduler at least every ``squall.comm.timeouts.tcp``; they ping it when
it has been quiet for a while (the scheduler answers every ping), and a peer that heard
nothing for the whole timeout treats the connection as lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar

from dask.utils import parse_timedelta

from squall import config
from squall.errors import TimeoutError
from squall.protocol import comm
from squall.protocol import messages as m
from squall.protocol.bounded import within
from squall.security import Security

logger = logging.getLogger("squall.comm")

#: Reconnection attempts wait this long after the first failure, doubling up to the cap.
FIRST_RETRY = 0.1
MAX_RETRY = 2.0


def silence_timeout() -> float:
    """``squall.comm.timeouts.tcp``: how long a silent scheduler counts as alive."""
    timeout = config.seconds("comm.timeouts.tcp")
    if timeout <= 0:
        raise config.ConfigError(f"squall.comm.timeouts.tcp: must be > 0, got {timeout}")
    return timeout


def death_timeout(value: float | str | None = None) -> float | None:
    """How long a worker or nanny tries to reach its scheduler before it gives up:
    ``value`` (seconds or a duration string), else ``squall.worker.death-timeout``;
    None: forever (Dask's default)."""
    if value is None:
        value = config.get("worker.death-timeout")
        if value is None:
            return None
        return config.seconds("worker.death-timeout")
    try:
        seconds = parse_timedelta(value, default="seconds")
    except (KeyError, TypeError, ValueError):
        seconds = None
    if seconds is None or seconds < 0:
        raise ValueError(f"death timeout: expected a duration >= 0 like '30s', got {value!r}")
    return float(seconds)


def idle_timeout() -> float | None:
    """``squall.comm.timeouts.idle``: a listener closes a connection that sent nothing
    for this long (None: never). Clients and nannies keep theirs alive every quarter of
    ``squall.comm.timeouts.tcp``, workers with their heartbeats."""
    if config.get("comm.timeouts.idle") is None:
        return None
    idle = config.seconds("comm.timeouts.idle")
    if idle <= silence_timeout() / 2:
        raise config.ConfigError(
            f"squall.comm.timeouts.idle ({idle}s) must exceed half of "
            f"squall.comm.timeouts.tcp ({silence_timeout()}s): keep-alives come every quarter"
        )
    return idle


async def read_batches(c: comm.Comm, who: str) -> AsyncGenerator[list[comm.Received], None]:
    """The message batches of a connection a listener accepted, until it ends; it is
    aborted once it sent nothing for ``idle_timeout()``. Use under ``aclosing``."""
    idle = _close_when_idle(c, who)
    try:
        while True:
            messages = await c.read_messages()
            if idle is not None:
                idle.heard()
            yield messages
    finally:
        if idle is not None:
            idle.stop()


def _close_when_idle(c: comm.Comm, who: str) -> Watchdog | None:
    idle = idle_timeout()
    if idle is None:
        return None

    def silent(seconds: float) -> None:
        logger.info("%s sent nothing for %.0fs: closing its connection", who, seconds)
        c.abort()

    return Watchdog(idle, lambda: None, silent)


class Watchdog:
    """Watches one connection: :meth:`heard` on every message received; when the peer
    has been quiet for a quarter of ``timeout``, ``ping`` is called (it should make the
    peer answer), and after ``timeout`` of silence ``on_silent(seconds)`` once.

    A stall of this process's own event loop (a long GIL hold, SIGSTOP of this process)
    is not the peer's silence: the messages may be waiting unread, so the watch restarts
    after it."""

    def __init__(
        self,
        timeout: float,
        ping: Callable[[], None],
        on_silent: Callable[[float], None],
        *,
        keep_alive: bool = False,
    ) -> None:
        self.timeout = timeout
        self._ping = ping
        self._on_silent = on_silent
        # Ping every quarter of the timeout even when the peer talks: the peer closes
        # connections that stay silent (idle_timeout), and this side may have nothing
        # to say for a long time.
        self._keep_alive = keep_alive
        self._loop = asyncio.get_running_loop()
        self._last = self._woke = self._loop.time()
        self._task = self._loop.create_task(self._watch())

    def heard(self) -> None:
        self._last = self._loop.time()

    def stop(self) -> None:
        self._task.cancel()

    async def _watch(self) -> None:
        period = self.timeout / 4
        while True:
            await asyncio.sleep(period)
            now = self._loop.time()
            if now - self._woke > 2 * period:
                self._last = now  # this loop stalled: give the reader its turn first
            self._woke = now
            quiet = now - self._last
            if quiet >= self.timeout:
                self._on_silent(quiet)
                return
            if quiet >= period or self._keep_alive:
                with contextlib.suppress(comm.CommError):
                    self._ping()


#: What the scheduler answers a registration with, per role.
R = TypeVar("R", m.WorkerRegistered, m.NannyRegistered, m.ClientRegistered)


async def register(
    address: str,
    role: str,
    info: dict[str, Any],
    registered: type[R],
    security: Security | None = None,
    *,
    server_hostname: str | None = None,
) -> tuple[comm.Comm, R]:
    """Connect to the scheduler at ``address`` as ``role`` (``info``: the
    :class:`~squall.protocol.messages.Hello` fields of that role) and read its
    ``registered`` answer (each within ``squall.comm.timeouts.connect``); CommError if
    that fails or it refuses. ``server_hostname``: the TLS SNI to send, if any."""
    timeout = config.seconds("comm.timeouts.connect")
    c = await comm.connect(
        address,
        role=role,
        info=info,
        timeout=timeout,
        security=security,
        server_hostname=server_hostname,
    )
    try:
        reply, _ = await within(c.read(), timeout)
    except (comm.CommError, TimeoutError) as e:
        c.abort()
        raise comm.CommError(f"registering with {address}: {e or 'timed out'}") from None
    if isinstance(reply, registered):
        return c, reply
    await c.close()
    if isinstance(reply, m.Error):
        raise comm.HandshakeError(f"{address} refused {role}: {reply.message}")
    what = reply.error if isinstance(reply, m.Malformed) else repr(reply.op())
    raise comm.ProtocolError(f"{address}: expected registered, got {what}")


async def retry(
    attempt: Callable[[], Awaitable[object]], timeout: float | None, what: str
) -> bool:
    """Call ``attempt`` until it returns, waiting 0.1 s after the first failure (a
    ``comm.CommError``), doubling up to 2 s, for ``timeout`` seconds (None: forever; an
    attempt still under way then is abandoned). False if the time ran out first."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    delay = FIRST_RETRY
    while True:
        left = None if deadline is None else max(deadline - loop.time(), 0.0)
        try:
            await within(attempt(), left)
            return True
        except (comm.CommError, TimeoutError) as e:
            logger.debug("%s: %s", what, e)
        # A wait inside the attempt that swallows a cancellation meeting its end (as
        # `asyncio.wait_for` can before 3.12; squall's own waits use `within`, which
        # never does) would leave a worker closed while reconnecting retrying forever.
        # 3.11 on keep the request on the task; 3.10 keeps no record of it.
        if sys.version_info >= (3, 11):
            me = asyncio.current_task()
            if me is not None and me.cancelling():
                raise asyncio.CancelledError
        if deadline is not None and loop.time() >= deadline:
            return False
        await asyncio.sleep(delay if deadline is None else min(delay, deadline - loop.time()))
        delay = min(2 * delay, MAX_RETRY)
