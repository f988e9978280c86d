"""distributed's server classes, in this process: ``squall.Scheduler`` and
``squall.Nanny`` (``squall.Worker`` is the worker itself), started on the running event
loop with ``await`` or ``async with`` (docs/runtime.md#servers-in-process).

They take distributed's arguments, preloads included (docs/runtime.md#preload); those
naming a feature squall does not have (services, extensions, plugins, Jupyter) raise a
``TypeError`` saying so rather than being ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Generator, Iterable, Sequence
from enum import Enum
from typing import Any

from dask.utils import parse_timedelta

from squall.client.scheduler_file import wait_for_scheduler_file, write_scheduler_file
from squall.config import get as config_get
from squall.deploy.local import print_level_flags, scheduler_info
from squall.errors import TimeoutError
from squall.preload import worker_flags
from squall.protocol import comm, liveness
from squall.protocol.bounded import within
from squall.scheduler.launcher import default_idle_timeout, stop_when_idle
from squall.scheduler.server import SchedulerServer
from squall.security import Security
from squall.worker.memory import parse_memory_limit
from squall.worker.nanny import Nanny as Supervisor

logger = logging.getLogger("squall.deploy")

#: How long ``await Nanny(...)`` waits for its worker to join the scheduler (seconds),
#: unless ``death_timeout`` is shorter: a worker process takes a second or two to start.
NANNY_START_TIMEOUT = 60.0
#: How often the starting nanny looks for its worker among the scheduler's.
NANNY_START_POLL = 0.05
#: How long one look may take (seconds): an unanswered one is retried, not awaited.
NANNY_LOOK_TIMEOUT = 2.0


class Status(str, Enum):
    """The states of distributed's servers and clusters (``distributed.Status``).

    A ``str`` enum: squall's servers and clients keep their status as these strings
    (``"running"``), so ``client.status == Status.running`` holds as in distributed."""

    undefined = "undefined"
    created = "created"
    init = "init"
    starting = "starting"
    running = "running"
    paused = "paused"
    stopping = "stopping"
    stopped = "stopped"
    closing = "closing"
    closing_gracefully = "closing_gracefully"
    closed = "closed"
    failed = "failed"
    dont_reply = "dont_reply"


def refuse_unsupported(cls: str, unknown: dict[str, Any], **given: Any) -> None:
    """A ``TypeError`` naming the arguments given (truthy, or ``unknown`` at all) that
    squall's ``cls`` has no use for."""
    named = sorted([*(name for name, value in given.items() if value), *unknown])
    if named:
        raise TypeError(f"squall's {cls} does not support {', '.join(named)}")


def listen_address(
    host: str | None, port: int | None, interface: str | None, protocol: str | None, tls: bool
) -> str:
    """distributed's host/port/interface/protocol as one address; the host defaults to
    ``squall.scheduler.host`` (all interfaces unless configured)."""
    if interface is not None:
        host = comm.interface_ip(interface)
    scheme = (protocol or ("tls" if tls else "tcp")).removesuffix("://")
    return comm.format_address(host or comm.scheduler_host(), port or 0, scheme)


class Scheduler(SchedulerServer):
    """distributed's ``Scheduler``: the scheduler server, here on the running event
    loop: ``async with Scheduler(port=0) as s`` (or ``s = await Scheduler(...)``, then
    ``await s.close()``).

    ``host`` defaults to ``squall.scheduler.host`` and ``port`` to 0 (a free one);
    ``dashboard=False`` serves no dashboard, else it is served at ``dashboard_address``
    (default ``squall.scheduler.dashboard.address``), under the path ``http_prefix``.
    ``allowed_failures``, ``validate``
    and ``worker_ttl`` override the ``squall.scheduler`` knobs of those names;
    ``scheduler_file`` is written once it listens and removed when it closes;
    ``idle_timeout`` (seconds or a duration; default: Dask's
    ``distributed.scheduler.idle-timeout``) closes it after that long without work.
    ``preload`` and ``preload_argv``
    (default: ``squall.scheduler.preload``, else Dask's ``distributed.scheduler.preload``)
    run with this object as their server (docs/runtime.md#preload). ``plugins`` are
    scheduler plugins, started with it (docs/runtime.md#scheduler-plugins)."""

    def __init__(
        self,
        loop: Any = None,
        services: Any = None,
        service_kwargs: Any = None,
        allowed_failures: int | None = None,
        extensions: Any = None,
        validate: bool | None = None,
        scheduler_file: str | None = None,
        security: Security | None = None,
        worker_ttl: float | str | None = None,
        idle_timeout: float | str | None = None,
        interface: str | None = None,
        host: str | None = None,
        port: int = 0,
        protocol: str | None = None,
        dashboard_address: str | int | None = None,
        dashboard: bool | None = None,
        http_prefix: str | None = "/",
        preload: str | Sequence[str] | None = None,
        preload_argv: Sequence[str] | Sequence[Sequence[str]] = (),
        plugins: Iterable[Any] = (),
        contact_address: str | None = None,
        transition_counter_max: bool | int = False,
        jupyter: bool = False,
        **kwargs: Any,
    ) -> None:
        # ``loop`` is accepted as distributed's (deprecated there): the running loop serves.
        refuse_unsupported(
            "Scheduler",
            kwargs,
            services=services,
            service_kwargs=service_kwargs,
            extensions=extensions,
            contact_address=contact_address,
            jupyter=jupyter,
        )
        knobs: dict[str, Any] = {}
        for name, value in [
            ("allowed-failures", allowed_failures),
            ("validate", validate),
            ("worker-ttl", worker_ttl),
        ]:
            if value is not None:
                knobs[name] = value
        tls = security is not None and security.tls
        address = listen_address(host, port, interface, protocol, tls)
        served: str | int | None = dashboard_address
        if dashboard is False:
            served = None
        elif dashboard_address is None:
            served = config_get("scheduler.dashboard.address")
        super().__init__(
            address, knobs, security, served, preload, preload_argv, http_prefix or ""
        )
        for plugin in plugins:  # started with the scheduler
            self.add_plugin(plugin)
        self.scheduler_file = scheduler_file
        #: Seconds without work after which it closes itself (None: never); by default
        #: Dask's ``distributed.scheduler.idle-timeout``, as distributed's.
        self.idle_timeout = (
            default_idle_timeout()
            if idle_timeout is None
            else float(parse_timedelta(idle_timeout, default="s"))
        )
        self._idle: asyncio.Task[None] | None = None
        self.status = Status.created

    async def start(self) -> None:
        self.status = Status.starting
        await super().start()
        self.status = Status.running
        if self.scheduler_file is not None:
            write_scheduler_file(self.scheduler_file, self.identity())
        if self.idle_timeout:
            loop = asyncio.get_running_loop()
            self._idle = loop.create_task(
                stop_when_idle(self, self.idle_timeout, lambda: loop.create_task(self.close()))
            )

    def identity(self) -> dict[str, Any]:
        """What the scheduler file holds, as distributed's ``identity()``."""
        dashboard = {} if self.http is None else {"dashboard": self.http.port}
        return {
            "type": "Scheduler",
            "id": self.id,
            "address": self.address,
            "services": dashboard,
            "started": self.started,
            "workers": {},
        }

    async def close(self) -> None:
        if self.status in (Status.closing, Status.closed):
            return
        self.status = Status.closing
        if self._idle is not None and self._idle is not asyncio.current_task():
            self._idle.cancel()
        await super().close()
        if self.scheduler_file is not None:  # as distributed's, gone with its scheduler
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.scheduler_file)
        self.status = Status.closed

    def __await__(self) -> Generator[Any, None, Scheduler]:
        async def started() -> Scheduler:
            await self.start()
            return self

        return started().__await__()

    async def __aenter__(self) -> Scheduler:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class Nanny:
    """distributed's ``Nanny``: starts a ``squall worker`` process joined to the
    scheduler and a new one whenever it dies, supervised from this process's running
    event loop (docs/runtime.md#supervision-the-nanny). ``async with Nanny(s.address)
    as n`` returns once the worker has joined; ``n.worker_address`` is the worker's,
    ``n.address`` the nanny's.

    The worker process takes its config from this process's environment and config
    files (not from a ``dask.config.set`` here). ``preload``/``preload_argv`` run in
    the worker process, ``preload_nanny``/``preload_nanny_argv`` here, with the nanny's
    supervisor as their server (docs/runtime.md#preload)."""

    def __init__(
        self,
        scheduler_ip: str | None = None,
        scheduler_port: int | None = None,
        scheduler_file: str | None = None,
        worker_port: int | str = 0,
        nthreads: int | None = None,
        loop: Any = None,
        local_directory: str | None = None,
        services: Any = None,
        name: str | int | None = None,
        memory_limit: str | float = "auto",
        reconnect: bool | None = None,
        validate: bool = False,
        quiet: bool = False,
        resources: dict[str, float] | None = None,
        silence_logs: int | None = None,
        death_timeout: float | str | None = None,
        preload: str | Sequence[str] | None = None,
        preload_argv: Sequence[str] | Sequence[Sequence[str]] | None = None,
        preload_nanny: str | Sequence[str] | None = None,
        preload_nanny_argv: Sequence[str] | Sequence[Sequence[str]] | None = None,
        security: Security | None = None,
        contact_address: str | None = None,
        listen_address: str | None = None,
        worker_class: Any = None,
        env: dict[str, str] | None = None,
        interface: str | None = None,
        host: str | None = None,
        port: int | None = None,
        protocol: str | None = None,
        config: dict[str, Any] | None = None,
        **worker_kwargs: Any,
    ) -> None:
        refuse_unsupported(
            "Nanny",
            worker_kwargs,
            services=services,
            security=security,
            worker_class=worker_class,
            env=env,
            config=config,
        )
        if scheduler_file is not None:
            # as distributed's: waits for it, up to the death timeout
            scheduler_ip = wait_for_scheduler_file(
                scheduler_file, liveness.death_timeout(death_timeout)
            )
        if scheduler_ip is None:
            raise ValueError("Nanny needs a scheduler address or a scheduler_file")
        if scheduler_port is not None:
            scheduler_ip = comm.format_address(scheduler_ip, scheduler_port)
        self.scheduler_addr = scheduler_ip
        nthreads = nthreads or 1
        self.memory_limit = parse_memory_limit(memory_limit, nthreads)
        command = [sys.executable, "-m", "squall.worker", scheduler_ip]
        command += ["--nthreads", str(nthreads), "--memory-limit", str(self.memory_limit)]
        if name is not None:
            command += ["--name", str(name)]
        if resources:
            command += ["--resources", " ".join(f"{k}={v}" for k, v in resources.items())]
        if local_directory is not None:
            command += ["--local-directory", local_directory]
        if contact_address is not None:
            command += ["--contact-address", contact_address]
        if listen_address is not None:
            command += ["--listen", listen_address]
        elif interface is not None:
            command += ["--interface", interface]
        elif host is not None or worker_port:
            where = host or comm.worker_host(scheduler_ip)
            listen = comm.format_address(where, int(worker_port), protocol or "tcp")
            command += ["--listen", listen]
        if death_timeout is not None:
            command += ["--death-timeout", str(death_timeout)]
        command += print_level_flags(silence_logs)
        command += worker_flags(preload, preload_argv)
        self._supervisor = Supervisor(
            scheduler_ip,
            command,
            death_timeout,
            self.memory_limit,
            handle_signals=False,
            preload=preload_nanny,
            preload_argv=preload_nanny_argv,
        )
        self._start_timeout = min(
            NANNY_START_TIMEOUT, self._supervisor.death_timeout or NANNY_START_TIMEOUT
        )
        self._running: asyncio.Task[int] | None = None
        #: The address of the worker it runs, once joined.
        self.worker_address: str | None = None
        self.status = Status.created

    @property
    def address(self) -> str:
        """Where the nanny serves ``Client.run(..., nanny=True)``."""
        return self._supervisor.address

    async def start(self) -> Nanny:
        self.status = Status.starting
        self._running = asyncio.get_running_loop().create_task(self._supervisor.run())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._start_timeout
        while self.worker_address is None:
            if self._running.done():
                code = self._running.result()
                raise RuntimeError(f"the nanny ended (exit code {code}) before its worker joined")
            if loop.time() > deadline:
                await self.close()
                raise TimeoutError(
                    f"the nanny's worker did not join {self.scheduler_addr} within "
                    f"{self._start_timeout}s"
                )
            await asyncio.sleep(NANNY_START_POLL)
            if self._supervisor.listening:
                self.worker_address = await self._find_worker()
        self.status = Status.running
        return self

    async def _find_worker(self) -> str | None:
        try:
            info = await within(scheduler_info(self.scheduler_addr), NANNY_LOOK_TIMEOUT)
        except (comm.CommError, OSError, TimeoutError):
            return None
        mine = [w["address"] for w in info["workers"] if w.get("nanny") == self.address]
        return mine[0] if mine else None

    async def close(self, timeout: float = 30.0) -> None:
        """Stop the worker, then the nanny."""
        if self._running is None or self.status in (Status.closing, Status.closed):
            return
        self.status = Status.closing
        self._supervisor.close()
        try:
            await within(asyncio.shield(self._running), timeout)
        except TimeoutError:
            logger.warning("nanny %s did not close within %ss", self.address, timeout)
        self.status = Status.closed

    async def finished(self) -> None:
        """Wait until the nanny has ended (closed, or its worker left for good)."""
        if self._running is not None:
            await asyncio.shield(self._running)

    def __await__(self) -> Generator[Any, None, Nanny]:
        return self.start().__await__()

    async def __aenter__(self) -> Nanny:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
