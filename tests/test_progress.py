"""``squall.progress`` on a real cluster: the text bar goes to 100% with the right
counts, collections are followed with their dependencies, erred tasks are shown, and
the scheduler-side watch counts what distributed's does."""

from __future__ import annotations

import sys
import threading
import time

import cloudpickle  # type: ignore[import-untyped]
import dask.array as da
import pytest

import squall
from squall import Client, LocalCluster
from squall.diagnostics.progressbar import Progress, TextProgressBar

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def inc(x: int) -> int:
    time.sleep(0.01)
    return x + 1


def add(x: int, y: int) -> int:
    return x + y


def fail(x: int) -> float:
    return 1 / x


def draws(out: str) -> list[str]:
    """The bar's successive states in captured output."""
    return [d for d in out.rstrip("\n").split("\r") if d]


def test_text_bar_reaches_100_percent_and_ends_with_a_newline(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    with Client(cluster) as client:
        futures = client.map(inc, range(40))
        squall.progress(futures, interval="20ms")
        out = capsys.readouterr().out
        assert out.endswith("\n") and out.count("\n") == 1
        assert "] | 100% Completed | " in draws(out)[-1]
        assert "#" * 40 in draws(out)[-1]
        # Done already: one full bar at once.
        squall.diagnostics.progress(futures)
        assert [d.split(" | ")[:2] for d in draws(capsys.readouterr().out)] == [
            ["[" + "#" * 40 + "]", "100% Completed"]
        ]


def test_erred_tasks_are_shown_and_the_bar_still_ends(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    with Client(cluster) as client:
        futures = client.map(fail, [1, 0, 2])
        squall.progress(futures, group_by="spans")  # the text bar ignores it, as distributed's
        last = draws(capsys.readouterr().out)[-1]
        assert "66% Completed | 1 erred | " in last


def test_a_collection_is_followed_with_its_dependencies(cluster: LocalCluster) -> None:
    pytest.importorskip("ipywidgets")
    with Client(cluster) as client:
        a = client.submit(inc, 1, key="inc-1")
        b = client.submit(inc, 2, key="inc-2")
        total = client.submit(add, a, b, key="add-1")
        widget = squall.progress(total, notebook=True)
        assert widget.task is not None
        done = widget.task.result(timeout=20)
        assert done.prefixes == {"inc": (2, 2, 0), "add": (1, 1, 0)}
        assert [bar.children[1].value for bar in widget.bars.children] == [1.0, 1.0]
        assert "Finished" in widget.status.value
        # Persisted: every chunk and the sum counted.
        x = client.persist((da.ones(40, chunks=10) + 1).sum())
        counts = squall.progress(x, notebook=True, multi=False).task.result(timeout=20)
        assert counts.remaining == 0 and counts.erred == 0
        assert counts.total == counts.done >= 4 + 1
        assert len(counts.prefixes) >= 2
        # Not persisted: nothing to follow (nothing computed), as distributed's; it says so.
        with pytest.warns(UserWarning, match="holds no futures"):
            counts = squall.progress(da.ones(4), notebook=True).task.result(timeout=20)
        assert counts.total == 0 and counts.remaining == 0


def test_complete_false_leaves_out_what_was_done_before(cluster: LocalCluster) -> None:
    pytest.importorskip("ipywidgets")
    with Client(cluster) as client:
        a = client.submit(inc, 10, key="inc-10")
        a.result(timeout=20)
        total = client.submit(add, a, 1, key="add-10")
        full = squall.progress(total, notebook=True, complete=True).task.result(timeout=20)
        assert full.prefixes == {"inc": (1, 1, 0), "add": (1, 1, 0)}
        later = client.submit(add, a, 2, key="add-11")
        part = squall.progress(later, notebook=True, complete=False).task.result(timeout=20)
        assert part.prefixes == {"add": (1, 1, 0)}


def test_progress_stops_when_the_client_closes(cluster: LocalCluster) -> None:
    client = Client(cluster)
    slow = client.submit(time.sleep, 2, pure=False)
    errors: list[BaseException] = []

    def follow() -> None:
        try:
            squall.progress(slow)
        except Exception as e:
            errors.append(e)

    t = threading.Thread(target=follow)
    t.start()
    time.sleep(0.5)
    client.close()
    t.join(timeout=10)
    assert not t.is_alive()
    assert errors, "progress must fail, not pretend to finish"


def test_bar_text_and_options() -> None:
    bar = TextProgressBar(width=10)
    p = Progress({"inc": (8, 3, 1), "sum": (2, 1, 0)}, remaining=5, elapsed=62.5)
    assert bar.line(p) == "[####      ] | 40% Completed | 1 erred |  1min  2.5s"
    assert bar.line(Progress()) == "[##########] | 100% Completed |  0.0s"


def test_dask_progress_bar_prints_when_computing_through_squall(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    from dask.diagnostics import ProgressBar

    with Client(cluster), ProgressBar(dt=0.02):
        assert (da.ones(40, chunks=10) + 1).sum().compute() == 80
    out = capsys.readouterr().out
    assert "] | 100% Completed | " in draws(out)[-1] and out.endswith("\n")
