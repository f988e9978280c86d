"""squall.dask.graphs without a cluster: specs run as dask runs the graph, functions are
pickled once per graph, and legacy graphs convert as dask converts them."""

from __future__ import annotations

import functools
import gc
import operator
import pickle
import pickletools
import subprocess
import sys
import types
import weakref
from collections.abc import Hashable
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import dask
import dask.array as da
import numpy as np
import pytest
from dask._task_spec import (
    Alias,
    DataNode,
    Dict,
    List,
    Task,
    TaskRef,
    _execute_subgraph,
    convert_legacy_graph,
)

from squall._core import RESTORE_NODE_CODE, CycleError, call_node, restore_node
from squall.dask import graphs as graph
from squall.dask.gc_pause import gc_paused
from squall.dask.subgraph import execute_subgraph
from squall.protocol.specs import run_spec

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Point:
    """A class cloudpickle sends by value (this module is registered so)."""

    def __init__(self, x: int) -> None:
        self.x = x

    def shifted(self, d: int) -> int:
        return self.x + d


def _run(g: graph.Graph, key: Hashable) -> Any:
    """``key``'s value, each spec unpickled and run as a worker runs it."""
    index = {k: i for i, k in enumerate(g.keys)}
    done: dict[Hashable, Any] = {}

    def value(k: Hashable) -> Any:
        if k not in done:
            i = index[k]
            done[k] = run_spec(g.specs[i], {d: value(d) for d in g.deps[i]})
        return done[k]

    return value(key)


def _materialize(*collections: Any) -> tuple[graph.Graph, list[Hashable]]:
    expr = graph.compute_expr(list(collections), True)
    keys = graph.flatten_keys(expr.__dask_keys__())
    return graph.materialize(expr, keys), keys


def test_specs_run_as_dask_runs_the_graph() -> None:
    inc = dask.delayed(lambda v: v + 1)
    pts = [dask.delayed(Point)(i) for i in range(4)]
    parts = [
        inc(dask.delayed(operator.mul)(i, 2)) for i in range(4)
    ] + [  # methods, partials, lambdas as arguments, modules, nested containers
        dask.delayed(p.shifted)(10) for p in pts
    ]
    applied = dask.delayed(list)(dask.delayed(map)(lambda v: v * 3, parts))
    nested = dask.delayed(functools.partial(sorted, reverse=True))(
        [parts[0], {"a": parts[1]}["a"], (parts[2],)[0]]
    )
    ones = dask.delayed(getattr)(np, "ones")
    x = da.arange(36, chunks=7).reshape((6, 6)).rechunk(4)
    cases = [applied, nested, dask.delayed(sum)(parts), ones, (x + x.T).sum(), x.mean(axis=0)]
    for case in cases:
        g, keys = _materialize(case)
        (expected,) = dask.compute(case, scheduler="sync")
        got = _run(g, keys[0])
        if isinstance(expected, types.FunctionType | type(np.ones)):
            assert got is expected
        else:
            np.testing.assert_array_equal(got, expected)


def test_functions_are_pickled_once_per_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    dumps = cloudpickle.dumps

    def counting(obj: Any, *args: Any, **kwargs: Any) -> bytes:
        calls.append(obj)
        blob: bytes = dumps(obj, *args, **kwargs)
        return blob

    monkeypatch.setattr(graph.cloudpickle, "dumps", counting)
    add = dask.delayed(lambda a, b: a + b)
    ident = dask.delayed(lambda v: v)
    leaves = [ident(i) for i in range(50)]
    total = add(leaves[0], leaves[1])
    for leaf in leaves[2:]:
        total = add(total, leaf)
    g, keys = _materialize(total)
    assert len(g.keys) == 99
    # One lambda shared by the leaves, one by the sums, each pickled once.
    assert len(calls) == 2
    assert _run(g, keys[0]) == sum(range(50))


def test_fused_tasks_run_squalls_subgraph_to_dasks_values() -> None:
    # dask fuses blockwise chains into tasks running an inner graph; squall pickles its
    # execute_subgraph in place of dask's (ordered by squall.order, not dask.order).
    x = da.arange(144, chunks=4).reshape((12, 12)).rechunk(4)
    y = ((x + x.T) * 2 - 1).sum(axis=0)
    g, keys = _materialize(y)
    funcs = [getattr(pickle.loads(spec), "func", None) for spec in g.specs]
    assert execute_subgraph in funcs
    assert _execute_subgraph not in funcs
    # The sum's toolz compositions are shared functions: a blob each, not in every spec.
    assert any(b"Compose" in blob for blob in g.blobs)
    # Nodes and functions come back through one function, named by its extension code
    # once per spec and read from the memo after that: no global, no import.
    for spec in g.specs:
        ops = [(op.name, arg) for op, arg, _ in pickletools.genops(spec)]
        assert ops[:4] == [
            ("PROTO", 5),
            ("EXT1", RESTORE_NODE_CODE),
            ("MEMOIZE", None),
            ("POP", None),
        ]
        assert ("EXT1", RESTORE_NODE_CODE) not in ops[4:]
    # Functions and classes named by reference (operator's, numpy's, the `list` a
    # partial sum casts to) are shared blobs as well: no spec names any global.
    assert not set().union(*map(_globals_of, g.specs))
    assert any(b"builtins" in blob and b"list" in blob for blob in g.blobs)
    (expected,) = dask.compute(y, scheduler="sync")
    got = [_run(g, k) for k in keys]
    np.testing.assert_array_equal(np.concatenate(got), expected)


def _globals_of(spec: bytes) -> set[tuple[str, str]]:
    """The (module, name) globals a pickle names (not those inside its blobs)."""
    strings: list[str] = []
    out = set()
    for op, arg, _ in pickletools.genops(spec):
        if isinstance(arg, str):
            strings.append(arg)
        elif op.name == "STACK_GLOBAL":
            out.add((strings[-2], strings[-1]))
    return out


def test_tasks_unpickle_to_their_slots_and_refuse_another_dasks_state() -> None:
    task = Task(("t", 0), operator.add, TaskRef("a"), 1, _data_producer=True)
    (g,) = [graph.pack({task.key: task}, {})]
    back = pickle.loads(g.specs[0])
    assert type(back) is Task
    assert {s: getattr(back, s) for s in Task.get_all_slots()} == {
        s: getattr(task, s) for s in Task.get_all_slots()
    }
    with pytest.raises(ValueError, match="different dask versions"):
        restore_node(0, (1, 2))
    with pytest.raises(ValueError, match="no node kind 9"):
        restore_node(9)


def test_an_extension_code_taken_by_another_library_fails_the_import_naming_it() -> None:
    # Going on would call the other library's object where restore_node belongs.
    code = (
        "import copyreg; copyreg.add_extension('elsewhere', 'thing', "
        f"{RESTORE_NODE_CODE}); import squall._core"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert f"squall needs pickle extension code {RESTORE_NODE_CODE}" in done.stderr
    assert "elsewhere" in done.stderr


_seen: list[weakref.ref[Any]] = []


class _Value:
    """A value a weak reference can watch."""


def _make() -> _Value:
    v = _Value()
    _seen.append(weakref.ref(v))
    return v


def _alive(_: Any) -> bool:
    gc.collect()
    return _seen[-1]() is not None


def test_execute_subgraph_gives_dasks_value_and_drops_spent_values() -> None:
    # a -> b -> c -> out: by the time c runs, a's value is gone (b and c need only
    # their own input), as dask's execute_graph drops it.
    inner = {
        "a": Task("a", _make),
        "b": Task("b", _alive, TaskRef("a")),
        "c": Task("c", _alive, TaskRef("b")),
        "out": Task("out", operator.add, TaskRef("c"), TaskRef("inp")),
    }
    assert execute_subgraph(inner, "out", ("inp",), 10) == 10  # c saw a gone: False + 10
    assert _execute_subgraph(inner, "out", ("inp",), 10) == 10
    # Not a chain (squall.order's order): a diamond whose two sides need a; at the
    # end a's value is gone, the sides' values too.
    diamond = {
        "a": Task("a", _make),
        "l": Task("l", _alive, TaskRef("a")),
        "r": Task("r", _alive, TaskRef("a")),
        "end": Task("end", lambda x, y, z: (x, y, _alive(z)), TaskRef("l"), TaskRef("r"), 0),
    }
    assert execute_subgraph(diamond, "end", ()) == (True, True, False)
    assert _execute_subgraph(diamond, "end", ()) == (True, True, False)


def test_execute_subgraph_refuses_a_cycle() -> None:
    loop = {"a": Task("a", operator.neg, TaskRef("b")), "b": Task("b", operator.neg, TaskRef("a"))}
    with pytest.raises(CycleError):
        execute_subgraph(loop, "a", ())


def test_execute_subgraph_raises_the_inner_tasks_error() -> None:
    inner = {
        "a": Task("a", operator.truediv, TaskRef("inp"), 0),
        "b": Task("b", operator.neg, TaskRef("a")),
    }
    with pytest.raises(ZeroDivisionError):
        execute_subgraph(inner, "b", ("inp",), 1)


def test_delayed_graphs_cull_as_dask_optimizes_them() -> None:
    # materialize culls dask.delayed graphs itself: the same tasks and annotations as
    # dask's optimizer, including a callable annotation and an unneeded branch.
    with dask.annotate(priority=lambda k: len(str(k)), retries=2):
        a = dask.delayed(operator.add)(1, 2)
        unused = dask.delayed(operator.mul)(a, 3)
    with dask.annotate(workers="w1"):
        b = dask.delayed(operator.neg)(a)
    total = dask.delayed(sum)([a, b, unused])
    for wanted in ([b], [total], [b, a]):
        expr = graph.compute_expr(wanted, True)
        keys = graph.flatten_keys(expr.__dask_keys__())
        assert graph._delayed_layers(expr) is not None
        g = graph.materialize(expr, keys)
        dsk = graph._graph_nodes(expr.__dask_graph__())
        assert sorted(map(str, g.keys)) == sorted(map(str, dsk))
        expected = graph.pack(dsk, expr.__dask_annotations__())
        got = {g.keys[i]: o for o, ix in g.task_options for i in ix}
        assert got == {expected.keys[i]: o for o, ix in expected.task_options for i in ix}
    g, keys = _materialize(b)
    assert _run(g, keys[0]) == -3


def test_shared_functions_travel_once_and_the_scheduler_gives_specs_back_whole() -> None:
    from squall._core import Scheduler
    from squall.protocol import update_graph

    x = da.ones((40, 40), chunks=4)
    g, _ = _materialize((x + x.T).sum())
    assert g.blobs
    n, kb, payload, _ = update_graph.encode(g.keys, g.specs, g.deps, g.blobs)
    _, _, whole, _ = update_graph.encode(g.keys, g.specs, g.deps)
    # The array's functions are most of its specs' bytes.
    assert len(payload) < len(whole) / 2
    s = Scheduler()
    s.submit_wire(s.client("c"), payload, n, kb, now=0.0)
    for key, spec in zip(g.keys, g.specs, strict=True):
        task = s.lookup(key)
        assert task is not None and s.task_info(task)["run_spec"] == spec


def test_futures_in_a_graph_travel_as_their_keys() -> None:
    class Ref(TaskRef):
        __slots__ = ()

        def __reduce__(self) -> Any:
            raise TypeError("a client's future itself cannot be pickled")

    dsk = {"y": Task("y", operator.add, Ref("x"), 1)}
    g = graph.pack(dsk, {})
    assert g.deps == [["x"]]
    assert pickle.loads(g.specs[0])({"x": 41}) == 42


def test_a_method_bound_to_an_object_is_not_shared() -> None:
    # A module's built-in function is a blob; one bound to an object (which tasks could
    # mutate through) is pickled with each task that names it, as the object and the
    # method's name (through ``getattr``, a module's function).
    held: list[int] = [7]
    dsk = {"a": Task("a", len, held), "b": Task("b", held.copy)}
    g = graph.pack(dsk, {})
    assert [pickle.loads(blob) for blob in g.blobs] == [len, getattr]
    assert [pickle.loads(spec)({}) for spec in g.specs] == [1, [7]]


def _pair(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
    return args, kwargs


class _Ref(TaskRef):
    __slots__ = ()


def test_nodes_are_called_as_dask_calls_them() -> None:
    values = {"a": 1, "b": [2], "c": {"x": 3}}
    inner = Task("i", operator.add, TaskRef("a"), 10)
    nodes = [
        Task("t", operator.add, TaskRef("a"), 1),
        Task("t", _pair),
        Task("t", _pair, inner, TaskRef("b"), 5, key=TaskRef("c"), other=inner, plain=7),
        Task("t", _pair, Task("n", _pair, inner, _Ref("a")), DataNode("d", 4), Alias("al", "b")),
        Task("t", _pair, List(TaskRef("a"), inner), Dict({"k": TaskRef("b")})),
        Task("t", len, TaskRef("b")),
        DataNode("d", 5),
        Alias("al", "c"),
    ]
    for node in nodes:
        assert call_node(node, values) == node(values), node
        assert call_node(node, {**values, "more": 0}) == node(values), node
    # The function's own error, and dask's for values that lack a dependency.
    failing = Task("t", operator.truediv, TaskRef("a"), 0)
    with pytest.raises(ZeroDivisionError):
        call_node(failing, values)
    lacking = Task("t", _pair, TaskRef("a"), TaskRef("zz"))
    with pytest.raises(RuntimeError) as ours:
        call_node(lacking, values)
    with pytest.raises(RuntimeError) as dasks:
        lacking(values)
    assert str(ours.value) == str(dasks.value)


def _nested(depth: int) -> Task:
    node = Task("n0", operator.neg, TaskRef("a"))
    for i in range(1, depth):
        node = Task(f"n{i}", operator.neg, node)
    return node


def test_deeply_nested_tasks_recurse_through_dasks_own_call() -> None:
    # Past a bound the compiled call hands nesting to dask's Python, whose recursion
    # limit reports a pathological depth as an error instead of exhausting the stack.
    values = {"a": 1}
    assert call_node(_nested(200), values) == _nested(200)(values) == 1
    with pytest.raises(RecursionError):
        call_node(_nested(20_000), values)


def test_legacy_graphs_convert_as_dask_converts_them() -> None:
    legacy = {
        "a": 1,
        "b": (operator.add, "a", 1),
        "c": Alias("c"),  # an alias of itself: dropped by dask
        "d": Alias("d", "b"),
        "e": DataNode("e", 5),
    }
    assert graph._graph_nodes(legacy).keys() == convert_legacy_graph(legacy).keys()
    nodes = {k: v for k, v in convert_legacy_graph(legacy).items()}
    nodes["c"] = Alias("c")
    assert graph._graph_nodes(nodes).keys() == convert_legacy_graph(nodes).keys()


def test_materialize_pauses_the_collector_and_restores_it() -> None:
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # left to a program that manages it itself
    finally:
        gc.enable()
