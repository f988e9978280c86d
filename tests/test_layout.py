"""The package's faces that outlive its layout: every public name of ``squall``, and the
``python -m`` programs LocalCluster and users start."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import squall
from squall.deploy.local import scheduler_info
from squall.deploy.requests import run_sync

# Every public name squall has had, by kind: a name leaves only on purpose.
CLIENT = {"Client", "Future", "LocalCluster", "as_completed", "fire_and_forget", "wait"}
CLIENT |= {"CancelledError", "CompatibleExecutor", "KilledWorker", "Security", "TimeoutError"}
SERVERS = {"Scheduler", "Worker", "Nanny", "Status", "sync"}
IN_TASKS = {"get_client", "get_worker", "rejoin", "secede", "print", "warn"}
# The bare core is squall.core (its ``Scheduler`` and ``Commands``); ``Scheduler`` here
# is the server, as distributed's.
CORE = {"core", "order", "sim", "config", "__version__"}
CLIENT |= {"default_client", "futures_of", "get_task_metadata", "span"}
IN_TASKS |= {"worker_client", "local_client", "Reschedule"}
ACTORS = {"Actor", "ActorFuture", "BaseActorFuture"}
DIAGNOSTICS = {"get_task_stream", "performance_report", "progress"}
PLUGINS = {"SchedulerPlugin", "WorkerPlugin", "NannyPlugin"}
PLUGINS |= {"UploadFile", "UploadDirectory", "InstallPlugin", "PipInstall", "CondaInstall"}
PLUGINS |= {"Environ"}
PRIMITIVES = {"Event", "Lock", "MultiLock", "Queue", "Semaphore", "Variable"}
ERRORS = {"SchedulerError", "CycleError", "DuplicateKeyError", "InternalError"}
ERRORS |= {"StaleReportError", "UnknownDependencyError", "UnknownKeyError"}
ERRORS |= {"UnknownTaskError", "UnknownWorkerError"}
PUBLIC = CLIENT | SERVERS | IN_TASKS | CORE | ERRORS | DIAGNOSTICS | PRIMITIVES | ACTORS
PUBLIC |= PLUGINS
PUBLIC |= {"SSHCluster"}  # docs/deploy.md#ssh


def test_public_names() -> None:
    assert set(squall.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(squall, name) is not None, name


def test_python_m_scheduler_and_worker() -> None:
    """``python -m squall.scheduler`` serves and ``python -m squall.worker`` joins it;
    the scheduler leaves cleanly on SIGTERM, and the worker once its scheduler has been
    gone for its death timeout."""
    sched = subprocess.Popen(
        [sys.executable, "-m", "squall.scheduler", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    worker = None
    try:
        assert sched.stdout is not None
        line = sched.stdout.readline()
        assert line.startswith("squall scheduler listening at "), line
        address = line.rsplit(" ", 1)[-1].strip()
        args = [address, "--nthreads", "2", "--name", "w", "--death-timeout", "1s"]
        worker = subprocess.Popen([sys.executable, "-m", "squall.worker", *args])
        deadline = time.monotonic() + 30
        while not (workers := run_sync(scheduler_info(address))["workers"]):
            assert time.monotonic() < deadline, "the worker did not join"
            assert worker.poll() is None, "the worker exited"
            time.sleep(0.05)
        assert [(w["name"], w["nthreads"]) for w in workers] == [("w", 2)]
        sched.send_signal(signal.SIGTERM)
        assert sched.wait(timeout=20) == 0
        assert worker.wait(timeout=20) == 0
    finally:
        for proc in (worker, sched):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
