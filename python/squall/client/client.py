"""The user-facing client: a drop-in for ``distributed.Client`` (docs/runtime.md).

A :class:`Client` owns one connection to the scheduler (role ``client``) and an asyncio
event loop (:mod:`squall.client.connection`). By default the loop runs in a background
thread and the API blocks, as Dask's synchronous client does; with
``asynchronous=True`` the client uses the running loop and its coroutine methods
(``gather``, ``result``, ``close``, …) return awaitables.

The client is composed: each of its public methods hands the call to one collaborator,
a plain object holding the connection (and what else it needs), which does the work —
``submission`` (graphs: ``submit``, ``map``, ``compute``, …), ``data`` (``gather``,
``scatter``), ``cluster_ops`` (the workers, ``run``, ``restart``, …), ``admin``
(``run_on_scheduler``, the scheduler's metadata), ``scheduler_plugins``
(``register_scheduler_plugin``, ``unregister_scheduler_plugin``), ``diagnostics``
(``who_has``, the logs, the versions, …), ``task_stream`` (``get_task_stream``) and
``connection`` itself (``sync``, ``close``, the futures' reference counts). Futures,
``wait`` and ``as_completed`` use the connection (and ``data`` to fetch a result).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from functools import partial
from typing import Any, Literal

import dask
from dask.typing import no_default
from dask.utils import parse_timedelta

from squall import config
from squall.client import default, display
from squall.client.admin import AdminOps
from squall.client.connection import ClientConnection
from squall.client.data import DataMovement
from squall.client.datasets import NO_DEFAULT, DatasetOps, Datasets
from squall.client.default import (
    become_default,
    default_client,
    prefer_task_shuffle,
    stop_being_default,
)
from squall.client.diagnostics import Diagnostics
from squall.client.events import EventOps, Handler
from squall.client.executor import ClientExecutor
from squall.client.futures import Future, FutureState, Key, futures_of
from squall.client.inspection import Inspection
from squall.client.replicas import AMMClientProxy, ReplicaOps
from squall.client.scheduler_file import wait_for_scheduler_file
from squall.client.scheduler_plugins import SchedulerPluginOps
from squall.client.submission import CallOptions, Submission
from squall.client.task_stream import TaskStreamReader
from squall.client.worker_plugins import WorkerPluginOps
from squall.client.workers import ClusterOps
from squall.dask.graphs import insert_futures
from squall.diagnostics.plugin import plugin_kind, plugin_name
from squall.protocol import messages as m
from squall.protocol.tracebacks import user_frames
from squall.security import Security
from squall.worker.context import get_worker


class Client:
    """Connect to a squall scheduler: ``Client("tcp://host:8786")``.

    ``Client()`` without an address starts a :class:`~squall.deploy.local.LocalCluster`
    sized to the machine and stops it on ``close()`` (awaited, or leaving ``async with``,
    for an asynchronous client, which is made on a running event loop, as
    distributed's). ``timeout`` (for connecting) defaults to
    ``squall.comm.timeouts.connect``."""

    def __init__(
        self,
        address: str | Any = None,
        loop: Any = None,
        timeout: float | str | None = None,
        set_as_default: bool = True,
        asynchronous: bool = False,
        name: str | None = None,
        direct_to_workers: bool | None = None,
        security: Security | bool | None = None,
        heartbeat_interval: float | str | None = None,
        serializers: list[str] | None = None,
        deserializers: list[str] | None = None,
        extensions: dict[str, Callable[[Client], Any]] | None = None,
        scheduler_file: str | None = None,
        connection_limit: int = 512,
        **kwargs: Any,
    ) -> None:
        # ``direct_to_workers`` is accepted and ignored: results always come straight
        # from the workers. ``heartbeat_interval`` too: the client speaks to a quiet
        # scheduler every quarter of ``squall.comm.timeouts.tcp`` (keep-alive), not on
        # a fixed period. ``connection_limit`` bounds nothing squall opens: one
        # connection to the scheduler and at most one per worker.
        check_serializers(serializers, "serializers")
        check_serializers(deserializers, "deserializers")
        if connection_limit < 1:
            raise ValueError(f"connection_limit must be at least 1, not {connection_limit}")
        if address is None and scheduler_file is not None:
            # as distributed's, waits for the file; here within the connect timeout
            wait = config.seconds("comm.timeouts.connect") if timeout is None else timeout
            address = wait_for_scheduler_file(scheduler_file, parse_timedelta(wait, "s"))
        self.connection = ClientConnection(
            address,
            loop,
            timeout,
            asynchronous,
            name,
            security,
            on_closed=partial(stop_being_default, self),
            **kwargs,
        )
        self.cluster_ops = ClusterOps(self.connection)
        self.data = DataMovement(self, self.connection, self.cluster_ops)
        self.submission = Submission(self, self.connection, self.data)
        self.diagnostics = Diagnostics(self.connection, self.data)
        self.task_stream = TaskStreamReader(self.connection)
        self.inspection = Inspection(self.connection, self.cluster_ops, self.diagnostics)
        self.dataset_ops = DatasetOps(self, self.connection)
        self.worker_plugin_ops = WorkerPluginOps(self.connection)
        self.event_ops = EventOps(self.connection, self.worker_plugin_ops)
        self.admin = AdminOps(self.connection)
        self.replica_ops = ReplicaOps(self.connection)
        self.scheduler_plugins = SchedulerPluginOps(self.connection)
        #: distributed's client extensions: ``{name: extension(client)}``.
        self.extensions = {name: make(self) for name, make in (extensions or {}).items()}
        if set_as_default:
            become_default(self)
        prefer_task_shuffle()

    def __await__(self) -> Any:
        async def start() -> Client:
            await self.connection.started()
            return self

        return start().__await__()

    async def __aenter__(self) -> Client:
        await self.connection.started()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.connection.close_async(None)

    def __enter__(self) -> Client:
        if self.asynchronous:
            raise RuntimeError("use 'async with' with an asynchronous client")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- state, as distributed's attributes (the connection's) ----------------------

    @property
    def address(self) -> str:
        """The scheduler's address."""
        return self.connection.address

    @property
    def id(self) -> str:
        """This client's name at the scheduler (``Client-<uuid>`` unless ``name``)."""
        return self.connection.id

    @property
    def status(self) -> str:
        """``"newly-created"``, ``"running"``, ``"closing"`` or ``"closed"``."""
        return self.connection.status

    @property
    def asynchronous(self) -> bool:
        """Whether the methods return awaitables (``asynchronous=True``)."""
        return self.connection.asynchronous

    @property
    def cluster(self) -> Any:
        """The cluster object this client was given or started (``Client(cluster)``,
        ``Client()``); None for an address."""
        return self.connection.cluster

    @property
    def security(self) -> Security | None:
        """TLS and token for the scheduler and workers (docs/security.md); None: the
        process's, from config."""
        return self.connection.security

    @property
    def futures(self) -> dict[Key, FutureState]:
        """The state of each key this client holds futures for (a copy: the table
        itself is the connection's, read and changed under its lock)."""
        with self.connection.refcount_lock:
            return dict(self.connection.futures.items())

    @property
    def refcount(self) -> dict[Key, int]:
        """How many futures this client holds per key."""
        return self.connection.refcount

    @property
    def generation(self) -> int:
        """How many times the scheduler restarted since this client connected."""
        return self.connection.generation

    @property
    def dashboard_port(self) -> int | None:
        """The port of the scheduler's dashboard (None: it serves none)."""
        return self.connection.dashboard_port

    @property
    def dashboard_scheme(self) -> str:
        """``"http"`` or ``"https"``: how the dashboard is reached."""
        return self.connection.dashboard_scheme

    @property
    def dashboard_link(self) -> str | None:
        """The scheduler's dashboard, as a person reaches it (None if it serves none)."""
        connection = self.connection
        return display.dashboard_link(
            connection.address, connection.dashboard_port, connection.dashboard_scheme
        )

    def _identity_for_display(self) -> m.SchedulerInfoReply | None:
        """The cluster's shape for a repr: asked now on a running synchronous client
        (at most 2 s), else unknown — a repr must not fail or hang."""
        if self.asynchronous or self.status != "running":
            return None
        try:
            info: m.SchedulerInfoReply = self.sync(self.cluster_ops.identity, callback_timeout=2)
            return info
        except Exception:
            return None

    def __repr__(self) -> str:
        return display.text_repr(
            self.address, self.status, self.dashboard_link, self._identity_for_display()
        )

    def _repr_html_(self) -> str:
        return display.html_repr(
            self.id, self.address, self.status, self.dashboard_link, self._identity_for_display()
        )

    # ----- submitting work (submission.py) ---------------------------------

    def submit(
        self,
        func: Callable[..., Any],
        *args: Any,
        key: Key | None = None,
        workers: Any = None,
        resources: dict[str, float] | None = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: float | str = "100 ms",
        allow_other_workers: bool = False,
        actor: bool = False,
        actors: bool = False,
        pure: bool = True,
        **kwargs: Any,
    ) -> Future:
        """Run ``func(*args, **kwargs)`` on the cluster; futures among the arguments
        are replaced by their values."""
        options = CallOptions(
            workers, resources, retries, priority, fifo_timeout, allow_other_workers
        )
        return self.submission.submit(func, args, kwargs, key, pure, options, actor or actors)

    def map(
        self,
        func: Callable[..., Any],
        *iterables: Iterable[Any],
        key: str | list[Key] | None = None,
        workers: Any = None,
        retries: int | None = None,
        resources: dict[str, float] | None = None,
        priority: int = 0,
        allow_other_workers: bool = False,
        fifo_timeout: float | str = "100 ms",
        actor: bool = False,
        actors: bool = False,
        pure: bool = True,
        batch_size: int | None = None,
        **kwargs: Any,
    ) -> list[Future]:
        """``[submit(func, *items) for items in zip(*iterables)]`` as one graph per
        batch of ``batch_size`` items. Without ``batch_size`` the items are sent in
        chunks of ``MAP_CHUNK`` as they are built, so the cluster starts on the first
        ones while the client still builds the rest."""
        options = CallOptions(
            workers, resources, retries, priority, fifo_timeout, allow_other_workers
        )
        return self.submission.map(
            func, iterables, kwargs, key, pure, batch_size, options, actor or actors
        )

    def get(
        self,
        dsk: Any,
        keys: Any,
        workers: Any = None,
        allow_other_workers: bool | None = None,
        resources: dict[str, float] | None = None,
        sync: bool = True,
        asynchronous: bool | None = None,
        direct: bool | None = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: float | str = "60s",
        actors: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Compute a dask graph (a dict, a HighLevelGraph or an expression) for ``keys``;
        the scheduler function behind ``dask.compute(..., scheduler=client)``."""
        where = (workers, resources, retries, priority, fifo_timeout, bool(allow_other_workers))
        with user_frames():  # no frame of squall's in a task's traceback
            return self.submission.get(dsk, keys, CallOptions(*where), actors, sync, asynchronous)

    def compute(
        self,
        collections: Any,
        sync: bool = False,
        optimize_graph: bool = True,
        workers: Any = None,
        allow_other_workers: bool = False,
        resources: dict[str, float] | None = None,
        retries: int | None = 0,
        priority: int = 0,
        fifo_timeout: float | str = "60s",
        actors: Any = None,
        traverse: bool = True,
        **kwargs: Any,
    ) -> Any:
        """Start computing dask collections: a future per collection (values with
        ``sync=True``); a single collection gives a single future."""
        where = (workers, resources, retries, priority, fifo_timeout, bool(allow_other_workers))
        with user_frames():
            return self.submission.compute(
                collections, CallOptions(*where), actors, sync, optimize_graph, traverse, kwargs
            )

    def persist(
        self,
        collections: Any,
        optimize_graph: bool = True,
        workers: Any = None,
        allow_other_workers: bool | None = None,
        resources: dict[str, float] | None = None,
        retries: int | None = None,
        priority: int = 0,
        fifo_timeout: float | str = "60s",
        actors: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Start computing dask collections and return equivalent collections backed by
        the futures (a single collection gives a single collection)."""
        where = (workers, resources, retries, priority, fifo_timeout, bool(allow_other_workers))
        return self.submission.persist(collections, CallOptions(*where), actors, optimize_graph)

    def cancel(
        self,
        futures: Any,
        asynchronous: bool | None = None,
        force: bool = False,
        reason: str | None = None,
        msg: str | None = None,
    ) -> Any:
        """Stop computing the futures; their ``result()`` raises CancelledError."""
        return self.submission.cancel(futures, asynchronous, force, reason, msg)

    def retry(self, futures: Any, asynchronous: bool | None = None) -> Any:
        """Run erred futures (and erred dependencies) again."""
        return self.submission.retry(futures, asynchronous)

    def get_executor(self, **kwargs: Any) -> ClientExecutor:
        """A ``concurrent.futures.Executor`` submitting to this client; ``kwargs``
        (``pure``, ``workers``, ``resources``, ``allow_other_workers``, ``retries``)
        go to each ``submit``/``map``."""
        return ClientExecutor(self, **kwargs)

    def normalize_collection(self, collection: Any) -> Any:
        """``collection`` with the tasks whose keys this client holds futures for
        replaced by those futures (and what only they needed left out), so that
        computing it reuses those results; the collection itself if none is held."""
        graph = collection.__dask_graph__()
        with self.connection.refcount_lock:
            held = [k for k in graph if k in self.connection.futures]
            futures = {k: Future(k, self) for k in held}
        if not futures:
            return collection
        return insert_futures(collection, graph, futures)

    def futures_of(self, futures: Any) -> list[Future]:
        """:func:`futures_of` of ``futures``, raising if one of them was cancelled."""
        return futures_of(futures, client=self)

    # ----- the current client (default.py) ---------------------------------

    @contextmanager
    def as_current(self) -> Iterator[None]:
        """Within the block (this thread or task only), ``Client.current()``,
        ``default_client()`` and dask's ``compute``/``persist`` use this client."""
        token = default.current.set(self)
        try:
            with dask.config.set(scheduler="squall"):
                yield
        finally:
            default.current.reset(token)

    @classmethod
    def current(cls, allow_global: bool = True) -> Client:
        """The client of the enclosing ``as_current()`` block, else (``allow_global``)
        the default client; ``ValueError`` if there is none."""
        client = default.current.get()
        if client is not None:
            return client
        if allow_global:
            return default_client()
        raise ValueError("Not running inside the `as_current` context manager")

    # ----- moving data (data.py) -------------------------------------------

    def gather(
        self,
        futures: Any,
        errors: str = "raise",
        direct: bool | None = None,
        asynchronous: bool | None = None,
    ) -> Any:
        """Values of futures, in the same (nested list/tuple/set/dict) structure."""
        with user_frames():
            return self.data.gather(futures, errors, direct, asynchronous)

    def scatter(
        self,
        data: Any,
        workers: Any = None,
        broadcast: bool | int = False,
        direct: bool | None = None,
        hash: bool = True,
        timeout: float | str | None = None,
        asynchronous: bool | None = None,
    ) -> Any:
        """Put local data on workers; returns futures in the shape of ``data`` (a list,
        tuple, set or dict of futures, or one future for any other object).

        Keys are ``{type}-{token}`` (``hash=False``: a random token; a dict's keys are
        kept). Items go round robin to the ``workers`` (addresses, names or hosts;
        default all), or each to every one of them with ``broadcast=True`` (to that
        many with an int). Data always goes straight to the workers, whatever
        ``direct``. ``timeout`` (default the client's) bounds the wait for workers."""
        return self.data.scatter(data, workers, broadcast, direct, hash, timeout, asynchronous)

    # ----- the cluster (workers.py) ----------------------------------------

    def scheduler_info(self, n_workers: int = -1, **kwargs: Any) -> Any:
        """The scheduler and its workers, in ``distributed``'s shape: ``{"type",
        "id", "address", "services", "started", "n_workers", "total_threads",
        "total_memory", "workers": {address: {"nthreads", "name", "memory_limit",
        "resources", …}}}`` (``n_workers`` ≥ 0 limits the workers listed)."""
        return self.cluster_ops.scheduler_info(n_workers, **kwargs)

    def nthreads(self, workers: Any = None, **kwargs: Any) -> Any:
        """``{worker address: number of threads}`` (of ``workers``, default all)."""
        return self.cluster_ops.nthreads(workers, **kwargs)

    ncores = nthreads

    def run(
        self,
        function: Callable[..., Any],
        *args: Any,
        workers: Any = None,
        wait: bool = True,
        nanny: bool = False,
        on_error: Literal["raise", "return", "ignore"] = "raise",
        **kwargs: Any,
    ) -> Any:
        """Call ``function(*args, **kwargs)`` on every worker (or ``workers``), outside
        the task system, on the worker's event loop: ``{address: result}``. A
        ``dask_worker`` parameter receives the worker; coroutine functions are awaited
        (not with ``wait=False``, which returns None). Failures raise, or with
        ``on_error="return"``/``"ignore"`` are returned/left out. With ``nanny=True``
        it runs in the workers' nannies instead (still keyed by worker address;
        ``dask_worker`` receives the nanny)."""
        return self.cluster_ops.run(
            function, *args, workers=workers, wait=wait, nanny=nanny, on_error=on_error, **kwargs
        )

    def run_on_scheduler(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``function(*args, **kwargs)`` in the scheduler process, on its event
        loop, and return its result (for live debugging and admin code). A
        ``dask_scheduler`` parameter receives the scheduler as such code reads it
        (docs/runtime.md#admin-calls); coroutine functions are awaited (not with
        ``wait=False``, which returns None and leaves them running there). Its
        exception is raised here with the scheduler's traceback. The function blocks
        the scheduler while it runs."""
        return self.sync(self.admin.run_on_scheduler, function, *args, **kwargs)

    def register_scheduler_plugin(
        self, plugin: Any, name: str | None = None, idempotent: bool | None = None
    ) -> Any:
        """Send ``plugin`` (a ``SchedulerPlugin``, squall's or distributed's) to the
        scheduler, which awaits its ``start(scheduler)`` and then calls its hooks
        (docs/runtime.md#scheduler-plugins). ``name`` defaults to the plugin's ``name``
        attribute, else a unique one; ``idempotent`` (default: the plugin's attribute)
        keeps a plugin already registered under that name instead, else the new one
        replaces it. The exception of unpickling or starting it is raised here."""
        return self.sync(self.scheduler_plugins.register, plugin, name, idempotent)

    def unregister_scheduler_plugin(self, name: str) -> Any:
        """Remove the scheduler plugin registered under ``name`` (ValueError if none):
        its hooks are no longer called, then its ``close()`` is awaited."""
        return self.sync(self.scheduler_plugins.unregister, name)

    def set_metadata(self, key: Any, value: Any) -> Any:
        """Store ``value`` on the scheduler under ``key``, or under a path of keys
        given as a list (``["a", "b"]`` sets ``metadata["a"]["b"]``, making the dicts
        on the way). Values of any picklable type; plain data (dicts, lists, strings,
        numbers) is what code on the scheduler can read. Kept until overwritten."""
        return self.sync(self.admin.set_metadata, key, value)

    def get_metadata(self, keys: Any, default: Any = no_default) -> Any:
        """The metadata under a key or a path of keys (a list or a tuple);
        ``default`` if it is missing, else KeyError."""
        return self.sync(self.admin.get_metadata, keys, default)

    def replicate(
        self,
        futures: Any,
        n: int | None = None,
        workers: Any = None,
        branching_factor: int = 2,
        **kwargs: Any,
    ) -> Any:
        """Have each of ``futures`` (once done) held by at least ``n`` (default: all)
        of ``workers`` (addresses or names; default: all running workers), copies
        beyond ``n`` among them dropped; blocks until the copies are in place
        (``squall.scheduler.replicas-timeout``, then TimeoutError). Each holder serves
        ``branching_factor`` copies at a time. The active memory manager, if started,
        drops the extra copies again, as Dask's does
        (docs/runtime.md#replicas-and-rebalancing)."""
        return self.sync(
            self.replica_ops.replicate,
            self.futures_of(futures),
            n,
            workers,
            branching_factor,
            **kwargs,
        )

    def rebalance(self, futures: Any = None, workers: Any = None, **kwargs: Any) -> Any:
        """Move results (of ``futures``, once done; default: all) from the workers
        (of ``workers``; default: all) holding more memory than the mean to those
        holding less, within Dask's ``distributed.worker.memory.rebalance.*``
        tolerances; blocks until done. KeyError names the futures' keys that no
        worker holds or whose move did not complete
        (docs/runtime.md#replicas-and-rebalancing)."""
        fs = None if futures is None else self.futures_of(futures)
        return self.sync(self.replica_ops.rebalance, fs, workers, **kwargs)

    @property
    def amm(self) -> AMMClientProxy:
        """The scheduler's active memory manager: ``start()``, ``stop()``,
        ``running()``, ``run_once()`` (docs/runtime.md#replicas-and-rebalancing)."""
        return AMMClientProxy(self)

    # ----- plugins (scheduler_plugins.py, worker_plugins.py) ------------------------

    def register_plugin(
        self, plugin: Any, name: str | None = None, idempotent: bool | None = None
    ) -> Any:
        """Register a plugin where its base class says it runs
        (docs/runtime.md#plugins): a ``SchedulerPlugin`` on the scheduler (as
        ``register_scheduler_plugin``), a ``WorkerPlugin`` on every worker, a
        ``NannyPlugin`` on every nanny, now and as they join, under ``name`` (else its
        ``name`` attribute, else a fresh one), replacing a plugin of that name unless
        ``idempotent`` (default: the plugin's own attribute). Returns each worker's (or
        nanny's) status; the first error raised by a ``setup`` is raised here."""
        if isinstance(plugin, type):
            raise TypeError("Please provide an instance of a plugin, not a type.")
        kind = plugin_kind(plugin)
        if kind == "scheduler":
            return self.register_scheduler_plugin(plugin, name, idempotent)
        name = plugin_name(plugin, name)
        if idempotent is None:
            idempotent = bool(getattr(plugin, "idempotent", False))
        nanny = kind == "nanny"
        return self.sync(
            self.worker_plugin_ops.register, plugin, name, idempotent=idempotent, nanny=nanny
        )

    def unregister_worker_plugin(self, name: str, nanny: bool | None = None) -> Any:
        """Remove the worker plugin (with ``nanny``, the nanny plugin) ``name``: torn
        down everywhere, and not given to workers that join later; ValueError if no
        plugin has that name."""
        return self.sync(self.worker_plugin_ops.unregister, name, nanny=bool(nanny))

    def register_worker_callbacks(self, setup: Callable[..., Any] | None = None) -> Any:
        """Call ``setup`` on every worker now and on each that joins later (with the
        worker as ``dask_worker`` if it takes that parameter): a worker plugin."""
        if setup is None:
            return {}
        return self.sync(self.worker_plugin_ops.register_callbacks, setup)

    def upload_file(self, filename: str, load: bool = True) -> Any:
        """Send a ``.py``, ``.zip`` or ``.egg`` file to every worker, now and as they
        join, into its ``local_directory``, which is on its ``sys.path``; with
        ``load``, import it there, reloading a module uploaded before so that new
        tasks run the new code (docs/runtime.md#uploading-code). Returns each worker's
        status."""
        return self.sync(self.worker_plugin_ops.upload_file, filename, load)

    def restart(self, timeout: float | str | None = None, wait_for_workers: bool = True) -> Any:
        """Restart every worker and forget every task: all futures (of every client)
        are cancelled. Waits for the workers to come back (unless not
        ``wait_for_workers``), ``TimeoutError`` after ``timeout`` (default four times
        the client's timeout)."""
        return self.cluster_ops.restart(timeout, wait_for_workers)

    def retire_workers(
        self,
        workers: list[str] | str | None = None,
        close_workers: bool = True,
        remove: bool = True,
        **kwargs: Any,
    ) -> Any:
        """Retire workers (addresses or names; default: the idle ones Dask's
        ``workers_to_close`` picks) gracefully: they get no new tasks, their running
        tasks finish and every result only they hold is copied to another worker, so
        nothing is recomputed; then they leave the scheduler (``remove``) and, with
        ``close_workers``, close (with their nannies). Returns ``{address: worker
        info}`` of those retired. A worker whose results could not all be copied
        (no other worker, or not within ``squall.retire.timeout``) is kept, and a
        warning says why."""
        return self.cluster_ops.retire_workers(workers, close_workers, remove, **kwargs)

    def restart_workers(
        self,
        workers: list[str],
        timeout: float | str | None = None,
        raise_for_error: bool = True,
    ) -> Any:
        """Restart these workers (addresses or names) through their nannies and wait
        for them to come back: ``{worker: "OK" or "timed out"}``, keyed as given.
        ``ValueError`` if one has no nanny; ``TimeoutError`` on a time-out unless not
        ``raise_for_error``. Their tasks are rescheduled, their results recomputed if
        needed; other workers and tasks are untouched (unlike :meth:`restart`)."""
        return self.cluster_ops.restart_workers(workers, timeout, raise_for_error)

    def wait_for_workers(self, n_workers: int, timeout: float | str | None = None) -> Any:
        """Wait until ``n_workers`` workers are running; ``TimeoutError`` saying how
        many arrived after ``timeout`` (default: no limit). The scheduler answers as
        soon as they are there, so nothing polls over the network."""
        return self.cluster_ops.wait_for_workers(n_workers, timeout)

    def shutdown(self) -> Any:
        """Close the scheduler, every worker and nanny, then this client."""
        return self.cluster_ops.shutdown()

    # ----- diagnostics (diagnostics.py) ------------------------------------

    def who_has(self, futures: Any = None, **kwargs: Any) -> Any:
        """``{key: [worker address, …]}`` for the given futures; by default for every
        result held on the cluster, any client's, as distributed's."""
        return self.diagnostics.who_has(futures, **kwargs)

    def has_what(self, workers: Any = None, **kwargs: Any) -> Any:
        """``{worker address: (keys it holds, …)}`` of ``workers`` (addresses or names;
        default all); an unknown worker holds ``()``."""
        return self.diagnostics.has_what(workers, **kwargs)

    def processing(self, workers: Any = None, **kwargs: Any) -> Any:
        """``{worker address: (keys it runs or has queued, …)}``, as ``has_what``."""
        return self.diagnostics.processing(workers, **kwargs)

    def nbytes(self, keys: Any = None, summary: bool = True, **kwargs: Any) -> Any:
        """Bytes of each result held on the cluster, ``{key: bytes}``, or with
        ``summary`` summed per key prefix (``{"inc": bytes}``), as distributed's."""
        return self.diagnostics.nbytes(keys, summary, **kwargs)

    def story(self, *keys_or_futures: Any, on_error: str = "raise", **kwargs: Any) -> Any:
        """The scheduler's retained transitions of these keys (or futures' keys), oldest
        first, as distributed's rows: ``("scheduler", key, start state, finish state,
        {}, stimulus id, epoch seconds)``. The core keeps no recommendations (``{}``)
        and workers keep no stories, so only the scheduler's rows come; a stimulus id
        is not looked up. ``on_error="ignore"``: no rows instead of an error."""
        return self.diagnostics.story(*keys_or_futures, on_error=on_error, **kwargs)

    def get_scheduler_logs(self, n: int | None = None, **kwargs: Any) -> Any:
        """The scheduler's newest ``n`` log lines (all it keeps if None or 0, up to
        ``squall.admin.log-length``), newest first (as distributed's), as ``(level, line)``."""
        return self.diagnostics.get_scheduler_logs(n, **kwargs)

    def get_worker_logs(
        self, n: int | None = None, workers: Any = None, nanny: bool = False, **kwargs: Any
    ) -> Any:
        """``{worker address: [(level, line), …]}``: each worker's (or with ``nanny``,
        its nanny's) newest ``n`` log lines, newest first. The scheduler asks them; a
        worker that does not answer within ``squall.comm.timeouts.connect`` gets one
        ``("ERROR", why)`` line instead."""
        return self.diagnostics.get_worker_logs(n, workers, nanny, **kwargs)

    def get_versions(
        self, check: bool = False, packages: Sequence[str] | None = None, **kwargs: Any
    ) -> Any:
        """``{"scheduler": …, "workers": {address: …}, "client": …}``, each
        ``{"host": {...}, "packages": {name: version}}`` (``packages`` adds names).
        With ``check``, versions that differ between the client, the scheduler and the
        workers are warned about with a table (``VersionMismatchWarning``; required
        packages first), as distributed warns."""
        return self.diagnostics.get_versions(check, packages, **kwargs)

    # ----- the task stream (task_stream.py) --------------------------------

    def get_task_stream(
        self,
        start: float | str | None = None,
        stop: float | str | None = None,
        count: int | None = None,
        plot: bool | str = False,
        filename: str = "task-stream.html",
        bokeh_resources: Any = None,
        **kwargs: Any,
    ) -> Any:
        """The records of the tasks that ended between ``start`` and ``stop`` (epoch
        seconds, or durations before now like ``"10s"``), ``count`` of them at most,
        as distributed's. ``plot="save"`` also writes them to ``filename`` as a
        self-contained HTML page and returns ``(records, filename)``;
        ``bokeh_resources`` has no effect (the page has no script)."""
        return self.task_stream.get_task_stream(
            start, stop, count, plot, filename, bokeh_resources, **kwargs
        )

    # ----- published datasets (datasets.py) --------------------------------

    @property
    def datasets(self) -> Datasets:
        """The published datasets as a mapping: ``client.datasets["x"] = value``,
        ``client.datasets["x"]``, ``del``, ``in``, iteration, ``len``."""
        return Datasets(self)

    def publish_dataset(
        self, *args: Any, name: Key | None = None, override: bool = False, **kwargs: Any
    ) -> Any:
        """Publish named values (dask collections, futures, any picklable object) on
        the scheduler, for any client to get with ``get_dataset``:
        ``publish_dataset(x=df)``, ``publish_dataset(df, name="x")`` or
        ``publish_dataset({"x": df})``. The futures inside stay alive while the
        dataset is published, even after this client leaves; persist a collection
        first, or it is published uncomputed. A name already published raises
        KeyError (and nothing is published) unless ``override``."""
        return self.sync(self.dataset_ops.publish, args, name, override, kwargs)

    def get_dataset(self, name: Key | list[Key], default: Any = NO_DEFAULT, **kwargs: Any) -> Any:
        """The dataset published under ``name`` (a list of names: a list of datasets),
        its futures bound to this client; ``default`` if there is none, or without a
        default KeyError."""
        return self.sync(self.dataset_ops.get, name, default, **kwargs)

    def list_datasets(self, **kwargs: Any) -> Any:
        """The names of the published datasets, sorted by their text."""
        return self.sync(self.dataset_ops.names, **kwargs)

    def unpublish_dataset(self, name: Key | list[Key], **kwargs: Any) -> Any:
        """Remove the datasets of ``name`` (or of each of a list of names; unknown
        names are ignored): the scheduler keeps their futures alive no longer."""
        return self.sync(self.dataset_ops.unpublish, name, **kwargs)

    # ----- events (events.py) ----------------------------------------------

    def log_event(self, topic: str | Collection[str], msg: Any) -> Any:
        """Log ``msg`` (a msgpack value; else TypeError) under ``topic``, or under
        each of several topics, at the scheduler: subscribers get it at once,
        ``get_events`` while it is among the topic's newest
        ``squall.admin.events-log-length``."""
        return self.event_ops.log_event(topic, msg)

    def get_events(self, topic: str | None = None) -> Any:
        """The events kept under ``topic``, oldest first, as ``(time, msg)`` tuples
        (time: epoch seconds at the scheduler); without a topic, ``{topic: events}``
        of every topic with events."""
        return self.event_ops.get_events(topic)

    def subscribe_topic(self, topic: str, handler: Handler) -> None:
        """Call ``handler((time, msg))`` on the client's event loop for every event
        logged under ``topic`` from now on (a coroutine function's result is awaited);
        replaces the topic's handler if it had one."""
        self.event_ops.subscribe_topic(topic, handler)

    def unsubscribe_topic(self, topic: str) -> None:
        """Stop handling ``topic``'s events; ValueError if it has no handler."""
        self.event_ops.unsubscribe_topic(topic)

    def forward_logging(
        self, logger_name: str | None = None, level: int | str = logging.NOTSET
    ) -> Any:
        """Forward the records the logger ``logger_name`` (default the root logger,
        so all of them) handles on the workers, at ``level`` or above, to the logger
        of the same name in this process, as distributed does: a worker plugin, so
        workers that join later forward too; calling it again does not forward
        twice."""
        return self.event_ops.forward_logging(logger_name, level)

    def unforward_logging(self, logger_name: str | None = None) -> Any:
        """Stop ``forward_logging(logger_name)``."""
        return self.event_ops.unforward_logging(logger_name)

    # ----- the connection (connection.py) ----------------------------------

    def close(self, timeout: float | str | None = None) -> Any:
        """Close the connection (the scheduler releases this client's keys) and the
        LocalCluster the client started, if any."""
        return self.connection.close(timeout)

    def sync(
        self,
        func: Callable[..., Awaitable[Any]],
        *args: Any,
        asynchronous: bool | None = None,
        callback_timeout: float | str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run coroutine function ``func``: returns an awaitable on an asynchronous
        client, otherwise blocks for its result."""
        with user_frames():
            return self.connection.sync(
                func, *args, asynchronous=asynchronous, callback_timeout=callback_timeout, **kwargs
            )

    # ----- looking inside the cluster (inspection.py) ------------------------------

    def call_stack(self, futures: Any = None, keys: Any = None) -> Any:
        """What the workers' task threads execute now: ``{worker: {key: [stack line,
        …]}}``, outermost call first, in distributed's line format; only workers
        running a task (of ``futures``/``keys``, if given) appear."""
        return self.inspection.call_stack(futures, keys)

    def profile(
        self,
        key: str | None = None,
        start: float | None = None,
        stop: float | None = None,
        workers: Any = None,
        merge_workers: bool = True,
        plot: bool | str = False,
        filename: str | None = None,
        server: bool = False,
        scheduler: bool = False,
    ) -> Any:
        """The sampled profile of the tasks the workers ran between ``start`` and
        ``stop`` (epoch seconds), of key prefix ``key`` (e.g. ``"inc"``) if given, as
        distributed's tree (``{"identifier", "description", "count", "children"}``);
        ``{worker: tree}`` unless ``merge_workers``. Sampling is set by
        ``squall.worker.profile.*``. ``plot``/``filename`` (bokeh figures) and
        ``server``/``scheduler`` (profiles of event loops) raise ``ValueError``."""
        return self.inspection.profile(
            key, start, stop, workers, merge_workers, plot, filename, server, scheduler
        )

    def benchmark_hardware(self) -> Any:
        """Bandwidths the workers measure, ``{"disk", "memory", "network": {size:
        bytes per second}}``, each averaged over the workers (network: pairs of
        workers; none with a single worker). Takes a few seconds."""
        return self.inspection.benchmark_hardware()

    def dump_cluster_state(
        self,
        filename: str = "dask-cluster-dump",
        write_from_scheduler: bool | None = None,
        exclude: Collection[str] = (),
        format: Literal["msgpack", "yaml"] = "msgpack",
        **storage_options: Any,
    ) -> Any:
        """Write the scheduler's and the workers' state to ``filename`` +
        ``.msgpack.gz`` (gzipped msgpack) or ``.yaml``, as distributed does:
        ``{"scheduler", "workers": {address: state}, "versions"}`` with squall's fields
        (docs/runtime.md#cluster-dumps); ``exclude`` names fields to leave out. Written
        by the client, to a local path."""
        if storage_options:
            raise ValueError("squall writes cluster dumps to local paths: no storage_options")
        return self.inspection.dump_cluster_state(filename, write_from_scheduler, exclude, format)

    def write_scheduler_file(self, scheduler_file: str) -> Any:
        """Write the scheduler's identity (its ``address``…) as JSON to
        ``scheduler_file``, for ``Client(scheduler_file=)``."""
        return self.inspection.write_scheduler_file(scheduler_file)


def check_serializers(families: list[str] | None, what: str) -> None:
    """squall pickles (cloudpickle, dask's serializers through pickle): lists that
    exclude pickle name something it cannot do."""
    if families is not None and not {"pickle", "dask", "cloudpickle"} & set(families):
        raise ValueError(
            f"squall serializes with pickle: {what}={families!r} without 'pickle' or "
            "'dask' is not supported"
        )


def get_client(
    address: str | None = None,
    timeout: float | str | None = None,
    resolve_address: bool = True,
) -> Client:
    """A client for tasks to submit work. On a worker (for its scheduler): the default
    client if it is a synchronous one connected to that scheduler, else one client per
    worker, made on first use; elsewhere the default client (or a new one for
    ``address``). ``resolve_address`` is accepted: addresses are compared as given."""
    seconds = 10 if timeout is None else timeout
    try:
        worker = get_worker()
    except ValueError:
        pass
    else:
        if address is None or address == worker.scheduler_address:
            with suppress(ValueError):
                client = default_client()
                if client.address == worker.scheduler_address and _usable(client):
                    return client
            return worker.task_client(
                lambda: Client(worker.scheduler_address, timeout=seconds, security=worker.security)
            )
    try:
        client = default_client()
    except ValueError:
        if address is None:
            raise ValueError("No global client found and no address provided") from None
    else:
        if address is None or client.address == address:
            return client
    return Client(address, timeout=seconds)


def _usable(client: Client) -> bool:
    """Whether a task may block on ``client``: running and synchronous."""
    return client.status == "running" and not client.asynchronous


default.get_client = get_client
