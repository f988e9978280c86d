"""``squall.progress``: how far futures (or collections) and everything they depend on
have come, as a text bar in a terminal or one bar per task prefix in a notebook
(docs/runtime.md#progress).

The scheduler counts (one ``progress`` request registers the keys, then one per poll):
per prefix, tasks, done and erred. The bar polls every ``interval`` until nothing is
left to run, the client closes, or a poll gets no answer within
``squall.comm.timeouts.tcp``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import html
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dask.base import is_dask_collection

from squall import config
from squall._core import encode_keys
from squall.client.default import default_client
from squall.client.futures import Future, futures_of
from squall.client.loop import timeout_seconds
from squall.protocol import messages as m
from squall.protocol.bounded import within

if TYPE_CHECKING:
    from squall.client.client import Client


@dataclass
class Progress:
    """The counts of one poll: per prefix ``(tasks, done, erred)``."""

    prefixes: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    remaining: int = 0
    #: Keys asked for that were released (cancelled) before they finished.
    cancelled: int = 0
    elapsed: float = 0.0

    @property
    def total(self) -> int:
        return sum(t for t, _, _ in self.prefixes.values())

    @property
    def done(self) -> int:
        return sum(d for _, d, _ in self.prefixes.values())

    @property
    def erred(self) -> int:
        return sum(e for _, _, e in self.prefixes.values())

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0


def format_time(seconds: float) -> str:
    """``" 1.2s"``, ``" 3min  4.0s"``, ``" 1hr  2min  3.0s"``."""
    minutes, s = divmod(seconds, 60)
    hours, minutes = divmod(int(minutes), 60)
    if hours:
        return f"{hours:2d}hr {minutes:2d}min {s:4.1f}s"
    if minutes:
        return f"{minutes:2d}min {s:4.1f}s"
    return f"{s:4.1f}s"


async def follow(
    client: Client,
    keys: list[Any],
    complete: bool,
    interval: float,
    draw: Callable[[Progress], None],
) -> Progress:
    """Register ``keys`` with the scheduler and ``draw`` each poll's counts until no
    task is left to run (the last drawn is returned). Raises if the client closes or
    the scheduler does not answer a poll within ``squall.comm.timeouts.tcp``."""
    bound = config.seconds("comm.timeouts.tcp")
    start = time.monotonic()
    ask = client.connection.request
    first = m.Progress(complete=complete)
    reply, _ = await within(ask(first, m.ProgressReply, encode_keys(keys)), bound)
    watch = reply.watch
    try:
        while True:
            state = Progress(
                {name: (t, d, e) for name, t, d, e in reply.counts},
                reply.remaining,
                reply.cancelled,
                time.monotonic() - start,
            )
            draw(state)
            if not state.remaining:
                return state
            await asyncio.sleep(interval)
            reply, _ = await within(ask(m.Progress(watch=watch), m.ProgressReply), bound)
    except BaseException:
        # Interrupted, or the client closed: the scheduler may drop the watch now.
        if client.status == "running":
            client.connection.send(m.Progress(watch=watch, stop=True))
        raise


class TextProgressBar:
    """One line redrawn in place, ``[####      ] | 42% Completed |  1.2s``; erred and
    cancelled tasks are shown when there are any. Ends with a newline."""

    def __init__(self, width: int = 40) -> None:
        self.width = width

    def line(self, p: Progress) -> str:
        bar = "#" * int(self.width * p.fraction)
        parts = [f"[{bar:<{self.width}}]", f"{int(100 * p.fraction)}% Completed"]
        if p.erred:
            parts.append(f"{p.erred} erred")
        if p.cancelled:
            parts.append(f"{p.cancelled} cancelled")
        return " | ".join([*parts, format_time(p.elapsed)])

    def draw(self, p: Progress) -> None:
        sys.stdout.write("\r" + self.line(p))
        sys.stdout.flush()

    def stop(self) -> None:
        sys.stdout.write("\n")
        sys.stdout.flush()


class ProgressWidget:
    """A notebook widget (ipywidgets): one bar per task prefix, most numerous first
    (``multi``), or one for all. Fills in as the polls come, on the client's loop;
    green when done, red where tasks erred."""

    def __init__(self, multi: bool) -> None:
        from ipywidgets import HTML, VBox

        self.multi = multi
        self.status = HTML("")
        self.bars = VBox([])
        self.widget = VBox([self.status, self.bars])
        self._rows: dict[str, Any] = {}
        #: The polls, on the client's loop; its result is the last drawn.
        self.task: concurrent.futures.Future[Progress] | None = None
        #: The futures followed, held (so their keys stay wanted) until finished.
        self.futures: list[Future] = []

    def _row(self, name: str) -> Any:
        from ipywidgets import HTML, FloatProgress, HBox

        row = self._rows.get(name)
        if row is None:
            label = HTML(f"<div style='padding: 0 10px'>{html.escape(name)}</div>")
            row = self._rows[name] = HBox([HTML(""), FloatProgress(min=0, max=1), label])
        return row

    def draw(self, p: Progress) -> None:
        counts = p.prefixes if self.multi else {"": (p.total, p.done, p.erred)}
        ordered = sorted(counts.items(), key=lambda kv: (-kv[1][0], kv[0]))
        self.bars.children = tuple(self._row(name) for name, _ in ordered)
        for name, (total, done, erred) in ordered:
            text, bar, _ = self._row(name).children
            bar.value = done / total if total else 1.0
            text.value = f"<div style='text-align: right'>{done} / {total}</div>"
            if erred:
                bar.bar_style = "danger"
            elif not p.remaining:
                bar.bar_style = "success"
        what = "Finished" if not p.remaining else "Computing"
        extra = f", {p.erred} erred" if p.erred else ""
        self.status.value = f"<b>{what}:</b> {format_time(p.elapsed)}{extra}"

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        """Shown in a notebook as its widget."""
        return self.widget._repr_mimebundle_(**kwargs)


def progress(
    *futures: Any,
    notebook: bool | None = None,
    multi: bool = True,
    complete: bool = True,
    group_by: Any = "prefix",
    interval: str | float = "100ms",
    **kwargs: Any,
) -> Any:
    """Follow futures, or persisted dask collections, and all the tasks they depend
    on. In a terminal, block and draw a text bar until they are finished (in memory
    or erred); in a notebook (``notebook``; default: when running in a Jupyter kernel
    with ipywidgets), return a widget that fills in meanwhile, one bar per task prefix
    if ``multi``. ``complete``: also count dependencies that were done before. As
    distributed's, a collection that was not persisted holds no futures and has
    nothing to follow (a warning says so). The bars are per task prefix whatever
    ``group_by`` asks (distributed's text bar ignores it too; a notebook's multi bar
    warns); of the text bar's options, ``width`` is taken and the others ignored, as
    distributed does. With an asynchronous client, returns an awaitable."""
    client = _client_of(futures)
    found = _futures(futures)
    keys = list(dict.fromkeys(f.key for f in found))
    seconds = timeout_seconds(interval) or 0.1
    if notebook is None:
        notebook = _in_kernel()
    if notebook and multi and group_by != "prefix":
        warnings.warn(f"squall.progress groups by task prefix, not {group_by!r}", stacklevel=2)
    if notebook:
        widget = ProgressWidget(multi)
        widget.futures = found

        async def run() -> Progress:
            try:
                return await follow(client, keys, complete, seconds, widget.draw)
            except Exception as e:
                widget.status.value = f"<b>Stopped:</b> {html.escape(repr(e))}"
                raise
            finally:
                widget.futures = []

        widget.task = asyncio.run_coroutine_threadsafe(run(), _loop(client))
        return widget
    bar = TextProgressBar(int(kwargs.get("width", 40)))

    async def block() -> None:
        try:
            await follow(client, keys, complete, seconds, bar.draw)
        finally:
            bar.stop()

    if client.asynchronous:
        return block()
    client.sync(block)
    return None


def _client_of(items: tuple[Any, ...]) -> Client:
    for f in futures_of(list(items)):
        return f.client
    return default_client()


def _futures(items: tuple[Any, ...]) -> list[Future]:
    """The futures of ``items``; a collection without any is warned about."""
    out = []
    for item in items:
        found = futures_of(item)
        if not found and is_dask_collection(item):
            warnings.warn(
                f"progress: this {type(item).__name__} holds no futures, so there is "
                "nothing to follow; persist it first (x = client.persist(x); progress(x))",
                stacklevel=3,
            )
        out += found
    return out


def _loop(client: Client) -> asyncio.AbstractEventLoop:
    loop = client.connection.loop
    if loop is None:
        raise RuntimeError("the client has no event loop")
    return loop


def _in_kernel() -> bool:
    """Running in a Jupyter kernel, with ipywidgets to draw in it."""
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    ip = shell.get_ipython()
    if ip is None or "IPKernelApp" not in getattr(ip, "config", {}):
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True
