"""Worker and nanny plugins from the client (docs/runtime.md#worker-and-nanny-plugins):
registering and removing them, ``register_worker_callbacks`` and ``upload_file``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any

import cloudpickle  # type: ignore[import-untyped]

from squall.client.connection import ClientConnection
from squall.diagnostics.plugin import WorkerPlugin
from squall.diagnostics.uploads import UploadFile
from squall.protocol import messages as m
from squall.protocol.remote_errors import unpack_error
from squall.protocol.run_calls import takes_arg

#: Per worker (or nanny) address: ``{"status": "OK"}``, as distributed answers.
Responses = dict[str, dict[str, str]]


class WorkerPluginOps:
    """The plugin methods of :class:`~squall.client.client.Client` (documented there)."""

    def __init__(self, connection: ClientConnection) -> None:
        self.connection = connection

    async def register(
        self, plugin: object, name: str, *, idempotent: bool, nanny: bool
    ) -> Responses:
        blob = cloudpickle.dumps(plugin)
        msg = m.RegisterWorkerPlugin(name=name, idempotent=idempotent, nanny=nanny)
        h, payload = await self.connection.request(msg, m.PluginReply, blob)
        return _responses(h, payload, f"plugin {name}")

    async def unregister(self, name: str, *, nanny: bool) -> Responses:
        msg = m.UnregisterWorkerPlugin(name=name, nanny=nanny)
        h, payload = await self.connection.request(msg, m.PluginReply)
        return _responses(h, payload, f"plugin {name}")

    async def register_callbacks(self, setup: Callable[..., Any]) -> Responses:
        plugin = _SetupCallback(setup)
        return await self.register(plugin, plugin.name, idempotent=False, nanny=False)

    async def upload_file(self, filename: str, load: bool) -> Responses:
        # A fresh name per upload: uploading again sets the file up anew everywhere.
        name = f"{os.path.basename(filename)}-{uuid.uuid4()}"
        return await self.register(
            UploadFile(filename, load=load), name, idempotent=False, nanny=False
        )


def _responses(h: m.PluginReply, payload: memoryview, where: str) -> Responses:
    """The statuses; the first failure (a worker's setup raised) is raised here."""
    if h.error is not None:
        raise ValueError(h.error)
    if h.n_exception or h.exception_text:
        exc, tb = unpack_error(h, payload, where)
        raise exc.with_traceback(tb)
    return {address: {"status": status} for address, status in h.statuses.items()}


class _SetupCallback(WorkerPlugin):
    """``register_worker_callbacks``' plugin: calls ``setup`` on each worker, with the
    worker as ``dask_worker`` if it takes that parameter."""

    def __init__(self, setup: Callable[..., Any]) -> None:
        self.setup_function = setup
        self.name = f"worker-setup-{uuid.uuid4()}"

    def setup(self, worker: Any) -> Any:
        if takes_arg(self.setup_function, "dask_worker"):
            return self.setup_function(dask_worker=worker)
        return self.setup_function()
