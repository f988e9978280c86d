"""A ``map`` chunk of plain arguments is encoded in one compiled call
(``encode_map_chunk``): its specs, keys and payload must be exactly what pickling each
item and encoding the graph give, so the scheduler, the workers and a pure map's keys
cannot tell which path made them. A worker makes such a call's arguments without the
unpickler, and must give what the unpickler gives."""

from __future__ import annotations

import functools
import hashlib
import pickle
from typing import Any

import cloudpickle
from hypothesis import given, settings
from hypothesis import strategies as st

import squall
from squall._core import RunAnswer, WorkerCore, encode_map_chunk
from squall.client.submission import map_head, map_keys, pure_token
from squall.protocol import update_graph
from squall.protocol.specs import call_prefix, fill_call
from squall.worker.memory import sizeof_value

FUNCTION = cloudpickle.dumps(len)
PREFIX = call_prefix(FUNCTION)

plain = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=300),
    st.binary(max_size=300),
)


def by_pickler(columns: list[list[Any]], name: str, start: int, token: str) -> Any:
    specs = [PREFIX + pickle.dumps((args, {}), protocol=5) for args in zip(*columns, strict=True)]
    keys = map_keys(name, token, start, len(specs))
    # The function's bytes travel once, in the graph's blob table.
    return keys, *update_graph.encode(keys, specs, None, [FUNCTION])[:3], map_head(name, token)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(plain, min_size=3, max_size=3), min_size=1, max_size=5),
    st.integers(0, 2**36),
)
def test_plain_items_encode_as_the_pickler_writes_them(rows: list[list[Any]], start: int) -> None:
    columns = [list(c) for c in zip(*rows, strict=True)]
    for width in (1, 2, 3):
        got = encode_map_chunk(PREFIX, columns[:width], "f", start, "tok")
        assert got == by_pickler(columns[:width], "f", start, "tok")


def test_a_pure_chunk_s_token_is_a_function_of_every_spec() -> None:
    columns = [list(range(5)), ["a", "b", "c", "d", "e"]]
    got = encode_map_chunk(PREFIX, columns, "f", 0, functools.partial(pure_token, b"fn"))
    specs = [PREFIX + pickle.dumps((args, {}), protocol=5) for args in zip(*columns, strict=True)]
    token = hashlib.sha1(b"fn" + b"".join(specs), usedforsecurity=False).hexdigest()[:24]
    assert got == by_pickler(columns, "f", 0, token)


def test_one_object_twice_in_a_call_is_pickled_as_a_reference() -> None:
    s, b = "shared" * 3, b"bytes" * 3
    columns = [[s, b, 7], [s, b, 7], [s, b"other", 2**40]]
    assert encode_map_chunk(PREFIX, columns, "f", 0, "t") == by_pickler(columns, "f", 0, "t")
    # Many arguments (a MARK tuple) and many memoized ones.
    base = [[f"s{i}"] for i in range(300)]
    wide = base + [list(c) for c in base]  # each string twice per call, by reference
    assert encode_map_chunk(PREFIX, wide, "f", 0, "t") == by_pickler(wide, "f", 0, "t")


def test_anything_not_plain_is_left_to_the_pickler() -> None:
    class Sub(int):
        pass

    for odd in ([1.0, (1,)], [1, Sub(2)], [2**64], ["\ud800"], [b"x" * 70_000], [True, [1]]):
        assert encode_map_chunk(PREFIX, [odd], "f", 0, "t") is None


def echo(*args: Any) -> tuple[Any, ...]:
    return args


def run_on_a_worker(calls: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """What ``echo`` returns on a worker core for each call, sent as a map's specs are
    (the function as a blob, each call pickled as the client pickles it)."""
    function = cloudpickle.dumps(echo)
    s = squall.core.Scheduler({"validate": True, "worker-saturation": float("inf")})
    c = s.client("c")
    s.add_worker("tcp://127.0.0.1:1", 1, now=0.0)
    keys = [f"echo-{i}" for i in range(len(calls))]
    specs = [call_prefix(function) + pickle.dumps((a, {}), protocol=5) for a in calls]
    n, keys_bytes, payload, _ = update_graph.encode(keys, specs, None, [function])
    s.submit_wire(c, payload, n, keys_bytes, now=0.0)
    [(addresses, batch, count)] = s.encode_compute(s.take_commands()).values()
    core = WorkerCore("tcp://127.0.0.1:1", 1, [], 0.0, fill_call, repr, sizeof_value, 8)
    core.compute(batch, addresses)
    core.add_thread()
    done = 0
    while done < count:  # each run returns once a result waits to be reported
        assert core.run() == RunAnswer.WAKE
        finished, erred, _, _ = core.take_reports()
        assert not erred
        done += finished[0] if finished else 0
    core.close()
    data = core.data()
    return [data[k] for k in keys]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(plain, max_size=4).map(tuple), min_size=1, max_size=8))
def test_a_worker_calls_with_what_the_unpickler_gives(calls: list[tuple[Any, ...]]) -> None:
    """Plain calls are made without the unpickler on the worker: the same values, of
    the same types, and one object where the call held one object twice."""
    shared = "shared" * 3
    calls = [*calls, (shared, shared, b"x", 2**40), (-1.5, None, True, "é"), (2**70,)]
    for got, sent in zip(run_on_a_worker(calls), calls, strict=True):
        want = pickle.loads(pickle.dumps(sent, protocol=5))
        assert [type(x) for x in got] == [type(x) for x in want]
        assert got == want
    a, b = run_on_a_worker([(shared, shared)])[0]
    assert a is b
