"""The client's table of futures' states (docs/runtime.md#the-table-of-states): a map
chunk's keys held as a run behave exactly as a dict of them would."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squall._core import FutureTable, encode_keys, finish_keys, hold_keys, release_states
from squall.client.futures import Future, FutureState

CLIENT = object()  # hold_keys only stores it in the futures


def run_keys(head: str, start: int, n: int) -> list[Any]:
    return [f"{head}{i:08x}" for i in range(start, start + n)]


def hold(
    table: FutureTable, keys: list[Any], run: tuple[str, int] | None = None
) -> tuple[list[Future], list[int] | None]:
    return hold_keys(table, keys, Future, FutureState, CLIENT, run)


def release(table: FutureTable, futures: list[Future]) -> list[Any]:
    """Releases one reference per future (its state, then its key)."""
    pairs = [x for f in futures for x in (f._state, f.key)]
    return release_states(table, pairs, FutureState)


def test_a_run_of_keys_is_held_as_a_dict_of_them_would_be() -> None:
    table = FutureTable()
    keys = run_keys("inc-ab12", 5, 1000)
    futures, fresh = hold(table, keys, ("inc-ab12", 5))
    assert fresh is None and len(table) == 1000
    assert [f.key for f in futures] == keys
    for f in futures[::97]:
        assert table[f.key] is f._state and f.key in table and table.get(f.key) is f._state
    assert "inc-ab1200000004" not in table and "inc-ab12000003ed" not in table
    assert dict(table.items()) == {f.key: f._state for f in futures}
    assert table.values() == [f._state for f in futures]
    # The same keys again count one more reference each.
    again, fresh = hold(table, keys[:10], ("inc-ab12", 5))
    assert fresh == [] and [f._state for f in again] == [f._state for f in futures[:10]]
    assert futures[0]._state.refs == 2
    with pytest.raises(KeyError):
        table["inc-ab1200000004"]
    assert table.pop("inc-ab1200000004", None) is None


def test_a_run_s_key_entered_alone_goes_to_its_place_in_the_run() -> None:
    table = FutureTable()
    futures, _ = hold(table, run_keys("f-0", 0, 4), ("f-0", 0))
    gone = release(table, [futures[1]])
    assert gone == ["f-000000001"] and len(table) == 3 and "f-000000001" not in table
    st_ = FutureState()
    table["f-000000001"] = st_
    assert table["f-000000001"] is st_ and len(table) == 4
    assert table.pop("f-000000001") is st_ and len(table) == 3


def test_a_key_held_alone_keeps_its_head_from_making_a_run() -> None:
    table = FutureTable()
    (alone,), _ = hold(table, ["g-00000002"])
    futures, fresh = hold(table, run_keys("g-", 0, 4), ("g-", 0))
    assert fresh == [0, 1, 3] and futures[2]._state is alone._state
    assert alone._state.refs == 2 and len(table) == 4


def test_a_run_whose_keys_are_not_its_head_and_indices_is_refused() -> None:
    table = FutureTable()
    with pytest.raises(ValueError, match="not h-00000001"):
        hold(table, ["h-00000000", "h-00000002"], ("h-", 0))
    assert len(table) == 0


def test_indices_beyond_eight_hex_digits_are_held_alone() -> None:
    table = FutureTable()
    keys = [f"big-{i:08x}" for i in range(2**32 - 2, 2**32 + 2)]
    futures, fresh = hold(table, keys, ("big-", 2**32 - 2))
    assert fresh is None and dict(table.items()) == {f.key: f._state for f in futures}
    assert release(table, futures) == keys and len(table) == 0


def test_key_in_memory_finishes_the_states_of_runs_and_of_the_dict() -> None:
    table = FutureTable()
    futures, _ = hold(table, run_keys("m-", 0, 3), ("m-", 0))
    others, _ = hold(table, [("x", 1), "plain", 7])
    waited = futures[2]._state
    waited.exception = ValueError("made its rare part")
    done = [futures[0].key, futures[2].key, ("x", 1), 7, "not-held"]
    awaited = finish_keys(table, encode_keys(done), FutureState)
    assert awaited == [waited]
    statuses = [f._state.status for f in futures + others]
    assert statuses == ["finished", "pending", "finished", "finished", "pending", "finished"]


def test_a_state_is_two_slots_and_keeps_its_count_in_its_rare_part() -> None:
    table = FutureTable()
    futures, _ = hold(table, run_keys("r-", 0, 2) * 2)  # two futures per key
    state = futures[0]._state
    # Two slots: 48 bytes with the collector's header on CPython 3.10-3.14.
    assert FutureState.__basicsize__ == object.__basicsize__ + 2 * 8 and state.refs == 2
    state.set_error(ValueError("rare"), None)  # the count moves to the rare part
    assert state.refs == 2 and state.status == "error"
    assert release(table, futures[:1]) == [] and state.refs == 1
    assert release(table, futures[2:3]) == ["r-00000000"] and state.refs == 0
    assert "r-00000000" not in table and "r-00000001" in table


def test_a_cycle_through_a_run_s_state_is_collected() -> None:
    class Marker:
        table: FutureTable

    table, marker, error = FutureTable(), Marker(), ValueError("holds the table")
    futures, _ = hold(table, run_keys("c-", 0, 2), ("c-", 0))
    marker.table = table
    error.marker = marker  # type: ignore[attr-defined]
    futures[0]._state.set_error(error, None)  # the table holds the state, it the table
    alive = weakref.ref(marker)
    del table, marker, error, futures
    gc.collect()
    assert alive() is None


# ----- against a dict ---------------------------------------------------------------

HEADS = ["a-", "a-0", "b-"]
OTHER_KEYS: list[Any] = ["plain", ("t", 1), 3, "a-00000001x"]
run_key = st.builds(lambda h, i: f"{h}{i:08x}", st.sampled_from(HEADS), st.integers(0, 8))
ops = st.lists(
    st.one_of(
        st.tuples(st.just("run"), st.sampled_from(HEADS), st.integers(0, 4), st.integers(1, 4)),
        st.tuples(
            st.just("hold"),
            st.lists(
                st.one_of(
                    st.sampled_from(OTHER_KEYS),
                    st.builds(
                        lambda h, i: f"{h}{i:08x}", st.sampled_from(HEADS), st.integers(0, 8)
                    ),
                ),
                max_size=4,
            ),
        ),
        st.tuples(st.just("release"), st.integers(0, 50)),
        st.tuples(st.just("pop"), run_key),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_the_table_holds_what_a_dict_would(script: list[tuple[Any, ...]]) -> None:
    table, model = FutureTable(), {}
    handed: list[Future] = []  # the futures not released yet
    for op, *args in script:
        if op in ("run", "hold"):
            if op == "run":
                head, start, n = args
                keys, run = run_keys(head, start, n), (head, start)
            else:
                keys, run = args[0], None
            futures, fresh = hold(table, keys, run)
            expect_fresh = []
            for i, (key, f) in enumerate(zip(keys, futures, strict=True)):
                if key in model:
                    assert f._state is model[key]
                else:
                    model[key] = f._state
                    expect_fresh.append(i)
            assert (fresh if fresh is not None else list(range(len(keys)))) == expect_fresh
            handed += futures
        elif op == "release" and handed:
            future = handed.pop(args[0] % len(handed))
            state, key = future._state, future.key
            expect = []
            if state.refs == 1:
                if model.get(key) is state:
                    del model[key]
                if key not in model:
                    expect = [key]
            assert release(table, [future]) == expect
        elif op == "pop":
            assert table.pop(args[0], None) is model.pop(args[0], None)
        assert len(table) == len(model)
        assert dict(table.items()) == model
        for key in model:
            assert table[key] is model[key]
