"""Events, the client's side (docs/runtime.md#events-and-printing-from-tasks):
``log_event``, ``get_events``, ``subscribe_topic``, ``unsubscribe_topic``,
``forward_logging``, and what a client does with the ``print`` and ``warn`` events
tasks log (every client subscribes to both when it connects, as distributed's)."""

from __future__ import annotations

import builtins
import logging
import pickle
import sys
import warnings
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from squall.diagnostics.forwarding import ForwardLoggingPlugin
from squall.protocol import messages as m
from squall.worker import events as worker_events

if TYPE_CHECKING:
    from squall.client.connection import ClientConnection
    from squall.client.worker_plugins import WorkerPluginOps

logger = logging.getLogger("squall.client")

#: ``(time, msg)``: what a topic's handler is called with.
EventTuple = tuple[float, Any]
Handler = Callable[[EventTuple], Any]
#: The topic of ``forward_logging``'s records starts so, as distributed's.
FORWARDED_LOG_RECORD = "forwarded-log-record"


def handle_print(event: EventTuple) -> None:
    """A task's ``squall.print``: printed here the same way."""
    _, msg = event
    if not isinstance(msg, dict):  # logged by hand under "print": print it as it is
        builtins.print(msg)
        return
    args = msg.get("args")
    if not isinstance(args, (list, tuple)):
        raise TypeError(f"a print event's args are not a sequence: {args!r}")
    files = {None: None, 1: sys.stdout, 2: sys.stderr}
    if msg.get("file") not in files:
        raise TypeError(f"a print event names no known stream: {msg.get('file')!r}")
    builtins.print(
        *args,
        sep=msg.get("sep"),
        end=msg.get("end"),
        file=files[msg.get("file")],
        flush=bool(msg.get("flush")),
    )


def handle_warn(event: EventTuple) -> None:
    """A task's ``squall.warn``: warned here with its message and category."""
    _, msg = event
    if not isinstance(msg, dict):  # logged by hand under "warn"
        warnings.warn(str(msg), stacklevel=1)
        return
    if "message" not in msg:
        raise TypeError('a warn event lacks its "message"')
    category = pickle.loads(msg["category"]) if "category" in msg else None
    warnings.warn(pickle.loads(msg["message"]), category, stacklevel=1)


#: The topics every client subscribes to when it connects.
DEFAULT_HANDLERS: dict[str, Handler] = {"print": handle_print, "warn": handle_warn}


def handle_forwarded_record(event: EventTuple) -> None:
    """A record a worker's logger handled (``forward_logging``): handled again by the
    logger of the same name here."""
    record = logging.makeLogRecord(event[1])
    logging.getLogger(record.name).handle(record)


def forwarding_topic(logger_name: str | None) -> str:
    return f"{FORWARDED_LOG_RECORD}-forward-logging-{logger_name or '<root>'}"


class EventOps:
    """The event methods of :class:`~squall.client.client.Client` (documented there)."""

    def __init__(self, connection: ClientConnection, plugins: WorkerPluginOps) -> None:
        self.connection = connection
        self.plugins = plugins

    def log_event(self, topic: str | Collection[str], msg: Any, **kwargs: Any) -> Any:
        message = worker_events.log_event_message(topic, msg)

        async def run() -> None:
            self.connection.send(message)

        return self.connection.sync(run, **kwargs)

    def get_events(self, topic: str | None, **kwargs: Any) -> Any:
        async def run() -> Any:
            reply, _ = await self.connection.request(m.GetEvents(topic=topic), m.GetEventsReply)
            events = {t: tuple(map(tuple, evs)) for t, evs in reply.events.items()}
            return events.get(topic, ()) if topic is not None else events

        return self.connection.sync(run, **kwargs)

    def subscribe_topic(self, topic: str, handler: Handler) -> None:
        handlers = self.connection.event_handlers
        if topic in handlers:
            logger.info("replacing the handler of topic %r", topic)
        handlers[topic] = handler
        self.connection.call_soon(self.connection.send, m.SubscribeTopic(topic=topic))

    def unsubscribe_topic(self, topic: str) -> None:
        if self.connection.event_handlers.pop(topic, None) is None:
            raise ValueError(f"No event handler known for topic {topic}.")
        self.connection.call_soon(self.connection.send, m.UnsubscribeTopic(topic=topic))

    def forward_logging(self, logger_name: str | None, level: int | str) -> Any:
        topic = forwarding_topic(logger_name)
        self.subscribe_topic(topic, handle_forwarded_record)
        # A worker plugin named by the topic: again, it replaces the one there was.
        plugin = ForwardLoggingPlugin(logger_name, level, topic)
        return self.connection.sync(
            self.plugins.register, plugin, topic, idempotent=False, nanny=False
        )

    def unforward_logging(self, logger_name: str | None) -> Any:
        topic = forwarding_topic(logger_name)
        self.unsubscribe_topic(topic)
        return self.connection.sync(self.plugins.unregister, topic, nanny=False)
