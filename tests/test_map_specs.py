"""A ``map`` chunk of plain arguments is encoded in one compiled call
(``encode_map_chunk``): its specs, keys and payload must be exactly what pickling each
item and encoding the graph give, so the scheduler, the workers and a pure map's keys
cannot tell which path made them."""

from __future__ import annotations

import functools
import hashlib
import pickle
from typing import Any

import cloudpickle
from hypothesis import given, settings
from hypothesis import strategies as st

from squall._core import encode_map_chunk
from squall.client.submission import pure_token
from squall.protocol import update_graph
from squall.protocol.specs import call_prefix

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
    keys = [f"{name}-{token}-{i}" for i in range(start, start + len(specs))]
    # The function's bytes travel once, in the graph's blob table.
    return keys, *update_graph.encode(keys, specs, None, [FUNCTION])[:3]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(plain, min_size=3, max_size=3), min_size=1, max_size=5),
    st.integers(0, 10**6),
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
    token = hashlib.sha1(b"fn" + b"".join(specs), usedforsecurity=False).hexdigest()[:32]
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
