"""distributed's coordination primitives, their state on the scheduler
(docs/primitives.md): ``Lock``, ``MultiLock``, ``Semaphore``, ``Event``, ``Variable``,
``Queue``."""

from squall.primitives.event import Event
from squall.primitives.lock import Lock
from squall.primitives.multi_lock import MultiLock
from squall.primitives.queue import Queue
from squall.primitives.semaphore import Semaphore
from squall.primitives.variable import Variable

__all__ = ["Event", "Lock", "MultiLock", "Queue", "Semaphore", "Variable"]
