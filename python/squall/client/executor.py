"""``Client.get_executor()``: the cluster as a ``concurrent.futures.Executor``
(docs/runtime.md#the-executor).

Each call is a ``submit`` (or one ``map``) of the client with the executor's options;
its ``concurrent.futures.Future`` is completed from the loop once the squall future is
done, and cancelling it cancels the task.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from squall.client import waiting
from squall.client.futures import Future
from squall.client.loop import timeout_seconds
from squall.errors import CancelledError, TimeoutError

if TYPE_CHECKING:
    from squall.client.client import Client

#: The options an executor passes on to ``submit`` and ``map`` (distributed's).
OPTIONS = frozenset({"pure", "workers", "resources", "allow_other_workers", "retries"})


class ClientExecutor(cf.Executor):
    """A ``concurrent.futures.Executor`` running calls on a :class:`Client`'s cluster."""

    def __init__(self, client: Client, **kwargs: Any) -> None:
        unknown = set(kwargs) - OPTIONS
        if unknown:
            raise TypeError(f"unsupported arguments to ClientExecutor: {sorted(unknown)}")
        self._client = client
        self._kwargs = kwargs
        self._futures: weakref.WeakSet[Future] = weakref.WeakSet()
        self._shutdown = False
        # Cascades in flight: the loop keeps only weak references to its tasks.
        self._cascades: set[asyncio.Task[None]] = set()

    def _wrap(self, future: Future) -> cf.Future[Any]:
        """A ``concurrent.futures.Future`` mirroring ``future``; cancelling it cancels
        the task."""
        out: cf.Future[Any] = cf.Future()

        def cancel_task(f: cf.Future[Any]) -> None:
            if f.cancelled() and future.status != "cancelled":
                future.cancel()

        out.add_done_callback(cancel_task)
        self._client.connection.call_soon(self._start_cascade, future, out)
        return out

    def _start_cascade(self, future: Future, out: cf.Future[Any]) -> None:
        task = asyncio.get_running_loop().create_task(_cascade(future, out))
        self._cascades.add(task)
        task.add_done_callback(self._cascades.discard)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        """Run ``fn(*args, **kwargs)`` on the cluster (with the executor's options)."""
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future = self._client.submit(fn, *args, **{**self._kwargs, **kwargs})
        self._futures.add(future)
        return self._wrap(future)

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | str | None = None,
        chunksize: int = 1,
        **kwargs: Any,
    ) -> Iterator[Any]:
        """The results of ``fn`` over the items, in order, as ``map`` would give them;
        all calls are submitted at once (``chunksize`` is ignored). Iterating raises a
        call's exception, or ``concurrent.futures.TimeoutError`` once ``timeout``
        seconds have passed since this call; the calls not yet iterated are cancelled
        when the iterator is closed or collected."""
        if kwargs:
            raise TypeError(f"unexpected arguments to map(): {sorted(kwargs)}")
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        seconds = timeout_seconds(timeout)
        deadline = None if seconds is None else time.monotonic() + seconds
        remaining = iter(self._client.map(fn, *iterables, **self._kwargs))

        def results() -> Iterator[Any]:
            # A generator made before the first result is asked for: every call is
            # submitted by the time map() returns.
            try:
                for future in remaining:
                    self._futures.add(future)
                    if deadline is None:
                        yield future.result()
                        continue
                    try:
                        value = future.result(max(0.0, deadline - time.monotonic()))
                    except TimeoutError:  # concurrent.futures' own, as Executor.map's
                        raise cf.TimeoutError(f"map() not done within {timeout}") from None
                    yield value
            finally:
                rest = list(remaining)
                self._futures.update(rest)
                if rest:
                    self._client.cancel(rest)

        return results()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No new calls from now on. With ``wait`` (and not ``cancel_futures``), wait
        for the calls submitted so far; otherwise cancel those not done (distributed's
        ``wait=False`` cancels too). Calling it again does nothing."""
        if self._shutdown:
            return
        self._shutdown = True
        futures = list(self._futures)
        if not futures:
            return
        if wait and not cancel_futures:
            with contextlib.suppress(CancelledError):  # a cancelled call is done too
                waiting.wait(futures)
        else:
            self._client.cancel([f for f in futures if not f.done()])


async def _cascade(future: Future, out: cf.Future[Any]) -> None:
    """Complete ``out`` as ``future`` completes (on the client's loop)."""
    value = await future._result(raiseit=False)
    with contextlib.suppress(cf.InvalidStateError):  # ``out`` was cancelled meanwhile
        status = future.status
        if status == "finished":
            out.set_result(value)
        elif status == "cancelled":
            out.cancel()
            with contextlib.suppress(RuntimeError):  # notified already
                out.set_running_or_notify_cancel()  # wakes cf.wait and cf.as_completed
        else:
            out.set_exception(value.with_traceback(future._state.traceback))
