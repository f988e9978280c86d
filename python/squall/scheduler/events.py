"""Events logged under topics (docs/runtime.md#events-and-printing-from-tasks): a
bounded log per topic and the clients subscribed to each, a store with no policy.

Clients and tasks log events (``log-event``), the scheduler logs its own (workers and
clients coming and going); each event is kept, newest last, in the log of each of its
topics (at most ``squall.admin.events-log-length`` per topic) and pushed at once to the
clients subscribed to the topic. Nothing here runs per task."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from squall import config
from squall.protocol import messages as m

if TYPE_CHECKING:
    from squall.scheduler.server import SchedulerServer

Answer = tuple[m.Message, bytes] | None


@dataclass
class Topic:
    events: deque[tuple[float, Any]]
    subscribers: set[int] = field(default_factory=set)


class EventLog:
    """The topics of one scheduler, and the handlers of the clients' event messages."""

    def __init__(self, server: SchedulerServer) -> None:
        self._server = server
        self._length = config.integer("admin.events-log-length")
        self._cleanup_delay = config.seconds("admin.events-cleanup-delay")
        self.topics: dict[str, Topic] = {}

    def _topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            topic = self.topics[name] = Topic(deque(maxlen=self._length))
        return topic

    def log(self, topics: str | Iterable[str], msg: Any) -> None:
        """Log ``msg`` under each topic (one timestamp for all) and push it to their
        subscribers."""
        now = time.time()
        for name in [topics] if isinstance(topics, str) else topics:
            topic = self._topic(name)
            topic.events.append((now, msg))
            self._server.plugin_host.log_event(name, msg)
            for cid in topic.subscribers:
                peer = self._server.clients.get(cid)
                if peer is not None:
                    peer.send(m.Event(topic=name, time=now, msg=msg))

    def get(self, topic: str | None) -> dict[str, list[tuple[float, Any]]]:
        if topic is not None:
            found = self.topics.get(topic)
            return {topic: list(found.events) if found is not None else []}
        return {name: list(t.events) for name, t in self.topics.items() if t.events}

    def left(self, name: str, still_here: Any) -> None:
        """A client or worker named ``name`` left: its own topic is dropped after the
        cleanup delay unless ``still_here()`` then (it came back), or someone listens."""

        def drop() -> None:
            topic = self.topics.get(name)
            if topic is not None and not topic.subscribers and not still_here():
                del self.topics[name]

        asyncio.get_running_loop().call_later(self._cleanup_delay, drop)

    def client_left(self, cid: int) -> None:
        for topic in self.topics.values():
            topic.subscribers.discard(cid)

    # ----- the clients' messages ------------------------------------------------------

    def log_request(self, cid: int, msg: m.LogEvent, payload: memoryview) -> Answer:
        self.log(msg.topics, msg.msg)
        return None

    def get_request(self, cid: int, msg: m.GetEvents, payload: memoryview) -> Answer:
        return m.GetEventsReply(id=msg.id, events=self.get(msg.topic)), b""

    def subscribe(self, cid: int, msg: m.SubscribeTopic, payload: memoryview) -> Answer:
        self._topic(msg.topic).subscribers.add(cid)
        return None

    def unsubscribe(self, cid: int, msg: m.UnsubscribeTopic, payload: memoryview) -> Answer:
        topic = self.topics.get(msg.topic)
        if topic is not None:
            topic.subscribers.discard(cid)
        return None

    def worker_event(self, address: str, msg: m.LogEvent) -> None:
        """A worker's event (a task's ``log_event``, ``print``, ``warn``): a dict is
        tagged with the worker's address unless the topic is that address, as Dask
        does."""
        if isinstance(msg.msg, dict) and msg.topics != [address]:
            msg.msg["worker"] = address
        self.log(msg.topics, msg.msg)
