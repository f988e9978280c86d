"""dask-jobqueue's clusters with squall's scheduler and workers (docs/deploy.md#job-queues).

``from squall.deploy.jobqueue import SLURMCluster`` in place of ``from dask_jobqueue
import SLURMCluster``: the same arguments, job scripts and submit/cancel commands (those
of dask-jobqueue's own ``Job`` classes), but the script starts ``python -m
squall.cli.dask_worker`` and the scheduler it joins is squall's, in this process as
dask-jobqueue's is. dask-jobqueue's ``JobQueueCluster`` itself cannot drive it: it is a
distributed ``SpecCluster``, which talks distributed's wire protocol to its scheduler.
Needs ``dask-jobqueue`` (``pip install squall[jobqueue]``).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import math
import threading
import uuid
import weakref
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

import dask
from dask.utils import parse_bytes
from dask_jobqueue.core import Job
from dask_jobqueue.htcondor import HTCondorJob
from dask_jobqueue.local import LocalJob
from dask_jobqueue.lsf import LSFJob
from dask_jobqueue.moab import MoabJob
from dask_jobqueue.oar import OARJob
from dask_jobqueue.pbs import PBSJob
from dask_jobqueue.sge import SGEJob
from dask_jobqueue.slurm import SLURMJob

from squall.client import display
from squall.client.client import Client
from squall.deploy.adaptive import Adaptive
from squall.deploy.local import cluster_client, scheduler_info
from squall.deploy.servers import Scheduler
from squall.security import Security

T = TypeVar("T")

logger = logging.getLogger("squall.deploy")

#: The worker module dask-jobqueue's job scripts run, and squall's under its path.
DASK_WORKER = "distributed.cli.dask_worker"
SQUALL_WORKER = "squall.cli.dask_worker"
#: How long workers asked to close (``close``, scaling down) may take to leave before
#: their jobs are cancelled anyway (seconds).
LEAVE_GRACE = 10.0
#: How often the cluster looks whether they have.
LEAVE_POLL = 0.05
#: The placeholder address of a script shown before the scheduler runs (dask-jobqueue's).
NO_ADDRESS = "tcp://<insert-scheduler-address-here>:8786"


# Open clusters, closed at exit: their jobs would otherwise wait in the queue or run on
# until their workers' death timeout.
_open: weakref.WeakSet[JobQueueCluster] = weakref.WeakSet()


@atexit.register
def _close_open_clusters() -> None:
    for cluster in list(_open):
        cluster.close()


def squall_worker_command(job: Job) -> Job:
    """Have ``job`` start squall's worker module where it would start distributed's.
    dask-jobqueue adds ``--nworkers`` and ``--nanny`` only for distributed's module, so
    the job is made with it and the module swapped after; a ``worker_command`` of the
    user's own is left as it is."""
    template: str = job._command_template
    job._command_template = template.replace(f" -m {DASK_WORKER} ", f" -m {SQUALL_WORKER} ", 1)
    return job


class JobQueueCluster:
    """dask-jobqueue's ``JobQueueCluster`` over squall: a squall scheduler on a thread
    of this process (``scheduler_options`` are ``squall.Scheduler``'s, i.e. distributed's
    ``Scheduler`` arguments; ``scheduler_cls`` may be a subclass) and one ``job_cls``
    job per ``processes`` workers. The arguments are dask-jobqueue's, its config
    (``jobqueue.<config_name>.*``) supplying those left out; subclasses set ``job_cls``.

    Unless ``scheduler_options`` name a ``host`` or an ``interface`` (or ``interface``
    is given), the scheduler listens on every interface and tells workers an address of
    this host, as distributed's does: jobs run on other hosts."""

    job_cls: type[Job] | None = None

    def __init__(
        self,
        n_workers: int = 0,
        job_cls: type[Job] | None = None,
        *,
        security: Security | None = None,
        silence_logs: str | int | bool | None = "error",
        name: str | None = None,
        scheduler_options: dict[str, Any] | None = None,
        scheduler_cls: type[Scheduler] = Scheduler,
        interface: str | None = None,
        protocol: str | None = None,
        config_name: str | None = None,
        asynchronous: bool = False,
        **job_kwargs: Any,
    ) -> None:
        cls = job_cls or self.job_cls
        if cls is None:
            raise ValueError("no job class: pass job_cls= or use a subclass (SLURMCluster, ...)")
        self.job_cls = cls
        self._job_type: type[Job] = cls
        if security is not None or asynchronous:
            unsupported = "security=" if security is not None else "asynchronous=True"
            raise TypeError(
                f"squall's job-queue clusters do not support {unsupported} "
                "(docs/deploy.md#job-queues)"
            )
        #: The cluster's name; its jobs are ``NAME-0``, ``NAME-1``, ... (as dask-jobqueue's).
        self.name = name or uuid.uuid4().hex[:8]
        #: Clients of the cluster connect without TLS or a token.
        self.security: Security | None = None
        config_name = config_name or cls.default_config_name()
        if interface is None:
            interface = dask.config.get(f"jobqueue.{config_name}.interface")
        if scheduler_options is None:
            scheduler_options = dask.config.get(f"jobqueue.{config_name}.scheduler-options", {})
        # The dashboard's default is squall's (squall.scheduler.dashboard.address: :8787).
        options: dict[str, Any] = {"protocol": protocol, **(scheduler_options or {})}
        if "host" not in options and "interface" not in options:
            options["interface"] = interface
            if interface is None:
                options["host"] = "0.0.0.0"
        self._job_kwargs = {
            **job_kwargs,
            "config_name": config_name,
            "interface": interface,
            "protocol": protocol,
        }
        #: Running jobs by name, oldest first (distributed's ``SpecCluster.workers``).
        self.workers: dict[str, Job] = {}
        self._jobs_made = 0
        self._clients: list[Client] = []
        self._adaptive: Adaptive | None = None
        #: One scaling change at a time (``scale``, ``adapt``'s loop).
        self.lock = threading.Lock()
        #: Workers per job; making the first job checks the job arguments.
        self.processes: int = self._dummy_job.worker_processes
        self._silenced = _silence(silence_logs)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="squall-jobqueue", daemon=True
        )
        self._thread.start()
        self.scheduler: Scheduler | None = None
        try:
            self.scheduler = self._call(_started(scheduler_cls(**options)))
            _open.add(self)
            if n_workers:
                self.scale(n_workers)
        except BaseException:
            self.close()
            raise

    @property
    def scheduler_address(self) -> str:
        return self._running().address

    @property
    def cluster(self) -> JobQueueCluster:
        """Itself, to the adaptive loop (which drives a cluster's scaling state)."""
        return self

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the cluster's loop, where its scheduler and jobs run."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _job(self, name: str, address: str) -> Job:
        return squall_worker_command(self._job_type(address, name=name, **self._job_kwargs))

    @property
    def _dummy_job(self) -> Job:
        """A job as the cluster makes them, but for its name (dask-jobqueue's)."""
        running = getattr(self, "scheduler", None) is not None
        address = self.scheduler_address if running else NO_ADDRESS
        return self._job("dummy-name", address)

    def job_script(self) -> str:
        """The script each job runs (with a placeholder worker name)."""
        script: str = self._dummy_job.job_script()
        return script

    @property
    def job_header(self) -> str:
        return str(self._dummy_job.job_header)

    @property
    def job_name(self) -> str | None:
        name: str | None = self._dummy_job.job_name
        return name

    @property
    def dashboard_link(self) -> str | None:
        http = None if self.scheduler is None else self.scheduler.http
        if http is None:
            return None
        return display.dashboard_link(self.scheduler_address, http.port, http.scheme)

    def scheduler_info(self) -> dict[str, Any]:
        return self._call(scheduler_info(self.scheduler_address, self.security))

    def get_client(self) -> Client:
        """A client of this cluster (``squall.deploy.local.cluster_client``)."""
        return cluster_client(self, self._clients, None)

    # ----- scaling ------------------------------------------------------------------

    def _workers_of(self, job: str) -> list[str]:
        """The names of a job's workers: the job's, or with several processes ``JOB-0``,
        ``JOB-1``, ... (as ``--nworkers`` names them)."""
        if self.processes == 1:
            return [job]
        return [f"{job}-{i}" for i in range(self.processes)]

    def alive(self) -> list[str]:
        """The workers of the running jobs (names), joined or not."""
        return [w for job in self.workers for w in self._workers_of(job)]

    def scale(
        self,
        n: int | None = None,
        jobs: int = 0,
        memory: str | int | None = None,
        cores: int | None = None,
    ) -> None:
        """Run enough jobs for ``n`` workers, or ``jobs`` jobs, or ``cores`` threads or
        ``memory`` bytes, the largest need: submit the missing jobs (not waiting for
        their workers to join), or close jobs — those whose workers have not joined
        first, then the newest — their workers retired gracefully first (their results
        move to workers that stay)."""
        if n is not None:
            jobs = math.ceil(n / self.processes)
        if cores is not None or memory is not None:
            job = self._dummy_job
            if cores is not None:
                jobs = max(jobs, math.ceil(cores / job.worker_cores))
            if memory is not None:
                if not job.worker_memory:
                    raise ValueError("scale(memory=) needs jobs with memory")
                jobs = max(jobs, math.ceil(parse_bytes(memory) / job.worker_memory))
        if jobs < 0:
            raise ValueError(f"cannot scale to {jobs} jobs")
        with self.lock:
            self._call(self._scale(jobs))

    async def _scale(self, jobs: int) -> None:
        if jobs > len(self.workers):
            await self._submit(jobs - len(self.workers))
        elif jobs < len(self.workers):
            joined = set(self._joined())
            newest_first = list(reversed(self.workers))
            newest_first.sort(key=lambda j: any(w in joined for w in self._workers_of(j)))
            await self._close_jobs(newest_first[: len(self.workers) - jobs])

    def _joined(self) -> dict[str, int]:
        """The scheduler's workers: name → id (on the cluster's loop)."""
        core = self._running().core
        return {str(core.worker_info(w)["name"]): w for _, w in core.workers()}

    def _running(self) -> Scheduler:
        if self.scheduler is None:
            raise RuntimeError(f"cluster {self.name} is closed")
        return self.scheduler

    async def _submit(self, count: int) -> None:
        names = [f"{self.name}-{self._jobs_made + i}" for i in range(count)]
        self._jobs_made += count
        new = {name: self._job(name, self.scheduler_address) for name in names}
        results = await asyncio.gather(*(j.start() for j in new.values()), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        for (name, job), result in zip(new.items(), results, strict=True):
            if not isinstance(result, BaseException):
                self.workers[name] = job
        if errors:
            raise RuntimeError(f"{len(errors)} of {count} jobs failed to start") from errors[0]

    def retire(self, *, workers: list[str]) -> None:
        """Close the jobs of these workers (addresses or names; the adaptive loop's
        choice), all their workers retired gracefully first."""
        self._call(self._retire(set(workers)))

    async def _retire(self, workers: set[str]) -> None:
        core = self._running().core
        named = {
            str(info["name"])
            for info in (core.worker_info(w) for _, w in core.workers())
            if {str(info["name"]), info["address"]} & workers
        }
        await self._close_jobs([j for j in self.workers if named & set(self._workers_of(j))])

    def scale_down(self, workers: Iterable[str]) -> None:
        """Close the jobs of these workers (addresses or names), as distributed's."""
        with self.lock:
            self.retire(workers=list(workers))

    async def _close_jobs(self, jobs: list[str], *, retire: bool = True) -> None:
        """Have the workers of ``jobs`` leave — retired gracefully, or with ``retire``
        False just closed — then cancel the jobs (whose workers had not all left within
        ``LEAVE_GRACE`` are stopped by that)."""
        s = self._running()
        joined = self._joined()
        ids = [joined[w] for j in jobs for w in self._workers_of(j) if w in joined]
        if retire:
            await s.lifecycle.retire(ids, close=True, remove=True)
        else:
            for w in ids:
                s.lifecycle.close_worker(w)
        deadline = self._loop.time() + LEAVE_GRACE
        while any(w in s.workers for w in ids) and self._loop.time() < deadline:
            await asyncio.sleep(LEAVE_POLL)
        closing = [self.workers.pop(j) for j in jobs]
        results = await asyncio.gather(*(job.close() for job in closing), return_exceptions=True)
        for job, result in zip(closing, results, strict=True):
            if isinstance(result, Exception):
                logger.warning("job %s could not be cancelled: %s", job.name, result)

    def adapt(
        self,
        minimum: int | None = None,
        maximum: int | float | None = None,
        *,
        minimum_jobs: int | None = None,
        maximum_jobs: int | None = None,
        **kwargs: Any,
    ) -> Adaptive:
        """Scale with the work (squall's ``Adaptive``, docs/runtime.md#adaptive-scaling):
        ``minimum``/``maximum`` workers, or ``minimum_jobs``/``maximum_jobs`` jobs;
        ``interval``, ``wait_count`` and ``target_duration`` as ``LocalCluster.adapt``'s.
        A worker the loop retires takes its whole job with it."""
        if minimum_jobs is not None:
            minimum = minimum_jobs * self.processes
        if maximum_jobs is not None:
            maximum = maximum_jobs * self.processes
        self._stop_adapting()
        self._adaptive = Adaptive(self, minimum=minimum, maximum=maximum, **kwargs)
        return self._adaptive

    def _stop_adapting(self) -> None:
        if self._adaptive is not None:
            self._adaptive.stop()
            self._adaptive = None

    def close(self) -> None:
        """Close the workers, cancel the jobs, stop the scheduler."""
        _open.discard(self)
        self._stop_adapting()
        for client in self._clients:
            client.close()
        self._clients.clear()
        if self._thread.is_alive():
            with self.lock:
                self._call(self._close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()
        self._silenced.restore()

    async def _close(self) -> None:
        if self.scheduler is not None:
            await self._close_jobs(list(self.workers), retire=False)
            await self.scheduler.close()
            self.scheduler = None

    def __enter__(self) -> JobQueueCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "closed" if self.scheduler is None else repr(self.scheduler_address)
        return f"{type(self).__name__}({where}, jobs={len(self.workers)})"


async def _started(scheduler: Scheduler) -> Scheduler:
    return await scheduler


class _silence:
    """``silence_logs`` (distributed's): squall's loggers in this process (the
    scheduler's) print only this level and above until the cluster closes."""

    def __init__(self, level: str | int | bool | None) -> None:
        self.logger = logging.getLogger("squall")
        self.previous = self.logger.level
        if level is True:
            level = logging.ERROR
        if level is not None and level is not False:
            self.logger.setLevel(level.upper() if isinstance(level, str) else level)

    def restore(self) -> None:
        self.logger.setLevel(self.previous)


class LocalCluster(JobQueueCluster):
    """dask-jobqueue's ``LocalCluster``: its jobs are the job script run as a local
    process (for tests; ``squall.LocalCluster`` is the local cluster to use)."""

    job_cls = LocalJob


class SLURMCluster(JobQueueCluster):
    job_cls = SLURMJob


class PBSCluster(JobQueueCluster):
    job_cls = PBSJob


class SGECluster(JobQueueCluster):
    job_cls = SGEJob


class LSFCluster(JobQueueCluster):
    job_cls = LSFJob


class HTCondorCluster(JobQueueCluster):
    job_cls = HTCondorJob


class OARCluster(JobQueueCluster):
    job_cls = OARJob


class MoabCluster(JobQueueCluster):
    job_cls = MoabJob
