"""The scheduler's side of clients: their connections and requests, one handler each
(docs/protocol.md#client--scheduler). A request the core refuses, or whose header did
not validate, is answered ``request-failed``; the connection stays open."""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from squall import config
from squall._core import SchedulerError, decode_keys, encode_keys
from squall.protocol import comm
from squall.protocol import messages as m
from squall.protocol.dispatch import Handlers
from squall.protocol.run_calls import run_function
from squall.scheduler import task_stream
from squall.scheduler.peer import Peer

if TYPE_CHECKING:
    from squall.scheduler.server import SchedulerServer

logger = logging.getLogger("squall.scheduler")

#: A request's answer now (the reply and its payload), or None: none, or sent later.
Answer = tuple[m.Message, bytes] | None


class ClientRoom:
    """Clients' connections to one :class:`SchedulerServer`."""

    def __init__(self, server: SchedulerServer) -> None:
        self._server = server

    async def serve(self, c: comm.Comm, hello: m.Hello) -> None:
        s = self._server
        name = str(hello.client or c.peer)
        # A connection made for one request (a LocalCluster's, a tool's) is no user's
        # client: logged for debugging only, and not counted in the client metrics.
        log_level = logging.DEBUG if hello.one_request else logging.INFO
        if hello.one_request:
            # Concurrent requests of one kind share a name, but each connection needs an
            # id of its own (answers sent later find their connection by id); the lowest
            # free suffix keeps the core's client names as few as the concurrency.
            name = next(
                f"{name}-{k}"
                for k in itertools.count()
                if s.core.client(f"{name}-{k}") not in s.clients
            )
        cid = s.core.client(name)
        stream = s.stream(c)
        s.clients[cid] = Peer(c, stream, name)
        s.coordination.client_joined(cid, hello)
        await c.write(m.ClientRegistered(client_id=cid, **self._dashboard_fields()))
        stream.start()
        logger.log(log_level, "client %s connected from %s", name, c.peer)
        if not hello.one_request:
            s.events.log(["all", name], {"action": "add-client", "client": name})
            s.plugin_host.add_client(name)
        s.clients_added += not hello.one_request
        handlers = self._handlers(cid)

        def handle(msg: m.Message | m.Malformed, payload: memoryview) -> None:
            try:
                answer = handlers(msg, payload)
            except SchedulerError as e:
                answer = m.RequestFailed(id=getattr(msg, "id", None), error=str(e)), b""
            except comm.MALFORMED as e:
                error = f"malformed: {e}"
                answer = m.RequestFailed(id=getattr(msg, "id", None), error=error), b""
            if answer is not None:
                stream.send(*answer)

        try:
            await s.read_until_closed(c, f"client {name}", handle, log_level)
        finally:
            s.clients_removed += not hello.one_request
            s.diagnostics.client_left(cid)
            s.events.client_left(cid)
            if not hello.one_request:
                s.events.log(["all", name], {"action": "remove-client", "client": name})
                s.plugin_host.remove_client(name)
                s.events.left(name, lambda: any(p.name == name for p in s.clients.values()))
            peer = s.clients.pop(cid)
            await peer.stream.close()
            with contextlib.suppress(SchedulerError):
                s.core.remove_client(cid, now=s.now())
            s.coordination.client_left(cid)
            s.dispatch()

    def _handlers(self, cid: int) -> Handlers[Answer]:
        s = self._server

        def of(handler: Any) -> Any:
            return lambda msg, payload: handler(cid, msg, payload)

        table: dict[type[m.Message], Any] = {
            m.UpdateGraph: self._update_graph,
            m.WhoHas: self._who_has,
            m.ReleaseKeys: self._release_keys,
            m.Cancel: self._cancel,
            m.Retry: self._retry,
            m.FireAndForget: self._fire_and_forget,
            m.Scatter: self._scatter,
            m.SchedulerInfo: self._scheduler_info,
            m.WorkerKeys: self._worker_keys,
            m.Story: self._story,
            m.TaskStream: self._task_stream,
            m.HeartbeatClient: self._keep_alive,
            m.Progress: s.diagnostics.progress,
            m.GetLogs: s.diagnostics.get_logs,
            m.Versions: s.diagnostics.versions,
            m.RestartCluster: s.lifecycle.restart_request,
            m.RetireWorkers: s.lifecycle.retire_request,
            m.RestartWorkers: s.lifecycle.restart_workers_request,
            m.WaitForWorkers: s.lifecycle.wait_request,
            m.AdaptiveTarget: s.lifecycle.adaptive_request,
            m.Shutdown: s.lifecycle.shutdown_request,
            m.PublishDatasets: s.datasets.publish,
            m.GetDatasets: s.datasets.get,
            m.UnpublishDatasets: s.datasets.unpublish,
            m.ListDatasets: s.datasets.names,
            m.LogEvent: s.events.log_request,
            m.GetEvents: s.events.get_request,
            m.SubscribeTopic: s.events.subscribe,
            m.UnsubscribeTopic: s.events.unsubscribe,
            m.Run: self._run,
            m.GetMetadata: s.metadata.get_request,
            m.SetMetadata: s.metadata.set_request,
            m.RegisterSchedulerPlugin: s.plugin_host.register_request,
            m.UnregisterSchedulerPlugin: s.plugin_host.unregister_request,
            m.RegisterWorkerPlugin: s.worker_plugins.register_request,
            m.UnregisterWorkerPlugin: s.worker_plugins.unregister_request,
            **s.coordination.handlers(),
            **s.replicas.handlers(),
        }
        return Handlers(
            m.Route.CLIENT_TO_SCHEDULER,
            {cls: of(handler) for cls, handler in table.items()},
            malformed=lambda msg: (m.RequestFailed(id=msg.id, error=msg.error), b""),
        )

    def _update_graph(self, cid: int, msg: m.UpdateGraph, payload: memoryview) -> Answer:
        s = self._server
        s.core.submit_wire(
            cid,
            bytes(payload),
            msg.n,
            msg.keys_bytes,
            now=s.now(),
            wanted=msg.wanted,
            order=msg.order,
            priority=msg.priority,
            fifo_timeout=msg.fifo_timeout,
            retries=msg.retries,
            workers=msg.workers,
            resources=msg.resources,
            allow_other_workers=msg.allow_other_workers,
            task_options=msg.task_options,
            data_producers=msg.data_producers,
        )
        s.plugin_host.update_graph(s.clients[cid].name, msg, payload)
        redefined = s.core.take_redefined()
        if redefined:
            logger.warning(
                "a graph redefined %d known key(s) with other dependencies, e.g. %r; "
                "the tasks already known were kept (use unique keys, or release the "
                "results before resubmitting)",
                len(redefined),
                redefined[0],
            )
        return m.GraphAccepted(id=msg.id), b""

    def _who_has(self, cid: int, msg: m.WhoHas, payload: memoryview) -> Answer:
        addresses, holders = self._server.core.who_has_wire(bytes(payload))
        return m.WhoHasReply(id=msg.id, addresses=addresses), holders

    def _release_keys(self, cid: int, msg: m.ReleaseKeys, payload: memoryview) -> Answer:
        s = self._server
        s.core.client_releases_keys(cid, decode_keys(bytes(payload)), now=s.now())
        return None

    def _cancel(self, cid: int, msg: m.Cancel, payload: memoryview) -> Answer:
        s = self._server
        s.core.cancel(cid, decode_keys(bytes(payload)), now=s.now(), force=msg.force)
        return None

    def _retry(self, cid: int, msg: m.Retry, payload: memoryview) -> Answer:
        self._server.core.retry(decode_keys(bytes(payload)), now=self._server.now())
        return None

    def _fire_and_forget(self, cid: int, msg: m.FireAndForget, payload: memoryview) -> Answer:
        self._server.core.fire_and_forget(decode_keys(bytes(payload)), now=self._server.now())
        return None

    def _keep_alive(self, cid: int, msg: m.HeartbeatClient, payload: memoryview) -> Answer:
        return m.HeartbeatClient(), b""  # the answer shows this scheduler is alive

    def _task_stream(self, cid: int, msg: m.TaskStream, payload: memoryview) -> Answer:
        """Answered once its flush (a heartbeat from each worker) is done; other
        messages are handled meanwhile."""
        s = self._server

        async def run() -> None:
            reply = await task_stream.answer(
                s.task_stream,
                msg,
                lambda: [p.address for p in s.workers.values()],
                2 * config.seconds("worker.heartbeat-interval"),
            )
            peer = s.clients.get(cid)
            if peer is not None:
                peer.send(*reply)

        s.spawn(run())
        return None

    def _run(self, cid: int, msg: m.Run, payload: memoryview) -> Answer:
        """``run_on_scheduler``: the client's function, called on this loop with the
        facade as ``dask_scheduler``; answered when it returns (other messages are
        handled meanwhile if it awaits). Logged as distributed logs it."""
        s = self._server
        blob = memoryview(bytes(payload))  # read after this turn of the reader
        who = s.clients[cid].name

        def announce(func: Callable[..., Any]) -> None:
            name = getattr(func, "__qualname__", None) or repr(func)
            logger.info("running %s for client %s", name, who)
            s.events.log("all", {"action": "run-function", "function": name})

        async def run() -> None:
            reply = await run_function(
                s.facade, msg, blob, s.spawn, arg="dask_scheduler", announce=announce
            )
            peer = s.clients.get(cid)
            if peer is not None:
                peer.send(*reply)

        s.spawn(run())
        return None

    def _scheduler_info(self, cid: int, msg: m.SchedulerInfo, payload: memoryview) -> Answer:
        s = self._server
        workers = [
            {**s.core.worker_info(w), "nanny": self._nanny_of(w), "services": self._services(w)}
            for _, w in s.core.workers()
        ]
        reply = m.SchedulerInfoReply(
            id=msg.id,
            scheduler_id=s.id,
            address=s.address,
            started=s.started,
            services={} if s.http is None else {"dashboard": s.http.port},
            dashboard_scheme=None if s.http is None else s.http.scheme,
            total_threads=s.core.total_nthreads,
            n_tasks=s.core.n_tasks,
            total_memory=s.core.total_memory,
            workers=workers,
        )
        return reply, b""

    def _worker_keys(self, cid: int, msg: m.WorkerKeys, payload: memoryview) -> Answer:
        """The keys each worker holds or processes, with their sizes: counts per worker
        in the header, the keys in one payload (keys may be tuples, which msgpack
        would turn into lists)."""
        s = self._server
        counts: list[tuple[str, int]] = []
        keys: list[Any] = []
        nbytes: list[int] = []
        for address, w in s.core.workers():
            if msg.workers is not None and address not in msg.workers:
                continue
            held = s.core.worker_keys(w, msg.which)
            counts.append((address, len(held)))
            keys += [k for k, _ in held]
            nbytes += [n for _, n in held]
        reply = m.WorkerKeysReply(id=msg.id, workers=counts, nbytes=nbytes)
        return reply, encode_keys(keys)

    def _story(self, cid: int, msg: m.Story, payload: memoryview) -> Answer:
        """Each key's retained transitions (the core keeps a log per key), their times
        in epoch seconds (the core's are seconds since the scheduler started)."""
        s = self._server
        stories = [
            [(start, finish, stimulus, s.started + at) for start, finish, stimulus, at in story]
            for story in map(s.core.story, decode_keys(bytes(payload)))
        ]
        return m.StoryReply(id=msg.id, stories=stories), b""

    def _dashboard_fields(self) -> dict[str, Any]:
        """Where a client finds the dashboard: its port and scheme (None: none)."""
        http = self._server.http
        if http is None:
            return {"dashboard": None, "dashboard_scheme": None}
        return {"dashboard": http.port, "dashboard_scheme": http.scheme}

    def _services(self, w: int) -> dict[str, int]:
        """A worker's HTTP port, as distributed lists it (``{"dashboard": port}``)."""
        peer = self._server.workers.get(w)
        return {} if peer is None or peer.dashboard is None else {"dashboard": peer.dashboard}

    def _nanny_of(self, w: int) -> str | None:
        peer = self._server.workers.get(w)
        return None if peer is None else peer.nanny

    def _scatter(self, cid: int, msg: m.Scatter, payload: memoryview) -> Answer:
        """Register data a client put on workers (``update-data``), then tell each
        holder to keep it under its task id, or to drop it (-1) if the client failed to
        place some of it or the core refused it."""
        s = self._server
        keys = decode_keys(bytes(payload))
        holders = msg.holders
        if not len(keys) == len(holders) == len(msg.nbytes):
            raise ValueError("scatter needs one holder list and one size per key")
        error = msg.error
        tasks = [-1] * len(keys)
        if error is None:
            try:
                items = list(zip(keys, msg.nbytes, holders, strict=True))
                tasks = s.core.scatter(cid, items, now=s.now())
            except SchedulerError as e:
                error = str(e)
        ids = dict(s.core.workers())
        per_worker: dict[str, list[int]] = {}
        for i, hs in enumerate(holders):
            for a in hs:
                per_worker.setdefault(a, []).append(i)
        for a, idx in per_worker.items():
            peer = s.workers.get(ids.get(a, -1))
            if peer is not None:
                peer.send(
                    m.Scattered(tasks=[tasks[i] for i in idx]),
                    encode_keys([keys[i] for i in idx]),
                )
        if error is not None:
            return m.RequestFailed(id=msg.id, error=error), b""
        return m.ScatterDone(id=msg.id), b""
