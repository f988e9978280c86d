"""``LocalCluster``: a scheduler and workers on this machine.

Processes by default, which do not outlive the process that started them
(:mod:`squall.deploy.lifeline`); with ``processes=False``, inside the calling process
(:mod:`squall.deploy.embedded`).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from squall import config
from squall.client import display
from squall.deploy.adaptive import Adaptive
from squall.deploy.embedded import EmbeddedCluster
from squall.deploy.lifeline import lifeline
from squall.deploy.scaling import Scaling, ask
from squall.deploy.shape import default_shape
from squall.protocol import comm, ops
from squall.security import Security
from squall.worker.memory import parse_memory_limit

T = TypeVar("T")


class LocalCluster:
    """Starts ``squall scheduler`` and ``n_workers`` ``squall worker`` processes on
    loopback; ``scheduler_address`` is where clients connect. Close it (or use it as a
    context manager) to stop them.

    The processes see this process's ``squall`` config (``dask.config.set`` applies to
    them); ``scheduler_kwargs`` override scheduling knobs of ``squall.scheduler``, e.g.
    ``{"worker_saturation": "inf"}``. Every worker declares ``resources`` (e.g.
    ``{"GPU": 1}``, as ``squall worker --resources "GPU=1"``): tasks submitted with
    ``resources=`` run only on workers declaring enough, and each worker runs at once
    only as many as its amounts allow.

    With ``nanny=True`` (the default, as Dask's) each worker runs under a nanny that
    starts a new worker process when it dies (docs/runtime.md#supervision-the-nanny);
    ``worker_processes`` are then the nannies' processes.

    With ``processes=False`` the scheduler and workers run on a thread of this process
    instead (as Dask's, one worker with a thread per core by default, and no nanny):
    the quick embedded mode for tests and notebooks. Restarted workers are replaced by
    new ones in the process; a task that crashes the worker crashes the caller too.

    ``memory_limit`` is each worker's ("auto" by default, as Dask's: the system memory *
    threads per worker / cores; docs/runtime.md#memory), spilling under
    ``local_directory``."""

    def __init__(
        self,
        n_workers: int | None = None,
        threads_per_worker: int | None = None,
        *,
        host: str = "127.0.0.1",
        scheduler_port: int = 0,
        timeout: float = 30.0,
        log_level: str = "WARNING",
        scheduler_kwargs: dict[str, Any] | None = None,
        resources: dict[str, float] | None = None,
        nanny: bool = True,
        processes: bool = True,
        security: Security | bool | None = None,
        memory_limit: str | float | None = "auto",
        local_directory: str | None = None,
        dashboard_address: str | int | None = "config",
        **kwargs: Any,
    ) -> None:
        cores = os.cpu_count() or 1
        default_workers, default_threads = default_shape(cores) if processes else (1, cores)
        self.n_workers = default_workers if n_workers is None else n_workers
        self.threads_per_worker = threads_per_worker or default_threads
        self.resources = dict(resources or {})
        self.processes = processes
        self.nanny = nanny and processes
        #: Each worker's, in bytes (0: none), as ``parse_memory_limit`` reads it.
        self.memory_limit = parse_memory_limit(memory_limit, self.threads_per_worker)
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
        self._env = {**os.environ, **config.inherit(scheduler_kwargs)}
        if self.security is not None:
            self._env.update(self.security.to_env(Path(self._secrets.name)))
        #: The scheduler's dashboard address ("config": squall.scheduler.dashboard.address).
        self._dashboard_address = dashboard_address
        self._scaling = Scaling(self, log_level)
        try:
            if processes:
                self._start(host, scheduler_port, timeout, log_level)
            else:
                self._start_embedded(host, scheduler_port, timeout, scheduler_kwargs)
        except BaseException:
            self.close()
            raise

    def _start(self, host: str, port: int, timeout: float, log_level: str) -> None:
        cmd = [sys.executable, "-m", "squall.scheduler", "--host", host, "--port", str(port)]
        if self._dashboard_address is None:
            cmd.append("--no-dashboard")
        elif self._dashboard_address != "config":
            cmd += ["--dashboard-address", str(self._dashboard_address)]
        self._scheduler = subprocess.Popen(
            [*cmd, "--log-level", log_level, "--watch-stdin"],
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
            self._add_worker(f"local-{i}", log_level)
        self.wait_for_workers(self.n_workers, timeout)

    def _start_embedded(
        self, host: str, port: int, timeout: float, scheduler_kwargs: dict[str, Any] | None
    ) -> None:
        self._embedded = EmbeddedCluster(
            comm.format_address(host, port, self._scheme),
            scheduler_kwargs,
            self.security,
            self._dashboard_address,
        )
        self._host = host
        self.scheduler_address = self._embedded.address
        for i in range(self.n_workers):
            self._add_worker(f"local-{i}", "")
        self.wait_for_workers(self.n_workers, timeout)

    def _add_worker(self, name: str, log_level: str) -> None:
        """Start one more worker: a process, or a worker of the embedded cluster."""
        if self._embedded is None:
            self._procs.append(self._spawn_worker(name, log_level))
            return
        self._embedded.add_worker(
            nthreads=self.threads_per_worker,
            name=name,
            address=comm.format_address(self._host, 0, self._scheme),
            resources=self.resources,
            memory_limit=self.memory_limit,
            local_directory=self.local_directory,
        )

    def _spawn_worker(self, name: str, log_level: str) -> subprocess.Popen[str]:
        cmd = [sys.executable, "-m", "squall.worker", self.scheduler_address]
        cmd += ["--nthreads", str(self.threads_per_worker), "--name", name]
        cmd += [
            "--log-level",
            log_level,
            "--watch-stdin",
            "--nanny" if self.nanny else "--no-nanny",
        ]
        if self.resources:
            cmd += ["--resources", " ".join(f"{k}={v}" for k, v in self.resources.items())]
        cmd += ["--memory-limit", str(self.memory_limit)]
        if self.local_directory is not None:
            cmd += ["--local-directory", self.local_directory]
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
        return _run(scheduler_info(self.scheduler_address, self.security))

    def wait_for_workers(self, n: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.scheduler_info()["workers"]) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only some of {n} workers joined within {timeout}s")
            time.sleep(0.05)

    def scale(self, n: int) -> None:
        """Have ``n`` workers: start the missing ones at once (``wait_for_workers``
        waits for them), or retire the extra ones gracefully (those the scheduler
        would close first: idle, holding the least data), whose results move to the
        workers that stay, then stop their processes
        (docs/runtime.md#cluster-lifecycle)."""
        self._scaling.scale(n)

    def adapt(
        self,
        minimum: int | None = None,
        maximum: int | float | None = None,
        interval: float | str | None = None,
        wait_count: int | None = None,
        target_duration: float | str | None = None,
    ) -> Adaptive:
        """Scale with the work, as Dask's ``adapt``: every ``interval`` the scheduler's
        adaptive target (within ``minimum``..``maximum``) starts workers at once, and a
        worker the target leaves out ``wait_count`` times in a row is retired.
        Defaults: ``squall.adaptive.*``. Calling it again replaces the loop; ``close``
        stops it (docs/runtime.md#adaptive-scaling)."""
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
        if self._embedded is not None:
            self._embedded.close(timeout)
            self._embedded = None
        # Workers first, so none of them sees its scheduler vanish and warns about it.
        grace = 10.0 if timeout is None else timeout
        _stop(self._procs, grace)
        _stop([self._scheduler] if self._scheduler else [], grace)
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


async def scheduler_info(address: str, security: Security | None = None) -> dict[str, Any]:
    """Ask a scheduler for its workers: {"workers": [{address, name, nthreads, ...}]}."""
    return dict(await ask(address, {"op": ops.SCHEDULER_INFO}, security))


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``, also on a thread whose loop is running (an asynchronous
    ``Client()`` starting its cluster), where it runs on a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _stop(procs: list[subprocess.Popen[str]], grace: float) -> None:
    """SIGTERM, then SIGKILL whatever is still running ``grace`` seconds later."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
