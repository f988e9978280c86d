"""Configuration: squall.yaml defaults, overridden by user YAML, environment variables,
dask.config.set, keyword arguments and command-line flags."""

from __future__ import annotations

import asyncio
import math
import os
import pathlib
import re
import socket
import struct
import subprocess
import sys
import time
from typing import Any

import cloudpickle
import dask.config
import pytest
from conftest import submit_map

from squall import Client, _core, config
from squall.deploy.local import LocalCluster, scheduler_info
from squall.protocol import comm
from squall.scheduler.server import SchedulerServer
from squall.worker.worker import Worker

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def nap(i: int) -> int:
    time.sleep(0.5)
    return i


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, **extra}


def cli(*args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    """``squall ARGS`` in a child process with these environment variables."""
    return subprocess.run(
        [sys.executable, "-m", "squall.cli", *args],
        env=env(**extra_env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def n_queued(server: SchedulerServer, n_tasks: int = 10) -> int:
    """Queued tasks after a map of ``n_tasks`` onto one single-threaded worker."""
    core = server.core
    core.add_worker("tcp://127.0.0.1:1", 1, now=0.0)
    submit_map(core, core.client("c"), n_tasks, now=0.0)
    return core.n_queued


def test_defaults() -> None:
    assert config.get("scheduler.port") == 8786
    assert config.port("scheduler.port") == 8786
    assert config.integer("worker.nthreads") == 1
    assert config.seconds("comm.batch-interval.scheduler") == pytest.approx(0.0002)
    assert config.seconds("comm.batch-interval.client") == pytest.approx(0.002)
    assert config.seconds("comm.timeouts.connect") == 10
    assert config.nbytes("comm.max-frame-bytes") == 1 << 30
    assert config.log_level() == "INFO"
    # squall.yaml, parsed, is what the core holds by default: one fact, checked here.
    defaults = {name: default for name, _, _, default in _core.core_settings()}
    assert config.core_config() == defaults
    assert set(config.get("scheduler")) - config._SERVER_KEYS == set(defaults)


def test_core_defaults_are_dasks() -> None:
    pytest.importorskip("distributed")
    dask_scheduler = dask.config.get("distributed.scheduler")
    ours = config.core_config()
    theirs = config.core_config(
        {
            **{k: dask_scheduler[k] for k in ours if k in dask_scheduler},
            "transition-log-length": dask.config.get("distributed.admin.low-level-log-length"),
            "erred-tasks-max-history": dask.config.get(
                "distributed.diagnostics.erred-tasks.max-history"
            ),
            "memory-terminate": bool(dask.config.get("distributed.worker.memory.terminate")),
        }
    )
    assert ours == theirs


def test_dask_config_set_and_keywords_reach_the_scheduler_core() -> None:
    assert n_queued(SchedulerServer("tcp://127.0.0.1:0")) == 8  # ceil(1.1 * 1) = 2 run
    with dask.config.set({"squall.scheduler.worker-saturation": "inf"}):
        assert n_queued(SchedulerServer("tcp://127.0.0.1:0")) == 0
        # Keyword arguments beat the configuration.
        server = SchedulerServer("tcp://127.0.0.1:0", {"worker_saturation": 3.0})
        assert n_queued(server) == 7
    # Every interface by default, as distributed's (docs/deploy.md#across-hosts).
    assert SchedulerServer().address == "tcp://0.0.0.0:8786"
    with dask.config.set({"squall.scheduler.host": "::1", "squall.scheduler.port": 9999}):
        assert SchedulerServer().address == "tcp://[::1]:9999"


def test_environment_and_user_yaml(tmp_path: pathlib.Path) -> None:
    (tmp_path / "mine.yaml").write_text("squall:\n  comm:\n    timeouts:\n      connect: 3s\n")
    code = (
        "from squall import config\n"
        "print(config.core_config()['worker-saturation'], config.core_config()['worker-ttl'],"
        " config.seconds('comm.timeouts.connect'), config.get('comm.batch-interval.client'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env(
            DASK_CONFIG=str(tmp_path),
            DASK_SQUALL__SCHEDULER__WORKER_SATURATION="inf",
            DASK_SQUALL__SCHEDULER__WORKER_TTL="null",
            DASK_SQUALL__COMM__BATCH_INTERVAL__CLIENT="5ms",
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.split() == ["inf", "None", "3.0", "5ms"]


def test_comm_limits_and_timeouts_come_from_config() -> None:
    async def main() -> None:
        seen: list[BaseException] = []

        async def handler(c: comm.Comm) -> None:
            try:
                await c.read()
            except comm.CommError as e:
                seen.append(e)

        with dask.config.set({"squall.comm.max-frame-bytes": "1kiB"}):
            listener = await comm.listen("tcp://127.0.0.1:0", handler, roles=frozenset({"client"}))
            c = await comm.connect(listener.address, role="client")
            c._stream.write(struct.pack("<II", 10, 2048))  # a frame over the reader's limit
            for _ in range(200):
                if seen:
                    break
                await asyncio.sleep(0.01)
            assert "exceeds the 1024-byte limit" in str(seen[0])
            await c.close()
            await listener.close()

        # A listener that never answers the handshake: connect gives up after the
        # configured timeout.
        silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = silent.sockets[0].getsockname()[1]
        with dask.config.set({"squall.comm.timeouts.connect": "200ms"}):
            start = time.monotonic()
            with pytest.raises(comm.HandshakeError):
                await comm.connect(f"tcp://127.0.0.1:{port}", role="client")
            assert time.monotonic() - start < 5
        silent.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_cli_takes_port_nthreads_and_log_level_from_config(tmp_path: pathlib.Path) -> None:
    port = free_port()
    (tmp_path / "squall.yaml").write_text(
        f"squall:\n  scheduler:\n    host: 127.0.0.1\n    port: {port}\n"
        "  logging:\n    level: warning\n"
    )
    sched = subprocess.Popen(
        [sys.executable, "-m", "squall.cli", "scheduler"],
        env=env(DASK_CONFIG=str(tmp_path)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert sched.stdout is not None
        address = sched.stdout.readline().rsplit(" ", 1)[-1].strip()
        assert address == f"tcp://127.0.0.1:{port}"
        worker = subprocess.Popen(
            [sys.executable, "-m", "squall.cli", "worker", address],
            env=env(DASK_SQUALL__WORKER__NTHREADS="3"),
        )
        try:
            deadline = time.monotonic() + 30
            while not (workers := asyncio.run(scheduler_info(address))["workers"]):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert [w["nthreads"] for w in workers] == [3]
        finally:
            worker.terminate()
            worker.wait(timeout=20)
    finally:
        sched.terminate()
        sched.wait(timeout=20)
        assert sched.stderr is not None
        # squall.logging.level: warning silences the scheduler's INFO lines.
        assert "scheduler listening" not in sched.stderr.read()
        sched.stderr.close()
        sched.stdout.close()


def test_cli_flags_beat_config() -> None:
    out = cli("scheduler", "--port", "70000", DASK_SQUALL__SCHEDULER__PORT="1")
    assert out.returncode == 1 and ":70000" in out.stderr


@pytest.mark.parametrize("how", ["dask.config.set", "scheduler_kwargs"])
def test_local_cluster_processes_get_the_config(how: str) -> None:
    setting = {"squall.scheduler.worker-saturation": "inf"} if how == "dask.config.set" else {}
    overrides = {"worker_saturation": "inf"} if how == "scheduler_kwargs" else None
    with (
        dask.config.set(setting),
        LocalCluster(1, 1, scheduler_kwargs=overrides) as cluster,
        Client(cluster) as c,
    ):
        futures = c.map(nap, range(10))
        deadline = time.monotonic() + 30
        # Without queuing all ten go to the worker at once (with it, two at a time).
        while cluster.scheduler_info()["workers"][0]["processing"] < 10:
            assert time.monotonic() < deadline, cluster.scheduler_info()
            time.sleep(0.02)
        del futures


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("scheduler.worker-saturation", "lots", "expected a number or 'inf', got 'lots'"),
        ("scheduler.worker-saturation", 0, "must be > 0 or 'inf', got 0"),
        ("scheduler.worker-ttl", "5 parsecs", "expected a duration like '500ms'"),
        ("scheduler.work-stealing", "maybe", "expected true or false, got 'maybe'"),
        ("scheduler.allowed-failures", -1, "expected an integer >= 0, got -1"),
        ("scheduler.default-data-size", "1 bushel", "expected a size like '1kiB'"),
        ("scheduler.worker-saturaton", 2, "unknown configuration key"),
        ("scheduler.port", 70000, "expected a port in 0..65535"),
    ],
)
def test_bad_values_are_named(key: str, value: Any, message: str) -> None:
    with (
        dask.config.set({f"squall.{key}": value}),
        pytest.raises(config.ConfigError, match=re.escape(f"squall.{key}")) as e,
    ):
        SchedulerServer()
    assert message in str(e.value)


def test_bad_keywords_and_cli_values() -> None:
    with pytest.raises(config.ConfigError, match="unknown scheduler option 'worker_saturaton'"):
        SchedulerServer("tcp://127.0.0.1:0", {"worker_saturaton": 2})
    with pytest.raises(config.ConfigError, match="worker-saturation"):
        LocalCluster(1, 1, scheduler_kwargs={"worker_saturation": -1})
    with (
        dask.config.set({"squall.worker.nthreads": 0}),
        pytest.raises(
            config.ConfigError, match=r"squall\.worker\.nthreads: expected an integer >= 1"
        ),
    ):
        Worker("tcp://127.0.0.1:8786")
    bad = cli("scheduler", "--port", "0", DASK_SQUALL__SCHEDULER__UNKNOWN_TASK_DURATION="soon")
    assert bad.returncode == 1
    assert "squall.scheduler.unknown-task-duration" in bad.stderr and "'soon'" in bad.stderr
    bad = cli("worker", "tcp://127.0.0.1:1", "--log-level", "loud")
    assert bad.returncode == 1 and "log level: expected one of" in bad.stderr
    assert math.isinf(config.core_config({"worker-saturation": float("inf")})["worker-saturation"])
