"""squall.order against dask.order on real collection graphs."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from dask.order import order as dask_order

import squall

Key = Hashable


def graph_of(x: Any) -> dict[Key, Any]:
    return dict(x.__dask_graph__())


def deps_of(dsk: Mapping[Key, Any]) -> dict[Key, set[Key]]:
    from dask.core import get_dependencies

    out = {}
    for k, v in dsk.items():
        ds = v.dependencies if hasattr(v, "dependencies") else get_dependencies(dsk, task=v)
        out[k] = {d for d in ds if d in dsk}
    return out


def max_pressure(dsk: Mapping[Key, Any], prio: Mapping[Key, int]) -> int:
    """Most results held at once when run single-threaded in priority order."""
    deps = deps_of(dsk)
    waiting = {k: 0 for k in dsk}
    for ds in deps.values():
        for d in ds:
            waiting[d] += 1
    held, peak = 0, 0
    for k in sorted(dsk, key=prio.__getitem__):
        held += 1
        peak = max(peak, held)
        for d in deps[k]:
            waiting[d] -= 1
            if waiting[d] == 0:
                held -= 1
    return peak


def assert_topological(dsk: Mapping[Key, Any], prio: Mapping[Key, int]) -> None:
    assert set(prio) == set(dsk)
    for k, ds in deps_of(dsk).items():
        for d in ds:
            assert prio[d] < prio[k], (d, k)


def _df() -> dd.DataFrame:
    pdf = pd.DataFrame({"a": np.arange(4000) % 17, "b": np.arange(4000.0)})
    return dd.from_pandas(pdf, npartitions=20)


def _delayed_tree() -> Any:
    leaves = [dask.delayed(lambda i: i)(i) for i in range(64)]
    while len(leaves) > 1:
        leaves = [
            dask.delayed(lambda a, b: a + b)(a, b)
            for a, b in zip(leaves[::2], leaves[1::2], strict=True)
        ]
    return leaves[0]


def _rng_array(shape: tuple[int, ...], chunks: tuple[int, ...]) -> da.Array:
    return da.random.default_rng(0).random(shape, chunks=chunks)


COLLECTIONS: dict[str, Callable[[], Any]] = {
    "array-sum": lambda: _rng_array((400, 400), (20, 20)).sum(),
    "array-x-plus-xT-sum": lambda: (lambda x: (x + x.T).sum())(_rng_array((300, 300), (20, 20))),
    "array-mean-axis0": lambda: _rng_array((600, 400), (20, 100)).mean(axis=0),
    "array-matmul": lambda: (lambda x: x @ x.T)(_rng_array((200, 200), (25, 25))),
    "array-map-overlap": lambda: _rng_array((400, 400), (50, 50)).map_overlap(
        lambda b: b, depth=1, boundary="reflect"
    ),
    "array-rechunk": lambda: _rng_array((400, 400), (10, 400)).rechunk((400, 10)),
    "array-anom-mean": lambda: (lambda x: (x - x.mean(axis=0)).mean(axis=1))(
        _rng_array((400, 400), (20, 400))
    ),
    "dataframe-groupby": lambda: _df().groupby("a").b.sum(),
    "dataframe-shuffle": lambda: _df().shuffle("a", shuffle_method="tasks"),
    "delayed-tree": _delayed_tree,
}


@pytest.mark.parametrize("name", sorted(COLLECTIONS))
def test_memory_pressure_no_worse_than_dask(name: str) -> None:
    dsk = graph_of(COLLECTIONS[name]())
    ours = squall.order(dsk)
    theirs = dask_order(dsk)
    assert_topological(dsk, ours)
    # dask.order's pressure on this graph varies between 19 and 20 with the hash seed
    # (its set iteration order); ours is a deterministic 20, inside dask's range.
    slack = 1 if name == "array-x-plus-xT-sum" else 0
    assert max_pressure(dsk, ours) <= max_pressure(dsk, theirs) + slack


def test_matches_dask_exactly_where_hash_order_cannot_matter() -> None:
    inc, add = (lambda x: x + 1), (lambda x, y: x + y)
    dsk = {"a": 1, "b": 2, "c": (inc, "a"), "d": (add, "b", "c")}
    assert squall.order(dsk) == dask_order(dsk) == {"a": 0, "c": 1, "b": 2, "d": 3}
    chain = {f"x-{i}": (inc, f"x-{i - 1}") if i else (inc, 0) for i in range(50)}
    assert squall.order(chain) == dask_order(chain)
    tree = graph_of(_delayed_tree())
    assert squall.order(tree) == dask_order(tree)


def test_external_keys_are_left_out_like_dask() -> None:
    inc = lambda x: x + 1  # noqa: E731
    chain = {"b": (inc, "existing"), "c": (inc, "b")}
    assert squall.order(chain) == dask_order(chain) == {"b": 0, "c": 1}
    # Two users of one external key: dask's answer depends on the hash seed here, so
    # check the contract: externals left out, a topological numbering 0..n-1.
    dsk = {"b": (inc, "existing"), "c": (inc, "b"), "d": (inc, "existing")}
    ours = squall.order(dsk)
    assert sorted(ours.values()) == [0, 1, 2]
    assert ours["b"] < ours["c"]


def test_cycle_raises() -> None:
    inc = lambda x: x + 1  # noqa: E731
    with pytest.raises(squall.CycleError, match="a"):
        squall.order({"a": (inc, "b"), "b": (inc, "a")})


def test_empty_graph() -> None:
    assert squall.order({}) == {}
