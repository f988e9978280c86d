"""Scheduler plugins (docs/runtime.md#scheduler-plugins): the plugins a scheduler keeps
by name, and their hooks, called as distributed calls them. A hook that raises is
logged with its plugin's name and the scheduler goes on.

Transitions come from the core's transition feed, switched on only while a plugin
overrides ``transition``, and taken once per batch of handled messages (at each
dispatch), so a plugin costs one Python call per transition and nothing per task
when none watches transitions."""

from __future__ import annotations

import inspect
import logging
import pickle
import time
import warnings
from collections.abc import Awaitable, Hashable
from typing import TYPE_CHECKING, Any

from squall._core import decode_keys
from squall.diagnostics.plugin import plugin_kind, plugin_name
from squall.protocol import messages as m
from squall.protocol.remote_errors import error_fields, pack_error

if TYPE_CHECKING:
    from squall.scheduler.server import SchedulerServer

logger = logging.getLogger("squall.scheduler")

Answer = tuple[m.Message, bytes] | None

#: Transitions taken from the core at once: a million-task graph's are handed over in
#: chunks, never all as Python objects at the same time.
TRANSITIONS_AT_ONCE = 1 << 16

#: The base classes whose hooks do nothing: a plugin inheriting a hook from one of
#: them does not watch that event (named so that distributed's need not be imported).
_NO_OP_BASES = frozenset(
    {
        "squall.diagnostics.plugin.SchedulerPlugin",
        "distributed.diagnostics.plugin.SchedulerPlugin",
    }
)


def overrides(plugin: object, hook: str) -> bool:
    """Whether ``plugin`` has a ``hook`` of its own (not a base class's no-op)."""
    if hook in getattr(plugin, "__dict__", {}):
        return True
    for cls in type(plugin).__mro__:
        if hook in cls.__dict__:
            return f"{cls.__module__}.{cls.__qualname__}" not in _NO_OP_BASES
    return False


class SchedulerPlugins:
    """The plugins of one :class:`SchedulerServer`, by name, and the calls of their
    hooks."""

    def __init__(self, server: SchedulerServer) -> None:
        self._server = server
        self.plugins: dict[str, Any] = {}
        #: Those with a ``transition`` and an ``update_graph`` of their own.
        self._watching: list[tuple[str, Any]] = []
        self._graph_watchers: list[tuple[str, Any]] = []

    # ----- keeping plugins ------------------------------------------------------------

    def add(self, plugin: Any, name: str | None = None, idempotent: bool = False) -> None:
        """Keep ``plugin`` under ``name`` (``plugin_name``'s), without starting it, as
        distributed's ``Scheduler.add_plugin``: a taken name is kept with
        ``idempotent``, else replaced with a warning."""
        name = plugin_name(plugin, name)
        if name in self.plugins:
            if idempotent:
                return
            warnings.warn(
                f"Scheduler already contains a plugin with name {name}; overwriting.",
                UserWarning,
                stacklevel=2,
            )
        self.plugins[name] = plugin
        self._changed()

    def remove(self, name: str) -> Any:
        """Stop calling the plugin under ``name`` and return it (ValueError if none)."""
        try:
            plugin = self.plugins.pop(name)
        except KeyError:
            raise ValueError(
                f"Could not find plugin {name!r} among the current scheduler plugins"
            ) from None
        self._changed()
        return plugin

    def _changed(self) -> None:
        self._watching = [(n, p) for n, p in self.plugins.items() if overrides(p, "transition")]
        self._graph_watchers = [
            (n, p) for n, p in self.plugins.items() if overrides(p, "update_graph")
        ]
        self._server.core.transition_feed = bool(self._watching)

    async def register(self, plugin: Any, name: str, idempotent: bool) -> None:
        """A client's plugin: started (``start(scheduler)``), then kept; with
        ``idempotent`` a plugin already under ``name`` is kept and this one ignored."""
        if idempotent and name in self.plugins:
            return
        start = getattr(plugin, "start", None)
        if start is not None:
            await _awaited(start(self._server.facade))
        self.add(plugin, name=name, idempotent=idempotent)

    async def unregister(self, name: str) -> None:
        """Remove the plugin under ``name``, then close it."""
        close = getattr(self.remove(name), "close", None)
        if close is not None:
            await _awaited(close())

    # ----- the clients' messages ------------------------------------------------------

    def register_request(
        self, cid: int, msg: m.RegisterSchedulerPlugin, payload: memoryview
    ) -> Answer:
        """Unpickling and starting a plugin is code the client asks the scheduler to
        run, as ``run_on_scheduler``'s functions are (docs/runtime.md#admin-calls)."""
        blob = bytes(payload)

        async def register() -> None:
            plugin = pickle.loads(blob)
            if plugin_kind(plugin) != "scheduler":
                raise TypeError(f"{plugin!r} is no SchedulerPlugin")
            await self.register(plugin, msg.name, msg.idempotent)

        self._answer(cid, msg, register())
        return None

    def unregister_request(
        self, cid: int, msg: m.UnregisterSchedulerPlugin, payload: memoryview
    ) -> Answer:
        self._answer(cid, msg, self.unregister(msg.name))
        return None

    def _answer(self, cid: int, msg: m.Request, work: Awaitable[None]) -> None:
        s = self._server

        async def answer() -> None:
            try:
                await work
                reply: tuple[m.Message, bytes] = (
                    m.SchedulerPluginResult(id=msg.id, status="OK"),
                    b"",
                )
            except Exception as e:
                reply = error_fields(
                    m.SchedulerPluginResult(id=msg.id, status="error"), pack_error(e)
                )
            peer = s.clients.get(cid)
            if peer is not None:
                peer.send(*reply)

        s.spawn(answer())

    # ----- hooks ----------------------------------------------------------------------

    def transitions(self) -> None:
        """Hand the transitions the core made since the last call to the plugins that
        watch them (called at each dispatch; nothing to do while none watches)."""
        if not self._watching:
            return
        core = self._server.core
        while fed := core.take_transitions(TRANSITIONS_AT_ONCE):
            self._hand_over(fed)

    def _hand_over(self, fed: list[tuple[Hashable, str, str, int]]) -> None:
        for name, plugin in self._watching:
            hook = plugin.transition
            last, stimulus_id, failed = -1, "", 0
            for key, start, finish, stimulus in fed:
                if stimulus != last:
                    last, stimulus_id = stimulus, f"stimulus-{stimulus}"
                try:
                    hook(key, start, finish, stimulus_id=stimulus_id)
                except Exception:
                    # The first failure of a batch with its traceback, then a count: a
                    # hook failing on every transition must not flood the log.
                    if not failed:
                        logger.exception("plugin %s failed in transition", name)
                    failed += 1
            if failed > 1:
                logger.error("plugin %s failed in %d transitions", name, failed)

    def update_graph(
        self,
        client: str,
        msg: m.UpdateGraph,
        payload: memoryview,
    ) -> None:
        """A client's graph was accepted: ``keys`` it wants, ``tasks`` the graph's
        keys (read from the payload in one call, only when a plugin asks),
        ``annotations`` by name then key."""
        if not self._graph_watchers:
            return
        tasks = decode_keys(bytes(payload[: msg.keys_bytes]))[: msg.n]
        wanted = tasks if msg.wanted is None else [tasks[i] for i in msg.wanted]
        annotations: dict[str, dict[Hashable, Any]] = {}
        for options, indices in msg.task_options or ():
            for option, value in options.items():
                by_key = annotations.setdefault(option, {})
                for i in indices:
                    by_key[tasks[i]] = value
        self._each(
            "update_graph",
            self._server.facade,
            client=client,
            keys=set(wanted),
            tasks=tasks,
            annotations=annotations,
            priority={},
            stimulus_id=f"update-graph-{time.time()}",
            among=self._graph_watchers,
        )

    def add_worker(self, address: str) -> None:
        self._each("add_worker", scheduler=self._server.facade, worker=address)

    def remove_worker(self, address: str) -> None:
        self._each(
            "remove_worker",
            scheduler=self._server.facade,
            worker=address,
            stimulus_id=f"remove-worker-{time.time()}",
        )

    def add_client(self, client: str) -> None:
        self._each("add_client", scheduler=self._server.facade, client=client)

    def remove_client(self, client: str) -> None:
        self._each("remove_client", scheduler=self._server.facade, client=client)

    def log_event(self, topic: str, msg: Any) -> None:
        if self.plugins:
            self._each("log_event", topic, msg)

    def restart(self) -> None:
        self._each("restart", self._server.facade)

    async def start(self) -> None:
        """Start the plugins added before the scheduler started (by preloads)."""
        await self._in_turn("start", self._server.facade)

    async def before_close(self) -> None:
        await self._in_turn("before_close")

    async def close(self) -> None:
        await self._in_turn("close")

    async def _in_turn(self, hook: str, *args: Any) -> None:
        """Call and await ``hook`` of each plugin, one after the other."""
        for name, plugin in list(self.plugins.items()):
            method = getattr(plugin, hook, None)
            if method is not None:
                try:
                    await _awaited(method(*args))
                except Exception:
                    logger.exception("plugin %s failed in %s", name, hook)

    def _each(
        self, hook: str, *args: Any, among: list[tuple[str, Any]] | None = None, **kwargs: Any
    ) -> None:
        """Call ``hook`` of each plugin (of ``among``) that has one; one that returns an
        awaitable is awaited as a task of its own, so that the caller goes on."""
        for name, plugin in list(self.plugins.items()) if among is None else among:
            method = getattr(plugin, hook, None)
            if method is None:
                continue
            try:
                result = method(*args, **kwargs)
            except Exception:
                logger.exception("plugin %s failed in %s", name, hook)
                continue
            if inspect.isawaitable(result):
                self._server.spawn(_logged(name, hook, result))


async def _logged(name: str, hook: str, result: Awaitable[Any]) -> None:
    try:
        await result
    except Exception:
        logger.exception("plugin %s failed in %s", name, hook)


async def _awaited(result: Awaitable[Any] | None) -> None:
    if inspect.isawaitable(result):
        await result
