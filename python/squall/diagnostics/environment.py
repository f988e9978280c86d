"""Plugins that change the workers' environment (docs/runtime.md#installing-packages):
``InstallPlugin`` and its ``PipInstall`` and ``CondaInstall``, and ``Environ``."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import cloudpickle  # type: ignore[import-untyped]

from squall.diagnostics.plugin import NannyPlugin, SchedulerPlugin, WorkerPlugin
from squall.diagnostics.uploads import raise_first_error

__all__ = ["CondaInstall", "Environ", "InstallPlugin", "PipInstall"]

logger = logging.getLogger("squall.plugins")


class InstallPlugin(SchedulerPlugin):
    """Runs ``install_fn`` (which must be idempotent) on the scheduler, then on every
    worker, current and future, one install per host at a time; with
    ``restart_workers`` it runs in each nanny instead, which then restarts its worker
    (workers without a nanny are not reached then). A scheduler plugin, as
    distributed's: the scheduler registers the worker (or nanny) plugin that installs,
    and removes it when this plugin is removed."""

    idempotent = True
    #: One install at a time in the scheduler process.
    _lock: ClassVar[asyncio.Lock | None] = None

    def __init__(self, install_fn: Callable[[], None], restart_workers: bool) -> None:
        self._install_fn = install_fn
        self.restart_workers = restart_workers
        self.name = f"{type(self).__name__}-{uuid.uuid4()}"
        self._scheduler: Any = None

    @classmethod
    def _the_lock(cls) -> asyncio.Lock:
        if InstallPlugin._lock is None:
            InstallPlugin._lock = asyncio.Lock()
        return InstallPlugin._lock

    async def start(self, scheduler: Any) -> None:
        self._scheduler = scheduler
        async with self._the_lock():
            await asyncio.to_thread(self._install_fn)
            plugin: WorkerPlugin | NannyPlugin
            if self.restart_workers:
                plugin = _InstallNannyPlugin(self._install_fn, self.name)
                register = scheduler.register_nanny_plugin
            else:
                plugin = _InstallWorkerPlugin(self._install_fn, self.name)
                register = scheduler.register_worker_plugin
            responses = await register(
                plugin=cloudpickle.dumps(plugin), name=self.name, idempotent=True
            )
            raise_first_error(responses)

    async def close(self) -> None:
        if self._scheduler is None:
            return
        async with self._the_lock():
            if self.restart_workers:
                await self._scheduler.unregister_nanny_plugin(name=self.name)
            else:
                await self._scheduler.unregister_worker_plugin(name=self.name)


async def install_on_this_host(install_fn: Callable[[], None]) -> None:
    """Run ``install_fn`` in a thread, holding a lock file that every squall process
    of this host shares: installs into one environment never overlap."""
    await asyncio.to_thread(_locked, install_fn)


def _locked(install_fn: Callable[[], None]) -> None:
    lock = Path(tempfile.gettempdir()) / "squall-install.lock"
    with lock.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            install_fn()
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class _InstallWorkerPlugin(WorkerPlugin):
    def __init__(self, install_fn: Callable[[], None], name: str) -> None:
        self._install_fn = install_fn
        self.name = name

    async def setup(self, worker: Any) -> None:
        await install_on_this_host(self._install_fn)


class _InstallNannyPlugin(NannyPlugin):
    restart = True

    def __init__(self, install_fn: Callable[[], None], name: str) -> None:
        self._install_fn = install_fn
        self.name = name

    async def setup(self, nanny: Any) -> None:
        await install_on_this_host(self._install_fn)


class PipInstall(InstallPlugin):
    """``python -m pip install`` of ``packages`` (requirement-file lines) with
    ``pip_options``, on the scheduler and every worker (see ``InstallPlugin``)."""

    def __init__(
        self,
        packages: list[str],
        pip_options: list[str] | None = None,
        restart_workers: bool = False,
    ) -> None:
        super().__init__(_PipInstaller(packages, pip_options), restart_workers=restart_workers)


class _PipInstaller:
    def __init__(self, packages: list[str], pip_options: list[str] | None = None) -> None:
        self.packages = packages
        self.pip_options = pip_options or []

    def __call__(self) -> None:
        logger.info("pip installing %s", self.packages)
        with tempfile.NamedTemporaryFile(mode="w+", suffix=".txt") as f:
            f.write("\n".join(self.packages))
            f.flush()
            command = [sys.executable, "-m", "pip", "install", *self.pip_options, "-r", f.name]
            done = subprocess.run(command, capture_output=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"pip install failed with '{done.stderr.decode().strip()}'")


class CondaInstall(InstallPlugin):
    """``conda install`` of ``packages`` with ``conda_options``, on the scheduler and
    every worker (see ``InstallPlugin``); RuntimeError where conda is not installed."""

    def __init__(
        self,
        packages: list[str],
        conda_options: list[str] | None = None,
        restart_workers: bool = False,
    ) -> None:
        super().__init__(_CondaInstaller(packages, conda_options), restart_workers=restart_workers)


class _CondaInstaller:
    def __init__(self, packages: list[str], conda_options: list[str] | None = None) -> None:
        self.packages = packages
        self.conda_options = conda_options or []

    def __call__(self) -> None:
        conda = shutil.which("conda")
        if conda is None:
            raise RuntimeError(
                "conda install failed because conda could not be found: "
                "no conda program on this process's PATH"
            )
        logger.info("conda installing %s", self.packages)
        command = [conda, "install", "--yes", *self.conda_options, *self.packages]
        done = subprocess.run(command, capture_output=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"conda install failed with '{done.stderr.decode().strip()}'")


class Environ(NannyPlugin):
    """Sets environment variables in the workers: each nanny starts its worker with
    them, restarting the one it runs (workers without a nanny are not reached)."""

    restart = True

    def __init__(self, environ: dict[str, Any] | None = None) -> None:
        self.environ = {str(k): str(v) for k, v in (environ or {}).items()}

    def setup(self, nanny: Any) -> None:
        nanny.env.update(self.environ)
