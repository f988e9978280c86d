"""The rest of the Dask Client API over real processes: scatter, fire_and_forget,
secede/rejoin, get_worker/get_client, restart, run, nthreads/scheduler_info and
``squall worker --nworkers``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
import weakref
from collections import OrderedDict, defaultdict, namedtuple
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import dask
import pytest
from conftest import cli_scheduler, eventually

import squall
from squall import (
    Client,
    Future,
    as_completed,
    fire_and_forget,
    get_client,
    get_worker,
    rejoin,
    secede,
    wait,
)
from squall._core import function_cache_size
from squall.deploy.local import LocalCluster
from squall.deploy.shape import default_shape
from squall.errors import CancelledError, RemoteError

# Worker processes cannot import this test module: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

Pair = namedtuple("Pair", ["a", "b"])


def inc(x: int) -> int:
    return x + 1


def held_keys(client: Client) -> dict[str, list[Any]]:
    """Keys in each worker's data, asked with Client.run."""
    return client.run(lambda dask_worker: list(dask_worker.data))  # type: ignore[no-any-return]


# ----- scatter ----------------------------------------------------------------------------


def test_scatter_shapes_and_keys(client: Client) -> None:
    futures = client.scatter([1, 2, "three"])
    assert isinstance(futures, list) and len(futures) == 3
    assert [f.key.split("-")[0] for f in futures] == ["int", "int", "str"]
    assert all(f.status == "finished" for f in futures) and futures[0].type is int
    assert client.gather(futures) == [1, 2, "three"]
    assert [f.key for f in client.scatter([1, 2, "three"])] == [f.key for f in futures]
    assert client.scatter([1], hash=False)[0].key != futures[0].key

    named = client.scatter({"x": 10, "y": [1, 2]})
    assert set(named) == {"x", "y"} and named["x"].key == "x"
    assert client.gather(named) == {"x": 10, "y": [1, 2]}

    ordered = client.scatter(OrderedDict(a=1))  # not exactly a dict: one value, as Dask
    assert isinstance(ordered, Future) and ordered.result(timeout=10) == OrderedDict(a=1)
    one = client.scatter(42)
    assert isinstance(one, Future) and one.result(timeout=10) == 42
    assert isinstance(client.scatter((1, 2)), tuple)
    assert isinstance(client.scatter({5, 6}), set)
    pair = client.scatter(Pair(1, 2))
    assert isinstance(pair, Pair) and client.gather(list(pair)) == [1, 2]


def test_scattered_data_feeds_tasks_and_spreads_round_robin(
    client: Client, cluster: LocalCluster
) -> None:
    futures = client.scatter(list(range(10, 20)), hash=False)
    holders = client.who_has(futures)
    assert all(len(h) == 1 for h in holders.values())
    assert len({h[0] for h in holders.values()}) == 2  # both workers got some
    # every item used by a task on each worker: half of them are fetched from the other
    addresses = list(client.nthreads())
    for address in addresses:
        total = client.submit(sum, futures, workers=[address])
        assert total.result(timeout=20) == sum(range(10, 20))
    assert client.submit(inc, futures[3]).result(timeout=20) == 14


def test_scatter_to_chosen_workers_and_broadcast(client: Client) -> None:
    addresses = sorted(client.nthreads())
    x = client.scatter(7, workers=[addresses[1]], hash=False)
    assert client.who_has([x])[x.key] == [addresses[1]]
    named = client.scatter("abc", workers=client.scheduler_info()["workers"][addresses[0]]["name"])
    assert client.who_has([named])[named.key] == [addresses[0]]
    [b] = client.scatter([[1, 2, 3]], broadcast=True)
    assert sorted(client.who_has([b])[b.key]) == addresses
    on_all = held_keys(client)
    assert all(b.key in keys for keys in on_all.values())
    assert client.submit(len, b).result(timeout=20) == 3


def test_releasing_scattered_futures_frees_worker_memory(client: Client) -> None:
    [big] = client.scatter([b"x" * 1000], broadcast=True, hash=False)
    small = client.scatter(123, hash=False)
    key, small_key = big.key, small.key
    assert sum(key in keys for keys in held_keys(client).values()) == 2
    del big
    gc.collect()
    eventually(lambda: all(key not in keys for keys in held_keys(client).values()))
    assert any(small_key in keys for keys in held_keys(client).values())
    assert small.result(timeout=10) == 123


def test_scatter_of_unpicklable_data_on_workers_fails_cleanly(client: Client) -> None:
    class OnlyHere:
        def __reduce__(self) -> Any:
            return (_no_such_module_import, ())

    with pytest.raises(RuntimeError, match="could not scatter"):
        client.scatter(OnlyHere(), hash=False)
    assert client.submit(inc, 1).result(timeout=10) == 2


def _no_such_module_import() -> None:
    raise ImportError("this value cannot be rebuilt on a worker")


def test_scattered_futures_travel_as_references(client: Client) -> None:
    # As distributed: a future inside scattered data is pickled by key, and arrives as
    # a future bound to no client; the scattered value does not depend on it.
    x = client.submit(inc, 1)
    refs, three = client.scatter([x, 3])
    assert client.gather(three) == 3 and refs.type is Future
    got = refs.result(timeout=10)
    assert isinstance(got, Future) and got.key == x.key and got is not x
    assert got.status is None and got.client is None and str(x.key) in repr(got)
    with pytest.raises(RuntimeError, match="bound to no client"):
        got.result()
    [nested] = client.gather([client.scatter({"k": [x, 1]})["k"]])
    assert nested[0].key == x.key and nested[1] == 1
    seen = client.submit(lambda v: (type(v).__name__, v.key, v.status), client.scatter(x))
    assert seen.result(timeout=10) == ("_FutureRef", x.key, None)


# ----- futures nested in arguments ----------------------------------------------------------


class Items(list):  # type: ignore[type-arg]
    pass


def describe(*args: Any, **kwargs: Any) -> Any:
    """The types and values a task received."""

    def walk(o: Any) -> Any:
        if isinstance(o, dict):
            return (type(o).__name__, {k: walk(v) for k, v in o.items()})
        if isinstance(o, (list, tuple, set, frozenset)):
            return (type(o).__name__, sorted(map(walk, o), key=repr))
        return o

    return walk(args), {k: walk(v) for k, v in kwargs.items()}


def test_futures_nested_in_arguments_are_dependencies(client: Client) -> None:
    a, b = client.submit(inc, 1), client.submit(inc, 2)
    # Any depth of lists, tuples, sets and dicts (their subclasses too), in args and
    # kwargs; as distributed, subclasses holding futures arrive as their base type, a
    # namedtuple as itself, and containers without futures untouched.
    deep = client.submit(describe, [[({"k": [a]},)]], x={b}, y=OrderedDict(z=(a, b)))
    assert deep.result(timeout=10) == (
        ("tuple", [("list", [("list", [("tuple", [("dict", {"k": ("list", [2])})])])])]),
        {"x": ("set", [3]), "y": ("dict", {"z": ("tuple", [2, 3])})},
    )
    pair = client.submit(lambda p: (type(p).__name__, p.a + p.b), Pair(a, b))
    assert pair.result(timeout=10) == ("Pair", 5)
    typed = client.submit(describe, Items([a]), Items([1]), defaultdict(int, k=b))
    assert typed.result(timeout=10)[0] == (
        "tuple",
        [("Items", [1]), ("dict", {"k": 3}), ("list", [2])],
    )
    # map items holding futures, with futures in kwargs too
    mapped = client.map(describe, [[a, 1], {"b": b}], extra=[a])
    assert client.gather(mapped) == [
        (("tuple", [("list", [1, 2])]), {"extra": ("list", [2])}),
        (("tuple", [("dict", {"b": 3})]), {"extra": ("list", [2])}),
    ]


# ----- as_completed -----------------------------------------------------------------------


def sleep_then(x: Any, delay: float) -> Any:
    time.sleep(delay)
    return x


def div(a: float, b: float) -> float:
    return a / b


def test_as_completed_yields_every_addition(client: Client) -> None:
    x = client.submit(sleep_then, "x", 0.5)
    twin = Future(x.key, client)  # another future of the same key
    ac = as_completed([x, twin, x])
    assert ac.count() == 2  # pending futures count once each, as in distributed
    got = list(as_completed([x, twin, x], timeout=10))
    assert len(got) == 3 and sum(f is x for f in got) == 2 and sum(f is twin for f in got) == 1
    assert ac.count() == 3 and len(ac.next_batch()) == 3 and ac.count() == 0
    ac.add(x)
    ac.update([twin])
    assert {id(f) for f in ac} == {id(x), id(twin)}
    with pytest.raises(TypeError, match="must be a future"):
        as_completed([x, 1])
    with pytest.raises(TypeError, match="must be a future"):
        as_completed([[x]])
    with pytest.raises(TypeError, match="must be a future"):
        ac.add("x")  # type: ignore[arg-type]
    slow = client.submit(sleep_then, "slow", 2, pure=False)
    t0 = time.monotonic()
    with pytest.raises(squall.TimeoutError):
        next(as_completed([slow], timeout=0.3))
    assert time.monotonic() - t0 < 1.5
    slow.cancel()


def test_as_completed_with_results_and_errors(client: Client) -> None:
    good, bad = client.submit(inc, 1), client.submit(div, 1, 0)
    cancelled = client.submit(sleep_then, "c", 1, pure=False)
    cancelled.cancel()
    fs = [good, bad, cancelled]
    results = dict(as_completed(fs, with_results=True, raise_errors=False, timeout=10))
    assert results[good] == 2
    typ, exc, tb = results[bad]  # as distributed: (type, exception, traceback)
    assert typ is ZeroDivisionError and isinstance(exc, ZeroDivisionError)
    assert "div" in [fr.name for fr in traceback.extract_tb(tb)]
    assert isinstance(results[cancelled], CancelledError)
    # raise_errors (the default) raises the error, but not a cancellation
    got = []
    with pytest.raises(ZeroDivisionError):
        for f, r in as_completed([cancelled, bad], with_results=True, timeout=10):
            got.append((f, r))
    assert [f for f, _ in got] == [cancelled]  # cancelled first, not raised


# ----- remote tracebacks -------------------------------------------------------------------

PLUMBING = tuple(
    os.path.dirname(m.__file__) + os.sep
    for m in (squall, asyncio, concurrent.futures)  # type: ignore[type-var]
)


def fails_in_user_code(x: float) -> float:
    return div(x, 0)


def raised_frames(call: Callable[[], Any]) -> list[traceback.FrameSummary]:
    try:
        call()
    except ZeroDivisionError as e:
        return traceback.extract_tb(e.__traceback__)
    raise AssertionError("nothing raised")


async def raised_frames_awaited(address: str) -> list[traceback.FrameSummary]:
    async with Client(address, asynchronous=True) as c:
        try:
            await c.submit(fails_in_user_code, 5)
        except ZeroDivisionError as e:
            return traceback.extract_tb(e.__traceback__)
    raise AssertionError("nothing raised")


def test_remote_tracebacks_show_the_users_frames(client: Client) -> None:
    tracebacks = [
        raised_frames(call)
        for call in [
            lambda: client.submit(fails_in_user_code, 1).result(timeout=10),
            lambda: client.gather([client.submit(fails_in_user_code, 2)]),
            lambda: next(as_completed([client.submit(fails_in_user_code, 3)], with_results=True)),
            lambda: dask.delayed(fails_in_user_code)(4).compute(scheduler=client),  # run_spec
        ]
    ]
    tracebacks.append(asyncio.run(asyncio.wait_for(raised_frames_awaited(client.address), 20)))
    for frames in tracebacks:
        assert [fr.name for fr in frames[-2:]] == ["fails_in_user_code", "div"]
        # distributed leaves one frame of its own (Future.result); squall none, but for
        # its entry point's on Python 3.10 (docs/install.md#supported-pythons)
        ours = [fr for fr in frames if fr.filename.startswith(PLUMBING)]
        assert len(ours) == (0 if sys.version_info >= (3, 11) else 1), ours
    erred = client.submit(fails_in_user_code, 6)
    remote = traceback.extract_tb(erred.traceback(timeout=10))
    assert [fr.name for fr in remote] == ["fails_in_user_code", "div"]


# ----- references ---------------------------------------------------------------------------


def test_a_future_equals_only_itself(client: Client) -> None:
    """As distributed's: two futures of one key are two, in sets and in comparisons."""
    a, b = client.submit(inc, 1), client.submit(inc, 1)
    assert a.key == b.key and a._state is b._state
    assert a == a and a != b and len({a, b, a}) == 2
    assert wait([a, b, a], timeout=10).done == {a, b}


def test_dropped_futures_die_at_once(client: Client) -> None:
    """As distributed's test_no_future_references: nothing of squall's holds a future
    (no cycle either: the collector is off), whether pending, finished or erred."""
    baseline = client.scheduler_info()["n_tasks"]
    gc.disable()
    try:
        alive: weakref.WeakSet[Future] = weakref.WeakSet()
        loop = client.connection.loop
        assert loop is not None
        loop.call_soon_threadsafe(time.sleep, 0.3)  # the graph waits on the loop
        futures = client.map(inc, range(10), pure=False)
        alive.update(futures)
        del futures
        assert not list(alive)
        f = client.submit(inc, 1, pure=False)
        f.result(timeout=10)
        ref = weakref.ref(f)
        del f
        assert ref() is None
        bad = client.submit(div, 1, 0, pure=False)
        with pytest.raises(ZeroDivisionError):
            bad.result(timeout=10)
        ref = weakref.ref(bad)
        del bad
        assert ref() is None
    finally:
        gc.enable()
    # Releases still follow the graphs naming the keys: a dependency dropped at once is
    # not forgotten before its dependent's graph arrives, and nothing stays held.
    for i in range(10):
        loop.call_soon_threadsafe(time.sleep, 0.05)  # both graphs and the release wait
        assert client.submit(inc, client.submit(inc, i, pure=False)).result(timeout=10) == i + 2
    eventually(lambda: client.scheduler_info()["n_tasks"] == baseline)


# ----- fire_and_forget --------------------------------------------------------------------


def write_later(path: str, text: str, delay: float) -> str:
    time.sleep(delay)
    Path(path).write_text(text)
    return text


def test_fire_and_forget_runs_released_tasks(client: Client, tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    a = client.submit(write_later, str(first), "a", 0.3, pure=False)
    b = client.submit(write_later, str(second), a, 0.1, pure=False)
    fire_and_forget([b])
    del a, b
    gc.collect()
    eventually(lambda: second.exists())
    assert first.read_text() == "a" and second.read_text() == "a"
    assert squall.fire_and_forget is fire_and_forget


# ----- get_worker / get_client / secede / rejoin -----------------------------------------


def describe_worker() -> tuple[str, str, bool, int]:
    w = get_worker()
    return w.address, str(w.name), isinstance(w.data, dict), w.nthreads


def test_get_worker_inside_a_task(client: Client) -> None:
    info = client.scheduler_info()["workers"]
    for address, worker in info.items():
        got = client.submit(describe_worker, workers=[address], pure=False).result(timeout=10)
        assert got == (address, worker["name"], True, 1)
    with pytest.raises(ValueError, match="No worker found"):
        get_worker()


def waits_for_a_child(x: int) -> int:
    client = get_client()
    here = get_worker().address
    secede()
    # On a one-thread worker the child can run only because this task seceded.
    child = client.submit(inc, x, workers=[here], pure=False)
    result: int = child.result(timeout=20)
    rejoin()
    return result


def test_secede_lets_a_one_thread_worker_run_what_the_task_waits_for(client: Client) -> None:
    address = next(iter(client.nthreads()))
    futures = [client.submit(waits_for_a_child, i, workers=[address]) for i in range(3)]
    assert client.gather(futures) == [1, 2, 3]
    # the worker counts threads right again: plain tasks still run, one at a time
    assert client.submit(inc, 10, workers=[address]).result(timeout=10) == 11


def stamp_after(started: str, seconds: float) -> float:
    Path(started).touch()
    time.sleep(seconds)
    return time.time()


def rejoins_while_the_slot_is_busy(started: str) -> float:
    client = get_client()
    here = get_worker().address
    secede()
    busy = client.submit(stamp_after, started, 0.5, workers=[here], pure=False)
    while not Path(started).exists():
        time.sleep(0.01)
    rejoin()  # the only slot is busy's until it ends
    back = time.time()
    assert busy.result(timeout=20) <= back
    return back


def test_rejoin_waits_for_a_free_slot(client: Client, tmp_path: Path) -> None:
    address = next(iter(client.nthreads()))
    started = str(tmp_path / "started")
    back = client.submit(rejoins_while_the_slot_is_busy, started, workers=[address])
    assert back.result(timeout=30) > 0


class LooksAtTheWorkerWhenFreed:
    """Its ``__del__`` calls into the worker that held it."""

    def __del__(self) -> None:
        try:
            worker = get_worker()
        except ValueError:
            return  # the client's copy
        worker.__dict__["freed_keys"] = list(worker.data)  # takes the worker's lock


def make_looker() -> LooksAtTheWorkerWhenFreed:
    return LooksAtTheWorkerWhenFreed()


def test_a_value_whose_del_calls_the_worker_is_freed(client: Client) -> None:
    address = next(iter(client.nthreads()))
    looker = client.submit(make_looker, workers=[address], pure=False)
    looker.result(timeout=10)
    key = looker.key
    del looker
    # The worker frees it (running its __del__) and keeps working.
    eventually(lambda: key not in held_keys(client)[address])
    freed = client.run(lambda dask_worker: dask_worker.__dict__.get("freed_keys"))
    assert freed[address] is not None and key not in freed[address]
    assert client.submit(inc, 1, workers=[address], pure=False).result(timeout=10) == 2


def test_a_result_is_reported_while_the_next_task_runs(client: Client) -> None:
    address = next(iter(client.nthreads()))
    fast = client.submit(inc, 1, workers=[address], priority=10, pure=False)
    slow = client.submit(time.sleep, 2, workers=[address], pure=False)
    start = time.monotonic()
    assert fast.result(timeout=10) == 2
    assert time.monotonic() - start < 1.5, "reported only after the next task ended"
    slow.result(timeout=10)


class Unprintable(Exception):
    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    __str__ = __repr__


def raise_unprintable() -> None:
    raise Unprintable()


def test_an_exception_that_cannot_be_shown_is_still_reported(client: Client) -> None:
    exc = client.submit(raise_unprintable, pure=False).exception(timeout=10)
    assert type(exc).__name__ == "Unprintable"
    assert client.submit(inc, 1, pure=False).result(timeout=10) == 2


class BadArgsError(Exception):
    """Its arguments (a lock) cannot be pickled."""


def raise_bad_args() -> None:
    raise BadArgsError("bad arguments", threading.Lock())


class NeedsTwo(Exception):
    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"{a} and {b}")


def raise_needs_two() -> None:
    raise NeedsTwo(1, 2)  # unpickling calls NeedsTwo("1 and 2"): a TypeError


def raise_local_class() -> None:
    class LocalError(ValueError):
        pass

    raise LocalError("from a class made in the task", threading.Lock())


def test_an_exception_that_cannot_travel_keeps_its_type_and_message(client: Client) -> None:
    with pytest.raises(BadArgsError, match="bad arguments"):
        client.submit(raise_bad_args, pure=False).result(timeout=10)
    with pytest.raises(NeedsTwo, match="1 and 2"):
        client.submit(raise_needs_two, pure=False).result(timeout=10)
    # A class the client cannot import comes as a stand-in of the same name.
    exc = client.submit(raise_local_class, pure=False).exception(timeout=10)
    assert type(exc).__name__ == "LocalError" and isinstance(exc, RemoteError)
    assert "from a class made in the task" in str(exc)


def unpicklable() -> Any:
    return threading.Lock()


def test_an_unpicklable_result_errs_instead_of_hanging(client: Client) -> None:
    a, b = sorted(client.nthreads())
    lock = client.submit(unpicklable, workers=[a], pure=False)
    start = time.monotonic()
    with pytest.raises(TypeError, match="cannot pickle") as info:
        lock.result(timeout=20)
    assert time.monotonic() - start < 10
    assert any("could not be pickled" in note for note in info.value.__notes__)
    # A task on another worker that needs it errs with the same error.
    with pytest.raises(TypeError, match="cannot pickle"):
        client.submit(type, lock, workers=[b], pure=False).result(timeout=20)
    # On its own worker it is usable: the value itself is fine there.
    assert client.submit(lambda x: x.locked(), lock, workers=[a]).result(timeout=20) is False


def test_the_function_cache_of_workers_is_bounded_in_bytes(client: Client) -> None:
    for i in range(4):  # four 50 MB functions, each released after its call
        blob = bytes([i]) * 50_000_000

        def size(blob: bytes = blob) -> int:
            return len(blob)

        assert client.submit(size, pure=False).result(timeout=60) == 50_000_000
    cached = client.run(function_cache_size)
    assert all(nbytes <= 128 * 2**20 for _, nbytes in cached.values()), cached


def waits_too_long() -> None:
    raise TimeoutError("the task's own timeout")


def test_a_tasks_timeout_error_is_not_a_result_timeout(client: Client) -> None:
    with pytest.raises(TimeoutError, match="the task's own timeout"):
        client.submit(waits_too_long).result(timeout=10)


def test_get_client_outside_a_worker_is_the_default_client(client: Client) -> None:
    assert get_client() is client
    with pytest.raises(ValueError, match="secede"):
        secede()


# ----- nthreads / scheduler_info / run ----------------------------------------------------


def test_nthreads_and_scheduler_info(client: Client, cluster: LocalCluster) -> None:
    nthreads = client.nthreads()
    assert len(nthreads) == 2 and set(nthreads.values()) == {1}
    assert client.ncores() == nthreads
    first = sorted(nthreads)[0]
    assert client.nthreads(workers=[first]) == {first: 1}
    info = client.scheduler_info()
    assert info["type"] == "Scheduler" and info["address"] == cluster.scheduler_address
    assert info["id"].startswith("Scheduler-") and set(info["services"]) == {"dashboard"}
    assert info["n_workers"] == 2 and info["total_threads"] == 2
    assert set(info["workers"]) == set(nthreads)
    w = info["workers"][first]
    assert w["nthreads"] == 1 and w["name"].startswith("local-")
    assert w["memory_limit"] == cluster.memory_limit > 0  # "auto", as Dask's
    assert w["resources"] == {} and w["type"] == "Worker"
    assert len(client.scheduler_info(n_workers=1)["workers"]) == 1


async def async_answer(dask_worker: Any) -> str:
    return str(dask_worker.name)


def fails() -> None:
    raise ZeroDivisionError("on purpose")


def test_run_on_every_worker(client: Client) -> None:
    names = client.run(async_answer)
    assert sorted(names.values()) == ["local-0", "local-1"]
    first = sorted(names)[0]
    assert client.run(lambda: get_worker().address, workers=[first]) == {first: first}
    with pytest.raises(ZeroDivisionError, match="on purpose"):
        client.run(fails)
    errors = client.run(fails, on_error="return")
    assert all(isinstance(e, ZeroDivisionError) for e in errors.values())
    assert client.run(fails, on_error="ignore") == {}


# ----- restart ----------------------------------------------------------------------------


def test_restart_cancels_everything_and_brings_workers_back() -> None:
    # Without nannies: each worker process re-executes itself (tests/test_nanny.py: with).
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, nanny=False) as cluster,
        Client(cluster) as c,
    ):
        pids = [p.pid for p in cluster.worker_processes]
        before = set(c.nthreads())
        done = c.submit(inc, 1)
        assert done.result(timeout=10) == 2
        stuck = c.submit(time.sleep, 60)
        data = c.scatter([1, 2, 3])
        with Client(cluster) as other:
            theirs = other.submit(inc, 5)
            theirs.result(timeout=10)
            t0 = time.monotonic()
            c.restart()
            assert time.monotonic() - t0 < 20
            eventually(lambda: theirs.cancelled())
        for f in [done, stuck, *data]:
            assert f.cancelled()
        with pytest.raises(CancelledError, match="scheduler-restart"):
            stuck.result(timeout=5)
        after = c.nthreads()
        assert len(after) == 2 and not (set(after) & before)  # new workers
        assert [p.pid for p in cluster.worker_processes] == pids  # re-executed in place
        assert all(p.poll() is None for p in cluster.worker_processes)
        assert held_keys(c) == {a: [] for a in after}
        again = c.submit(inc, 1)  # the key of `done`: its release must not touch this
        del done
        gc.collect()
        assert again.result(timeout=20) == 2


# ----- squall worker --nworkers -----------------------------------------------------------


def test_worker_cli_with_several_processes() -> None:
    with cli_scheduler() as address:
        cmd = [sys.executable, "-m", "squall.cli", "worker", address, "--nworkers", "2"]
        workers = subprocess.Popen([*cmd, "--nthreads", "2", "--name", "w"])
        try:
            with Client(address) as c:
                eventually(lambda: len(c.nthreads()) == 2, timeout=30)
                assert set(c.nthreads().values()) == {2}
                names = {w["name"] for w in c.scheduler_info()["workers"].values()}
                assert names == {"w-0", "w-1"}
                assert c.gather(c.map(inc, range(10))) == list(range(1, 11))
                workers.send_signal(signal.SIGTERM)
                assert workers.wait(timeout=20) == 0
                eventually(lambda: c.nthreads() == {})
        finally:
            if workers.poll() is None:
                workers.kill()
    bad = subprocess.run(
        [sys.executable, "-m", "squall.cli", "worker", "tcp://127.0.0.1:1", "--nworkers", "0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode != 0 and "--nworkers must come to at least 1" in bad.stderr


@pytest.mark.parametrize("nworkers", ["auto", "-1"])
def test_worker_cli_sizes_itself_to_the_machine(nworkers: str) -> None:
    cores = os.cpu_count() or 1
    expected = default_shape(cores) if nworkers == "auto" else (cores, 1)
    with cli_scheduler() as address:
        cmd = [sys.executable, "-m", "squall.cli", "worker", address, "--nworkers", nworkers]
        workers = subprocess.Popen([*cmd, "--no-nanny"])
        try:
            with Client(address) as c:
                eventually(lambda: len(c.nthreads()) == expected[0], timeout=30)
                assert set(c.nthreads().values()) == {expected[1]}
        finally:
            workers.send_signal(signal.SIGTERM)
            assert workers.wait(timeout=20) == 0


def test_workers_measure_bandwidth_and_report_it(client: Client, cluster: LocalCluster) -> None:
    a, b = sorted(w["address"] for w in cluster.scheduler_info()["workers"])
    big = client.submit(bytes, 4_000_000, workers=[a], pure=False)
    assert client.submit(len, big, workers=[b]).result(timeout=30) == 4_000_000
    measured = client.run(lambda dask_worker: dask_worker.bandwidth)
    assert measured[a] is None or measured[a] > 0  # a may have fetched nothing
    assert measured[b] is not None and measured[b] > 0
    deadline = time.monotonic() + 10  # the next heartbeat carries it to the scheduler
    while time.monotonic() < deadline:
        seen = {w["address"]: w["bandwidth"] for w in cluster.scheduler_info()["workers"]}
        if seen[b] == pytest.approx(measured[b]):
            break
        time.sleep(0.1)
    assert seen[b] == pytest.approx(measured[b])
