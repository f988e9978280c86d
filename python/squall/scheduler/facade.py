"""What code running on the scheduler sees as ``dask_scheduler`` (``run_on_scheduler``,
docs/runtime.md#admin-calls): the attributes admin code commonly reads on distributed's
``Scheduler``, each built from the core's state through the binding when it is read.
Nothing here mirrors the core: a view is a snapshot of the moment it was made."""

from __future__ import annotations

import tempfile
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dask.config
from dask.typing import no_default

from squall.scheduler.worker_plugins import responses

if TYPE_CHECKING:
    from squall.scheduler.server import SchedulerServer


@dataclass(frozen=True)
class WorkerView:
    """A worker as the scheduler knows it (distributed's ``WorkerState`` names)."""

    address: str
    name: Any
    host: str
    nthreads: int
    memory_limit: int
    resources: dict[str, float]
    #: "running", "paused", "closing_gracefully" (distributed's ``Status`` names).
    status: str
    #: Bytes of the results it holds.
    nbytes: int
    nanny: str | None


@dataclass(frozen=True)
class TaskView:
    """A task as the scheduler knows it (distributed's ``TaskState`` names, but workers
    by address)."""

    key: Hashable
    #: distributed's task state names ("memory", "processing", "no-worker", …).
    state: str
    #: Addresses of the workers holding its result.
    who_has: frozenset[str]
    #: Its result's size in bytes; -1 if unknown.
    nbytes: int
    #: Address of the worker running it, if any.
    processing_on: str | None
    dependencies: tuple[Hashable, ...]
    prefix: str
    group: str


@dataclass(frozen=True)
class ClientView:
    """A connected client (distributed's ``ClientState`` names)."""

    client_key: str


class Tasks(Mapping[Hashable, TaskView]):
    """``dask_scheduler.tasks``: every task the scheduler knows, by key. Each lookup
    asks the core; iterating lists the keys in one call (a pass over the tasks)."""

    def __init__(self, server: SchedulerServer) -> None:
        self._server = server

    def __getitem__(self, key: Hashable) -> TaskView:
        core = self._server.core
        task = core.lookup(key)
        if task is None:
            raise KeyError(key)
        info = core.task_info(task)
        return TaskView(
            key=info["key"],
            state=info["state"],
            who_has=frozenset(info["who_has"]),
            nbytes=info["nbytes"],
            processing_on=info["processing_on"],
            dependencies=tuple(info["dependencies"]),
            prefix=info["prefix"],
            group=info["group"],
        )

    def __contains__(self, key: object) -> bool:
        return self._server.core.lookup(key) is not None

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._server.core.task_keys())

    def __len__(self) -> int:
        return self._server.core.n_tasks


class SchedulerFacade:
    """``dask_scheduler``: the scheduler as code running on it reads it."""

    def __init__(self, server: SchedulerServer) -> None:
        self._server = server
        self.tasks = Tasks(server)

    @property
    def address(self) -> str:
        return self._server.address

    @property
    def id(self) -> str:
        return self._server.id

    @property
    def n_tasks(self) -> int:
        return self._server.core.n_tasks

    @property
    def total_nthreads(self) -> int:
        return self._server.core.total_nthreads

    @property
    def total_memory(self) -> int:
        return self._server.core.total_memory

    @property
    def workers(self) -> dict[str, WorkerView]:
        """The workers that have not left, by address (one call to the core)."""
        nannies = {p.address: p.nanny for p in self._server.workers.values()}
        return {
            w["address"]: WorkerView(
                address=w["address"],
                name=w["name"],
                host=w["host"],
                nthreads=w["nthreads"],
                memory_limit=w["memory_limit"],
                resources=dict(w["resources"]),
                status=w["status"],
                nbytes=w["nbytes"],
                nanny=nannies.get(w["address"]),
            )
            for w in self._server.core.workers_info()
            if w["status"] != "closed"
        }

    @property
    def clients(self) -> dict[str, ClientView]:
        """The connected clients, by their ids (their names)."""
        return {p.name: ClientView(client_key=p.name) for p in self._server.clients.values()}

    def log_event(self, topic: str | Iterable[str], msg: Any) -> None:
        """Log ``msg`` (msgpack-able) under ``topic`` (or each of several), as
        ``Client.log_event`` does."""
        self._server.events.log(topic, msg)

    @property
    def plugins(self) -> dict[str, Any]:
        """The scheduler plugins by name (docs/runtime.md#scheduler-plugins)."""
        return self._server.plugin_host.plugins

    def add_plugin(self, plugin: Any, name: str | None = None, idempotent: bool = False) -> None:
        """Keep ``plugin`` under ``name`` and call its hooks from now on; not started
        (unless the scheduler has yet to start, as from a preload's ``dask_setup``)."""
        self._server.plugin_host.add(plugin, name=name, idempotent=idempotent)

    def remove_plugin(self, name: str) -> None:
        """Stop calling the plugin under ``name`` (ValueError if none); not closed."""
        self._server.plugin_host.remove(name)

    def get_metadata(self, keys: list[Hashable], default: Any = no_default) -> Any:
        """The metadata at the path ``keys``; ``default`` or KeyError if missing."""
        return self._server.metadata.get(list(keys), default)

    def set_metadata(self, keys: list[Hashable], value: Any = None) -> None:
        """Set the metadata at the path ``keys`` (msgpack-able values, to be read by
        clients)."""
        self._server.metadata.set(list(keys), value)

    @property
    def local_directory(self) -> str:
        """Where files for the scheduler go (``UploadDirectory``): Dask's
        ``temporary-directory``, else the system's temporary directory."""
        return str(dask.config.get("temporary-directory", default=None) or tempfile.gettempdir())

    @property
    def worker_plugins(self) -> dict[str, bytes]:
        """The worker plugins registered, pickled, by name."""
        return dict(self._server.worker_plugins.worker)

    @property
    def nanny_plugins(self) -> dict[str, bytes]:
        """The nanny plugins registered, pickled, by name."""
        return dict(self._server.worker_plugins.nanny)

    async def register_worker_plugin(
        self, comm: None = None, *, plugin: bytes, name: str, idempotent: bool = False
    ) -> dict[str, dict[str, Any]]:
        """Register a pickled worker plugin (distributed's signature): set up on every
        worker now and later; each worker's status, ``{"status": "OK"}`` or an error
        with its ``exception`` and ``traceback``
        (docs/runtime.md#worker-and-nanny-plugins)."""
        plugins = self._server.worker_plugins
        found = await plugins.register(plugin, name, idempotent=idempotent, nanny=False)
        return responses(found, f"worker plugin {name}")

    async def unregister_worker_plugin(
        self, comm: None = None, *, name: str
    ) -> dict[str, dict[str, Any]]:
        found = await self._server.worker_plugins.unregister(name, nanny=False)
        return responses(found, f"worker plugin {name}")

    async def register_nanny_plugin(
        self, comm: None = None, *, plugin: bytes, name: str, idempotent: bool = False
    ) -> dict[str, dict[str, Any]]:
        """As ``register_worker_plugin``, for every nanny."""
        plugins = self._server.worker_plugins
        found = await plugins.register(plugin, name, idempotent=idempotent, nanny=True)
        return responses(found, f"nanny plugin {name}")

    async def unregister_nanny_plugin(
        self, comm: None = None, *, name: str
    ) -> dict[str, dict[str, Any]]:
        found = await self._server.worker_plugins.unregister(name, nanny=True)
        return responses(found, f"nanny plugin {name}")

    def __repr__(self) -> str:
        return f"<squall scheduler {self.address!r}: {len(self.workers)} workers>"
