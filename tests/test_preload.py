"""Preloads (docs/runtime.md#preload): ``--preload`` of ``squall scheduler`` and ``squall
worker``, ``--preload-nanny``, ``--preload-argv`` for click commands, the config keys,
the in-process servers' arguments, and failures that name the preload."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import dask.config
import pytest
from conftest import cli_scheduler, start_scheduler, start_worker

import squall
from squall.preload import PreloadError, Preloads
from squall.worker.nanny import PRELOAD_FAILED


def recorder(out: Path, tag: str) -> str:
    """A preload writing its server's address to ``out/<tag>-setup`` and, on close,
    ``out/<tag>-teardown`` (the teardown a coroutine, as distributed allows)."""
    return textwrap.dedent(
        f"""
        import pathlib

        OUT = pathlib.Path({str(out)!r})

        def dask_setup(server):
            (OUT / "{tag}-setup").write_text(server.address)

        async def dask_teardown(server):
            (OUT / "{tag}-teardown").write_text(server.address)
        """
    )


CLICK = """
import pathlib

import click

@click.command()
@click.option("--tag", required=True)
@click.option("--count", type=int, default=1)
def dask_setup(server, tag, count):
    pathlib.Path(__file__).with_name("click-setup").write_text(f"{tag} {count} {server.address}")
"""


def on_path(directory: Path) -> dict[str, str]:
    """This environment with ``directory`` first on PYTHONPATH."""
    rest = os.environ.get("PYTHONPATH")
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(directory), *([rest] if rest else [])]),
    }


def stop(proc: subprocess.Popen[str] | subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=20)


def test_scheduler_runs_a_preload_file_on_start_and_close(tmp_path: Path) -> None:
    path = tmp_path / "sched_preload.py"
    path.write_text(recorder(tmp_path, "s"))
    proc, address = start_scheduler("--preload", str(path))
    try:
        # dask_setup ran before the scheduler said it listens.
        assert (tmp_path / "s-setup").read_text() == address
        assert not (tmp_path / "s-teardown").exists()
    finally:
        assert stop(proc) == 0
    assert (tmp_path / "s-teardown").read_text() == address


def test_worker_and_its_nanny_run_preload_modules(tmp_path: Path) -> None:
    (tmp_path / "worker_pre.py").write_text(recorder(tmp_path, "w"))
    (tmp_path / "nanny_pre.py").write_text(recorder(tmp_path, "n"))
    with cli_scheduler() as address, squall.Client(address) as c:
        flags = ["--preload", "worker_pre", "--preload-nanny", "nanny_pre"]
        proc = start_worker(address, *flags, env=on_path(tmp_path))
        try:
            c.wait_for_workers(1, timeout=30)
            [(worker, info)] = c.scheduler_info()["workers"].items()
            assert (tmp_path / "w-setup").read_text() == worker
            assert (tmp_path / "n-setup").read_text() == info["nanny"]
        finally:
            assert stop(proc) == 0
        assert (tmp_path / "w-teardown").read_text() == worker
        assert (tmp_path / "n-teardown").read_text() == info["nanny"]


def test_click_dask_setup_takes_preload_argv(tmp_path: Path) -> None:
    path = tmp_path / "click_pre.py"
    path.write_text(CLICK)
    out = tmp_path / "click-setup"
    proc, address = start_scheduler(
        "--preload", str(path), "--preload-argv", "--tag", "hello", "--count", "3"
    )
    assert stop(proc) == 0
    assert out.read_text() == f"hello 3 {address}"
    # As distributed's programs: arguments the program does not know go to the preload.
    proc = start_worker(
        "tcp://127.0.0.1:1", "--no-nanny", "--death-timeout", "0.1", "--preload", str(path),
        "--tag", "bare",
    )  # fmt: skip
    proc.wait(timeout=30)
    assert out.read_text().startswith("bare 1 tcp://")


def test_bad_preload_arguments_fail_the_program(tmp_path: Path) -> None:
    path = tmp_path / "click_pre.py"
    path.write_text(CLICK)
    proc, address = start_scheduler(
        "--preload", str(path), "--preload-argv", "--nope", stderr=subprocess.PIPE
    )
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1 and address == ""
    assert "click_pre.py" in err and "--nope" in err
    proc, _ = start_scheduler("--nope", stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "unrecognized arguments: --nope" in err


def test_config_keys_name_preloads_and_squalls_wins(tmp_path: Path) -> None:
    for tag in ("dask", "ours"):
        (tmp_path / f"{tag}.py").write_text(recorder(tmp_path, tag))
    env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__PRELOAD": str(tmp_path / "dask.py")}
    proc, address = start_scheduler(env=env)
    assert stop(proc) == 0
    assert (tmp_path / "dask-setup").read_text() == address
    (tmp_path / "dask-setup").unlink()
    env["DASK_SQUALL__SCHEDULER__PRELOAD"] = str(tmp_path / "ours.py")
    proc, address = start_scheduler(env=env)
    assert stop(proc) == 0
    assert (tmp_path / "ours-setup").read_text() == address
    assert not (tmp_path / "dask-setup").exists()


def test_in_process_servers_take_preloads_and_config(tmp_path: Path) -> None:
    for tag in ("s", "w", "nw", "n"):
        (tmp_path / f"{tag}.py").write_text(recorder(tmp_path, tag))
    (tmp_path / "click_pre.py").write_text(CLICK)

    async def main() -> None:
        preload = [str(tmp_path / "s.py"), str(tmp_path / "click_pre.py")]
        argv = [[], ["--tag", "in-process"]]
        async with squall.Scheduler(
            host="127.0.0.1", port=0, dashboard=False, preload=preload, preload_argv=argv
        ) as s:
            assert (tmp_path / "s-setup").read_text() == s.address
            assert (tmp_path / "click-setup").read_text() == f"in-process 1 {s.address}"
            with dask.config.set({"distributed.worker.preload": [str(tmp_path / "w.py")]}):
                async with squall.Worker(s.address, nthreads=1) as w:
                    assert (tmp_path / "w-setup").read_text() == w.address
            assert (tmp_path / "w-teardown").read_text() == w.address
            nanny = squall.Nanny(
                s.address, nthreads=1, preload=str(tmp_path / "nw.py"),
                preload_nanny=[str(tmp_path / "n.py")],
            )  # fmt: skip
            async with nanny as n:
                assert (tmp_path / "nw-setup").read_text() == n.worker_address
                assert (tmp_path / "n-setup").read_text() == n.address
            assert (tmp_path / "n-teardown").read_text() == n.address
        assert (tmp_path / "s-teardown").read_text() == s.address

    asyncio.run(asyncio.wait_for(main(), 90))


def test_local_cluster_gives_its_workers_preloads(tmp_path: Path) -> None:
    (tmp_path / "w.py").write_text(recorder(tmp_path, "w"))
    (tmp_path / "click_pre.py").write_text(CLICK)
    preload = [str(tmp_path / "w.py"), str(tmp_path / "click_pre.py")]
    with (
        squall.LocalCluster(
            n_workers=1, threads_per_worker=1, preload=preload, preload_argv=["--tag", "lc"]
        ) as cluster,
        squall.Client(cluster) as c,
    ):
        [worker] = c.scheduler_info()["workers"]
        assert (tmp_path / "w-setup").read_text() == worker
        assert (tmp_path / "click-setup").read_text() == f"lc 1 {worker}"


@pytest.mark.parametrize("processes", [True, False])
def test_local_cluster_gives_its_scheduler_preloads(tmp_path: Path, processes: bool) -> None:
    (tmp_path / "s.py").write_text(recorder(tmp_path, "s"))
    (tmp_path / "click_pre.py").write_text(CLICK)
    preload = [str(tmp_path / "s.py"), str(tmp_path / "click_pre.py")]
    kwargs = {"preload": preload, "preload_argv": ["--tag", "ls"], "worker_saturation": 2.0}
    with squall.LocalCluster(
        n_workers=1, processes=processes, scheduler_kwargs=kwargs, dashboard_address=None
    ) as cluster:
        address = cluster.scheduler_address
        assert (tmp_path / "s-setup").read_text() == address
        assert (tmp_path / "click-setup").read_text() == f"ls 1 {address}"
    assert (tmp_path / "s-teardown").read_text() == address


BROKEN = "raise ZeroDivisionError('the preload is broken')\n"


def test_a_broken_preload_fails_the_server_naming_it(tmp_path: Path) -> None:
    (tmp_path / "broken_pre.py").write_text(BROKEN)
    proc, _ = start_scheduler("--preload", str(tmp_path / "broken_pre.py"), stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "preload" in err and "broken_pre.py" in err and "the preload is broken" in err
    env = on_path(tmp_path)
    with cli_scheduler() as address:
        # Under a nanny the worker fails once: the nanny does not start it again.
        for flags in (["--preload", "broken_pre"], ["--no-nanny", "--preload", "broken_pre"]):
            worker = start_worker(address, *flags, env=env, stderr=subprocess.PIPE)
            _, out = worker.communicate(timeout=30)
            assert worker.returncode == PRELOAD_FAILED
            assert b"preload 'broken_pre' failed to import: ZeroDivisionError" in out
        worker = start_worker(
            address, "--preload-nanny", "broken_pre", env=env, stderr=subprocess.PIPE
        )
        _, out = worker.communicate(timeout=30)
        assert worker.returncode == 1 and b"broken_pre" in out
    with pytest.raises(PreloadError, match="broken_pre"):
        squall.Scheduler(preload=str(tmp_path / "broken_pre.py"))


def test_urls_are_refused_and_text_modules_run() -> None:
    with pytest.raises(PreloadError, match="does not download"):
        Preloads(["https://example.com/setup.py"])
    seen: list[object] = []
    preloads = Preloads("import sys\ndef dask_setup(server):\n    server.append('set up')\n")
    asyncio.run(preloads.setup(seen))
    assert seen == ["set up"]
    with pytest.raises(PreloadError, match="no preload's dask_setup is a click command"):
        Preloads(["sys"], ["--x"])
    assert sys.modules["sys"] is Preloads(["sys"]).preloads[0].module
