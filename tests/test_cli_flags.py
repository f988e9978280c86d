"""``squall scheduler`` and ``squall worker`` take the flags of ``dask scheduler`` and
``dask worker`` (docs/deploy.md#command-lines)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import tornado.web
from conftest import start_scheduler

import squall
from squall.client.scheduler_file import wait_for_scheduler_file
from squall.http.server import HttpServer
from squall.scheduler import launcher as scheduler_launcher
from squall.security import Security
from squall.worker import launcher as worker_launcher
from squall.worker.worker import Worker

LOOPBACK = ("--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0")


def dask_flags(program: str) -> set[str]:
    """The flags the installed ``dask PROGRAM --help`` lists."""
    out = subprocess.run(
        [sys.executable, "-m", f"distributed.cli.dask_{program}", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = [line for line in out.splitlines() if re.match(r"\s+-", line)]
    return {flag for line in lines for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line)}


@pytest.mark.parametrize(
    "program, parser",
    [("scheduler", scheduler_launcher.parser), ("worker", worker_launcher.parser)],
)
def test_every_flag_of_dask_is_taken(program: str, parser: object) -> None:
    ours = set(parser()._option_string_actions)  # type: ignore[operator]
    theirs = dask_flags(program)
    assert len(theirs) > 20
    assert theirs - ours == set()


def run(*cmd: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "squall.cli", *cmd]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)


def test_version_has_distributed_form() -> None:
    for program in ("scheduler", "worker"):
        done = run(program, "--version")
        assert done.returncode == 0
        assert done.stdout.strip() == f"squall, version {squall.__version__}"


@pytest.mark.parametrize(
    "module", ["squall.scheduler.launcher", "squall.worker.launcher", "squall.cli.dask_spec"]
)
def test_a_sigterm_while_the_process_exits_keeps_the_servers_exit_code(module: str) -> None:
    """A deployer may stop a server just as it closes on its own (a retired worker's
    nanny): the exit code must stay the server's, not -SIGTERM. The SIGTERM here lands
    at exit, after the command has returned."""
    code = (
        "import atexit, os, signal, sys\n"
        f"from {module} import main\n"
        "atexit.register(lambda: os.kill(os.getpid(), signal.SIGTERM))\n"
        "sys.exit(main(['--version']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "cmd, named",
    [
        (["scheduler", "--protocol", "ucx"], "--protocol ucx"),
        (["scheduler", "--jupyter"], "--jupyter"),
        (["scheduler", "--host", "ucx://127.0.0.1"], "--host ucx://"),
        (["worker", "tcp://127.0.0.1:1", "--protocol", "ws"], "--protocol ws"),
        (["worker", "tcp://x:1", "--worker-class", "my.Worker"], "--worker-class my.Worker"),
        (["worker", "tcp://x:1", "--worker-port", "9:x"], "--worker-port"),
        (["worker", "tcp://x:1", "--listen-address", "tcp://h:0", "--host", "h"], "--listen"),
        (["worker", "x:1", "--nworkers", "3", "--worker-port", "4000:4001"], "--worker-port"),
        (["worker"], "DASK_SCHEDULER_ADDRESS"),
    ],
)
def test_what_squall_cannot_honour_fails_naming_the_flag(cmd: list[str], named: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}
    done = run(*cmd, env=env)
    assert done.returncode != 0
    assert named in done.stderr


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path


def terminate(proc: subprocess.Popen[str] | subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=20)


def test_scheduler_file_and_pid_file_round_trip(tmp: Path) -> None:
    """A worker started before the scheduler waits for its file; a client reads it; the
    pid files hold the processes' pids and go when they exit."""
    sfile, spid, wpid = tmp / "scheduler.json", tmp / "scheduler.pid", tmp / "worker.pid"
    cmd = [sys.executable, "-m", "squall.cli.dask_worker", "--scheduler-file", str(sfile),
           "--no-nanny", "--nthreads", "1", "--host", "127.0.0.1", "--death-timeout", "30",
           "--pid-file", str(wpid), "--no-dashboard"]  # fmt: skip
    worker = subprocess.Popen(cmd)
    sched, address = start_scheduler(
        *LOOPBACK, "--scheduler-file", str(sfile), "--pid-file", str(spid)
    )
    try:
        assert json.loads(sfile.read_text())["address"] == address
        assert spid.read_text() == str(sched.pid)
        with squall.Client(scheduler_file=str(sfile), timeout=10) as c:
            c.wait_for_workers(1, timeout=20)
            assert c.submit(lambda x: x + 1, 1).result(timeout=20) == 2
        assert wpid.read_text() == str(worker.pid)
        assert terminate(worker) == 0
        assert not wpid.exists()
    finally:
        worker.kill()
        assert terminate(sched) == 0
    assert not spid.exists() and not sfile.exists()


def test_waiting_for_a_scheduler_file_is_bounded(tmp: Path) -> None:
    with pytest.raises(squall.TimeoutError, match=r"never\.json"):
        wait_for_scheduler_file(tmp / "never.json", 0.3)
    with pytest.raises(squall.TimeoutError, match=r"never\.json"):
        squall.Client(scheduler_file=str(tmp / "never.json"), timeout=0.3)
    done = run("worker", "--scheduler-file", str(tmp / "never.json"), "--death-timeout", "0.5")
    assert done.returncode == 1 and "never.json" in done.stderr


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    proc, address = start_scheduler(*LOOPBACK)
    try:
        yield address
    finally:
        assert terminate(proc) == 0


def joined(address: str, n: int) -> list[str]:
    with squall.Client(address, timeout=10) as c:
        c.wait_for_workers(n, timeout=30)
        return list(c.scheduler_info()["workers"])


def test_kubernetes_operator_command_with_dask_scheduler_address(scheduler: str) -> None:
    """The operator's worker command: no address but DASK_SCHEDULER_ADDRESS."""
    env = {**os.environ, "DASK_SCHEDULER_ADDRESS": scheduler}
    worker = subprocess.Popen(
        [sys.executable, "-m", "squall.cli", "worker", "--name", "k8s-0", "--dashboard",
         "--dashboard-address", "127.0.0.1:0", "--host", "127.0.0.1", "--no-nanny"],
        env=env,
    )  # fmt: skip
    try:
        with squall.Client(scheduler, timeout=10) as c:
            c.wait_for_workers(1, timeout=30)
            names = [w["name"] for w in c.scheduler_info()["workers"].values()]
            assert "k8s-0" in names
    finally:
        assert terminate(worker) == 0


def test_jobqueue_command(scheduler: str) -> None:
    """The command dask-jobqueue writes into job scripts, at squall's module path."""
    cmd = [sys.executable, "-m", "squall.cli.dask_worker", scheduler, "--name", "job-0",
           "--nthreads", "1", "--memory-limit", "1GiB", "--nworkers", "1", "--nanny",
           "--death-timeout", "60", "--protocol", "tcp", "--host", "127.0.0.1",
           "--nanny-port", "0", "--no-dashboard"]  # fmt: skip
    worker = subprocess.Popen(cmd)
    try:
        assert any(a.startswith("tcp://127.0.0.1:") for a in joined(scheduler, 1))
    finally:
        assert terminate(worker) == 0


def test_worker_port_range_takes_the_first_free_port(scheduler: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        first = taken.getsockname()[1]
        if first > 65000:
            pytest.skip("no room for a range above the ephemeral port")
        worker = subprocess.Popen(
            [sys.executable, "-m", "squall.cli", "worker", scheduler, "--no-nanny",
             "--host", "127.0.0.1", "--worker-port", f"{first}:{first + 20}", "--no-dashboard"]
        )  # fmt: skip
        try:
            addresses = joined(scheduler, 1)
            ports = [int(a.rsplit(":", 1)[1]) for a in addresses]
            assert any(first < p <= first + 20 for p in ports)
            assert first not in ports
        finally:
            assert terminate(worker) == 0


def test_nworkers_share_a_port_range(scheduler: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        first = probe.getsockname()[1] + 1
    if first > 65000:
        pytest.skip("no room for a range above the ephemeral port")
    cmd = [sys.executable, "-m", "squall.cli", "worker", scheduler, "--nworkers", "2",
           "--no-nanny", "--host", "127.0.0.1", "--worker-port", f"{first}:{first + 19}",
           "--no-dashboard", "--nthreads", "1"]  # fmt: skip
    workers = subprocess.Popen(cmd)
    try:
        ports = sorted(int(a.rsplit(":", 1)[1]) for a in joined(scheduler, 2))
        assert first <= ports[0] < first + 10 <= ports[1] < first + 20
    finally:
        assert terminate(workers) == 0


def test_port_ranges_are_shared_out_between_processes() -> None:
    share = worker_launcher.share_ports
    assert [share((4000, 4009), 2, i) for i in range(2)] == [(4000, 4004), (4005, 4009)]
    assert [share((4000, 4002), 2, i) for i in range(2)] == [(4000, 4000), (4001, 4002)]
    assert share((0, 0), 3, 2) == (0, 0) and share(None, 3, 1) is None


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.url, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, url, ""


def test_dashboard_prefix_serves_the_routes_under_it() -> None:
    proc, _ = start_scheduler(*LOOPBACK, "--dashboard-prefix", "foo", stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        line = next(line for line in proc.stderr if "dashboard at:" in line)
        status_url = line.split()[-1]
        assert status_url.endswith("/foo/status")
        base = status_url.removesuffix("/status")
        assert get(base + "/health")[:3:2] == (200, "ok")
        assert get(base + "/status")[0] == 200
        assert get(base + "/statics/dashboard.js")[0] == 200
        assert get(base)[1] == status_url  # redirected
        assert get(base.removesuffix("/foo") + "/health")[0] == 404
    finally:
        terminate(proc)


def test_idle_timeout_closes_the_scheduler() -> None:
    proc, _ = start_scheduler(*LOOPBACK, "--idle-timeout", "0.5", stderr=subprocess.PIPE)
    assert proc.wait(timeout=20) == 0
    assert proc.stderr is not None
    assert "closing after being idle" in proc.stderr.read()


class _RemoteIp(tornado.web.RequestHandler):
    def get(self) -> None:
        self.write(self.request.remote_ip or "")


@pytest.mark.parametrize("xheaders", [False, True])
def test_use_xheaders_trusts_a_proxy_headers(xheaders: bool) -> None:
    async def main() -> str:
        server = HttpServer([("/ip", _RemoteIp, {})], xheaders=xheaders)
        await server.start("127.0.0.1", 0)
        try:
            request = urllib.request.Request(server.url("/ip"), headers={"X-Real-Ip": "10.1.2.3"})
            return await asyncio.to_thread(lambda: urllib.request.urlopen(request).read().decode())
        finally:
            await server.close()

    assert asyncio.run(main()) == ("10.1.2.3" if xheaders else "127.0.0.1")


def test_scheduler_sni_is_sent_on_the_workers_tls_connection() -> None:
    """``--scheduler-sni``: the worker asks the scheduler's TLS for that server name."""
    sec = Security.temporary()
    asked: list[str | None] = []
    sec.ssl_context(server=True).sni_callback = lambda _s, name, _c: asked.append(name)

    async def main() -> None:
        async with squall.Scheduler(
            host="127.0.0.1", protocol="tls", security=sec, dashboard=False
        ) as s:
            worker = Worker(
                s.address,
                address="tls://127.0.0.1:0",
                security=sec,
                scheduler_sni="sched.example",
                dashboard_address=None,
            )
            await worker.start()
            await worker.close()

    asyncio.run(main())
    assert "sched.example" in asked
