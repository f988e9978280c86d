"""Events, printing and warning from tasks, and forwarded logging on a real cluster, as
distributed's tests describe them (``log_event``/``get_events`` from clients and tasks,
``subscribe_topic``, the scheduler's own events, ``print``/``warn``,
``forward_logging``)."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import warnings
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import dask
import pytest

import squall
from squall import Client, LocalCluster
from tests.conftest import eventually

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def log_from_task(topic: str, msg: Any) -> str:
    worker = squall.get_worker()
    worker.log_event(topic, msg)
    return worker.address


def test_log_event_and_get_events_from_a_client(cluster: LocalCluster) -> None:
    with Client(cluster) as c:
        before = time.time()
        c.log_event("c-topic", {"action": "test", "value": 1})
        c.log_event(["c-one", "c-two"], [1, "two"])
        events = c.get_events("c-topic")
        assert len(events) == 1
        ((at, msg),) = events
        assert before - 1 < at < time.time() + 1 and msg == {"action": "test", "value": 1}
        (one,) = c.get_events("c-one")
        assert one[1] == [1, "two"] and c.get_events("c-two") == (one,)
        everything = c.get_events()
        assert {"c-topic", "c-one", "c-two"} <= set(everything)
        assert c.get_events("never-logged") == ()
        with pytest.raises(TypeError, match="msgpack"):
            c.log_event("c-topic", object())


def test_log_event_from_tasks_names_the_worker(cluster: LocalCluster) -> None:
    with Client(cluster) as c:
        address = c.submit(log_from_task, "t-topic", {"x": 1}, pure=False).result(timeout=20)
        eventually(lambda: len(c.get_events("t-topic")) == 1)
        assert c.get_events("t-topic")[0][1] == {"x": 1, "worker": address}
        # Under the worker's own topic the message is left as it is.
        c.submit(log_from_task, address, {"y": 2}, workers=[address], pure=False).result(20)
        eventually(lambda: any(e[1] == {"y": 2} for e in c.get_events(address)))
        with pytest.raises(TypeError, match="msgpack"):
            c.submit(log_from_task, "t-topic", object(), pure=False).result(timeout=20)


def test_the_log_of_a_topic_is_bounded() -> None:
    with (
        dask.config.set({"squall.admin.events-log-length": 3}),
        LocalCluster(n_workers=0, dashboard_address=None) as cluster,
        Client(cluster) as c,
    ):
        for i in range(5):
            c.log_event("bounded", i)
        assert [msg for _, msg in c.get_events("bounded")] == [2, 3, 4]


def test_the_schedulers_own_events(cluster: LocalCluster) -> None:
    with Client(cluster) as c:
        workers = set(c.scheduler_info()["workers"])
        added = [m for _, m in c.get_events("all") if m.get("action") == "add-worker"]
        assert workers <= {m["worker"] for m in added}
        for w in workers:
            assert {"action": "add-worker"} in [m for _, m in c.get_events(w)]
        mine = {"action": "add-client", "client": c.id}
        assert mine in [m for _, m in c.get_events("all")]
        assert mine in [m for _, m in c.get_events(c.id)]
        with Client(cluster) as other:
            other_id = other.id
        gone = {"action": "remove-client", "client": other_id}
        eventually(lambda: gone in [m for _, m in c.get_events("all")])


def test_subscribe_topic_calls_the_handler_until_unsubscribed(cluster: LocalCluster) -> None:
    with Client(cluster) as c, Client(cluster) as other:
        got: list[tuple[float, Any]] = []
        c.subscribe_topic("s-topic", got.append)
        # Subscribed once the scheduler has read it: a request after it answers after.
        c.get_events("s-topic")
        other.log_event("s-topic", "from another client")
        other.submit(log_from_task, "s-topic", {"from": "task"}, pure=False).result(20)
        eventually(lambda: len(got) == 2)
        assert got[0][1] == "from another client" and got[1][1]["from"] == "task"
        c.unsubscribe_topic("s-topic")
        other.log_event("s-topic", "not handled")
        c.subscribe_topic("marker", got.append)
        c.get_events("marker")
        other.log_event("marker", "after")
        eventually(lambda: len(got) == 3)
        assert got[2][1] == "after"
        with pytest.raises(ValueError, match="No event handler"):
            c.unsubscribe_topic("s-topic")


def test_coroutine_handlers_are_awaited(cluster: LocalCluster) -> None:
    async def main() -> None:
        async with Client(cluster.scheduler_address, asynchronous=True) as c:
            got: asyncio.Queue[Any] = asyncio.Queue()

            async def handler(event: tuple[float, Any]) -> None:
                await asyncio.sleep(0)
                await got.put(event[1])

            c.subscribe_topic("a-topic", handler)
            await c.get_events("a-topic")
            await c.log_event("a-topic", {"n": 1})
            assert await asyncio.wait_for(got.get(), 10) == {"n": 1}

    asyncio.run(asyncio.wait_for(main(), 60))


def print_things() -> int:
    squall.print("hello from a task", 1, sep="|")
    squall.print("to stderr", file=sys.stderr)
    return 1


def test_print_from_a_task_reaches_the_client(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    with Client(cluster) as c:
        assert c.submit(print_things, pure=False).result(timeout=20) == 1

        def printed() -> bool:
            out, err = capsys.readouterr()
            seen.extend([out, err])
            return "hello from a task|1\n" in "".join(seen[::2]) and "to stderr\n" in "".join(
                seen[1::2]
            )

        seen: list[str] = []
        eventually(printed)
        squall.print("locally", "too")  # outside a task: only the builtin print
        assert capsys.readouterr().out == "locally too\n"
        with pytest.raises(TypeError):
            c.submit(lambda: squall.print("x", file=object()), pure=False).result(20)  # type: ignore[arg-type]


class TaskWarning(UserWarning):
    pass


def warn_things() -> int:
    squall.warn("a warning from a task", TaskWarning)
    return 1


def test_warn_from_a_task_reaches_the_client(cluster: LocalCluster) -> None:
    with Client(cluster) as c, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert c.submit(warn_things, pure=False).result(timeout=20) == 1
        eventually(lambda: any(w.category is TaskWarning for w in caught))
        (w,) = [w for w in caught if w.category is TaskWarning]
        assert str(w.message) == "a warning from a task"


def log_error(text: str) -> None:
    logging.getLogger("squall_test.module").error(text)
    squall.get_worker().log_event("log-marker", text)


def test_forward_logging(cluster: LocalCluster) -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    client_logger = logging.getLogger("squall_test.module")
    handler = Keep()
    client_logger.addHandler(handler)
    markers: list[Any] = []
    try:
        with Client(cluster) as c:
            c.subscribe_topic("log-marker", markers.append)
            c.forward_logging("squall_test", level=logging.WARNING)
            c.forward_logging("squall_test", level=logging.WARNING)  # not twice
            c.submit(log_error, "Hello error", pure=False).result(timeout=20)
            eventually(lambda: len(markers) == 1)
            # Events of one worker keep their order: the record came before the marker.
            (record,) = records
            assert record.getMessage() == "Hello error" and record.levelno == logging.ERROR
            assert record.name == "squall_test.module"
            assert record.worker in c.scheduler_info()["workers"]  # type: ignore[attr-defined]
            c.unforward_logging("squall_test")
            c.submit(log_error, "Not forwarded", pure=False).result(timeout=20)
            eventually(lambda: len(markers) == 2)
            assert len(records) == 1
    finally:
        client_logger.removeHandler(handler)
