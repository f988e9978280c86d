"""``performance_report``, distributed's name: one self-contained HTML file about a block
of code (docs/runtime.md#task-stream)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import sys
import time
from typing import Any

import fsspec  # type: ignore[import-untyped]

from squall.client.default import default_client
from squall.client.report_html import MemorySample, report_page

logger = logging.getLogger("squall.client")


class performance_report:  # distributed's name
    """Writes ``filename``: the calling code, the task stream of the block, a summary
    per task prefix and the workers' memory over time (read from the scheduler every
    ``interval`` seconds)::

        with performance_report(filename="report.html"):
            x.compute()

    As distributed's: ``stacklevel`` picks the frame whose source is shown (1: the one
    that opened the block); ``filename`` may be any URL ``fsspec`` writes, given
    ``storage_options``, compressed by its extension (``.gz``). ``mode`` (Bokeh's
    resources) is accepted and has no effect: the page has no script and fetches
    nothing. ``client`` defaults to the default client; ``async with`` works on an
    asynchronous client."""

    def __init__(
        self,
        filename: str = "dask-report.html",
        stacklevel: int = 1,
        mode: str | None = None,
        storage_options: dict[str, Any] | None = None,
        *,
        client: Any = None,
        interval: float = 0.5,
    ) -> None:
        self.filename = filename
        self.mode = mode
        self.storage_options = storage_options or {}
        self._stacklevel = max(stacklevel, 1)  # 0 or less would show squall's own code
        self._client = client
        self._interval = interval
        self._memory: list[MemorySample] = []
        self._sampler: asyncio.Task[None] | None = None
        self._start = 0.0
        self._cursor = self._tasks = 0

    def __enter__(self) -> performance_report:
        client = self._client if self._client is not None else default_client()
        return client.sync(self.__aenter__, asynchronous=False)  # type: ignore[no-any-return]

    def __exit__(self, *exc: object) -> None:
        code = _calling_code(self._stacklevel)
        self._client.sync(self.__aexit__, *exc, code=code, asynchronous=False)

    async def __aenter__(self) -> performance_report:
        if self._client is None:
            self._client = default_client()
        begun = await self._client.task_stream.read({"count": 0})
        self._cursor, self._tasks = begun.cursor, begun.tasks
        self._start = time.time()
        await self._sample_memory()
        self._sampler = asyncio.get_running_loop().create_task(self._sample_forever())
        return self

    async def __aexit__(self, *exc: object, code: str | None = None) -> None:
        if code is None:  # awaited by the block's own coroutine: its frame is the caller's
            code = _calling_code(self._stacklevel)
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
        await self._sample_memory()
        stop = time.time()
        ended = await self._client.task_stream.read({"cursor": self._cursor})
        ran = ended.tasks - self._tasks
        sampled = len(ended.records) / ran if ran else 1.0
        page = report_page(ended.records, self._memory, self._start, stop, sampled, code)
        with fsspec.open(
            self.filename, mode="w", compression="infer", **self.storage_options
        ) as f:
            f.write(page)

    async def _sample_forever(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self._sample_memory()
            except Exception as e:  # a missed sample leaves a gap, not a failed block
                logger.debug("performance_report: no memory sample: %s", e)

    async def _sample_memory(self) -> None:
        info = await self._client.cluster_ops.identity()
        memory = {
            w["address"]: (
                int((w.get("metrics") or {}).get("memory", 0)),
                int((w.get("metrics") or {}).get("managed_bytes", 0)),
            )
            for w in info.workers
        }
        self._memory.append((time.time(), memory))


def _calling_code(stacklevel: int) -> str:
    """The source of the frame ``stacklevel`` above this function's caller
    (``__exit__`` or ``__aexit__``; 1: the block's), as distributed's report shows it."""
    try:
        return inspect.getsource(sys._getframe(stacklevel + 1))
    except (OSError, TypeError, ValueError):  # no source (a REPL), or no such frame
        return "<Code not available>"
