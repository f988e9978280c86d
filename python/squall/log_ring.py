"""The newest log lines of this process, kept in memory for ``Client.get_scheduler_logs``
and ``get_worker_logs`` (docs/runtime.md#logs).

One bounded ring per process, on the ``squall`` logger: it keeps what that logger lets
through at its level, formatted as the programs' stderr lines are
(:data:`squall.config.LOG_FORMAT`), ``squall.admin.log-length`` lines at most.
"""

from __future__ import annotations

import logging
import threading
from collections import deque

from squall import config


class LogRing(logging.Handler):
    """Keeps the newest ``length`` records as ``(level name, formatted line)``."""

    def __init__(self, length: int) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter(config.LOG_FORMAT))
        self.lines: deque[tuple[str, str]] = deque(maxlen=length)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            # Formatted now: a kept record would hold its arguments (and tracebacks).
            self.lines.append((record.levelname, self.format(record)))
        except Exception:
            self.handleError(record)


_ring: LogRing | None = None
_lock = threading.Lock()


def install() -> None:
    """Start keeping this process's log lines (once; later calls do nothing)."""
    global _ring
    with _lock:
        if _ring is None:
            _ring = LogRing(config.integer("admin.log-length"))
            logging.getLogger("squall").addHandler(_ring)


def tail(n: int | None = None) -> list[tuple[str, str]]:
    """The newest ``n`` lines (all kept if None or 0), newest first, as distributed's
    ``get_logs`` gives them."""
    lines = [] if _ring is None else list(reversed(_ring.lines))
    return lines[:n] if n else lines
