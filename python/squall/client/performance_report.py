"""``performance_report``, distributed's name: one self-contained HTML file about a block
of code (docs/runtime.md#task-stream)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import time
from typing import Any

from squall.client.default import default_client
from squall.client.report_html import MemorySample, report_page

logger = logging.getLogger("squall.client")


class performance_report:  # distributed's name
    """Writes ``filename``: the task stream of the block, a summary per task prefix and
    the workers' memory over time (read from the scheduler every ``interval`` seconds)::

        with performance_report(filename="report.html"):
            x.compute()

    ``client`` defaults to the default client; ``async with`` works on an asynchronous
    client. The page has no script and fetches nothing."""

    def __init__(
        self,
        filename: str = "dask-report.html",
        client: Any = None,
        interval: float = 0.5,
    ) -> None:
        self.filename = filename
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
        self._client.sync(self.__aexit__, asynchronous=False)

    async def __aenter__(self) -> performance_report:
        if self._client is None:
            self._client = default_client()
        begun = await self._client._task_stream({"count": 0})
        self._cursor, self._tasks = begun.cursor, begun.tasks
        self._start = time.time()
        await self._sample_memory()
        self._sampler = asyncio.get_running_loop().create_task(self._sample_forever())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
        await self._sample_memory()
        stop = time.time()
        ended = await self._client._task_stream({"cursor": self._cursor})
        ran = ended.tasks - self._tasks
        sampled = len(ended.records) / ran if ran else 1.0
        page = report_page(ended.records, self._memory, self._start, stop, sampled)
        pathlib.Path(self.filename).write_text(page)

    async def _sample_forever(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self._sample_memory()
            except Exception as e:  # a missed sample leaves a gap, not a failed block
                logger.debug("performance_report: no memory sample: %s", e)

    async def _sample_memory(self) -> None:
        info = await self._client._identity()
        memory = {
            w["address"]: (
                int((w.get("metrics") or {}).get("memory", 0)),
                int((w.get("metrics") or {}).get("managed_bytes", 0)),
            )
            for w in info["workers"]
        }
        self._memory.append((time.time(), memory))
