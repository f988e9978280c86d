"""Nanny plugins on multi-process clusters with nannies
(docs/runtime.md#worker-and-nanny-plugins), after distributed's test_nanny_plugins.py:
set up on every nanny and those that join, torn down when removed; ``restart = True``
restarts the workers; ``Environ`` and ``UploadDirectory`` reach the tasks."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import pytest
from conftest import eventually

import squall
from squall import Client, LocalCluster

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster:
        yield cluster


class NannyMarker(squall.NannyPlugin):
    """Writes ``<directory>/<event>.<nanny pid>`` at setup and teardown."""

    name = "nanny-marker"

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def setup(self, nanny: Any) -> None:
        assert nanny.address.startswith("tcp://")
        (self.directory / f"setup.{os.getpid()}").touch()

    def teardown(self, nanny: Any) -> None:
        (self.directory / f"teardown.{os.getpid()}").touch()


def pids(directory: Path, event: str) -> set[str]:
    return {p.name.split(".")[1] for p in directory.glob(f"{event}.*")}


def test_setup_on_current_and_future_nannies_teardown_on_unregister(tmp_path: Path) -> None:
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as c,
    ):
        worker_pid = set(c.run(os.getpid).values())
        answer = c.register_plugin(NannyMarker(tmp_path))
        assert [r["status"] for r in answer.values()] == ["OK"]
        nannies = pids(tmp_path, "setup")
        assert len(nannies) == 1 and nannies != {str(p) for p in worker_pid}
        cluster.scale(2)
        c.wait_for_workers(2, timeout=30)
        eventually(lambda: len(pids(tmp_path, "setup")) == 2, timeout=30)
        assert set(c.run(os.getpid).values()) >= worker_pid  # no restart asked for
        c.unregister_worker_plugin("nanny-marker", nanny=True)
        assert pids(tmp_path, "teardown") == pids(tmp_path, "setup")


class Restarting(squall.NannyPlugin):
    name = "restarting"
    restart = True


def test_a_plugin_with_restart_restarts_the_workers(cluster: LocalCluster) -> None:
    with Client(cluster) as c:
        before = set(c.run(os.getpid).values())
        c.register_plugin(Restarting())
        c.wait_for_workers(1, timeout=30)
        eventually(lambda: set(c.run(os.getpid).values()).isdisjoint(before), timeout=30)
        c.unregister_worker_plugin("restarting", nanny=True)


def getenv(name: str) -> str | None:
    # Not os.environ.get itself: it would travel with this process's os.environ.
    return os.environ.get(name)


def test_environ_is_seen_by_tasks(cluster: LocalCluster) -> None:
    with Client(cluster) as c:
        c.register_plugin(squall.Environ({"SQUALL_TEST_ENVIRON": 42}))
        found = c.submit(getenv, "SQUALL_TEST_ENVIRON", pure=False).result(timeout=30)
        assert found == "42"


def test_upload_directory_to_the_workers(cluster: LocalCluster, tmp_path: Path) -> None:
    package = tmp_path / "shipped_dir"
    (package / "tests").mkdir(parents=True)
    (package / "shipped_module.py").write_text("VALUE = 'from the directory'\n")
    (package / "tests" / "left_out.py").write_text("")
    plugin = squall.UploadDirectory(str(package), restart_workers=True, update_path=True)

    with Client(cluster) as c:
        # A scheduler plugin: started on the scheduler, which registers its nanny plugin.
        c.register_plugin(plugin)
        assert plugin.name in c.run_on_scheduler(
            lambda dask_scheduler: dask_scheduler.nanny_plugins
        )

        def imported() -> tuple[str, bool]:
            import shipped_module  # type: ignore[import-not-found]

            here = Path(shipped_module.__file__).parent
            return shipped_module.VALUE, (here / "tests").exists()

        assert c.submit(imported, pure=False).result(timeout=30) == ("from the directory", False)
        c.unregister_worker_plugin(plugin.name, nanny=True)
