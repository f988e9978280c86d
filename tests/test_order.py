"""squall.order against dask.order on real collection graphs.

dask.order iterates hash sets, so on many graphs its result (and memory pressure)
depends on PYTHONHASHSEED. dask's side is therefore computed in subprocesses with a
few fixed seeds (all graphs of one seed in one process, the seeds in parallel), and
squall's is compared with the best and the worst of them.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Hashable, Mapping
from operator import add
from typing import Any

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from dask._task_spec import DataNode, Task, TaskRef
from dask.order import order as dask_order

import squall

Key = Hashable

HASH_SEEDS = (0, 1, 2, 3)


def graph_of(x: Any) -> dict[Key, Any]:
    return dict(x.__dask_graph__())


def deps_of(dsk: Mapping[Key, Any]) -> dict[Key, set[Key]]:
    from dask.core import get_dependencies

    out = {}
    for k, v in dsk.items():
        ds = v.dependencies if hasattr(v, "dependencies") else get_dependencies(dsk, task=v)
        out[k] = {d for d in ds if d in dsk}
    return out


def digest(dsk: Mapping[Key, Any]) -> str:
    """Identifies a graph's keys and edges, to check both processes order the same."""
    rows = sorted(f"{k!s}<-{sorted(map(str, ds))}" for k, ds in deps_of(dsk).items())
    return hashlib.sha1("\n".join(rows).encode()).hexdigest()


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


# Collections ------------------------------------------------------------------------


def _df(rows: int = 4000, npartitions: int = 20) -> dd.DataFrame:
    pdf = pd.DataFrame(
        {"a": np.arange(rows) % 17, "b": np.arange(rows * 1.0), "c": np.arange(rows)}
    )
    return dd.from_pandas(pdf, npartitions=npartitions)


def _ident(i: int) -> int:
    return i


def _delayed_tree() -> Any:
    # Explicit key names: tokens of lambdas would differ between processes.
    leaves = [dask.delayed(_ident)(i, dask_key_name=f"leaf-{i}") for i in range(64)]
    level = 0
    while len(leaves) > 1:
        level += 1
        leaves = [
            dask.delayed(add)(a, b, dask_key_name=f"add-{level}-{j}")
            for j, (a, b) in enumerate(zip(leaves[::2], leaves[1::2], strict=True))
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
        _ident, depth=1, boundary="reflect"
    ),
    "array-rechunk": lambda: _rng_array((400, 400), (10, 400)).rechunk((400, 10)),
    "array-anom-mean": lambda: (lambda x: (x - x.mean(axis=0)).mean(axis=1))(
        _rng_array((400, 400), (20, 400))
    ),
    "dataframe-groupby": lambda: _df().groupby("a").b.sum(),
    "dataframe-shuffle": lambda: _df().shuffle("a", shuffle_method="tasks"),
    "dataframe-set-index": lambda: _df(20000, 100).set_index(
        "c", npartitions=40, shuffle_method="tasks"
    ),
    "delayed-tree": _delayed_tree,
}

# Where squall holds more results than dask's best seed above, and why.
ABOVE_BEST_SEED = {
    # dask over seeds 0-3: 68, 73, 72, 71 (seeds 0-7: 68-73); squall: 70. Dozens of
    # dependents become ready together here, and dask's luckiest iteration orders of
    # those sets do slightly better than either order squall tries (ascending index,
    # or descending where that holds fewer results).
    "dataframe-set-index": "squall tries 2 of the many set orders dask may hit",
}


# Graphs on which dask.order's output does not depend on the hash seed --------------


def _legacy_chain(n: int) -> dict[Key, Any]:
    return {f"x-{i}": (add, f"x-{i - 1}", 1) if i else (add, 0, 1) for i in range(n)}


def _spec_chain(n: int) -> dict[Key, Any]:
    return {
        f"x-{i}": Task(f"x-{i}", add, TaskRef(f"x-{i - 1}"), 1) if i else Task("x-0", add, 0, 1)
        for i in range(n)
    }


def _legacy_tree(leaves: int) -> dict[Key, Any]:
    dsk: dict[Key, Any] = {("leaf", i): (_ident, i) for i in range(leaves)}
    level: list[Key] = list(dsk)
    depth = 0
    while len(level) > 1:
        depth += 1
        nxt: list[Key] = []
        for j in range(0, len(level), 2):
            k = (f"sum-{depth}", j // 2)
            dsk[k] = (add, *level[j : j + 2]) if j + 1 < len(level) else (_ident, level[j])
            nxt.append(k)
        level = nxt
    return dsk


def _spec_tree(leaves: int) -> dict[Key, Any]:
    def task(k: Key, v: Any) -> Task:
        return Task(k, v[0], *(TaskRef(a) if isinstance(a, tuple) else a for a in v[1:]))

    return {k: task(k, v) for k, v in _legacy_tree(leaves).items()}


def _with_data() -> dict[Key, Any]:
    """dask's docstring example, with a shared data node and a list alias added."""
    return {
        "a": 1,
        "b": 2,
        "c": (_ident, "a"),
        "d": (add, "b", "c"),
        "s": DataNode("s", 10),
        "e": Task("e", add, TaskRef("s"), TaskRef("d")),
        "f": Task("f", add, TaskRef("s"), TaskRef("e")),
        "out": ["f", "d"],
    }


def _independent() -> dict[Key, Any]:
    """Ties broken by str(key) alone, with keys whose str needs care."""
    keys: list[Key] = [
        "a",
        "é",
        "it's",
        'q"',
        "b\\s",
        ("a", 1),
        ("a", 10),
        ("a", -1),
        ("x",),
        (),
        (("n", 1), 2),
        10**30,
        -3,
        2.5,
        (1.5, 1e20),
        ("a\n",),
        (True, None),
        b"x",
        "\U0001f600",
        ("b", 2**70),
    ]
    return {k: (_ident, "not-a-key") for k in keys}


EXACT: dict[str, Callable[[], dict[Key, Any]]] = {
    "legacy-chain": lambda: _legacy_chain(50),
    "spec-chain": lambda: _spec_chain(50),
    "legacy-tree": lambda: _legacy_tree(100),
    "spec-tree": lambda: _spec_tree(100),
    "delayed-tree": lambda: graph_of(_delayed_tree()),
    "with-data": _with_data,
    "independent": _independent,
}


# dask.order under fixed hash seeds --------------------------------------------------

_CHILD = """
import importlib.util, json, sys
# Under the test module's own name, so that functions tokenize (name keys) alike.
spec = importlib.util.spec_from_file_location(sys.argv[2], sys.argv[1])
m = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
from dask.order import order
pressure = {}
for name, build in m.COLLECTIONS.items():
    dsk = m.graph_of(build())
    pressure[name] = [m.max_pressure(dsk, order(dsk)), m.digest(dsk)]
exact = {}
for name, build in m.EXACT.items():
    dsk = build()
    o = order(dsk)
    exact[name] = [o[k] for k in dsk]
print(json.dumps({"pressure": pressure, "exact": exact}))
"""


@pytest.fixture(scope="module")
def dask_runs() -> list[dict[str, Any]]:
    """dask's results for every graph above, one process per hash seed."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, __file__, __name__],
            env=dict(os.environ, PYTHONHASHSEED=str(seed)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in HASH_SEEDS
    ]
    runs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        runs.append(json.loads(out))
    return runs


@pytest.mark.parametrize("name", sorted(COLLECTIONS))
def test_memory_pressure_no_worse_than_dask(name: str, dask_runs: list[dict[str, Any]]) -> None:
    dsk = graph_of(COLLECTIONS[name]())
    ours = squall.order(dsk)
    assert_topological(dsk, ours)
    seeds = [run["pressure"][name] for run in dask_runs]
    assert all(d == digest(dsk) for _, d in seeds), "dask ordered another graph"
    theirs = [p for p, _ in seeds]
    pressure = max_pressure(dsk, ours)
    assert pressure <= max(theirs), (pressure, theirs)
    if name not in ABOVE_BEST_SEED:
        assert pressure <= min(theirs), (pressure, theirs)


def test_x_plus_xT_sum_gets_dasks_luckier_seeds() -> None:
    # dask: 19 or 20 depending on the seed (seeds 0-5: 19, 20, 20, 19, 20, 19).
    dsk = graph_of(COLLECTIONS["array-x-plus-xT-sum"]())
    assert max_pressure(dsk, squall.order(dsk)) == 19


@pytest.mark.parametrize("name", sorted(EXACT))
def test_matches_dask_exactly_where_hash_order_cannot_matter(
    name: str, dask_runs: list[dict[str, Any]]
) -> None:
    dsk = EXACT[name]()
    theirs = [run["exact"][name] for run in dask_runs]
    assert all(t == theirs[0] for t in theirs), "dask's result depends on the hash seed"
    ours = squall.order(dsk)
    assert [ours[k] for k in dsk] == theirs[0]
    assert ours == dask_order(dsk)


def test_legacy_and_task_spec_forms_order_alike() -> None:
    for legacy, spec in [(_legacy_chain(30), _spec_chain(30)), (_legacy_tree(50), _spec_tree(50))]:
        assert squall.order(legacy) == squall.order(spec)


def test_docstring_example() -> None:
    dsk = {"a": 1, "b": 2, "c": (_ident, "a"), "d": (add, "b", "c")}
    assert squall.order(dsk) == dask_order(dsk) == {"a": 0, "c": 1, "b": 2, "d": 3}


def test_legacy_dependencies_are_found_like_dask() -> None:
    # Keys nested in lists, dicts, inner tasks, TaskRefs and task-spec nodes count;
    # non-task tuples only as whole keys; unhashable and non-key values are skipped.
    dsk: dict[Key, Any] = {
        "a": (_ident, 1),
        ("b", 0): (_ident, 2),
        "c": (add, ["a", {"k": ("b", 0)}], (1, [2])),
        "d": (add, (_ident, "c"), TaskRef("a")),
        "e": [Task("inner", add, TaskRef("d"), 1), np.zeros(2), ("b", 0)],
        "f": "e",
        "g": (add, ("a", "c"), "nokey"),
    }
    from dask._task_spec import DependenciesMapping

    expected = {k: set(v) for k, v in DependenciesMapping(dsk).items()}
    assert squall.order(dsk) == squall.order(dsk, expected)
    assert expected["g"] == set()
    assert_topological(dsk, squall.order(dsk))


def test_explicit_dependencies_and_mappings() -> None:
    dsk = _legacy_chain(5)
    deps = {k: ({f"x-{int(k[2:]) - 1}"} if k != "x-0" else set()) for k in dsk}
    assert squall.order(dsk, deps) == squall.order(dsk)
    from types import MappingProxyType

    assert squall.order(MappingProxyType(dsk)) == squall.order(dsk)


def test_external_keys_are_left_out_like_dask() -> None:
    chain = {"b": Task("b", _ident, TaskRef("existing")), "c": Task("c", _ident, TaskRef("b"))}
    assert squall.order(chain) == dask_order(chain) == {"b": 0, "c": 1}
    # Two users of one external key: dask's answer depends on the hash seed here, so
    # check the contract: externals left out, a topological numbering 0..n-1.
    dsk = {
        "b": Task("b", _ident, TaskRef("existing")),
        "c": Task("c", _ident, TaskRef("b")),
        "d": Task("d", _ident, TaskRef("existing")),
    }
    ours = squall.order(dsk)
    assert sorted(ours.values()) == [0, 1, 2]
    assert ours["b"] < ours["c"]
    # In legacy tuples, strings that are not keys of the graph are plain values.
    legacy = {"b": (_ident, "existing"), "c": (_ident, "b")}
    assert squall.order(legacy) == dask_order(legacy) == {"b": 0, "c": 1}


def test_cycle_raises_naming_keys() -> None:
    with pytest.raises(squall.CycleError, match=r"\('a', 1\)"):
        squall.order({("a", 1): (_ident, "b"), "b": (_ident, ("a", 1)), "c": (_ident, "b")})


def test_empty_graph() -> None:
    assert squall.order({}) == {}
