"""Scheduler plugins on real multi-process clusters (docs/runtime.md#scheduler-plugins),
after the reference behaviour of distributed's tests/test_scheduler_plugin.py: the
hooks as distributed calls them, registration by name (idempotent or replacing),
unregistering, failing hooks, distributed's own base class, and a preload adding a
plugin."""

from __future__ import annotations

import asyncio
import itertools
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import dask
import pytest
from dask import delayed
from distributed.diagnostics.plugin import SchedulerPlugin as DistributedSchedulerPlugin

import squall
from squall import Client, LocalCluster, SchedulerPlugin, WorkerPlugin
from squall.scheduler.facade import SchedulerFacade
from squall.tools import bench_e2e
from tests.conftest import eventually, start_scheduler, start_worker, submit_map

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def inc(x: int) -> int:
    return x + 1


class Recorder(SchedulerPlugin):
    """Notes every hook call in ``seen``."""

    def __init__(self, name: str = "recorder") -> None:
        self.name = name
        self.seen: list[tuple[Any, ...]] = []

    async def start(self, scheduler: Any) -> None:
        self.seen.append(("start", type(scheduler).__name__))

    def transition(
        self, key: Any, start: str, finish: str, *args: Any, stimulus_id: str, **kwargs: Any
    ) -> None:
        self.seen.append(("transition", key, start, finish, stimulus_id))

    def update_graph(
        self,
        scheduler: Any,
        *,
        client: str,
        keys: set[Any],
        tasks: list[Any],
        annotations: dict[str, dict[Any, Any]],
        priority: dict[Any, Any],
        stimulus_id: str,
        **kwargs: Any,
    ) -> None:
        self.seen.append(("update_graph", client, sorted(keys), sorted(tasks), annotations))

    def add_worker(self, scheduler: Any, worker: str) -> None:
        self.seen.append(("add_worker", worker))

    async def remove_worker(
        self, scheduler: Any, worker: str, *, stimulus_id: str, **kwargs: Any
    ) -> None:
        await asyncio.sleep(0)  # awaited as a task of its own
        self.seen.append(("remove_worker", worker))

    def add_client(self, scheduler: Any, client: str) -> None:
        self.seen.append(("add_client", client))

    def remove_client(self, scheduler: Any, client: str) -> None:
        self.seen.append(("remove_client", client))

    def log_event(self, topic: str, msg: Any) -> None:
        self.seen.append(("log_event", topic, msg))

    def restart(self, scheduler: Any) -> None:
        self.seen.append(("restart",))


def seen(c: Client, name: str = "recorder", hook: str | None = None) -> list[tuple[Any, ...]]:
    def read(dask_scheduler: SchedulerFacade) -> list[tuple[Any, ...]]:
        return list(dask_scheduler.plugins[name].seen)

    calls: list[tuple[Any, ...]] = c.run_on_scheduler(read)
    return [s for s in calls if hook is None or s[0] == hook]


def feed_on(c: Client) -> bool:
    """Whether the core feeds transitions (only while a plugin watches them)."""

    def read(dask_scheduler: SchedulerFacade) -> bool:
        return bool(dask_scheduler._server.core.transition_feed)

    return bool(c.run_on_scheduler(read))


def test_the_core_feeds_transitions_only_when_asked(sched: squall.core.Scheduler) -> None:
    """The binding's feed: off by default; on, every transition since the last take,
    with distributed's state names and the stimulus ``story`` shows."""
    c = sched.client("c")
    sched.add_worker("tcp://127.0.0.1:1", 1, now=0.0)
    submit_map(sched, c, 2, now=0.1)
    assert not sched.transition_feed and sched.take_transitions() == []
    sched.transition_feed = True
    submit_map(sched, c, 3, now=0.2)  # inc-0, inc-1 known; inc-2 new
    fed = sched.take_transitions(limit=1)
    assert len(fed) == 1
    fed += sched.take_transitions()
    assert {k for k, *_ in fed} == {"inc-2"}
    assert [tuple(e[1:]) for e in fed] == [e[:3] for e in sched.story("inc-2")]
    assert fed[0][1:3] == ("released", "waiting") and fed[-1][2] == sched.state("inc-2")
    assert sched.take_transitions() == []
    sched.transition_feed = False
    submit_map(sched, c, 4, now=0.3)
    assert sched.take_transitions() == []


@pytest.fixture
def recorder(client: Client) -> Iterator[Client]:
    """``client`` with a :class:`Recorder` registered (and unregistered after)."""
    client.register_scheduler_plugin(Recorder())
    yield client
    client.unregister_scheduler_plugin("recorder")


def test_a_plugin_sees_each_keys_transitions_in_order(recorder: Client) -> None:
    c = recorder
    assert seen(c, hook="start") == [("start", "SchedulerFacade")]
    assert feed_on(c)
    futures = c.map(inc, range(4))
    assert c.gather(futures) == [1, 2, 3, 4]
    keys = [f.key for f in futures]
    del futures

    def stories() -> dict[Any, list[tuple[str, str]]]:
        out: dict[Any, list[tuple[str, str]]] = {k: [] for k in keys}
        for _, key, start, finish, stimulus_id in seen(c, hook="transition"):
            assert isinstance(stimulus_id, str) and stimulus_id
            if key in out:
                out[key].append((start, finish))
        return out

    eventually(lambda: all(s and s[-1][1] == "forgotten" for s in stories().values()))
    for key, story in stories().items():
        assert story[0] == ("released", "waiting"), key
        assert ("processing", "memory") in story, key
        # Each transition starts where the last one ended.
        assert all(a[1] == b[0] for a, b in itertools.pairwise(story)), story


def test_update_graph_gets_the_keys_and_the_graph(recorder: Client) -> None:
    c = recorder
    assert c.submit(inc, 1, key="ug-x").result() == 2
    [call] = [s for s in seen(c, hook="update_graph") if "ug-x" in s[3]]
    assert call[1] == c.id and call[2] == ["ug-x"] and call[3] == ["ug-x"]
    with dask.annotate(retries=2):
        y = delayed(inc)(2, dask_key_name="ug-y")
    z = delayed(inc)(y, dask_key_name="ug-z")
    assert c.compute(z).result() == 4
    [call] = [s for s in seen(c, hook="update_graph") if "ug-z" in s[3]]
    assert call[2:] == (["ug-z"], ["ug-y", "ug-z"], {"retries": {"ug-y": 2}})


def test_clients_and_events_reach_the_plugin(recorder: Client, cluster: LocalCluster) -> None:
    c = recorder
    with Client(cluster) as other:
        other_id = other.id
        eventually(lambda: ("add_client", other_id) in seen(c))
    eventually(lambda: ("remove_client", other_id) in seen(c))
    c.log_event("plugin-topic", {"a": 1})
    eventually(lambda: ("log_event", "plugin-topic", {"a": 1}) in seen(c))


def test_restart_calls_the_plugin_and_keeps_it(recorder: Client) -> None:
    c = recorder
    c.restart()
    assert seen(c, hook="restart") == [("restart",)]
    assert c.submit(inc, 10).result() == 11  # the workers came back; the plugin stays
    eventually(lambda: any(s[3] == "memory" for s in seen(c, hook="transition")))


def test_workers_joining_and_leaving_reach_the_plugin() -> None:
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as c,
    ):
        c.register_scheduler_plugin(Recorder())
        before = set(c.scheduler_info()["workers"])
        cluster.scale(2)
        c.wait_for_workers(2, timeout=30)
        [new] = set(c.scheduler_info()["workers"]) - before
        eventually(lambda: ("add_worker", new) in seen(c), timeout=30)
        cluster.scale(1)
        eventually(lambda: len(c.scheduler_info()["workers"]) == 1, timeout=30)
        [gone] = (before | {new}) - set(c.scheduler_info()["workers"])
        eventually(lambda: ("remove_worker", gone) in seen(c), timeout=30)


class FileLog(SchedulerPlugin):
    """Writes its lifecycle hooks (and its first transition) to a file: readable after
    it was unregistered, or the scheduler closed."""

    def __init__(self, path: Path, name: str) -> None:
        self.path, self.name = path, name

    def _note(self, what: str) -> None:
        with self.path.open("a") as f:
            f.write(what + "\n")

    def start(self, scheduler: Any) -> None:  # a sync start, as distributed accepts
        self._note("start")

    async def before_close(self) -> None:
        self._note("before_close")

    async def close(self) -> None:
        self._note("close")

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        self._note(f"transition {key}")


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_start_close_order_and_unregistering(tmp_path: Path) -> None:
    kept, dropped = tmp_path / "kept", tmp_path / "dropped"
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as c,
    ):
        c.register_scheduler_plugin(FileLog(kept, "kept"))
        c.register_scheduler_plugin(FileLog(dropped, "dropped"))
        assert c.submit(inc, 1, key="one").result() == 2
        eventually(lambda: "one" in lines(dropped))
        c.unregister_scheduler_plugin("dropped")
        assert lines(dropped)[-1] == "close"
        n = len(lines(dropped))
        assert c.submit(inc, 2, key="two").result() == 3
        eventually(lambda: "two" in lines(kept))
        assert len(lines(dropped)) == n, "no hook after unregistering"
        with pytest.raises(ValueError, match="Could not find plugin 'dropped'"):
            c.unregister_scheduler_plugin("dropped")
        c.unregister_scheduler_plugin("kept")
        assert not feed_on(c), "no plugin watches transitions: the feed is off"
        c.register_scheduler_plugin(FileLog(kept, "kept"))
    # The scheduler closed: before_close, then close.
    assert [x for x in lines(kept) if x != "transition"][-2:] == ["before_close", "close"]
    assert lines(kept)[0] == "start"


class Tagged(SchedulerPlugin):
    idempotent = True
    name = "tagged"

    def __init__(self, tag: int) -> None:
        self.tag = tag


def tag(c: Client) -> int:
    return int(c.run_on_scheduler(lambda dask_scheduler: dask_scheduler.plugins["tagged"].tag))


def test_idempotent_registration_keeps_the_first(client: Client) -> None:
    client.register_scheduler_plugin(Tagged(1))
    client.register_scheduler_plugin(Tagged(2))
    assert tag(client) == 1
    client.register_scheduler_plugin(Tagged(3), idempotent=False)
    assert tag(client) == 3
    client.register_scheduler_plugin(Tagged(4), name="other")
    assert tag(client) == 3
    names = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.plugins))
    assert {"tagged", "other"} <= set(names)
    client.unregister_scheduler_plugin("tagged")
    client.unregister_scheduler_plugin("other")


class Broken(SchedulerPlugin):
    name = "broken"

    def transition(self, *args: Any, **kwargs: Any) -> None:
        raise ZeroDivisionError("broken transition")

    def update_graph(self, *args: Any, **kwargs: Any) -> None:
        raise ZeroDivisionError("broken update_graph")

    def add_client(self, scheduler: Any, client: str) -> None:
        raise ZeroDivisionError("broken add_client")


class FailsToStart(SchedulerPlugin):
    async def start(self, scheduler: Any) -> None:
        raise ZeroDivisionError("cannot start")


def test_a_failing_hook_is_logged_and_the_scheduler_goes_on(
    recorder: Client, cluster: LocalCluster
) -> None:
    c = recorder
    c.register_scheduler_plugin(Broken())
    try:
        assert c.submit(inc, 5, key="after-broken").result() == 6
        with Client(cluster) as other:
            assert other.submit(inc, 1).result() == 2
        eventually(lambda: any(s[1] == "after-broken" for s in seen(c, hook="transition")))
        logs = "\n".join(line for _, line in c.get_scheduler_logs())
        assert "plugin broken failed in transition" in logs
        assert "plugin broken failed in update_graph" in logs
    finally:
        c.unregister_scheduler_plugin("broken")
    with pytest.raises(ZeroDivisionError, match="cannot start"):
        c.register_scheduler_plugin(FailsToStart(), name="fails")
    names = c.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.plugins))
    assert "fails" not in names


class DistributedCounter(DistributedSchedulerPlugin):  # type: ignore[misc]
    name = "distributed-counter"

    def start(self, scheduler: Any) -> None:
        self.count = 0

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if (start, finish) == ("processing", "memory"):
            self.count += 1


def test_a_plugin_deriving_from_distributeds_base_class(client: Client) -> None:
    client.register_scheduler_plugin(DistributedCounter())
    try:
        assert client.gather(client.map(inc, range(3), key=["dc-0", "dc-1", "dc-2"])) == [1, 2, 3]
        count = lambda: client.run_on_scheduler(  # noqa: E731
            lambda dask_scheduler: dask_scheduler.plugins["distributed-counter"].count
        )
        eventually(lambda: count() == 3)
    finally:
        client.unregister_scheduler_plugin("distributed-counter")


def test_only_scheduler_plugins_register_here(client: Client) -> None:
    with pytest.raises(TypeError, match="instance of a plugin"):
        client.register_scheduler_plugin(Recorder)
    with pytest.raises(TypeError, match="no SchedulerPlugin"):
        client.register_scheduler_plugin(WorkerPlugin())


PRELOAD = """
from squall import SchedulerPlugin

class Counter(SchedulerPlugin):
    name = "preloaded"

    def __init__(self):
        self.started = False
        self.count = 0

    def start(self, scheduler):
        self.started = True

    def transition(self, key, start, finish, *args, **kwargs):
        if finish == "memory":
            self.count += 1

def dask_setup(scheduler):
    scheduler.add_plugin(Counter())
"""


def test_a_preload_adds_a_plugin_started_with_the_scheduler(tmp_path: Path) -> None:
    path = tmp_path / "plugin_preload.py"
    path.write_text(textwrap.dedent(PRELOAD))
    proc, address = start_scheduler("--preload", str(path))
    worker = start_worker(address, "--nthreads", "1")
    try:
        with squall.Client(address) as c:
            c.wait_for_workers(1, timeout=30)
            assert c.submit(inc, 1).result() == 2

            def state(dask_scheduler: SchedulerFacade) -> tuple[bool, int]:
                p = dask_scheduler.plugins["preloaded"]
                return p.started, p.count

            eventually(lambda: c.run_on_scheduler(state) == (True, 1))
    finally:
        worker.terminate()
        worker.wait(timeout=20)
        proc.terminate()
        proc.wait(timeout=20)


def test_the_bench_row_with_a_transition_plugin(client: Client) -> None:
    """``squall bench e2e --workloads map-transition-plugin`` at a tiny size, on both
    systems: the plugin registers, counts every task reaching memory, and leaves."""
    import distributed

    run = bench_e2e.WORKLOADS["map-transition-plugin"][0]
    assert run(client, 50) == 50
    names = client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.plugins))
    assert bench_e2e.COUNTER not in names
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as dask_client,
    ):
        assert run(dask_client, 20) == 20


def test_an_in_process_scheduler_starts_its_plugins() -> None:
    """distributed's ``Scheduler(plugins=[...])``: started with the scheduler, their
    hooks called in this process; ``remove_plugin`` on the server."""
    plugin = Recorder()

    async def main() -> None:
        async with squall.Scheduler(
            host="127.0.0.1", port=0, dashboard=False, plugins=[plugin]
        ) as s:
            assert s.plugins == {"recorder": plugin}
            assert plugin.seen == [("start", "SchedulerFacade")]
            async with (
                squall.Worker(s.address, nthreads=1) as w,
                squall.Client(s.address, asynchronous=True) as c,
            ):
                assert await c.submit(inc, 1, key="in-process") == 2
                assert ("add_worker", w.address) in plugin.seen
                assert ("transition", "in-process", "processing", "memory") in [
                    t[:4] for t in plugin.seen
                ]
            s.remove_plugin("recorder")
            assert s.plugins == {}
            assert not s.core.transition_feed

    asyncio.run(asyncio.wait_for(main(), 60))
