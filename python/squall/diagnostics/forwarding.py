"""``Client.forward_logging``'s worker plugin (docs/runtime.md#events-and-printing-from-tasks):
a handler on a logger of each worker, current and future, that logs its records as
events of a topic the client subscribes to."""

from __future__ import annotations

from typing import Any

from squall.diagnostics.plugin import WorkerPlugin
from squall.worker import events

__all__ = ["ForwardLoggingPlugin"]


class ForwardLoggingPlugin(WorkerPlugin):
    """Forwards the records ``logger_name`` handles at ``level`` or above as events
    under ``topic``, until torn down."""

    def __init__(self, logger_name: str | None, level: int | str, topic: str) -> None:
        self.logger_name = logger_name
        self.level = level
        self.topic = topic

    def setup(self, worker: Any) -> None:
        events.forward_logging(self.logger_name, self.level, self.topic)

    def teardown(self, worker: Any) -> None:
        events.stop_forwarding(self.logger_name, self.topic)
