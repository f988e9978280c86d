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
        on = self._on
        return {
            m.SemaphoreAcquire: on(lambda s: s.semaphore_acquire, "name", "max_leases", "timeout"),
            m.SemaphoreRelease: on(lambda s: s.semaphore_release, "name", "lease"),
            m.SemaphoreValue: on(lambda s: s.semaphore_value, "name"),
            m.SemaphoreClose: on(lambda s: s.semaphore_close, "name"),
            m.MultiLockAcquire: on(
                lambda s: s.multi_lock_acquire, "names", "num_locks", "timeout"
            ),
            m.MultiLockRelease: on(lambda s: s.multi_lock_release, "lease"),
            m.EventWait: on(lambda s: s.event_wait, "name", "timeout"),
            m.EventSet: on(lambda s: s.event_set, "name"),
            m.EventClear: on(lambda s: s.event_clear, "name"),
            m.EventIsSet: on(lambda s: s.event_is_set, "name"),
            m.VariableSet: on(lambda s: s.variable_set, "name", value=True),
            m.VariableGet: on(lambda s: s.variable_get, "name", "timeout"),
            m.VariableDelete: on(lambda s: s.variable_delete, "name"),
            m.QueuePut: on(lambda s: s.queue_put, "name", "maxsize", "timeout", value=True),
            m.QueueGet: on(lambda s: s.queue_get, "name", "maxsize", "batch", "timeout"),
            m.QueueSize: on(lambda s: s.queue_size, "name", "maxsize"),
            m.QueueClose: on(lambda s: s.queue_close, "name"),
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

    def _on(
        self,
        method: Callable[[Coordination], Callable[..., None]],
        *fields: str,
        value: bool = False,
    ) -> Callable[[int, Any, memoryview], Answer]:
        """A handler passing the request's ``fields`` to ``method`` of the state, by
        name, and with ``value`` the value the payload carries (``data`` and ``keys``)."""

        def handle(cid: int, msg: Any, payload: memoryview) -> Answer:
            args = {f: getattr(msg, f) for f in fields}
            if value:
                args["data"], args["keys"] = self._value(msg.n_data, payload)
            method(self._state)(cid, msg.id or 0, **args, now=self._server.now())
            self._apply()
            return None

        return handle

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
