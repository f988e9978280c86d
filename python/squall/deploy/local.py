"""``LocalCluster``: a scheduler and workers on this machine.

Processes by default, which do not outlive the process that started them
(:mod:`squall.deploy.lifeline`); with ``processes=False``, inside the calling process
(:mod:`squall.deploy.embedded`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, TypeVar

import msgspec
from dask.utils import parse_bytes

from squall import config
from squall.client import connection, display
from squall.client.client import Client
from squall.client.default import default_client
from squall.client.loop import timeout_seconds
from squall.deploy.adaptive import Adaptive
from squall.deploy.embedded import EmbeddedCluster
from squall.deploy.lifeline import lifeline
from squall.deploy.requests import ask, run_sync
from squall.deploy.scaling import Scaling, stop_processes
from squall.deploy.shape import default_shape
from squall.errors import TimeoutError
from squall.preload import worker_flags
from squall.protocol import comm
from squall.protocol import messages as m
from squall.security import Security
from squall.worker.memory import parse_memory_limit

#: A scheduler's preloads and their argv (distributed's ``Scheduler`` arguments).
_Preload = tuple[Any, Any]

T = TypeVar("T")

#: How often (seconds) ``wait_for_workers`` looks for worker processes that exited.
PROCESS_CHECK_INTERVAL = 0.1


class LocalCluster:
    """Starts ``squall scheduler`` and ``n_workers`` ``squall worker`` processes on
    loopback; ``scheduler_address`` is where clients connect. Close it (or use it as a
    context manager) to stop them.

    The processes see this process's ``squall`` config and the ``distributed`` keys set
    in it (``dask.config.set`` applies to them); ``scheduler_kwargs`` override
    scheduling knobs of ``squall.scheduler``, e.g. ``{"worker_saturation": "inf"}``.
    Every worker declares ``resources`` (e.g. ``{"GPU": 1}``, as ``squall worker
    --resources "GPU=1"``; default ``squall.worker.resources``): tasks submitted with
    ``resources=`` run only on workers declaring enough, and each worker runs at once
    only as many as its amounts allow.

    With ``nanny=True`` (the default, as Dask's) each worker runs under a nanny that
    starts a new worker process when it dies (docs/runtime.md#supervision-the-nanny);
    ``worker_processes`` are then the nannies' processes.

    With ``processes=False`` the scheduler and workers run on a thread of this process
    instead (as Dask's, one worker with a thread per core by default, and no nanny):
    the quick embedded mode for tests and notebooks. Restarted workers are replaced by
    new ones in the process; a task that crashes the worker crashes the caller too.

    As distributed's, ``preload``, ``preload_argv`` and ``preload_nanny`` are the
    workers' (and nannies') preloads, and ``scheduler_kwargs``' ``preload`` and
    ``preload_argv`` the scheduler's (docs/runtime.md#preload).

    ``memory_limit`` is each worker's ("auto" by default: as Dask's LocalCluster, the
    system memory / ``n_workers``; docs/runtime.md#memory), spilling under
    ``local_directory``.

    Its processes print only warnings and errors (``silence_logs``, as Dask's: a level,
    or None to print all they log) and keep their ``squall.logging.level`` lines (INFO
    by default) for ``Client.get_scheduler_logs`` and ``get_worker_logs``."""

    def __init__(
        self,
        n_workers: int | None = None,
        threads_per_worker: int | None = None,
        *,
        host: str = "127.0.0.1",
        scheduler_port: int = 0,
        timeout: float = 30.0,
        silence_logs: int | str | Literal[False] | None = logging.WARNING,
        scheduler_kwargs: dict[str, Any] | None = None,
        resources: dict[str, float] | None = None,
        nanny: bool = True,
        processes: bool = True,
        security: Security | bool | None = None,
        memory_limit: str | float | None = "auto",
        local_directory: str | None = None,
        dashboard_address: str | int | None = "config",
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        cores = os.cpu_count() or 1
        #: distributed's cluster name (a fresh one unless given).
        self.name = name if name is not None else f"LocalCluster-{uuid.uuid4().hex[:8]}"
        self._clients: list[Client] = []
        default_workers, default_threads = default_shape(cores) if processes else (1, cores)
        self.n_workers = default_workers if n_workers is None else n_workers
        self.threads_per_worker = threads_per_worker or default_threads
        self.resources = dict(resources or {})
        self.processes = processes
        self.nanny = nanny and processes
        #: Each worker's, in bytes (0: none), as ``parse_memory_limit`` reads it; "auto"
        #: shares the machine among the workers asked for, as Dask's LocalCluster.
        self.memory_limit = parse_memory_limit(memory_limit, 1, cores=max(1, self.n_workers))
        self.local_directory = local_directory
        self._procs: list[subprocess.Popen[str]] = []
        self._scheduler: subprocess.Popen[str] | None = None
        self._embedded: EmbeddedCluster | None = None
        if security is True:  # as distributed: a temporary self-signed certificate
            security = Security.temporary()
        #: TLS and token of this cluster (docs/security.md); clients of it use them.
        self.security = security or None
        self._scheme = "tls" if self.security and self.security.tls else "tcp"
        self._secrets = tempfile.TemporaryDirectory(prefix="squall-cluster-")
        # The scheduler's preloads (distributed's Scheduler arguments); the rest of
        # scheduler_kwargs are the core's knobs.
        knobs = dict(scheduler_kwargs or {})
        scheduler_preload = knobs.pop("preload", None), knobs.pop("preload_argv", None)
        self._env = {**os.environ, **config.inherit(knobs)}
        if self.security is not None:
            self._env.update(self.security.to_env(Path(self._secrets.name)))
        #: The scheduler's dashboard address ("config": squall.scheduler.dashboard.address).
        self._dashboard_address = dashboard_address
        #: Flags of its processes: what they print (their log keeps squall.logging.level).
        self._log_flags = print_level_flags(silence_logs)
        self._scaling = Scaling(self)
        #: distributed's worker arguments for preloads (docs/runtime.md#preload).
        self._preload = kwargs.pop("preload", None)
        self._preload_argv = kwargs.pop("preload_argv", None)
        self._preload_flags = [
            *worker_flags(kwargs.pop("preload_nanny", None), None, "--preload-nanny"),
            *worker_flags(self._preload, self._preload_argv),
        ]
        try:
            if processes:
                self._start(host, scheduler_port, timeout, scheduler_preload)
            else:
                self._start_embedded(host, scheduler_port, timeout, knobs, scheduler_preload)
        except BaseException:
            self.close()
            raise

    def _start(self, host: str, port: int, timeout: float, preload: _Preload) -> None:
        cmd = [sys.executable, "-m", "squall.scheduler", "--host", host, "--port", str(port)]
        if self._dashboard_address is None:
            cmd.append("--no-dashboard")
        elif self._dashboard_address != "config":
            cmd += ["--dashboard-address", str(self._dashboard_address)]
        self._scheduler = subprocess.Popen(
            [*cmd, *self._log_flags, "--watch-stdin", *worker_flags(*preload)],
            stdin=lifeline(),
            stdout=subprocess.PIPE,
            text=True,
            env=self._env,
        )
        assert self._scheduler.stdout is not None
        line = self._scheduler.stdout.readline()
        prefix = "squall scheduler listening at "
        if not line.startswith(prefix):
            raise RuntimeError(f"the scheduler did not start: {line!r}")
        self.scheduler_address = line[len(prefix) :].strip()
        for i in range(self.n_workers):
            self._add_worker(f"local-{i}")
        self.wait_for_workers(self.n_workers, timeout)

    def _start_embedded(
        self, host: str, port: int, timeout: float, knobs: dict[str, Any], preload: _Preload
    ) -> None:
        self._embedded = EmbeddedCluster(
            comm.format_address(host, port, self._scheme),
            knobs,
            self.security,
            self._dashboard_address,
            preload,
        )
        self._host = host
        self.scheduler_address = self._embedded.address
        for i in range(self.n_workers):
            self._add_worker(f"local-{i}")
        self.wait_for_workers(self.n_workers, timeout)

    def _add_worker(self, name: str) -> None:
        """Start one more worker: a process, or a worker of the embedded cluster."""
        if self._embedded is None:
            self._procs.append(self._spawn_worker(name))
            return
        self._embedded.add_worker(
            nthreads=self.threads_per_worker,
            name=name,
            address=comm.format_address(self._host, 0, self._scheme),
            resources=self.resources or None,
            memory_limit=self.memory_limit,
            local_directory=self.local_directory,
            preload=self._preload,
            preload_argv=self._preload_argv,
        )

    def _spawn_worker(self, name: str) -> subprocess.Popen[str]:
        cmd = [sys.executable, "-m", "squall.worker", self.scheduler_address]
        cmd += ["--nthreads", str(self.threads_per_worker), "--name", name]
        cmd += [*self._log_flags, "--watch-stdin", "--nanny" if self.nanny else "--no-nanny"]
        if self.resources:
            cmd += ["--resources", " ".join(f"{k}={v}" for k, v in self.resources.items())]
        cmd += ["--memory-limit", str(self.memory_limit)]
        if self.local_directory is not None:
            cmd += ["--local-directory", self.local_directory]
        cmd += self._preload_flags  # last: --preload-argv takes the rest
        return subprocess.Popen(cmd, stdin=lifeline(), text=True, env=self._env)

    @property
    def scheduler_process(self) -> subprocess.Popen[str] | None:
        return self._scheduler

    @property
    def worker_processes(self) -> list[subprocess.Popen[str]]:
        return list(self._procs)

    @property
    def dashboard_link(self) -> str | None:
        """The scheduler's dashboard, as a person reaches it (None: it serves none)."""
        info = self.scheduler_info()
        port, scheme = info["services"].get("dashboard"), info.get("dashboard_scheme")
        return display.dashboard_link(self.scheduler_address, port, scheme or "http")

    def scheduler_info(self) -> dict[str, Any]:
        return run_sync(scheduler_info(self.scheduler_address, self.security))

    def wait_for_workers(self, n_workers: int = -1, timeout: float | str | None = 30.0) -> None:
        """Wait until ``n_workers`` workers (default: as many as it has) run: one
        request the scheduler answers when they do (a poll would count as a client
        connecting and leaving each time); no ``timeout`` (None): no limit.
        ``TimeoutError`` after ``timeout`` (a scheduler that does not answer at all: a
        connect timeout later, or a ``CommError`` naming it); ``RuntimeError`` at once
        if one of this cluster's worker processes exits meanwhile."""
        if n_workers < 0:
            n_workers = len(self._scaling.alive())
        run_sync(self._wait_for_workers(n_workers, timeout_seconds(timeout)))

    async def _wait_for_workers(self, n: int, timeout: float | None) -> None:
        request = m.WaitForWorkers(n_workers=n, timeout=timeout)
        running = [p for p in self._procs if p.poll() is None]
        answer = asyncio.ensure_future(
            ask(self.scheduler_address, request, m.WaitForWorkersReply, self.security)
        )
        # The scheduler answers by ``timeout``; one that does not (stopped, hung) fails
        # the wait a connect timeout later rather than never.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (math.inf if timeout is None else timeout)
        deadline += config.seconds("comm.timeouts.connect")
        try:
            while not answer.done():
                if loop.time() > deadline:
                    raise TimeoutError(
                        f"the scheduler at {self.scheduler_address} did not answer "
                        f"within {timeout}s while waiting for {n} workers"
                    )
                await asyncio.wait({answer}, timeout=PROCESS_CHECK_INTERVAL)
                exited = [p for p in running if p.poll() is not None]
                if exited and not answer.done():
                    raise RuntimeError(
                        f"worker process {exited[0].pid} exited with code"
                        f" {exited[0].returncode} before {n} workers joined"
                    )
        finally:
            answer.cancel()
        error = answer.result().error
        if error:
            raise TimeoutError(error)

    def scale(self, n: int = 0, memory: str | int | None = None, cores: int | None = None) -> None:
        """Have ``n`` workers — or enough for ``cores`` threads or ``memory`` (bytes or
        "8 GiB") at this cluster's ``threads_per_worker`` and ``memory_limit``, the
        largest if several are given: start the missing ones at once
        (``wait_for_workers`` waits for them), or retire the extra ones gracefully
        (those the scheduler would close first: idle, holding the least data), whose
        results move to the workers that stay, then stop their processes
        (docs/runtime.md#cluster-lifecycle)."""
        self._scaling.scale(self._workers_for(n, memory, cores))

    def _workers_for(self, n: int, memory: str | int | None, cores: int | None) -> int:
        """Workers for ``n`` workers, ``cores`` threads and ``memory`` bytes, as
        distributed's ``scale`` counts them: the largest need."""
        needs = [n]
        if cores is not None:
            needs.append(math.ceil(cores / self.threads_per_worker))
        if memory is not None:
            if not self.memory_limit:
                raise ValueError("scale(memory=) needs workers with a memory limit")
            needs.append(math.ceil(parse_bytes(memory) / self.memory_limit))
        return max(needs)

    def scale_up(self, n: int) -> None:
        """Have at least ``n`` workers (distributed's ``scale_up``)."""
        self._scaling.scale(max(n, len(self._scaling.alive())))

    def scale_down(self, workers: Iterable[str]) -> None:
        """Retire these workers (addresses or names) gracefully and stop them
        (distributed's ``scale_down``)."""
        wanted = set(workers)
        known = self.scheduler_info()["workers"]
        addresses = [w["address"] for w in known if {w["address"], str(w["name"])} & wanted]
        if addresses:
            with self._scaling.lock:
                self._scaling.retire(workers=addresses)

    def get_client(self) -> Client:
        """A client of this cluster (:func:`cluster_client`)."""
        return cluster_client(self, self._clients, self.security)

    def get_logs(
        self, cluster: bool = True, scheduler: bool = True, workers: bool | Iterable[str] = True
    ) -> dict[str, str]:
        """The processes' recent log lines, distributed's ``get_logs``: ``{"Cluster
        <name>": …, "Scheduler": …, worker address: …}``, each one text, oldest line
        first. ``workers`` may name some (addresses)."""
        logs = {f"Cluster {self.name}": ""} if cluster else {}  # it logs nothing itself
        logs.update(
            run_sync(server_logs(self.scheduler_address, self.security, scheduler, workers))
        )
        return logs

    def adapt(
        self,
        minimum: int | None = None,
        maximum: int | float | None = None,
        interval: float | str | None = None,
        wait_count: int | None = None,
        target_duration: float | str | None = None,
        *,
        minimum_cores: int | None = None,
        maximum_cores: int | None = None,
        minimum_memory: str | int | None = None,
        maximum_memory: str | int | None = None,
    ) -> Adaptive:
        """Scale with the work, as Dask's ``adapt``: every ``interval`` the scheduler's
        adaptive target (within ``minimum``..``maximum``) starts workers at once, and a
        worker the target leaves out ``wait_count`` times in a row is retired.
        Defaults: ``squall.adaptive.*``. ``minimum_cores``/``minimum_memory`` raise
        the minimum and ``maximum_cores``/``maximum_memory`` lower the maximum to the
        workers they make at this cluster's shape, as distributed's. Calling it again
        replaces the loop; ``close`` stops it (docs/runtime.md#adaptive-scaling)."""
        if minimum_cores is not None or minimum_memory is not None:
            floor = self._workers_for(0, minimum_memory, minimum_cores)
            minimum = max(minimum or 0, floor)
        if maximum_cores is not None or maximum_memory is not None:
            ceiling = self._workers_for(0, maximum_memory, maximum_cores)
            maximum = ceiling if maximum is None else min(maximum, ceiling)
        return self._scaling.adapt(
            minimum=minimum,
            maximum=maximum,
            interval=interval,
            wait_count=wait_count,
            target_duration=target_duration,
        )

    def close(self, timeout: float | None = None) -> None:
        """Stop the workers, then the scheduler. Processes get ``timeout`` seconds
        (default 10) after SIGTERM before SIGKILL; an embedded cluster waits at most
        ``timeout`` for its workers and scheduler to close."""
        self._scaling.stop_adapting()
        for client in self._clients:
            client.close()
        self._clients.clear()
        if self._embedded is not None:
            self._embedded.close(timeout)
            self._embedded = None
        # Workers first, so none of them sees its scheduler vanish and warns about it.
        grace = 10.0 if timeout is None else timeout
        stop_processes(self._procs, grace)
        stop_processes([self._scheduler] if self._scheduler else [], grace)
        if self._scheduler is not None and self._scheduler.stdout is not None:
            self._scheduler.stdout.close()
        self._procs.clear()
        self._scheduler = None
        self._secrets.cleanup()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"LocalCluster({self.scheduler_address!r}, workers={self.n_workers}, "
            f"threads={self.threads_per_worker}, processes={self.processes})"
        )


async def server_logs(
    address: str, security: Security | None, scheduler: bool, workers: bool | Iterable[str]
) -> dict[str, str]:
    """The scheduler's and workers' recent log lines, as a cluster's ``get_logs``
    gives them: ``{"Scheduler": …, worker address: …}``, each one text, oldest line
    first; ``workers`` may name some (addresses)."""
    logs: dict[str, str] = {}
    if not (scheduler or workers):
        return logs
    async with Client(address, asynchronous=True, set_as_default=False, security=security) as c:
        if scheduler:
            logs["Scheduler"] = _joined(await c.get_scheduler_logs())
        if workers:
            chosen = None if workers is True else list(workers)
            for worker, lines in (await c.get_worker_logs(workers=chosen)).items():
                logs[worker] = _joined(lines)
    return logs


def _joined(lines: list[tuple[str, str]]) -> str:
    """Log lines as one text, oldest first (squall's come newest first)."""
    return "\n".join(line for _, line in reversed(lines))


async def scheduler_info(address: str, security: Security | None = None) -> dict[str, Any]:
    """Ask a scheduler for its workers: {"workers": [{address, name, nthreads, ...}]}."""
    reply = await ask(address, m.SchedulerInfo(), m.SchedulerInfoReply, security)
    return msgspec.structs.asdict(reply)


def print_level_flags(silence_logs: int | str | Literal[False] | None) -> list[str]:
    """The flags that make a process print only ``silence_logs`` and above (Dask's
    ``LocalCluster(silence_logs=)``: a level, its name, or False/None to print what
    the process logs)."""
    if silence_logs is None or silence_logs is False:
        return []
    name = logging.getLevelName(silence_logs) if isinstance(silence_logs, int) else silence_logs
    return ["--print-level", config.log_level(str(name))]


connection.start_local_cluster = LocalCluster


def cluster_client(cluster: Any, clients: list[Client], security: Security | None) -> Client:
    """A client of ``cluster`` (its ``get_client``): the default client if it is
    connected there, else a new one, kept in ``clients`` to be closed with the cluster."""
    with contextlib.suppress(ValueError):
        client = default_client()
        if client.address == cluster.scheduler_address and client.status == "running":
            return client
    client = Client(cluster, security=security)
    clients.append(client)
    return client
