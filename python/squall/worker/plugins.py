"""The plugins a worker or a nanny runs (docs/runtime.md#worker-and-nanny-plugins): each
unpickled here from the bytes the scheduler kept, set up with its server, replaced by a
plugin of the same name, torn down when removed or when its server closes; and how an
uploaded file is imported (docs/runtime.md#uploading-code)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import inspect
import logging
import os
import pickle
import sys
import zipfile
import zipimport
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

from squall.protocol import messages as m
from squall.protocol.remote_errors import error_fields, pack_error

logger = logging.getLogger("squall.plugins")

#: The base classes whose ``transition`` does nothing, by name (squall's plugin module
#: sits above the worker's, and distributed need not be installed).
_SILENT_TRANSITIONS = {
    "squall.diagnostics.plugin.WorkerPlugin",
    "distributed.diagnostics.plugin.WorkerPlugin",
}


def overrides_transition(plugin: object) -> bool:
    """Whether ``plugin`` has a ``transition`` of its own (not a base class's no-op)."""
    for cls in type(plugin).__mro__:
        if "transition" in vars(cls):
            return f"{cls.__module__}.{cls.__qualname__}" not in _SILENT_TRANSITIONS
    return False


async def _call(hook: Callable[[Any], Awaitable[None] | None] | None, server: object) -> None:
    if hook is None:
        return
    result = hook(server)
    if inspect.isawaitable(result):
        await result


class PluginHost:
    """A server's plugins by name (``plugins``). ``server`` is what their hooks get;
    ``changed`` is called after any plugin is added or removed (the worker turns its
    transition feed on or off then); ``after_setup(plugin)`` runs after a plugin set up
    (the nanny restarts its worker there when the plugin asks)."""

    def __init__(
        self,
        server: object,
        *,
        changed: Callable[[], None] = lambda: None,
        after_setup: Callable[[Any], Awaitable[None]] | None = None,
    ) -> None:
        self._server = server
        self._changed = changed
        self._after_setup = after_setup
        self.plugins: dict[str, Any] = {}
        # One change at a time: a replacement's teardown and setup do not interleave.
        self._lock = asyncio.Lock()

    async def add(self, name: str, blob: bytes) -> None:
        """Unpickle and set up a plugin; one of the same name is torn down first. Kept
        even if its setup raises (as distributed), and the error raised."""
        plugin = pickle.loads(blob)
        async with self._lock:
            await self._remove(name)
            self.plugins[name] = plugin
            self._changed()
            logger.info("starting plugin %s", name)
            await _call(getattr(plugin, "setup", None), self._server)
            if self._after_setup is not None:
                await self._after_setup(plugin)

    async def add_all(self, plugins: dict[str, bytes]) -> None:
        """Set up each of ``plugins`` in turn (at registration); a failure is logged."""
        for name, blob in plugins.items():
            try:
                await self.add(name, blob)
            except Exception:
                logger.exception("plugin %s failed to set up", name)

    async def remove(self, name: str) -> None:
        async with self._lock:
            await self._remove(name)

    async def _remove(self, name: str) -> None:
        plugin = self.plugins.pop(name, None)
        if plugin is None:
            return
        self._changed()
        await _call(getattr(plugin, "teardown", None), self._server)

    async def close(self) -> None:
        """Tear every plugin down (the server closes); failures are logged."""
        for name in list(self.plugins):
            try:
                await self.remove(name)
            except Exception:
                logger.exception("plugin %s failed to tear down", name)

    async def answer_add(self, msg: m.PluginAdd, payload: memoryview) -> tuple[m.Message, bytes]:
        """``plugin-add`` from the scheduler: ``plugin-result``, with the error if any."""
        return await self._answer(msg.id, self.add(msg.name, bytes(payload)))

    async def answer_remove(
        self, msg: m.PluginRemove, payload: memoryview
    ) -> tuple[m.Message, bytes]:
        return await self._answer(msg.id, self.remove(msg.name))

    async def _answer(self, rid: int | None, change: Awaitable[None]) -> tuple[m.Message, bytes]:
        try:
            await change
        except Exception as e:
            logger.warning("plugin change failed: %r", e)
            return error_fields(m.PluginResult(id=rid, status="error"), pack_error(e))
        return m.PluginResult(id=rid, status="OK"), b""


def import_file(path: str) -> list[ModuleType]:
    """Import what an uploaded file holds: a ``.py`` module, or the top-level modules
    and packages of a ``.zip`` or ``.egg`` (put first on sys.path). Each is reloaded if
    imported before, so that new tasks see the new code; the file's directory joins
    sys.path too. Returns the modules."""
    directory, filename = os.path.split(path)
    name, ext = os.path.splitext(filename)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    if ext == ".py":
        names = [name]
        # A new version written within the second of the old one, at the same size,
        # looks unchanged to the bytecode cache's check: reload would run the old code.
        with contextlib.suppress(FileNotFoundError):
            os.remove(importlib.util.cache_from_source(path))
    elif ext in (".zip", ".egg"):
        if path in sys.path:
            # An archive uploaded again: drop the index zipimport keeps of the old one.
            zipimport._zip_directory_cache.pop(path, None)  # type: ignore[attr-defined]
            sys.path_importer_cache.pop(path, None)
        else:
            sys.path.insert(0, path)
        names = _top_level(path)
    else:
        raise ValueError(f"can upload and load .py, .zip or .egg files, not {filename!r}")
    importlib.invalidate_caches()
    modules = []
    for module in names:
        if module in sys.modules:
            # Its submodules too: a package's reload alone keeps their old code.
            for sub in [n for n in sys.modules if n.startswith(module + ".")]:
                importlib.reload(sys.modules[sub])
            modules.append(importlib.reload(sys.modules[module]))
        else:
            modules.append(importlib.import_module(module))
    return modules


def _top_level(archive: str) -> list[str]:
    """The modules and packages at the top of a zip archive (an egg's metadata aside)."""
    names: set[str] = set()
    with zipfile.ZipFile(archive) as z:
        for entry in z.namelist():
            head, _, rest = entry.partition("/")
            if rest == "__init__.py":
                names.add(head)
            elif not rest and head.endswith(".py"):
                names.add(head[:-3])
    return sorted(names)
