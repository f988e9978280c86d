"""dask-jobqueue's clusters over squall (squall.deploy.jobqueue, docs/deploy.md#job-queues):
jobs run as local processes, by dask-jobqueue's local runner or by fake ``sbatch``/``qsub``
commands that run the job script they are given."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import dask.array as da
import psutil
import pytest

pytest.importorskip("dask_jobqueue")

import squall
from squall.deploy import jobqueue
from tests.conftest import eventually

#: The scheduler on loopback (the default listens on every interface).
LOOPBACK = {"host": "127.0.0.1"}


def workers(client: squall.Client) -> list[str]:
    return sorted(str(w["name"]) for w in client.scheduler_info()["workers"].values())


def job_processes(address: str) -> list[psutil.Process]:
    """Processes started by jobs (worker programs, their workers) of this scheduler."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmdline = p.info["cmdline"] or []
        if address in cmdline and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(p)
    return found


def test_local_jobs_compute_scale_and_close() -> None:
    cluster = jobqueue.LocalCluster(
        cores=2, memory="1GiB", processes=1, name="jq", scheduler_options=LOOPBACK
    )
    try:
        script = cluster.job_script()
        assert f"-m squall.cli.dask_worker {cluster.scheduler_address} " in script
        assert "--nthreads 2 --memory-limit 1.00GiB --nanny --death-timeout 60" in script
        cluster.scale(2)
        with squall.Client(cluster) as client:
            client.wait_for_workers(2, timeout=30)
            assert workers(client) == ["jq-0", "jq-1"]
            assert client.gather(client.map(lambda x: x + 1, range(20))) == list(range(1, 21))
            assert da.ones((200, 200), chunks=50).sum().compute() == 40_000
            cluster.scale(1)  # the newest job goes
            assert workers(client) == ["jq-0"]
            assert list(cluster.workers) == ["jq-0"]
            cluster.scale(jobs=2)
            client.wait_for_workers(2, timeout=30)
            assert workers(client) == ["jq-0", "jq-2"]
            assert client.submit(sum, [1, 2]).result() == 3
        address = cluster.scheduler_address
        assert job_processes(address)
    finally:
        cluster.close()
    # Cancelling a job kills its program (the nanny); the worker it started follows when
    # its lifeline closes, a moment later, as after any queue's cancel command.
    eventually(lambda: not job_processes(address))


def test_several_processes_per_job() -> None:
    with jobqueue.LocalCluster(
        cores=2, memory="1GiB", processes=2, name="jp", scheduler_options=LOOPBACK
    ) as cluster:
        assert "--nthreads 1 --memory-limit 512.00MiB --nworkers 2 --nanny" in cluster.job_script()
        cluster.scale(3)  # two jobs
        address = cluster.scheduler_address
        with squall.Client(cluster) as client:
            client.wait_for_workers(4, timeout=30)
            assert workers(client) == ["jp-0-0", "jp-0-1", "jp-1-0", "jp-1-1"]
            cluster.scale_down([client.scheduler_info()["workers"].popitem()[0]])
            assert len(cluster.workers) == 1
            assert len(workers(client)) == 2
    eventually(lambda: not job_processes(address))


def test_adapt_in_jobs() -> None:
    with jobqueue.LocalCluster(
        cores=1, memory="1GiB", processes=1, name="ja", scheduler_options=LOOPBACK
    ) as cluster:
        adaptive = cluster.adapt(minimum_jobs=0, maximum_jobs=2, interval=0.1, wait_count=2)
        assert (adaptive.minimum, adaptive.maximum) == (0, 2)
        with squall.Client(cluster) as client:
            futures = client.map(lambda x: x, range(4))
            assert client.gather(futures) == list(range(4))
            del futures
            eventually(lambda: not cluster.workers, timeout=20)


def test_unknown_and_unsupported_arguments_are_errors() -> None:
    with pytest.raises(TypeError, match="nonsense"):
        jobqueue.SLURMCluster(cores=1, memory="1GiB", nonsense=1)
    with pytest.raises(TypeError, match="security="):
        jobqueue.SLURMCluster(cores=1, memory="1GiB", security=squall.Security())
    with pytest.raises(TypeError, match="asynchronous=True"):
        jobqueue.SLURMCluster(cores=1, memory="1GiB", asynchronous=True)


@pytest.mark.parametrize(
    ("cls", "directive", "extra"),
    [
        (jobqueue.SLURMCluster, "#SBATCH", {"queue": "q"}),
        (jobqueue.PBSCluster, "#PBS", {"queue": "q"}),
        (jobqueue.SGECluster, "#$", {"queue": "q"}),
        (jobqueue.LSFCluster, "#BSUB", {"queue": "q"}),
        (jobqueue.OARCluster, "#OAR", {"queue": "q", "memory_per_core_property_name": "mem"}),
        (jobqueue.HTCondorCluster, "RequestMemory", {"disk": "1GiB"}),
    ],
)
def test_job_scripts_run_squall_workers(
    cls: type[jobqueue.JobQueueCluster], directive: str, extra: dict[str, str]
) -> None:
    with cls(cores=4, memory="4GiB", processes=2, scheduler_options=LOOPBACK, **extra) as c:
        script = c.job_script()
        assert directive in script
        assert "squall.cli.dask_worker" in script and "distributed" not in script
        assert c.scheduler_address in script
        assert "--nworkers 2" in script


#: A queue's submit command: runs the script it is given in a session of its own
#: (the "job", its id the session's) and says so as the queue would.
SUBMIT = """#!/bin/sh
cp "$1" "$0.$$.sh"
setsid sh "$0.$$.sh" >"$0.$$.log" 2>&1 </dev/null &
echo "Submitted batch job $!"
"""
#: Its cancel command: ends the job's session.
CANCEL = """#!/bin/sh
kill -TERM -- "-$1"
"""


@pytest.fixture
def fake_queue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    commands = {"sbatch": SUBMIT, "scancel": CANCEL, "qsub": SUBMIT, "qdel": CANCEL}
    for name, text in commands.items():
        path = tmp_path / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    yield tmp_path


@pytest.mark.parametrize("cls", [jobqueue.SLURMCluster, jobqueue.PBSCluster])
def test_jobs_through_the_queue_commands(
    cls: type[jobqueue.JobQueueCluster], fake_queue: Path
) -> None:
    cluster = cls(
        cores=1, memory="1GiB", processes=1, walltime="00:05:00", scheduler_options=LOOPBACK
    )
    try:
        address = cluster.scheduler_address
        cluster.scale(2)
        assert all(job.job_id for job in cluster.workers.values())
        with squall.Client(cluster) as client:
            client.wait_for_workers(2, timeout=30)
            assert client.gather(client.map(lambda x: 2 * x, range(10))) == list(range(0, 20, 2))
            cluster.scale(1)
            assert len(workers(client)) == 1
    finally:
        cluster.close()
    assert list(fake_queue.glob("*.log"))  # the jobs ran through the queue's commands
    eventually(lambda: not job_processes(address))
