"""The task stream on the scheduler: what ran where and when (docs/runtime.md#task-stream).

Workers send the tasks they ran in their heartbeats, every one up to
``squall.diagnostics.task-stream.samples`` per heartbeat and an even sample beyond, with
how many ran. The scheduler keeps the last ``squall.diagnostics.task-stream.capacity``
records in distributed's task-stream shape, for the dashboard (``since``, a cursor over
records), ``Client.get_task_stream`` and ``performance_report`` (``window``), and the
fraction of tasks recorded lately (``sampled_fraction``). Its cost follows the number
of records, bounded per heartbeat, not the number of tasks.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from itertools import islice
from typing import Any

from dask.utils import key_split, parse_timedelta

from squall._core import decode_keys, encode_keys
from squall.errors import TimeoutError
from squall.protocol import comm
from squall.protocol import messages as m
from squall.protocol.bounded import within

Key = Hashable
#: One task's record: ``{"key", "prefix", "worker", "thread", "status": "OK" | "error",
#: "nbytes", "typename", "startstops": [{"action": "compute", "start", "stop"}]}``
#: (epoch seconds; a failed task's result has 0 bytes and type name "").
Record = dict[str, Any]
#: A worker's sample of one task: (key, start, stop, thread, ok, nbytes, typename).
Entry = tuple[Key, float, float, int, bool, int, str]
#: As kept: (key, worker, thread, ok, start, stop, nbytes, typename); records are made
#: when asked for, so that heartbeats cost a tuple per sample.
Row = tuple[Key, str, int, bool, float, float, int, str]

#: How far back ``sampled_fraction`` looks, in seconds.
RATE_WINDOW = 10.0


class TaskStream:
    """A bounded ring of task records; ``add`` them as heartbeats bring them."""

    def __init__(self, capacity: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._rows: deque[Row] = deque(maxlen=capacity)
        #: Records ever added: the cursor just past the newest.
        self._added = 0
        #: Tasks the workers ever said they ran (the records stand for them).
        self.tasks = 0
        self._clock = clock
        #: (when, records kept, tasks they stand for) of recent heartbeats.
        self._recent: deque[tuple[float, int, int]] = deque()
        #: Heartbeats heard per worker address, and the latest gap between two.
        self._heard: dict[str, int] = {}
        self._gap: dict[str, float] = {}
        self._last: dict[str, float] = {}
        self._beat = asyncio.Event()

    @property
    def cursor(self) -> int:
        """The cursor just past the newest record (``since`` it gives what came later)."""
        return self._added

    def add(self, worker: str, entries: Iterable[Entry], represented: int) -> None:
        """A heartbeat from ``worker`` with its sampled tasks, which stand for
        ``represented`` tasks (0 and no entries: a heartbeat with no task run)."""
        rows = [
            (key, worker, thread, ok, start, stop, nbytes, typename)
            for key, start, stop, thread, ok, nbytes, typename in entries
        ]
        self._add_rows(worker, rows, represented)

    def _add_rows(self, worker: str, rows: list[Row], represented: int) -> None:
        """``add``, its rows made."""
        now = self._clock()
        self._rows.extend(rows)
        n = len(rows)
        self._added += n
        self.tasks += represented
        if represented:
            self._recent.append((now, n, represented))
        while self._recent and self._recent[0][0] < now - RATE_WINDOW:
            self._recent.popleft()
        if worker in self._last:
            self._gap[worker] = now - self._last[worker]
        self._last[worker] = now
        self._heard[worker] = self._heard.get(worker, 0) + 1
        self._beat.set()
        self._beat = asyncio.Event()

    def add_heartbeat(self, worker: str, msg: m.Heartbeat, payload: bytes | memoryview) -> None:
        """``add`` a heartbeat's samples: ``stream`` holds their times, the payload
        their keys (docs/protocol.md); empty if no task ran."""
        # The samples are of tasks that ran; a count past any worker's (task ids are
        # u32) would only overflow the totals sent to clients.
        if not len(msg.stream) <= msg.stream_tasks < 2**32:
            raise ValueError(f"stream: {msg.stream_tasks} tasks for {len(msg.stream)} samples")
        if not msg.stream:
            self.add(worker, (), msg.stream_tasks)
            return
        keys = decode_keys(bytes(payload))
        if len(keys) != len(msg.stream):
            raise ValueError(f"stream: {len(keys)} keys for {len(msg.stream)} samples")
        # Rows straight from the samples: a heartbeat carries up to a thousand of them,
        # and a tuple per sample is all it should cost.
        rows = [
            (key, worker, thread, ok, start, stop, nbytes, typename)
            for key, (start, stop, thread, ok, nbytes, typename) in zip(
                keys, msg.stream, strict=True
            )
        ]
        self._add_rows(worker, rows, msg.stream_tasks)

    def sampled_fraction(self) -> float:
        """Of the tasks run in the last ``RATE_WINDOW`` seconds, the fraction that has a
        record (1.0 when every task was recorded, or none ran)."""
        kept = sum(n for _, n, _ in self._recent)
        ran = sum(r for _, _, r in self._recent)
        return kept / ran if ran else 1.0

    def since(self, cursor: int, limit: int | None = None) -> tuple[int, list[Record]]:
        """The records added after ``cursor`` (oldest first; the newest ``limit`` if there
        are more) and the cursor to ask from next time. Records that left the ring
        before being asked for are skipped."""
        cursor, rows = self.rows_since(cursor, limit)
        return cursor, [record(r) for r in rows]

    def window(
        self,
        start: float | str | None = None,
        stop: float | str | None = None,
        count: int | None = None,
    ) -> list[Record]:
        """The records of tasks that ended between ``start`` and ``stop`` (epoch seconds,
        or durations before now like ``"10s"``), in the order they ended (heartbeats
        from several workers interleave), as distributed's: with ``start`` alone
        ``count`` keeps the first that many, with ``stop`` alone or neither the last
        that many; with both it is ignored."""
        return [record(r) for r in self.rows_window(start, stop, count)]

    def rows_since(self, cursor: int, limit: int | None = None) -> tuple[int, list[Row]]:
        """``since``, as rows."""
        n = max(0, min(self._added - cursor, len(self._rows)))
        if limit is not None:
            n = min(n, max(limit, 0))
        return self._added, list(islice(reversed(self._rows), n))[::-1]

    def rows_window(
        self,
        start: float | str | None = None,
        stop: float | str | None = None,
        count: int | None = None,
    ) -> list[Row]:
        """``window``, as rows."""
        lo, hi = _epoch(start), _epoch(stop)
        picked = sorted(
            (r for r in self._rows if (lo is None or r[5] >= lo) and (hi is None or r[5] < hi)),
            key=lambda r: r[5],
        )
        if count is None or (lo is not None and hi is not None):
            return picked
        if count <= 0:
            return []
        return picked[:count] if lo is not None else picked[-count:]

    async def heard_from(self, workers: Callable[[], Iterable[str]], timeout: float) -> bool:
        """Waits (at most ``timeout`` seconds) until each worker connected (``workers()``,
        asked again after each heartbeat) has sent another heartbeat, which holds every
        task it had reported finished before this was called. True if all did."""
        connected = set(workers())
        for gone in self._heard.keys() - connected:  # forget the workers that left
            for d in (self._heard, self._gap, self._last):
                d.pop(gone, None)
        before = {w: self._heard.get(w, 0) for w in connected}
        deadline = self._clock() + timeout
        while any(self._heard.get(w, 0) == n for w, n in before.items() if w in connected):
            left = deadline - self._clock()
            if left <= 0:
                return False
            try:
                await within(self._beat.wait(), left)
            except TimeoutError:
                return False
            connected = set(workers())
        return True

    def flush_timeout(self, workers: Iterable[str], default: float) -> float:
        """Long enough for each of ``workers`` to send its next heartbeat: twice the
        longest recent gap between two of theirs (``default`` when none is known)."""
        gaps = [self._gap[w] for w in workers if w in self._gap]
        return 2 * max(gaps) if gaps else default


def record(row: Row) -> Record:
    """A row in distributed's task-stream shape, with the key's prefix."""
    key, worker, thread, ok, start, stop, nbytes, typename = row
    return {
        "key": key,
        "prefix": key_split(key),
        "worker": worker,
        "thread": thread,
        "status": "OK" if ok else "error",
        "nbytes": nbytes,
        "typename": typename,
        "startstops": [{"action": "compute", "start": start, "stop": stop}],
    }


def _epoch(t: float | str | None) -> float | None:
    """An epoch time, from a number or a duration before now (``"10s"``)."""
    if t is None or isinstance(t, int | float):
        return t
    return time.time() - float(parse_timedelta(t))


async def answer(
    stream: TaskStream, msg: m.TaskStream, workers: Callable[[], Iterable[str]], wait: float
) -> tuple[m.Message, bytes]:
    """The answer to a ``task-stream`` request (docs/protocol.md). With ``flush``, it
    first waits for a heartbeat from each worker (at most twice their recent gap, or
    ``wait`` seconds if unknown), so that tasks already reported finished are in."""
    flushed = True
    if msg.flush:
        flushed = await stream.heard_from(workers, stream.flush_timeout(workers(), wait))
    if msg.cursor is not None:
        cursor, rows = stream.rows_since(msg.cursor, msg.limit)
    else:
        try:
            rows = stream.rows_window(msg.start, msg.stop, msg.count)
        except comm.MALFORMED as e:  # a duration that does not parse (dask raises several)
            return m.RequestFailed(id=msg.id, error=f"malformed: {e}"), b""
        cursor = stream.cursor
    index: dict[str, int] = {}
    records = [
        (index.setdefault(worker, len(index)), thread, ok, start, stop, nbytes, typename)
        for _, worker, thread, ok, start, stop, nbytes, typename in rows
    ]
    reply = m.TaskStreamReply(
        id=msg.id,
        cursor=cursor,
        tasks=stream.tasks,
        workers=list(index),
        records=records,
        sampled=stream.sampled_fraction(),
        flushed=flushed,
    )
    return reply, encode_keys([r[0] for r in rows])
