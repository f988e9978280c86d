"""The task stream on the client, with distributed's names: ``Client.get_task_stream``
and the ``get_task_stream`` context manager (docs/runtime.md#task-stream).

Records are distributed's: ``{"key", "prefix", "worker", "thread", "status": "OK" |
"error", "nbytes", "typename" (of the result; 0 and "" for a failure), "startstops":
[{"action": "compute", "start", "stop"}]}``, epoch seconds.
Workers send them with their heartbeats, so each request first waits for one heartbeat
from every worker (``flush``): the tasks whose results the client has seen are in.
Above ``squall.diagnostics.task-stream.samples`` tasks per worker and heartbeat, the
records are an even sample of the tasks.
"""

from __future__ import annotations

import pathlib
import warnings
from typing import Any, NamedTuple

from dask.utils import key_split

from squall._core import decode_keys
from squall.client.connection import ClientConnection
from squall.client.default import default_client
from squall.client.report_html import task_stream_page
from squall.protocol import messages as m

Record = dict[str, Any]


class StreamSlice(NamedTuple):
    """An answer: the cursor past the newest record, how many tasks the workers ever
    said they ran (the scheduler's count, to compare between two answers), the
    records asked for."""

    cursor: int
    tasks: int
    records: list[Record]


_NO_FIGURES = (
    "get_task_stream(plot=True) returns a Bokeh figure in distributed; squall draws "
    "none: plot='save' writes the stream to `filename` as a self-contained HTML page"
)


class TaskStreamReader:
    """The task stream, read over a client's connection: ``Client.get_task_stream``
    (documented there) and the blocks of ``get_task_stream`` and
    ``performance_report``."""

    def __init__(self, connection: ClientConnection) -> None:
        self.connection = connection

    def get_task_stream(
        self,
        start: float | str | None = None,
        stop: float | str | None = None,
        count: int | None = None,
        plot: bool | str = False,
        filename: str = "task-stream.html",
        bokeh_resources: Any = None,
        **kwargs: Any,
    ) -> Any:
        _check_plot(plot)
        query = {"start": start, "stop": stop, "count": count}

        async def run() -> Any:
            records = (await self.read(query)).records
            return _saved(records, plot, filename)

        return self.connection.sync(run, **kwargs)

    async def read(self, query: dict[str, Any]) -> StreamSlice:
        """Asks for ``query`` (``cursor`` and ``limit``, or ``start``, ``stop`` and
        ``count``: fields of ``task-stream``), after a flush (docs/protocol.md)."""
        request = m.TaskStream(flush=True, **query)
        reply, payload = await self.connection.request(request, m.TaskStreamReply)
        workers = reply.workers
        keys = decode_keys(bytes(payload))
        records = [
            {
                "key": key,
                "prefix": key_split(key),
                "worker": workers[w],
                "thread": thread,
                "status": "OK" if ok else "error",
                "nbytes": nbytes,
                "typename": typename,
                "startstops": [{"action": "compute", "start": start, "stop": stop}],
            }
            for key, (w, thread, ok, start, stop, nbytes, typename) in zip(
                keys, reply.records, strict=True
            )
        ]
        return StreamSlice(reply.cursor, reply.tasks, records)


class get_task_stream:  # distributed's name
    """Collects the task stream of a block, as distributed's::

        with get_task_stream(client) as ts:
            x.compute()
        ts.data  # the records of the tasks that ended in the block

    ``client`` defaults to the default client; ``plot="save"`` also writes the records
    to ``filename`` as a self-contained HTML page (``figure`` stays None: squall makes
    no Bokeh figure). Works with ``async with`` on an asynchronous client.

    When workers ran more tasks per heartbeat than
    ``squall.diagnostics.task-stream.samples``, the records are an even sample of the
    block's tasks: a ``UserWarning`` says so, and ``tasks`` holds how many ran."""

    def __init__(
        self,
        client: Any = None,
        plot: bool | str = False,
        filename: str = "task-stream.html",
    ) -> None:
        _check_plot(plot)
        self.data: list[Record] = []
        #: How many tasks ended in the block (``len(data)`` unless sampled).
        self.tasks = 0
        self.figure = None
        self.client = client if client is not None else default_client()
        self._plot = plot
        self._filename = filename
        self._cursor = self._ran_before = 0

    def __enter__(self) -> get_task_stream:
        return self.client.sync(self.__aenter__, asynchronous=False)  # type: ignore[no-any-return]

    def __exit__(self, *exc: object) -> None:
        self.client.sync(self.__aexit__, asynchronous=False)

    async def __aenter__(self) -> get_task_stream:
        # After a flush, so that tasks which ended before the block are not in it.
        begun = await self.client.task_stream.read({"count": 0})
        self._cursor, self._ran_before = begun.cursor, begun.tasks
        return self

    async def __aexit__(self, *exc: object) -> None:
        ended = await self.client.task_stream.read({"cursor": self._cursor})
        ran = ended.tasks - self._ran_before
        self.data.extend(ended.records)
        self.tasks += ran
        if len(ended.records) < ran:
            warnings.warn(
                f"get_task_stream: {len(ended.records)} records stand for the {ran} tasks "
                "of the block (workers report at most "
                "squall.diagnostics.task-stream.samples tasks per heartbeat)",
                stacklevel=2,
            )
        _saved(ended.records, self._plot, self._filename)


def _check_plot(plot: bool | str) -> None:
    if plot and plot != "save":
        raise ValueError(_NO_FIGURES)


def _saved(records: list[Record], plot: bool | str, filename: str) -> Any:
    """``records``, or with ``plot="save"`` ``(records, filename)`` once written."""
    if plot != "save":
        return records
    pathlib.Path(filename).write_text(task_stream_page(records))
    return records, filename
