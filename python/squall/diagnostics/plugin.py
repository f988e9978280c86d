"""Plugins: user objects whose methods the scheduler, workers or nannies call at points
of their life (docs/runtime.md#plugins). The base classes have distributed's hook names
and signatures, every hook doing nothing, so a subclass overrides only what it needs;
plugins written against ``distributed.diagnostics.plugin`` register on squall too."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from typing import Any, ClassVar, Literal

from dask.utils import funcname

__all__ = [
    "CondaInstall",
    "Environ",
    "InstallPlugin",
    "NannyPlugin",
    "PipInstall",
    "SchedulerPlugin",
    "UploadDirectory",
    "UploadFile",
    "WorkerPlugin",
    "plugin_kind",
    "plugin_name",
]


class SchedulerPlugin:
    """Runs in the scheduler process. ``scheduler`` is what ``run_on_scheduler``
    functions get as ``dask_scheduler`` (docs/runtime.md#admin-calls)."""

    #: Registering again under a taken name keeps the first plugin.
    idempotent: ClassVar[bool] = False

    async def start(self, scheduler: Any) -> None:
        """When the plugin is added (or the scheduler starts with it)."""

    async def before_close(self) -> None:
        """When the scheduler starts closing, before its workers and clients leave."""

    async def close(self) -> None:
        """When the scheduler has closed, or the plugin is removed."""

    def update_graph(
        self,
        scheduler: Any,
        *,
        client: str,
        keys: set[Any],
        tasks: list[Any],
        annotations: dict[str, dict[Any, Any]],
        priority: dict[Any, tuple[int | float, ...]],
        stimulus_id: str,
        **kwargs: Any,
    ) -> None:
        """When a client has submitted tasks: ``keys`` it wants, ``tasks`` the new ones."""

    def restart(self, scheduler: Any) -> None:
        """When a client restarts the cluster."""

    def transition(
        self, key: Any, start: str, finish: str, *args: Any, stimulus_id: str, **kwargs: Any
    ) -> None:
        """After a task moved from state ``start`` to ``finish``."""

    def add_worker(self, scheduler: Any, worker: str) -> Awaitable[None] | None:
        """When a worker (its address) has joined."""

    def remove_worker(
        self, scheduler: Any, worker: str, *, stimulus_id: str, **kwargs: Any
    ) -> Awaitable[None] | None:
        """When a worker (its address) has left."""

    def add_client(self, scheduler: Any, client: str) -> None:
        """When a client (its id) has connected."""

    def remove_client(self, scheduler: Any, client: str) -> None:
        """When a client (its id) has gone."""

    def valid_workers_downscaling(self, scheduler: Any, workers: list[Any]) -> list[Any]:
        """Which of ``workers`` a scale-down may retire (all, unless overridden)."""
        return workers

    def log_event(self, topic: str, msg: Any) -> None:
        """When an event is logged under ``topic``."""


class WorkerPlugin:
    """Runs in each worker process, current and future."""

    idempotent: ClassVar[bool] = False

    def setup(self, worker: Any) -> Awaitable[None] | None:
        """When the plugin reaches the worker (or the worker starts with it)."""

    def teardown(self, worker: Any) -> Awaitable[None] | None:
        """When the worker closes, or the plugin is removed or replaced."""

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        """After a task on this worker moved from state ``start`` to ``finish``."""


class NannyPlugin:
    """Runs in each nanny process (``squall worker`` with a nanny), current and future."""

    idempotent: ClassVar[bool] = False
    #: Restart the nanny's worker once the plugin is set up (e.g. after an install).
    restart: ClassVar[bool] = False

    def setup(self, nanny: Any) -> Awaitable[None] | None:
        """When the plugin reaches the nanny (or the nanny starts with it)."""

    def teardown(self, nanny: Any) -> Awaitable[None] | None:
        """When the nanny closes, or the plugin is removed or replaced."""


PluginKind = Literal["scheduler", "worker", "nanny"]

# Base classes by kind, in the order a plugin deriving from several is classified
# (distributed's ``register_plugin`` order). distributed's own base classes count too,
# recognised by name so that squall never needs distributed installed.
_KINDS: tuple[tuple[PluginKind, type, str], ...] = (
    ("scheduler", SchedulerPlugin, "distributed.diagnostics.plugin.SchedulerPlugin"),
    ("nanny", NannyPlugin, "distributed.diagnostics.plugin.NannyPlugin"),
    ("worker", WorkerPlugin, "distributed.diagnostics.plugin.WorkerPlugin"),
)


def plugin_kind(plugin: object) -> PluginKind:
    """Where ``plugin`` runs, from its base class; TypeError if it has none of them."""
    bases = {f"{c.__module__}.{c.__qualname__}" for c in type(plugin).__mro__}
    for kind, ours, theirs in _KINDS:
        if isinstance(plugin, ours) or theirs in bases:
            return kind
    raise TypeError(
        "a plugin must derive from SchedulerPlugin, WorkerPlugin or NannyPlugin "
        f"(squall.diagnostics.plugin or distributed.diagnostics.plugin); got {plugin!r}"
    )


def plugin_name(plugin: object, name: str | None = None) -> str:
    """The name a plugin registers under: ``name``, else its ``name`` attribute, else
    its class name made unique (two unnamed plugins never replace each other)."""
    if name is not None:
        return name
    own = getattr(plugin, "name", None)
    if own is not None:
        return str(own)
    return f"{funcname(type(plugin))}-{uuid.uuid4()}"


# The built-in plugins, where distributed has them too; their modules build on the base
# classes above, hence imported last.
from squall.diagnostics.environment import (  # noqa: E402
    CondaInstall,
    Environ,
    InstallPlugin,
    PipInstall,
)
from squall.diagnostics.uploads import UploadDirectory, UploadFile  # noqa: E402
