"""Scheduler plugins from the client (docs/runtime.md#scheduler-plugins): registered
and unregistered by name, as distributed's ``Client`` does."""

from __future__ import annotations

from typing import Any

import cloudpickle  # type: ignore[import-untyped]

from squall.client.connection import ClientConnection
from squall.diagnostics.plugin import plugin_kind, plugin_name
from squall.protocol import messages as m
from squall.protocol.remote_errors import unpack_error


class SchedulerPluginOps:
    """The scheduler plugin methods of :class:`~squall.client.client.Client`
    (documented there)."""

    def __init__(self, connection: ClientConnection) -> None:
        self.connection = connection

    async def register(
        self, plugin: Any, name: str | None = None, idempotent: bool | None = None
    ) -> None:
        if isinstance(plugin, type):
            raise TypeError("Please provide an instance of a plugin, not a type.")
        if plugin_kind(plugin) != "scheduler":
            raise TypeError(f"{plugin!r} is no SchedulerPlugin")
        if idempotent is None:
            idempotent = bool(getattr(plugin, "idempotent", False))
        msg = m.RegisterSchedulerPlugin(name=plugin_name(plugin, name), idempotent=idempotent)
        await self._request(msg, cloudpickle.dumps(plugin))

    async def unregister(self, name: str) -> None:
        await self._request(m.UnregisterSchedulerPlugin(name=name))

    async def _request(self, msg: m.Request, payload: bytes = b"") -> None:
        """Send ``msg``; the scheduler's exception, if any, is raised here."""
        h, data = await self.connection.request(msg, m.SchedulerPluginResult, payload)
        if h.status != "OK":
            exc, tb = unpack_error(h, data, msg.op())
            raise exc.with_traceback(tb)
