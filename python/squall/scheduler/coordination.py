"""The scheduler's side of the coordination primitives — locks, semaphores, multi-locks,
events, variables, queues (docs/primitives.md): their requests go to
:class:`squall._core.Coordination`, which holds every primitive's state; this room
applies the commands it hands back — answers on the requesting client's stream,
futures' keys held and released in the core through a pseudo-client per variable and
queue — and keeps one timer armed for the earliest deadline of a waiting request.

A holder is a client connection; a task's client names its worker in its hello, so
that what it holds comes back when that worker is removed (it died, or hangs), not
only when the connection closes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from squall._core import CoordCommand, Coordination, decode_keys, encode_keys
from squall.protocol import messages as m

if TYPE_CHECKING:
    from squall.scheduler.server import SchedulerServer

#: A request's answer now, as the client room's handlers return it (always None here:
#: answers go out as the commands say).
Answer = tuple[m.Message, bytes] | None


class CoordinationRoom:
    """The primitives of one :class:`SchedulerServer`."""

    def __init__(self, server: SchedulerServer) -> None:
        self._server = server
        self._state = Coordination()
        self._timer: asyncio.TimerHandle | None = None
        self._armed: float | None = None
        #: Task clients' worker addresses, by client id.
        self._worker_of: dict[int, str] = {}

    def handlers(self) -> dict[type[m.Message], Callable[[int, Any, memoryview], Answer]]:
        """The client room's handlers of the primitives' requests (by client id)."""
        return {
            m.SemaphoreAcquire: self._semaphore_acquire,
            m.SemaphoreRelease: self._simple(lambda s: s.semaphore_release, "name", "lease"),
            m.SemaphoreValue: self._simple(lambda s: s.semaphore_value, "name"),
            m.SemaphoreClose: self._simple(lambda s: s.semaphore_close, "name"),
            m.MultiLockAcquire: self._multi_lock_acquire,
            m.MultiLockRelease: self._simple(lambda s: s.multi_lock_release, "lease"),
            m.EventWait: self._simple(lambda s: s.event_wait, "name", "timeout"),
            m.EventSet: self._simple(lambda s: s.event_set, "name"),
            m.EventClear: self._simple(lambda s: s.event_clear, "name"),
            m.EventIsSet: self._simple(lambda s: s.event_is_set, "name"),
            m.VariableSet: self._variable_set,
            m.VariableGet: self._simple(lambda s: s.variable_get, "name", "timeout"),
            m.VariableDelete: self._simple(lambda s: s.variable_delete, "name"),
            m.QueuePut: self._queue_put,
            m.QueueGet: self._simple(lambda s: s.queue_get, "name", "maxsize", "batch", "timeout"),
            m.QueueSize: self._simple(lambda s: s.queue_size, "name", "maxsize"),
            m.QueueClose: self._simple(lambda s: s.queue_close, "name"),
        }

    # ----- holders ------------------------------------------------------------------

    def client_joined(self, cid: int, hello: m.Hello) -> None:
        if hello.worker is not None:
            self._worker_of[cid] = hello.worker

    def client_left(self, cid: int) -> None:
        """A client's connection ended: its leases and locks come back."""
        self._worker_of.pop(cid, None)
        self._state.holder_gone(cid, now=self._server.now())
        self._apply()

    def worker_left(self, address: str) -> None:
        """A worker is gone (or unreachable): its tasks' clients' leases and locks come
        back, and their waiting requests fail, even if their connections linger."""
        for cid in [c for c, a in self._worker_of.items() if a == address]:
            self._state.holder_gone(cid, now=self._server.now())
        self._apply()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    # ----- requests -----------------------------------------------------------------

    def _simple(
        self, method: Callable[[Coordination], Callable[..., None]], *fields: str
    ) -> Callable[[int, Any, memoryview], Answer]:
        """A handler passing the request's ``fields`` to ``method`` of the state."""

        def handle(cid: int, msg: Any, payload: memoryview) -> Answer:
            args = [getattr(msg, f) for f in fields]
            method(self._state)(cid, msg.id or 0, *args, now=self._server.now())
            self._apply()
            return None

        return handle

    def _semaphore_acquire(self, cid: int, msg: m.SemaphoreAcquire, payload: memoryview) -> Answer:
        s = self._state
        s.semaphore_acquire(
            cid, msg.id or 0, msg.name, msg.max_leases, msg.timeout, now=self._server.now()
        )
        self._apply()
        return None

    def _multi_lock_acquire(
        self, cid: int, msg: m.MultiLockAcquire, payload: memoryview
    ) -> Answer:
        s = self._state
        s.multi_lock_acquire(
            cid, msg.id or 0, msg.names, msg.num_locks, msg.timeout, now=self._server.now()
        )
        self._apply()
        return None

    def _variable_set(self, cid: int, msg: m.VariableSet, payload: memoryview) -> Answer:
        data, keys = self._value(msg.n_data, payload)
        self._state.variable_set(cid, msg.id or 0, msg.name, data, keys, now=self._server.now())
        self._apply()
        return None

    def _queue_put(self, cid: int, msg: m.QueuePut, payload: memoryview) -> Answer:
        data, keys = self._value(msg.n_data, payload)
        s = self._state
        s.queue_put(
            cid,
            msg.id or 0,
            msg.name,
            msg.maxsize,
            data,
            keys,
            msg.timeout,
            now=self._server.now(),
        )
        self._apply()
        return None

    def _value(self, n_data: int, payload: memoryview) -> tuple[bytes, list[Any]]:
        """A value's pickle and its futures' keys, each known to the scheduler (a future
        released meanwhile cannot be kept alive: the request fails)."""
        if not 0 <= n_data <= len(payload):
            raise ValueError("n_data is past the payload")
        keys = decode_keys(bytes(payload[n_data:])) if n_data < len(payload) else []
        unknown = [k for k in keys if self._server.core.lookup(k) is None]
        if unknown:
            raise ValueError(f"futures unknown to the scheduler (released?): {unknown[:3]}")
        return bytes(payload[:n_data]), keys

    # ----- commands -----------------------------------------------------------------

    def _apply(self) -> None:
        """Carry out the state's commands in order, then re-arm the timer."""
        s = self._server
        for cmd in self._state.take_commands():
            if cmd.op == "answer":
                self._answer(cmd)
            else:
                owner = s.core.client(cmd.owner) if cmd.owner is not None else cmd.holder
                assert owner is not None
                keys = [k for k in cmd.keys if s.core.lookup(k) is not None]
                if cmd.op == "hold":
                    s.core.client_desires_keys(owner, keys, now=s.now())
                else:
                    s.core.client_releases_keys(owner, keys, now=s.now())
        self._arm()

    def _answer(self, cmd: CoordCommand) -> None:
        peer = self._server.clients.get(cmd.holder if cmd.holder is not None else -1)
        if peer is None:
            return  # it left; it was told nothing it could wait for
        rid = cmd.request
        if cmd.status == "failed":
            peer.send(m.RequestFailed(id=rid, error=cmd.error))
            return
        reply = m.CoordReply(id=rid, ok=cmd.status != "timed-out", count=cmd.count)
        payload = b""
        if cmd.status == "values":
            reply.sizes = [len(data) for data, _ in cmd.values]
            reply.n_keys = [len(keys) for _, keys in cmd.values]
            keys = [k for _, ks in cmd.values for k in ks]
            payload = b"".join(data for data, _ in cmd.values) + (
                encode_keys(keys) if keys else b""
            )
        peer.send(reply, payload)

    def _arm(self) -> None:
        """One timer, for the earliest deadline."""
        due = self._state.next_deadline()
        if due == self._armed:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._armed = due
        if due is not None:
            delay = max(0.0, due - self._server.now())
            self._timer = asyncio.get_running_loop().call_later(delay, self._expire)

    def _expire(self) -> None:
        self._timer = self._armed = None
        self._state.expire(now=self._server.now())
        self._apply()
        self._server.dispatch()
