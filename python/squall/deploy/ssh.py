"""``SSHCluster``: a scheduler and workers started over SSH (asyncssh), as distributed's.

Each host runs ``python -m squall.cli.dask_spec`` (docs/deploy.md#ssh): the scheduler
on the first host, one process with ``n_workers`` workers on each of the others. A
process is up once it has printed distributed's startup lines ("Scheduler at:", one
"worker at" per worker); it stops when the SSH channel's stdin is closed (its
``--watch-stdin``), so closing the cluster, or losing its connection, stops it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import shlex
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable, Generator, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from squall import config
from squall.client import display
from squall.client.loop import sync
from squall.deploy.local import scheduler_info, server_logs
from squall.deploy.requests import ask
from squall.deploy.servers import Status, refuse_unsupported
from squall.errors import TimeoutError
from squall.protocol import messages as m
from squall.protocol.bounded import within

if TYPE_CHECKING:
    import asyncssh

logger = logging.getLogger("squall.deploy")

T = TypeVar("T")
V = TypeVar("V")

#: Seconds a remote process has to print its startup lines, and the workers to join.
START_TIMEOUT = 60.0
#: Seconds a remote process has to shut down once its stdin is closed (then it is
#: signalled and its connection closed; it exits by itself soon after, see
#: ``squall.deploy.lifeline.STDIN_CLOSED_GRACE``).
STOP_GRACE = 15.0
#: Lines of the remote processes' output the cluster keeps for ``get_logs``.
LOG_LINES = 10_000


def _asyncssh() -> Any:
    """asyncssh, imported when a cluster starts (it takes half a second)."""
    try:
        import asyncssh
    except ImportError:
        raise ImportError(
            "squall's SSHCluster needs asyncssh: pip install 'squall[ssh]' (or asyncssh)"
        ) from None
    return asyncssh


class RemoteProcess:
    """One ``python -m squall.cli.dask_spec`` run over SSH on ``host``: started, its
    output (stdout and stderr) kept in ``log``, stopped by closing its stdin."""

    def __init__(
        self,
        role: str,
        host: str,
        connect_options: dict[str, Any],
        remote_python: str,
        args: list[str],
        spec: dict[str, Any],
        startup: tuple[str, int],
        log: collections.deque[str],
    ) -> None:
        self.role = role
        self.host = host
        self.connect_options = connect_options
        self.remote_python = remote_python
        self.args = args
        self.spec = spec
        #: The text of its startup lines, and how many it prints once up.
        self.startup = startup
        #: Its startup lines, once up.
        self.found: list[str] = []
        self.log = log
        self.connection: asyncssh.SSHClientConnection | None = None
        self.process: asyncssh.SSHClientProcess[str] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._closing = False

    def __str__(self) -> str:
        return f"the {self.role} on {self.host}"

    def command(self, env: dict[str, str]) -> str:
        """The remote shell's command line (a POSIX shell's)."""
        variables = [f"{k}={v}" for k, v in env.items()]
        program = [self.remote_python, "-m", "squall.cli.dask_spec", *self.args]
        return shlex.join(["env", *variables, *program, "--spec", json.dumps(self.spec)])

    async def start(self, env: dict[str, str], timeout: float) -> None:
        """Connect, run it and read its output until its startup lines: an error
        naming the host if it cannot be reached (within ``connect_timeout``, default
        ``squall.comm.timeouts.connect``), exits first (with what it printed), or
        does not start within ``timeout`` seconds."""
        ssh = _asyncssh()
        options = {"connect_timeout": config.seconds("comm.timeouts.connect")}
        options.update(self.connect_options)
        try:
            self.connection = await ssh.connect(self.host, **options)
        except (OSError, TimeoutError, ssh.Error) as e:
            port = options.get("port", 22)
            raise ConnectionError(f"SSHCluster: cannot reach {self.host}:{port}: {e}") from e
        assert self.connection is not None
        self.process = await self.connection.create_process(
            self.command(env) + " --watch-stdin", stderr=ssh.STDOUT
        )
        text, count = self.startup
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(self.found) < count:
            try:
                line = await within(self.process.stdout.readline(), deadline - loop.time())
            except TimeoutError:
                raise TimeoutError(
                    f"{self} did not start within {timeout}s; it printed:\n{self._tail()}"
                ) from None
            if not line:  # it ended
                raise RuntimeError(
                    f"{self} exited ({await self._exit_status()}) before it started; "
                    f"it printed:\n{self._tail()}"
                )
            self._keep(line)
            if text in line:
                self.found.append(line.split(text, 1)[1].strip())
        self._reader = loop.create_task(self._read_on())

    def _keep(self, line: str) -> None:
        self.log.append(f"[{self.role} {self.host}] {line.rstrip()}")

    def _tail(self) -> str:
        mine = f"[{self.role} {self.host}] "
        return "\n".join(line for line in self.log if line.startswith(mine))

    async def _exit_status(self) -> str:
        assert self.process is not None
        with contextlib.suppress(TimeoutError):
            await within(self.process.wait_closed(), STOP_GRACE)
        code = self.process.exit_status
        return "exit status unknown" if code is None else f"exit code {code}"

    async def _read_on(self) -> None:
        """Keep its output (so that it never blocks on a full pipe) until it ends."""
        assert self.process is not None
        while line := await self.process.stdout.readline():
            self._keep(line)
        if not self._closing:
            logger.warning("%s exited (%s)", self, await self._exit_status())

    async def close(self, grace: float) -> None:
        """Close its stdin (it shuts down gracefully), wait up to ``grace`` seconds for
        it to end, then signal it and drop the connection."""
        self._closing = True
        ssh = _asyncssh()
        if self.process is not None:
            with contextlib.suppress(OSError, ssh.Error):
                self.process.stdin.write_eof()
            try:
                await within(self.process.wait_closed(), grace)
            except TimeoutError:
                logger.warning("%s did not stop within %ss: killing it", self, grace)
                with contextlib.suppress(OSError, ssh.Error):
                    self.process.kill()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        if self.connection is not None:
            self.connection.close()
            await self.connection.wait_closed()


def per_host(value: V | list[V], hosts: list[str], what: str) -> list[V]:
    """An argument given once or per host, per host (distributed's ``RuntimeError``
    for a list of the wrong length)."""
    if not isinstance(value, list):
        return [value] * len(hosts)
    if len(value) != len(hosts):
        raise RuntimeError(f"{what} given as a list needs one entry per host")
    return value


class SSHCluster:
    """distributed's ``SSHCluster``: a scheduler on ``hosts[0]`` and workers on each of
    the other hosts (repeat a host to have several processes there), started over SSH
    with asyncssh (docs/deploy.md#ssh).

    ``connect_options`` go to ``asyncssh.connect`` (one dict, or one per host);
    ``scheduler_options`` to ``squall.Scheduler`` and ``worker_options`` to
    ``worker_class`` (default ``"distributed.Nanny"``, i.e. ``squall.Nanny``), with
    ``n_workers`` (default 1) such workers per host. Unless the options say where to
    listen (``host``, ``interface``, ...), the scheduler listens on ``hosts[0]`` and
    each worker on its host, as named here. ``remote_python`` is the Python to run on
    the hosts (one, or one per host; default: this process's path). The processes get
    this process's squall and Dask config, as a LocalCluster's do.

    Blocking unless ``asynchronous=True``: then ``await SSHCluster(...)`` or ``async
    with SSHCluster(...)`` starts it and ``await cluster.close()`` stops it."""

    def __init__(
        self,
        hosts: list[str] | None = None,
        connect_options: dict[str, Any] | list[dict[str, Any]] | None = None,
        worker_options: dict[str, Any] | None = None,
        scheduler_options: dict[str, Any] | None = None,
        worker_class: str | type = "distributed.Nanny",
        remote_python: str | list[str] | None = None,
        *,
        asynchronous: bool = False,
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        refuse_unsupported("SSHCluster", kwargs)
        if not hosts:
            raise ValueError(f"`hosts` must be a non empty list, value {hosts!r} found.")
        connects = per_host(connect_options or {}, hosts, "connect_options")
        pythons = per_host(remote_python or sys.executable, hosts, "remote_python")
        self.name = name if name is not None else f"SSHCluster-{uuid.uuid4().hex[:8]}"
        self.asynchronous = asynchronous
        self.status = Status.created
        self.scheduler_address = ""
        self._dashboard: tuple[int | None, str] = (None, "http")
        #: What the remote processes printed, each line prefixed with its process.
        self._log: collections.deque[str] = collections.deque(maxlen=LOG_LINES)
        where = ("host", "interface", "listen_address", "contact_address")
        scheduler_opts = dict(scheduler_options or {})
        if not any(k in scheduler_opts for k in where):
            scheduler_opts["host"] = hosts[0]
        self.scheduler = RemoteProcess(
            "scheduler",
            hosts[0],
            dict(connects[0]),
            pythons[0],
            [],
            {"cls": "squall.Scheduler", "opts": scheduler_opts},
            ("Scheduler at:", 1),
            self._log,
        )
        worker_opts = dict(worker_options or {})
        n_workers = int(worker_opts.pop("n_workers", 1))
        if not isinstance(worker_class, str):
            worker_class = f"{worker_class.__module__}.{worker_class.__qualname__}"
        self.workers: list[RemoteProcess] = []
        for i, host in enumerate(hosts[1:], start=1):
            opts = dict(worker_opts)
            if not any(k in opts for k in where):
                opts["host"] = host
            spec = {str(n): {"cls": worker_class, "opts": opts} for n in range(n_workers)}
            self.workers.append(
                RemoteProcess(
                    "worker",
                    host,
                    dict(connects[i]),
                    pythons[i],
                    ["SCHEDULER"],  # its address, once the scheduler is up
                    spec,
                    ("worker at", n_workers),
                    self._log,
                )
            )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        if not asynchronous:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(
                target=self._loop.run_forever, name=f"squall-{self.name}", daemon=True
            )
            self._thread.start()
            try:
                self._sync(self._start)
            except BaseException:
                self.close()
                raise

    def _sync(self, func: Callable[..., Awaitable[T]], *args: Any) -> Any:
        """``func(*args)``: awaitable if asynchronous, else run on the cluster's loop."""
        if self.asynchronous:
            return func(*args)
        return sync(self._loop, func, *args)

    async def _start(self) -> None:
        if self.status == Status.running:
            return
        self.status = Status.starting
        env = config.inherit()
        try:
            await self.scheduler.start(env, START_TIMEOUT)
            self.scheduler_address = self.scheduler.found[0]
            for worker in self.workers:
                worker.args = [self.scheduler_address]
            started = await asyncio.gather(
                *(w.start(env, START_TIMEOUT) for w in self.workers), return_exceptions=True
            )
            errors = [e for e in started if isinstance(e, BaseException)]
            if errors:
                raise errors[0]
            # "worker at" comes before a worker has joined: wait until all have.
            count = sum(w.startup[1] for w in self.workers)
            request = m.WaitForWorkers(n_workers=count, timeout=START_TIMEOUT)
            answer = await ask(self.scheduler_address, request, m.WaitForWorkersReply)
            if answer.error:
                raise TimeoutError(answer.error)
            info = await scheduler_info(self.scheduler_address)
            port = info["services"].get("dashboard")
            self._dashboard = port, info.get("dashboard_scheme") or "http"
        except BaseException:
            await self._close()
            raise
        self.status = Status.running

    @property
    def dashboard_link(self) -> str | None:
        """The scheduler's dashboard, as a person reaches it (None: it serves none)."""
        return display.dashboard_link(self.scheduler_address, *self._dashboard)

    def get_logs(
        self, cluster: bool = True, scheduler: bool = True, workers: bool | Iterable[str] = True
    ) -> Any:
        """distributed's ``get_logs``: ``{"Cluster <name>": …, "Scheduler": …, worker
        address: …}``, each one text, oldest line first; the cluster's are what the
        remote processes printed, each line prefixed with ``[role host]``. ``workers``
        may name some (addresses). Awaitable if asynchronous."""
        return self._sync(self._get_logs, cluster, scheduler, workers)

    async def _get_logs(
        self, cluster: bool, scheduler: bool, workers: bool | Iterable[str]
    ) -> dict[str, str]:
        logs = {f"Cluster {self.name}": "\n".join(self._log)} if cluster else {}
        logs.update(await server_logs(self.scheduler_address, None, scheduler, workers))
        return logs

    def close(self, timeout: float | None = None) -> Any:
        """Stop the workers' processes, then the scheduler's, each given ``timeout``
        seconds (default ``STOP_GRACE``) once told; awaitable if asynchronous."""
        if self._loop is not None and self._loop.is_closed():
            return None
        result = self._sync(self._close, STOP_GRACE if timeout is None else timeout)
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()
        return result

    async def _close(self, grace: float = STOP_GRACE) -> None:
        if self.status in (Status.closing, Status.closed):
            return
        self.status = Status.closing
        await asyncio.gather(*(w.close(grace) for w in self.workers), return_exceptions=True)
        await self.scheduler.close(grace)
        self.status = Status.closed

    def __await__(self) -> Generator[Any, None, SSHCluster]:
        async def started() -> SSHCluster:
            await self._start()
            return self

        return started().__await__()

    def __enter__(self) -> SSHCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> SSHCluster:
        return await self

    async def __aexit__(self, *exc: object) -> None:
        await self._close()

    def __repr__(self) -> str:
        workers = [w.host for w in self.workers]
        return f"SSHCluster({self.scheduler_address!r}, hosts={[self.scheduler.host, *workers]})"
