"""``SSHCluster`` against a real ``sshd`` the tests start on loopback, with a generated
host key and client key; and ``python -m squall.cli.dask_spec``, which it runs."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask.config
import psutil
import pytest

import squall

SSHD = shutil.which("sshd") or next(
    (p for p in ("/usr/sbin/sshd", "/usr/local/sbin/sshd") if os.path.exists(p)), None
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def remote_processes(sshd: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """The Python processes running under the test's sshd (its sessions' processes)."""
    found = []
    for child in psutil.Process(sshd.pid).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):  # it ended meanwhile
            if "python" in child.name() or "python" in " ".join(child.cmdline()):
                found.append(child)
    return found


def wait_until_none(sshd: subprocess.Popen[bytes], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while remote_processes(sshd) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not remote_processes(sshd)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, Any]]]:
    """An sshd on 127.0.0.1 accepting a generated key for this user; the
    ``connect_options`` to reach it and a ``remote_python`` that runs this Python with
    this test's PYTHONPATH (a remote session does not inherit the test's environment)."""
    if SSHD is None:
        pytest.skip("no sshd (apt-get install openssh-server)")
    asyncssh = pytest.importorskip("asyncssh", reason="SSHCluster needs asyncssh")
    d = tmp_path_factory.mktemp("sshd")
    host_key, client_key = (asyncssh.generate_private_key("ssh-ed25519") for _ in range(2))
    host_key.write_private_key(str(d / "host_key"))
    client_key.write_private_key(str(d / "client_key"))
    client_key.write_public_key(str(d / "authorized_keys"))
    os.chmod(d / "host_key", 0o600)
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", exist_ok=True)  # its privilege separation directory
    port = free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPidFile {d / 'sshd.pid'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nLogLevel FATAL\n"
    )
    python = d / "python"
    pythonpath = os.environ.get("PYTHONPATH")
    env = f"PYTHONPATH={pythonpath} " if pythonpath else ""
    python.write_text(f'#!/bin/sh\nexec env {env}{sys.executable} "$@"\n')
    python.chmod(0o755)
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")])
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.skip(f"sshd did not start (exit code {proc.poll()})")
                time.sleep(0.05)
        yield (
            proc,
            {
                "connect_options": {
                    "port": port,
                    "known_hosts": None,
                    "client_keys": [str(d / "client_key")],
                    "username": getpass.getuser(),
                },
                "remote_python": str(python),
            },
        )
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def sshd(
    server: tuple[subprocess.Popen[bytes], dict[str, Any]],
) -> Iterator[dict[str, Any]]:
    """The SSHCluster arguments to reach the sshd; no process is left under it after."""
    proc, options = server
    yield options
    wait_until_none(proc)


def test_cluster_computes_and_stops_every_process(
    server: tuple[subprocess.Popen[bytes], dict[str, Any]], sshd: dict[str, Any]
) -> None:
    import dask.array as da

    sshd_process, _ = server
    with squall.SSHCluster(
        ["127.0.0.1", "127.0.0.1", "localhost"],
        worker_options={"nthreads": 2},
        scheduler_options={"port": 0, "dashboard_address": ":0"},
        **sshd,
    ) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        assert cluster.dashboard_link is not None
        # the scheduler's process, and each worker host's with its nanny's worker
        assert len(remote_processes(sshd_process)) == 5
        with squall.Client(cluster) as client:
            assert client.cluster is cluster
            assert len(client.scheduler_info()["workers"]) == 2
            assert client.gather(client.map(lambda x: x + 1, range(50))) == list(range(1, 51))
            x = da.ones((200, 200), chunks=(50, 50))
            assert float((x + x.T).sum().compute()) == 80_000.0
        logs = cluster.get_logs()
        assert "Scheduler at:" in logs[f"Cluster {cluster.name}"]
        assert "Scheduler at:" in logs["Scheduler"]
        assert len(logs) == 4  # the cluster, the scheduler and two workers
    assert cluster.status == squall.Status.closed
    wait_until_none(sshd_process)


def test_remote_processes_end_with_the_clusters_process(
    server: tuple[subprocess.Popen[bytes], dict[str, Any]], sshd: dict[str, Any]
) -> None:
    """A cluster whose process is SIGKILLed leaves nothing running on its hosts: the
    dropped connections close the remote processes' stdin."""
    code = (
        "import json, sys, time, squall\n"
        "squall.SSHCluster(['127.0.0.1', '127.0.0.1'], **json.loads(sys.argv[1]))\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(sshd)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline() == "up\n"
        assert len(remote_processes(server[0])) == 3  # scheduler, nanny, worker
    finally:
        owner.kill()
        owner.wait()
    wait_until_none(server[0])


def test_a_remote_process_that_dies_is_reported(
    server: tuple[subprocess.Popen[bytes], dict[str, Any]],
    sshd: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    with squall.SSHCluster(["127.0.0.1", "127.0.0.1"], **sshd):
        commands = {p: " ".join(p.cmdline()) for p in remote_processes(server[0])}
        [spec] = [p for p, c in commands.items() if "dask_spec" in c and "Nanny" in c]
        spec.kill()
        deadline = time.monotonic() + 10
        while "the worker on 127.0.0.1 exited" not in caplog.text:
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.05)
        assert "exit code" in caplog.text or "exit status" in caplog.text


def test_asynchronous_cluster(sshd: dict[str, Any]) -> None:
    async def main() -> None:
        async with squall.SSHCluster(
            ["127.0.0.1", "127.0.0.1"],
            worker_options={"n_workers": 2, "nthreads": 1},
            worker_class="distributed.Worker",
            scheduler_options={"dashboard": False},
            asynchronous=True,
            **sshd,
        ) as cluster:
            assert cluster.dashboard_link is None
            async with squall.Client(cluster, asynchronous=True) as client:
                assert len((await client.scheduler_info())["workers"]) == 2
                assert await client.submit(sum, [1, 2, 3]) == 6
            logs = await cluster.get_logs(cluster=False, scheduler=False)
            assert len(logs) == 2

    asyncio.run(main())


def test_unreachable_host_is_a_bounded_error(sshd: dict[str, Any]) -> None:
    options = {**sshd["connect_options"], "port": free_port()}  # nothing listens there
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=rf"127.0.0.1:{options['port']}"):
        squall.SSHCluster(["127.0.0.1", "127.0.0.1"], connect_options=options)
    assert time.monotonic() - start < 10
    # A port that accepts but never speaks SSH: an error after the connect timeout.
    with socket.socket() as silent, dask.config.set({"squall.comm.timeouts.connect": "1s"}):
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        options["port"] = silent.getsockname()[1]
        start = time.monotonic()
        with pytest.raises(ConnectionError, match=rf"127.0.0.1:{options['port']}"):
            squall.SSHCluster(["127.0.0.1", "127.0.0.1"], connect_options=options)
        assert time.monotonic() - start < 5


def test_failing_remote_python_reports_its_message(sshd: dict[str, Any]) -> None:
    with pytest.raises(RuntimeError, match=r"the worker on 127\.0\.0\.1 exited") as e:
        squall.SSHCluster(
            ["127.0.0.1", "127.0.0.1"],
            worker_options={"no_such_option": 1},
            **sshd,
        )
    assert "no_such_option" in str(e.value)
    with pytest.raises(RuntimeError, match="No such file"):
        squall.SSHCluster(
            ["127.0.0.1", "127.0.0.1"],
            connect_options=sshd["connect_options"],
            remote_python="/nonexistent/python",
        )
    # (the scheduler started first is stopped: the fixture checks it)


def test_dask_spec_refuses_classes_it_cannot_run() -> None:
    run = [sys.executable, "-m", "squall.cli.dask_spec", "--spec"]
    for cls, message in [
        ("os.path", "is not a squall server class"),
        ("dask_cuda.CUDAWorker", "cannot import the server class"),
    ]:
        spec = f'{{"cls": "{cls}", "opts": {{}}}}'
        done = subprocess.run([*run, spec], capture_output=True, text=True, timeout=30)
        assert done.returncode == 1
        assert message in done.stderr


def test_ssh_cluster_arguments() -> None:
    with pytest.raises(ValueError, match="non empty"):
        squall.SSHCluster([])
    with pytest.raises(RuntimeError, match="connect_options given as a list needs one entry"):
        squall.SSHCluster(["a", "b"], connect_options=[{}])
    with pytest.raises(TypeError, match="does not support nprocs"):
        squall.SSHCluster(["a", "b"], nprocs=2)


def test_dask_spec_file_runs_until_a_clients_shutdown(tmp_path: Path) -> None:
    """A YAML spec file; the scheduler runs until a client's ``shutdown()``."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "cls: dask.distributed.Scheduler\n"
        "opts:\n  host: 127.0.0.1\n  port: 0\n  dashboard: false\n"
    )
    command = [sys.executable, "-m", "squall.cli.dask_spec", "--spec-file", str(spec)]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "Scheduler at:" in line, line
        with squall.Client(line.split("Scheduler at:")[1].strip()) as client:
            client.shutdown()
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        proc.wait()
