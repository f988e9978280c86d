"""The path of a ``submit`` loop (docs/runtime.md#submit). One function is pickled once
(``function_prefix``): only a function that cloudpickle writes as a reference may come
from the cache, since one pickled by value carries its code and globals, which can
change between calls. The client's queue of calls for its loop runs them in order
however many threads queue them. A burst of submits leaves as one graph, and if the
scheduler refuses it, only the calls at fault fail."""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import cloudpickle
import pytest

import squall
from squall import Future, SchedulerPlugin
from squall.protocol.specs import call_prefix, function_prefix
from squall.tools.bench_e2e import noop

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCALE = 1


def test_a_module_level_function_is_pickled_once() -> None:
    first = function_prefix(noop)  # this test module is pickled by value: not its own
    assert first == call_prefix(cloudpickle.dumps(noop))
    assert function_prefix(noop) is first


def test_a_lambda_s_globals_are_pickled_anew_each_call() -> None:
    global SCALE
    scaled = lambda x: x * SCALE  # noqa: E731 (a lambda: pickled by value)
    first = function_prefix(scaled)
    assert first == call_prefix(cloudpickle.dumps(scaled))
    SCALE = 2
    try:
        second = function_prefix(scaled)
        assert second == call_prefix(cloudpickle.dumps(scaled))
    finally:
        SCALE = 1
    assert first != second


@pytest.fixture
def module() -> Iterator[types.ModuleType]:
    mod = types.ModuleType("squall_test_by_value")
    exec("def f(x):\n    return x + 1\n", mod.__dict__)
    sys.modules[mod.__name__] = mod
    yield mod
    if mod.__name__ in cloudpickle.list_registry_pickle_by_value():
        cloudpickle.unregister_pickle_by_value(mod)
    del sys.modules[mod.__name__]


def test_a_module_registered_by_value_after_a_call_is_pickled_by_value(
    module: types.ModuleType,
) -> None:
    f = module.f
    by_ref = function_prefix(f)
    assert function_prefix(f) is by_ref
    cloudpickle.register_pickle_by_value(module)
    by_value = function_prefix(f)
    assert by_value != by_ref
    assert by_value == call_prefix(cloudpickle.dumps(f))


def test_submitted_lambdas_see_their_globals_as_of_each_submit(
    client: squall.Client,
) -> None:
    global SCALE
    scaled = lambda x: x * SCALE  # noqa: E731
    first = client.submit(scaled, 3, pure=False)
    SCALE = 5
    try:
        second = client.submit(scaled, 3, pure=False)
    finally:
        SCALE = 1
    assert client.gather([first, second]) == [3, 15]


def test_calls_queued_for_the_loop_run_in_order_from_many_threads(
    client: squall.Client,
) -> None:
    connection = client.connection
    ran: list[tuple[int, int]] = []
    done = threading.Event()

    def queue(thread: int) -> None:
        for i in range(2_000):
            connection.call_soon(ran.append, (thread, i))

    threads = [threading.Thread(target=queue, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    connection.call_soon(done.set)
    assert done.wait(10)
    assert len(ran) == 8_000
    for thread in range(4):
        assert [i for t, i in ran if t == thread] == list(range(2_000))


def test_a_call_queued_by_a_queued_call_waits_for_the_loop_s_other_work(
    client: squall.Client,
) -> None:
    # Were the queue run until empty, a thread queueing without pause would keep the
    # loop from reading and writing: what is queued during a run waits for the next.
    connection = client.connection
    ran: list[str] = []
    done = threading.Event()

    def first() -> None:
        ran.append("first")
        assert connection.loop is not None
        connection.loop.call_soon(ran.append, "loop's own")
        connection.call_soon(ran.append, "queued by first")
        connection.call_soon(done.set)

    connection.call_soon(first)
    assert done.wait(10)
    assert ran == ["first", "loop's own", "queued by first"]


def test_a_failing_queued_call_is_logged_and_the_rest_still_run(
    client: squall.Client, caplog: pytest.LogCaptureFixture
) -> None:
    connection = client.connection
    done = threading.Event()

    def fails() -> Any:
        raise ValueError("queued call failed")

    connection.call_soon(fails)
    connection.call_soon(done.set)
    assert done.wait(10)
    assert client.submit(noop, 7).result(timeout=10) == 7  # the connection still works
    assert any("queued call failed" in str(r.exc_info) for r in caplog.records if r.exc_info)


def test_a_function_whose_name_was_rebound_is_pickled_by_value(
    module: types.ModuleType,
) -> None:
    f = module.f
    by_ref = function_prefix(f)
    module.f = lambda x: x  # the name now refers to another function
    assert function_prefix(f) != by_ref
    assert function_prefix(f) == call_prefix(cloudpickle.dumps(f))


class GraphCounter(SchedulerPlugin):
    """The tasks of each ``update-graph`` the scheduler takes in."""

    name = "graph-counter"

    def __init__(self) -> None:
        self.graphs: list[list[Any]] = []

    def update_graph(self, scheduler: Any, *, tasks: list[Any], **kwargs: Any) -> None:
        self.graphs.append(sorted(tasks))


def graphs_seen(client: squall.Client) -> list[list[Any]]:
    def read(dask_scheduler: Any) -> list[list[Any]]:
        return list(dask_scheduler.plugins[GraphCounter.name].graphs)

    graphs: list[list[Any]] = client.run_on_scheduler(read)
    return graphs


@contextmanager
def loop_held(client: squall.Client) -> Iterator[None]:
    """The client's event loop kept busy inside the block: what is queued for it
    meanwhile waits, as it does behind a loop still busy with earlier work."""
    go, holding = threading.Event(), threading.Event()

    def hold() -> None:
        holding.set()
        go.wait(10)

    client.connection.call_soon(hold)
    assert holding.wait(10)
    try:
        yield
    finally:
        go.set()


@pytest.fixture
def counted(client: squall.Client) -> Iterator[squall.Client]:
    client.register_scheduler_plugin(GraphCounter())
    yield client
    client.unregister_scheduler_plugin(GraphCounter.name)


def test_a_burst_of_submits_leaves_as_one_graph_in_order(counted: squall.Client) -> None:
    with loop_held(counted):
        futures = [counted.submit(noop, i, key=f"burst-{i}") for i in range(50)]
        other = counted.submit(noop, 0, key="burst-other", priority=1)  # other options
    assert counted.gather(futures) == list(range(50))
    assert other.result(timeout=10) == 0
    graphs = [g for g in graphs_seen(counted) if any(str(k).startswith("burst-") for k in g)]
    assert graphs == [sorted(f.key for f in futures), ["burst-other"]]


def test_a_refused_burst_fails_only_the_call_at_fault(counted: squall.Client) -> None:
    lost = Future("refused-no-such-key", counted)  # a key the scheduler does not have
    with loop_held(counted):
        before = counted.submit(noop, 1, key="refused-before")
        bad = counted.submit(noop, lost, key="refused-bad")
        after = counted.submit(noop, 2, key="refused-after")
    assert counted.gather([before, after]) == [1, 2]
    with pytest.raises(RuntimeError, match="refused the graph"):
        bad.result(timeout=10)
    graphs = [g for g in graphs_seen(counted) if any("refused-" in str(k) for k in g)]
    assert graphs == [["refused-before"], ["refused-after"]]  # the bad one never taken in
