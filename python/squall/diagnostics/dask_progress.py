"""``dask.diagnostics.ProgressBar`` through squall (docs/runtime.md#progress).

Dask's ProgressBar is a callback of dask's local schedulers: it reads the counts of the
local scheduler's state (finished, waiting, …) from a thread of its own. ``Client.get``
runs no local scheduler, so the ProgressBars active while it computes are given a state
whose counts come from a progress watch instead; other local callbacks are not called.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from dask.callbacks import Callback
from dask.diagnostics.progress import ProgressBar

from squall.diagnostics.progressbar import Progress, follow

if TYPE_CHECKING:
    from squall.client.client import Client
    from squall.client.futures import Future


def active_progress_bars() -> list[Any]:
    """The ProgressBars in use now (``with ProgressBar():`` or ``register()``); Any:
    dask's callbacks are untyped."""
    found: dict[int, Any] = {}
    for callbacks in list(Callback.active):
        owner = getattr(callbacks[0], "__self__", None)
        if isinstance(owner, ProgressBar):
            found[id(owner)] = owner
    return list(found.values())


@contextlib.contextmanager
def dask_progress_bars(
    client: Client, futures: Iterable[Future], asynchronous: bool | None = None
) -> Iterator[None]:
    """While the block waits for ``futures``, the active ProgressBars draw their tasks'
    progress; they finish with the block (as erred if it raised). Not for a block that
    only makes an awaitable (``asynchronous``)."""
    bars = active_progress_bars()
    loop = client.connection.loop
    if not bars or asynchronous or client.asynchronous or loop is None:
        yield
        return
    keys = list(dict.fromkeys(f.key for f in futures))
    dsk: dict[Any, Any] = {}
    # The counts the bars read: lengths are all they take of these.
    state: dict[str, Any] = {k: range(0) for k in ("finished", "ready", "running", "waiting")}

    def draw(p: Progress) -> None:
        state["finished"], state["waiting"] = range(p.done), range(p.total - p.done)

    interval = min(bar._dt for bar in bars)
    for bar in bars:
        bar._start(dsk)
        bar._pretask(None, dsk, state)
    polls = asyncio.run_coroutine_threadsafe(follow(client, keys, True, interval, draw), loop)
    errored = True
    try:
        yield
        errored = False
    finally:
        polls.cancel()
        for bar in bars:
            bar._finish(dsk, state, errored)
