"""Waiting on futures: ``wait`` and ``as_completed``."""

from __future__ import annotations

import asyncio
import itertools
import operator
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from squall.client.default import default_client
from squall.client.futures import DONE, Future, Status, flat_futures, futures_of
from squall.client.loop import timed, timeout_seconds
from squall.errors import TimeoutError
from squall.protocol.tracebacks import user_frames

if TYPE_CHECKING:
    from squall.client.client import Client

ALL_COMPLETED = "ALL_COMPLETED"
FIRST_COMPLETED = "FIRST_COMPLETED"
FIRST_EXCEPTION = "FIRST_EXCEPTION"


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
    # A future listed twice is harmless here: no need for futures_of's pass over them,
    # nor for a copy of a list of them.
    futures = (fs if type(fs) is list else list(fs)) if flat_futures(fs) else futures_of(fs)
    with user_frames():
        return _client_of(futures).sync(_wait, futures, return_when, callback_timeout=timeout)


_STATE = operator.attrgetter("_state")
_STATUS = operator.attrgetter("status")


def _not_done(fs: list[Future]) -> list[Future]:
    """The futures not done yet (``not f.done()``, in C loops)."""
    return list(itertools.compress(fs, map(operator.not_, _done_flags(fs))))


def _statuses(fs: list[Future]) -> Iterator[Status]:
    return map(_STATUS, map(_STATE, fs))


def _done_flags(fs: list[Future]) -> Iterator[bool]:
    return map(DONE.__contains__, _statuses(fs))


async def _wait(fs: list[Future], return_when: str) -> DoneAndNotDoneFutures:
    # Passes over the futures rather than a list of their states: a wait on a map of
    # millions allocates nothing per future until its result set.
    if return_when == ALL_COMPLETED:
        pending = fs
        while pending:
            # The last one tends to finish last (tasks run in order): one wake-up, and
            # one pass over the others, for most waits.
            await pending[-1]._state.wait()
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
    if "cancelled" in _statuses(fs):
        exc = next(f._state.exception for f in fs if f._state.status == "cancelled")
        assert exc is not None
        raise exc
    if return_when == ALL_COMPLETED:
        return DoneAndNotDoneFutures(set(fs), set())
    flags = list(_done_flags(fs))
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
        seconds = timeout_seconds(timeout)
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
            client.connection.call_soon(self._watch, client, group)

    def _watch(self, client: Client, fs: list[Future]) -> None:
        for f in fs:  # one watch per addition: each completes one of them
            client.connection.watch(f, self._notify)

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

    def __repr__(self) -> str:
        with self._cond:
            return f"<as_completed: waiting={len(self._pending)} done={len(self._queue)}>"

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
            await timed(self._event.wait(), self._remaining())
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
