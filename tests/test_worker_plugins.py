"""Worker plugins on multi-process clusters (docs/runtime.md#worker-and-nanny-plugins),
after distributed's test_worker_plugins.py: set up on the workers there are and on
those that join, torn down when removed and when a worker closes, kept under a taken
name when idempotent, a failing setup raised on the client, the ``transition`` hook
fed the tasks' states."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import distributed
import pytest
from conftest import eventually

import squall
from squall import Client, LocalCluster
from squall.diagnostics.plugin import plugin_kind, plugin_name

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster:
        yield cluster


class Marker(squall.WorkerPlugin):
    """Writes ``<directory>/<name>.<event>.<pid>`` at setup and teardown."""

    def __init__(self, directory: Path, name: str = "marker", value: int = 0) -> None:
        self.directory = directory
        self.name = name
        self.value = value

    def _mark(self, event: str) -> None:
        (self.directory / f"{self.name}.{event}.{os.getpid()}").touch()

    def setup(self, worker: Any) -> None:
        assert worker.address.startswith("tcp://")
        self._mark("setup")

    def teardown(self, worker: Any) -> None:
        self._mark("teardown")


def marks(directory: Path, name: str, event: str) -> set[str]:
    return {p.name.rsplit(".", 1)[1] for p in directory.glob(f"{name}.{event}.*")}


def worker_pids(c: Client) -> set[str]:
    return {str(pid) for pid in c.run(os.getpid).values()}


def plugin_values(c: Client, name: str) -> list[Any]:
    def value(dask_worker: Any) -> Any:
        plugin = dask_worker.plugins.get(name)
        return None if plugin is None else plugin.value

    return list(c.run(value).values())


def test_kind_and_name_of_squall_and_distributed_plugins() -> None:
    class Both(squall.WorkerPlugin, squall.NannyPlugin):
        pass

    class Theirs(distributed.WorkerPlugin):
        name = "theirs"

    assert plugin_kind(squall.WorkerPlugin()) == "worker"
    assert plugin_kind(distributed.NannyPlugin()) == "nanny"
    assert plugin_kind(distributed.SchedulerPlugin()) == "scheduler"
    assert plugin_kind(Both()) == "nanny"  # distributed classifies so too
    assert plugin_kind(Theirs()) == "worker"
    with pytest.raises(TypeError, match="must derive"):
        plugin_kind(object())
    assert plugin_name(Theirs()) == "theirs"
    assert plugin_name(Theirs(), "given") == "given"
    unnamed = {plugin_name(squall.WorkerPlugin()) for _ in range(2)}
    assert len(unnamed) == 2 and all(n.startswith("WorkerPlugin-") for n in unnamed)


def test_setup_on_current_and_future_workers_teardown_on_unregister(tmp_path: Path) -> None:
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as c,
    ):
        first = worker_pids(c)
        answer = c.register_plugin(Marker(tmp_path))
        assert list(answer.values()) == [{"status": "OK"}]
        assert marks(tmp_path, "marker", "setup") == first
        cluster.scale(2)
        c.wait_for_workers(2, timeout=30)
        everyone = worker_pids(c)
        assert len(everyone) == 2
        # The newcomer set it up before it took any task.
        assert marks(tmp_path, "marker", "setup") == everyone
        c.unregister_worker_plugin("marker")
        assert marks(tmp_path, "marker", "teardown") == everyone
        assert plugin_values(c, "marker") == [None, None]
        with pytest.raises(ValueError, match="does not exist"):
            c.unregister_worker_plugin("marker")
        # A worker that closes tears its plugins down.
        c.register_plugin(Marker(tmp_path, name="second"))
        cluster.scale(1)
        eventually(lambda: len(marks(tmp_path, "second", "teardown")) == 1, timeout=30)


def test_a_name_replaces_unless_idempotent(cluster: LocalCluster, tmp_path: Path) -> None:
    with Client(cluster) as c:
        c.register_plugin(Marker(tmp_path, name="p", value=1))
        c.register_plugin(Marker(tmp_path, name="p", value=2))
        assert plugin_values(c, "p") == [2]
        assert len(marks(tmp_path, "p", "teardown")) == 1  # the first one's
        assert c.register_plugin(Marker(tmp_path, name="p", value=3), idempotent=True) == {}
        assert plugin_values(c, "p") == [2]
        c.unregister_worker_plugin("p")


class Failing(squall.WorkerPlugin):
    name = "failing"

    def setup(self, worker: Any) -> None:
        raise RuntimeError("no setup for you")


def test_a_failing_setup_is_raised_on_the_client(cluster: LocalCluster) -> None:
    with Client(cluster) as c:
        with pytest.raises(RuntimeError, match="no setup for you"):
            c.register_plugin(Failing())
        c.unregister_worker_plugin("failing")  # kept, as distributed keeps it
        assert c.submit(lambda: 1).result(timeout=20) == 1


class Transitions(squall.WorkerPlugin):
    name = "transitions"

    def __init__(self) -> None:
        self.seen: list[tuple[Any, str, str]] = []

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        self.seen.append((key, start, finish))


def test_the_transition_hook_sees_a_tasks_states(cluster: LocalCluster) -> None:
    with Client(cluster) as c:
        c.register_plugin(Transitions())
        held = c.submit(lambda x: x + 1, 1, key="inc-1")
        assert held.result(timeout=20) == 2
        c.submit(lambda: 1 / 0, key="div-0").exception(timeout=20)

        def seen(dask_worker: Any) -> list[tuple[Any, str, str]]:
            dask_worker._flush_buffered()  # the batch the hook is fed with
            return dask_worker.plugins["transitions"].seen

        [(w, log)] = c.run(seen).items()
        assert [(s, f) for k, s, f in log if k == "inc-1"] == [
            ("released", "waiting"),
            ("waiting", "ready"),
            ("ready", "executing"),
            ("executing", "memory"),
        ]
        assert ("div-0", "executing", "error") in log
        del held  # released: the worker forgets it
        gone = ("inc-1", "released", "forgotten")
        eventually(lambda: gone in c.run(seen)[w])
        c.unregister_worker_plugin("transitions")
        assert c.run(lambda dask_worker: dask_worker._transition_plugins) == {
            a: [] for a in c.scheduler_info()["workers"]
        }


class TheirPlugin(distributed.WorkerPlugin):
    """Written against distributed's base class."""

    name = "theirs"

    def setup(self, worker: Any) -> None:
        self.address = worker.address


def test_a_plugin_of_distributeds_base_class(cluster: LocalCluster) -> None:
    with Client(cluster) as c:
        c.register_plugin(TheirPlugin())
        addresses = c.run(lambda dask_worker: dask_worker.plugins["theirs"].address)
        assert all(k == v for k, v in addresses.items())
        c.unregister_worker_plugin("theirs")


def test_register_worker_callbacks(cluster: LocalCluster) -> None:
    def setup(dask_worker: Any) -> None:
        dask_worker.set_up_by_callback = dask_worker.address

    with Client(cluster) as c:
        c.register_worker_callbacks(setup)
        found = c.run(lambda dask_worker: dask_worker.set_up_by_callback)
        assert all(k == v for k, v in found.items())


def log_warning(text: str) -> None:
    logging.getLogger("squall_test_late").warning(text)


def test_forward_logging_reaches_workers_that_join_later() -> None:
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = Keep()
    logging.getLogger("squall_test_late").addHandler(handler)
    try:
        with (
            LocalCluster(n_workers=0, threads_per_worker=1, dashboard_address=None) as cluster,
            Client(cluster) as c,
        ):
            c.forward_logging("squall_test_late")
            cluster.scale(1)
            c.wait_for_workers(1, timeout=30)
            c.submit(log_warning, "from a newcomer", pure=False).result(timeout=20)
            eventually(lambda: records == ["from a newcomer"])
    finally:
        logging.getLogger("squall_test_late").removeHandler(handler)
