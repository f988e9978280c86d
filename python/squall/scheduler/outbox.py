"""The core's commands, sent: per-task notices packed per peer and op in Rust, the rare
commands one message each (docs/protocol.md#messages)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from squall._core import encode_keys
from squall.protocol import messages as m
from squall.protocol.remote_errors import error_fields

if TYPE_CHECKING:
    from squall.scheduler.server import SchedulerServer

logger = logging.getLogger("squall.scheduler")

#: The core's commands that are no message of their own name (tests/test_messages.py
#: checks them against ``_core.COMMAND_OPS``): dispatches go out in ``compute`` batches;
#: a worker removed by the core is disconnected.
COMPUTE_TASK, CLOSE_WORKER = "compute-task", "close-worker"

#: Per-task notices to workers and clients: one message of that op, a packed payload.
NOTICES: dict[str, type[m.Message]] = {
    cls.op(): cls
    for cls in (
        m.FreeKeys,
        m.RemoveReplicas,
        m.KeyInMemory,
        m.LostData,
        m.TaskRetried,
        m.CancelledKeys,
    )
}


#: Commands sent one message each (their records are read only when there are any).
RARE = frozenset(
    {m.StealRequest.op(), m.RemoveWorker.op(), CLOSE_WORKER, m.TaskErred.op(), m.Restart.op()}
)


class Outbox:
    """Drains the core's commands into the peers' batched streams."""

    def __init__(self, server: SchedulerServer) -> None:
        self._server = server

    def dispatch(self) -> None:
        """Keeps for each worker the core's order between freeing a task's old run and
        a new dispatch: frees first, so that a batch that frees an old run and
        re-dispatches the task does not reach the worker the other way round."""
        s = self._server
        cmds = s.core.take_commands()
        if not len(cmds):
            return
        counts = cmds.counts()
        if counts.keys() & RARE:
            for op, target, task, extra in cmds.records():
                self._rare(op, target, task, extra)
        # Per-task notices travel packed, one payload per peer and op (no Python object
        # per task).
        to_workers, to_clients = s.core.encode_notices(cmds)
        for w, op, tasks in to_workers:
            peer = s.workers.get(w)
            if peer is not None:
                peer.send(NOTICES[op](), tasks)
        if COMPUTE_TASK in counts:
            for w, (addresses, payload, count) in s.core.encode_compute(cmds).items():
                peer = s.workers.get(w)
                if peer is not None:
                    peer.send(m.Compute(addresses=addresses, n=count), payload)
        for cid, op, keys in to_clients:
            client = s.clients.get(cid)
            if client is not None:
                client.send(NOTICES[op](), keys)
        if m.AcquireReplicas.op() in counts:  # a retiring worker's results, copied elsewhere
            for w, holder, ids, keys in s.core.encode_acquire(cmds):
                peer = s.workers.get(w)
                if peer is not None:
                    peer.send(m.AcquireReplicas(holder=holder, tasks=ids), keys)

    def _rare(self, op: str, target: int, task: int, extra: int) -> None:
        s = self._server
        if op == m.StealRequest.op():
            self._to_worker(target, m.StealRequest(task=task, stimulus=extra))
        elif op == m.RemoveWorker.op():
            gone = s.core.worker_info(extra)["address"]  # kept after removal
            self._to_worker(target, m.RemoveWorker(worker_id=extra, address=gone))
        elif op == CLOSE_WORKER:
            self._close_worker(target)
        elif op == m.TaskErred.op():
            self._erred_to_client(target, task)
        elif op == m.Restart.op():  # a worker the core removed, to be restarted
            s.lifecycle.close_worker(target, restart=True)

    def _to_worker(self, w: int, msg: m.Message) -> None:
        peer = self._server.workers.get(w)
        if peer is not None:
            peer.send(msg)

    def _close_worker(self, w: int) -> None:
        """The core removed the worker on its own (silent past the TTL): close its
        connection, as Dask does, so that a worker that was only stopped or cut off finds
        itself disconnected and registers again instead of lingering, connected yet
        unknown."""
        peer = self._server.workers.get(w)
        if peer is None:
            return
        logger.warning("worker %s removed: no heartbeat within the TTL", peer.address)
        self._server.disconnect(peer)

    def _erred_to_client(self, cid: int, task: int) -> None:
        peer = self._server.clients.get(cid)
        if peer is None:
            return
        info = self._server.core.task_info(task)
        key = encode_keys([info["key"]])
        err = (
            info.get("exception_text", ""),
            info.get("traceback_text", ""),
            info.get("exception", b""),
            info.get("traceback", b""),
        )
        kind = info.get("error_kind", "Remote")
        msg, payload = error_fields(m.TaskErred(error_kind=kind, n_key=len(key)), err)
        peer.send(msg, key + payload)
