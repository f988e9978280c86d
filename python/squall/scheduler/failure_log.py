"""Task failures in the scheduler's log: a summary that stays readable when thousands
of tasks fail (workers log each failure themselves, with its traceback)."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("squall.scheduler")


class FailureLog:
    """Per ``window`` seconds, the first ``burst`` failures are said one by one (key,
    worker, exception); the rest are counted and said in one line when the window
    ends (:meth:`tick`)."""

    def __init__(self, window: float = 10.0, burst: int = 5) -> None:
        self.window = window
        self.burst = burst
        self._start: float | None = None
        self._said = 0
        self._unsaid = 0

    def failed(self, key: Any, worker: str, exception: str, now: float) -> None:
        self.tick(now)
        if self._start is None:
            self._start = now
        if self._said < self.burst:
            self._said += 1
            logger.warning("task %r failed on %s: %s", key, worker, exception)
        else:
            self._unsaid += 1

    def tick(self, now: float) -> None:
        """End the window if it is over, summarising what it did not say."""
        if self._start is None or now - self._start < self.window:
            return
        if self._unsaid:
            logger.warning(
                "%d more tasks failed in the last %.0f s (the workers' logs have each)",
                self._unsaid,
                now - self._start,
            )
        self._start, self._said, self._unsaid = None, 0, 0
