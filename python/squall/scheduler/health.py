"""The scheduler's own health (docs/dashboard.md#health): how late its event loop
wakes up, how many messages it reads and how much of its time the core takes.

Cheap by construction: the reading loop bumps two counters once per *batch* of
messages, the tick loop once per tick, and a sampler wakes a few times a second to
measure its own lateness and keep a short history of the counters for rates.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: How often the sampler wakes (its lateness is the event-loop latency).
INTERVAL = 0.25
#: Rates are taken over this many seconds of samples.
WINDOW = 5.0


@dataclass(frozen=True)
class _Sample:
    at: float
    messages: int
    core_seconds: float
    computed: int
    ticks: int
    tick_seconds: float


class Health:
    """Counters and rates of one scheduler. ``computed`` reads the core's total of
    computed tasks (for tasks/s)."""

    def __init__(self, computed: Callable[[], int], interval: float = INTERVAL) -> None:
        self._computed = computed
        self._interval = interval
        self.messages = 0
        self.batches = 0
        self.core_seconds = 0.0
        self.ticks = 0
        self.tick_seconds = 0.0
        #: Overshoots of the sampler's sleeps, most recent last (seconds).
        self.latencies: deque[float] = deque(maxlen=int(WINDOW / interval))
        self._samples: deque[_Sample] = deque(maxlen=int(WINDOW / interval) + 1)
        self._task: asyncio.Task[None] | None = None

    def batch(self, n_messages: int, seconds: float) -> None:
        """A batch of ``n_messages`` was handled, the core and dispatch taking ``seconds``."""
        self.messages += n_messages
        self.batches += 1
        self.core_seconds += seconds

    def tick(self, seconds: float) -> None:
        """A periodic tick of the core took ``seconds``."""
        self.ticks += 1
        self.tick_seconds += seconds
        self.core_seconds += seconds

    def start(self) -> None:
        self._sample()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(self._interval)
            self.latencies.append(max(0.0, time.perf_counter() - start - self._interval))
            self._sample()

    def _sample(self) -> None:
        self._samples.append(
            _Sample(
                time.perf_counter(),
                self.messages,
                self.core_seconds,
                self._computed(),
                self.ticks,
                self.tick_seconds,
            )
        )

    def figures(self) -> dict[str, Any]:
        """The current figures (JSON-able): latency in seconds, rates per second over
        the last few seconds, mean core seconds per tick, and the running totals."""
        lat = list(self.latencies)
        out: dict[str, Any] = {
            "latency": lat[-1] if lat else 0.0,
            "latency_max": max(lat, default=0.0),
            "latency_history": lat,
            "messages": self.messages,
            "batches": self.batches,
            "core_seconds": self.core_seconds,
            "ticks": self.ticks,
            "messages_per_second": 0.0,
            "core_seconds_per_second": 0.0,
            "tasks_per_second": 0.0,
            "tick_seconds": 0.0,
        }
        if len(self._samples) >= 2:
            first, last = self._samples[0], self._samples[-1]
            dt = last.at - first.at
            if dt > 0:
                out["messages_per_second"] = (last.messages - first.messages) / dt
                out["core_seconds_per_second"] = (last.core_seconds - first.core_seconds) / dt
                out["tasks_per_second"] = (last.computed - first.computed) / dt
            ticks = last.ticks - first.ticks
            if ticks:
                out["tick_seconds"] = (last.tick_seconds - first.tick_seconds) / ticks
        return out
