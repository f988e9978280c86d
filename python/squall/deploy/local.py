"""``LocalCluster``: a scheduler and worker processes on this machine.

They do not outlive the process that started them (:mod:`squall.deploy.lifeline`).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from squall import config
from squall.deploy.lifeline import lifeline
from squall.protocol import comm, ops
from squall.worker.memory import parse_memory_limit

T = TypeVar("T")


def default_shape(n_cores: int) -> tuple[int, int]:
    """(workers, threads per worker) for a machine, as Dask sizes its LocalCluster."""
    if n_cores <= 4:
        return n_cores, 1
    workers = max(2, int(n_cores**0.5))
    return workers, max(1, n_cores // workers)


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
    ``worker_processes`` are then the nannies' processes. ``memory_limit`` is each
    worker's ("auto" by default, as Dask's: the system memory * threads per worker /
    cores; docs/runtime.md#memory), spilling under ``local_directory``."""

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
        memory_limit: str | float | None = "auto",
        local_directory: str | None = None,
        **kwargs: Any,
    ) -> None:
        cores = os.cpu_count() or 1
        default_workers, default_threads = default_shape(cores)
        self.n_workers = default_workers if n_workers is None else n_workers
        self.threads_per_worker = threads_per_worker or default_threads
        self.resources = dict(resources or {})
        self.nanny = nanny
        #: Each worker's, in bytes (0: none), as ``parse_memory_limit`` reads it.
        self.memory_limit = parse_memory_limit(memory_limit, self.threads_per_worker)
        self.local_directory = local_directory
        self._procs: list[subprocess.Popen[str]] = []
        self._scheduler: subprocess.Popen[str] | None = None
        self._env = {**os.environ, **config.inherit(scheduler_kwargs)}
        try:
            self._start(host, scheduler_port, timeout, log_level)
        except BaseException:
            self.close()
            raise

    def _start(self, host: str, port: int, timeout: float, log_level: str) -> None:
        cmd = [sys.executable, "-m", "squall.scheduler", "--host", host, "--port", str(port)]
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
            self._procs.append(self._spawn_worker(f"local-{i}", log_level))
        self.wait_for_workers(self.n_workers, timeout)

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

    def scheduler_info(self) -> dict[str, Any]:
        return _run(scheduler_info(self.scheduler_address))

    def wait_for_workers(self, n: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.scheduler_info()["workers"]) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only some of {n} workers joined within {timeout}s")
            time.sleep(0.05)

    def close(self) -> None:
        # Workers first, so none of them sees its scheduler vanish and warns about it.
        _stop(self._procs)
        _stop([self._scheduler] if self._scheduler else [])
        if self._scheduler is not None and self._scheduler.stdout is not None:
            self._scheduler.stdout.close()
        self._procs.clear()
        self._scheduler = None

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"LocalCluster({self.scheduler_address!r}, workers={self.n_workers}, "
            f"threads={self.threads_per_worker})"
        )


async def scheduler_info(address: str) -> dict[str, Any]:
    """Ask a scheduler for its workers: {"workers": [{address, name, nthreads, ...}]}."""
    c = await comm.connect(address, role="client", info={"client": "scheduler-info"})
    try:
        await c.read()  # registered
        await c.write({"op": ops.SCHEDULER_INFO, "id": 0})
        while True:
            for header, _ in await c.read_messages():
                if header["op"] == ops.SCHEDULER_INFO:
                    return dict(header)
    finally:
        await c.close()


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``, also on a thread whose loop is running (an asynchronous
    ``Client()`` starting its cluster), where it runs on a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    """SIGTERM, then SIGKILL whatever is still running 10 s later."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
