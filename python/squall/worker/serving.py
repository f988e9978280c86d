"""What a worker serves its peers, clients and other workers (docs/protocol.md, peer →
worker): ``get-data`` (its results, pickled), ``update-data`` (scattered values, staged
until the scheduler's ``scattered`` names their tasks), ``run`` (``Client.run``, which
a nanny serves too) and calls on its actors (``actor-call``, ``actor-attribute``,
docs/actors.md).

Requests on one connection are answered in order, each by its handler in the table of
its message type (:class:`~squall.protocol.dispatch.Handlers`), but for ``actor-call``:
each is answered when its method returns, so that calls on one connection overlap.
A request whose header does not validate is answered with ``error`` and closes that
connection only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from squall._core import decode_keys
from squall.protocol import comm, dispatch, liveness
from squall.protocol import messages as m
from squall.protocol.peers import MISSING, UNPICKLABLE
from squall.protocol.remote_errors import error_fields, pack_error
from squall.protocol.run_calls import run_function
from squall.protocol.specs import PLAIN_TYPES
from squall.worker.load import Transfers
from squall.worker.memory import sizeof_value
from squall.worker.spill import Spilled, dumps

if TYPE_CHECKING:
    from squall.worker.worker import Worker

logger = logging.getLogger("squall.worker")

#: A request's answer: the reply and its payload.
Answer = tuple[m.Message, comm.Payload]
Requests = dispatch.Handlers[Awaitable[Answer]]

#: What ``WorkerCore.get_data`` gives for a key this worker does not hold.
ABSENT = object()


async def refuse(why: str) -> Answer:
    """An ``error`` answer: the connection closes after it (:func:`answer`)."""
    return m.Error(message=why), b""


def refuse_malformed(bad: m.Malformed) -> Awaitable[Answer]:
    return refuse(bad.error)


async def answer(
    c: comm.Comm,
    requests: Requests,
    msg: m.Message | m.Malformed,
    payload: memoryview,
    transfers: Transfers | None = None,
) -> None:
    """Answer one request on ``c``, in a call of its own: the serving loop outlives it
    and must keep neither the values nor their pickles. A refusal closes the
    connection (ProtocolError, after the ``error`` is sent); ``data`` replies count in
    ``transfers``."""
    reply, data = await requests(msg, payload)
    if isinstance(reply, m.Error):
        await c.write(reply)
        raise comm.ProtocolError(f"refused a request: {reply.message}")
    if transfers is None or not isinstance(reply, m.Data):
        await c.write(reply, data)
        return
    with transfers.outgoing(comm.payload_size(data)):
        await c.write(reply, data)


class PeerService:
    """A worker's peer listener: one connection per peer, requests in turn."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker
        #: Connections being served (closed with the worker).
        self.incoming: set[comm.Comm] = set()
        self.requests: Requests = dispatch.Handlers(
            m.Route.PEER_TO_WORKER,
            {
                m.GetData: self._get_data,
                m.UpdateData: self._update_data,
                m.Run: self._run,
                m.ActorCall: self._actor_call,
                m.ActorAttribute: self._actor_attribute,
                m.PluginAdd: worker.plugin_host.answer_add,
                m.PluginRemove: worker.plugin_host.answer_remove,
            },
            malformed=refuse_malformed,
        )
        #: Actor calls being answered (each outlives the request loop's turn).
        self._calls: set[asyncio.Task[None]] = set()

    async def serve(self, c: comm.Comm) -> None:
        w = self._worker
        self.incoming.add(c)
        try:
            async with contextlib.aclosing(liveness.read_batches(c, f"peer {c.peer}")) as batches:
                async for received in batches:
                    for msg, payload in received:
                        if isinstance(msg, m.ActorCall):
                            self._answer_later(c, msg, payload)
                        else:
                            await answer(c, self.requests, msg, payload, w.transfers)
        except comm.CommError as e:
            if not isinstance(e, comm.CommClosedError):
                logger.info("worker %s: peer %s: %s", w.address, c.peer, e)
        except comm.MALFORMED as e:
            logger.info("worker %s: bad request from %s: %s", w.address, c.peer, e)
        finally:
            self.incoming.discard(c)

    def _answer_later(self, c: comm.Comm, msg: m.ActorCall, payload: memoryview) -> None:
        async def reply() -> None:
            w = self._worker
            try:
                await answer(c, self.requests, msg, payload)
            except comm.CommClosedError:
                pass  # the caller left: nobody to tell
            except (comm.CommError, *comm.MALFORMED) as e:
                # Refused or malformed, as in the serving loop: the connection closes.
                logger.info("worker %s: bad request from %s: %s", w.address, c.peer, e)
                c.abort()

        task = asyncio.ensure_future(reply())
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    async def _actor_call(self, msg: m.ActorCall, payload: memoryview) -> Answer:
        [key] = decode_keys(msg.key)
        if key not in self._worker.actors.instances:
            return _no_actor(msg.id, key)
        try:
            args, kwargs = pickle.loads(payload)
            value = await self._worker.actors.call(key, msg.method, args, kwargs)
            return m.ActorAnswer(id=msg.id, status="OK"), dumps(value)
        except Exception as e:
            return error_fields(m.ActorAnswer(id=msg.id, status="error"), pack_error(e))

    async def _actor_attribute(self, msg: m.ActorAttribute, payload: memoryview) -> Answer:
        [key] = decode_keys(msg.key)
        if key not in self._worker.actors.instances:
            return _no_actor(msg.id, key)
        try:
            value = self._worker.actors.attribute(key, msg.attribute)
            return m.ActorAnswer(id=msg.id, status="OK"), dumps(value)
        except Exception as e:
            return error_fields(m.ActorAnswer(id=msg.id, status="error"), pack_error(e))

    async def _get_data(self, msg: m.GetData, payload: memoryview) -> Answer:
        w = self._worker
        got = await pickle_values(w._core.get_data(bytes(payload), ABSENT))
        for text, _ in got.failed.values():
            logger.warning("worker %s: a result cannot be pickled: %s", w.address, text)
        # The pieces go out as they are, never joined (docs/runtime.md#memory).
        reply = m.Data(
            id=msg.id, sizes=got.sizes, buffers=got.buffers, failed=got.failed, whole=got.whole
        )
        return reply, got.pieces

    async def _update_data(self, msg: m.UpdateData, payload: memoryview) -> Answer:
        """Stage scattered values; the reply gives their sizes (``sizeof``)."""
        staged = self._worker._staged
        keys = decode_keys(bytes(payload[: msg.keys_bytes]))
        pos, nbytes = msg.keys_bytes, []
        try:
            for key, size in zip(keys, msg.sizes, strict=True):
                value = pickle.loads(payload[pos : pos + size])
                pos += size
                staged[key] = (value, sizeof_value(value))
                nbytes.append(staged[key][1])
        except Exception as e:
            for key in keys:
                staged.pop(key, None)
            return m.DataUpdated(id=msg.id, error=repr(e)), b""
        return m.DataUpdated(id=msg.id, nbytes=nbytes), b""

    def _run(self, msg: m.Run, payload: memoryview) -> Awaitable[Answer]:
        return run_function(self._worker, msg, payload, self._worker._spawn)


def _no_actor(rid: int | None, key: object) -> Answer:
    """The answer for an actor this worker does not hold (any more)."""
    return m.ActorAnswer(id=rid, status="missing", exception_text=f"no actor {key!r} here"), b""


@dataclass
class _Pickled:
    """A ``get-data`` reply's fields and its payload's pieces."""

    sizes: list[int] = field(default_factory=list)
    buffers: dict[int, list[int]] = field(default_factory=dict)
    failed: dict[int, tuple[str, bytes]] = field(default_factory=dict)
    pieces: list[comm.Blob] = field(default_factory=list)
    whole: bool = False


async def pickle_values(values: list[Any]) -> _Pickled:
    """``get-data``'s answer: per value its pickle's size (``MISSING`` for a value this
    worker lacks, ``UNPICKLABLE`` for one that cannot be pickled) and the sizes of its
    out-of-band buffers (numpy's: sent as they are, not copied into the pickle), the
    payload's pieces, and the errors of the values that cannot be pickled (their repr
    and pickled exception, which the asking side raises or reports for the tasks that
    needed them); spilled values are served as stored (no out-of-band buffers), read
    in a thread (blocking IO)."""
    if any(type(v) is Spilled for v in values):
        return await asyncio.to_thread(_pickle_now, values)
    return _pickle_now(values)


def _pickle_now(values: list[Any]) -> _Pickled:
    if all(map(PLAIN_TYPES.__contains__, map(type, values))):
        # All held, all plain (the small results of a large map): one pickle of the
        # list, in one C call, rather than one per value (docs/protocol.md#get-data).
        return _Pickled(whole=True, pieces=[pickle.dumps(values, protocol=5)])
    out = _Pickled()
    for i, value in enumerate(values):
        if value is ABSENT:
            out.sizes.append(MISSING)
            continue
        buffers: list[pickle.PickleBuffer] = []
        try:
            blob: comm.Blob = (
                value.raw() if type(value) is Spilled else dumps(value, buffers.append)
            )
            views = [_flat(b) for b in buffers]
        except Exception as e:
            exc_text, _, exc_blob, _ = pack_error(e)
            out.failed[i] = (exc_text, exc_blob)
            out.sizes.append(UNPICKLABLE)
            continue
        out.sizes.append(len(blob))
        out.pieces.append(blob)
        if views:
            out.buffers[i] = [len(v) for v in views]
            out.pieces.extend(views)
    return out


def _flat(buffer: pickle.PickleBuffer) -> comm.Blob:
    """An out-of-band buffer's bytes: its memory as it is, or a copy where that is
    not one contiguous area."""
    try:
        return buffer.raw()
    except BufferError:
        return memoryview(buffer).tobytes()
