"""Hot wire messages: compute batches encoded by the scheduler, decoded by workers."""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import cloudpickle  # type: ignore[import-untyped]
import pytest

import squall
from squall._core import decode_compute, decode_keys, split_call
from squall.protocol import update_graph
from squall.protocol.specs import call_prefix, load_function, make_spec, run_spec


def test_compute_batches_roundtrip_per_worker() -> None:
    s = squall.core.Scheduler({"validate": True})
    c = s.client("c")
    a = s.add_worker("tcp://127.0.0.1:1", 1, now=0.0)
    b = s.add_worker("tcp://127.0.0.1:2", 1, now=0.0, resources=[("GPU", 1.0)])
    s.submit(c, [("x", 0)], specs=[b"spec-x"], now=0.0)
    s.take_commands()
    x = s.lookup(("x", 0))
    assert x is not None
    holder = s.task_info(x)["processing_on"]
    w = a if holder == "tcp://127.0.0.1:1" else b
    run = s.task_info(x)["run_id"]
    assert s.task_finished(w, x, run, 1234, now=0.1) == "applied"
    s.take_commands()
    s.submit(
        c, ["y"], [[("x", 0)]], specs=[b"spec-y"], resources=[("GPU", 1.0)], priority=5, now=0.2
    )
    cmds = s.take_commands()
    batches = s.encode_compute(cmds)
    assert list(batches) == [b]
    addresses, payload, count = batches[b]
    assert count == 1
    [(task, run_id, key, prio, spec, actor, resources, deps)] = decode_compute(payload, addresses)
    assert key == "y" and spec == b"spec-y" and not actor
    assert task == s.lookup("y") and run_id == s.task_info(task)["run_id"]
    assert prio[0] == -5
    assert resources == [("GPU", 1.0)]
    assert deps == [(("x", 0), 1234, [holder])]


def test_truncated_compute_payload_is_an_error() -> None:
    s = squall.core.Scheduler()
    c = s.client("c")
    s.add_worker("tcp://127.0.0.1:1", 1, now=0.0)
    s.submit(c, ["a"], specs=[b"abc"], now=0.0)
    [(addresses, payload, _)] = s.encode_compute(s.take_commands()).values()
    with pytest.raises(ValueError, match="truncated"):
        decode_compute(payload[:-2], addresses)
    with pytest.raises(ValueError, match="malformed key"):
        decode_compute(payload[:25] + b"\x00" * (len(payload) - 25), addresses)


def test_update_graph_payload_is_decoded_in_rust() -> None:
    s = squall.core.Scheduler({"validate": True})
    c = s.client("c")
    s.submit(c, ["old"], specs=[b"o"], now=0.0)
    keys, specs = [("a", 0), "b", "d"], [b"spec-a", b"spec-b", None]
    n, kb, payload, index = update_graph.encode(keys, specs, [[], [("a", 0), "old"], ["old"]])
    assert decode_keys(payload[:kb]) == [*keys, "old"]  # an external key once, after
    ids = s.submit_wire(c, payload, n, kb, now=0.1, wanted=[1])
    assert len(ids) == 12 and index == {("a", 0): 0, "b": 1, "d": 2}
    b = s.lookup("b")
    assert b is not None
    assert sorted(map(str, s.task_info(b)["dependencies"])) == sorted(map(str, [("a", 0), "old"]))
    assert s.state("d") != "forgotten"
    for bad in (payload[:-1], payload + b"x", payload[: kb - 1]):
        with pytest.raises(ValueError, match=r"malformed|truncated"):
            s.submit_wire(c, bad, n, kb, now=0.2)
    with pytest.raises(squall.UnknownDependencyError):
        n2, kb2, p2, _ = update_graph.encode(["e"], [b"e"], [["nope"]])
        s.submit_wire(c, p2, n2, kb2, now=0.3)
    s.validate()


def test_update_graph_encoder_refuses_what_it_cannot_send() -> None:
    for keys, specs, deps in [(["a", "b"], [b"s"], None), (["a"], [b"s"], [[], []])]:
        with pytest.raises(ValueError, match="one spec and one list of dependencies per key"):
            update_graph.encode(keys, specs, deps)
    with pytest.raises(TypeError, match="invalid key"):
        update_graph.encode(["a"], [b"s"], [[True]])


def test_update_graph_without_dependencies_and_map_call_specs() -> None:
    # deps=None (no task has any) encodes as empty dependency lists do.
    keys, specs = ["p", "q"], [b"sp", b"sq"]
    assert update_graph.encode(keys, specs) == update_graph.encode(keys, specs, [[], []])
    # A map batch's specs are make_spec's, in the C loops for plain values or not.
    prefix = call_prefix(cloudpickle.dumps(len))
    to_dep = lambda o: o.key if isinstance(o, Marker) else None  # noqa: E731
    for calls, kwargs in [
        ([(1,), ("x",), (2.5,), (None,), (b"b",), (True,)], {}),
        ([(1, 2), (3, 4)], {}),
        ([(1,), ([1, 2],)], {}),  # not all plain
        ([(1,), (2,)], {"k": 3}),  # kwargs
        ([(Marker("a"),), (1,), ({"z": Marker("b")},)], {}),  # dependencies
    ]:
        columns = list(zip(*calls, strict=True))
        specs, deps = update_graph.call_specs(prefix, columns, kwargs, to_dep)
        made = [make_spec(prefix, args, kwargs, to_dep) for args in calls]
        assert specs == [s for s, _ in made]
        assert deps == ([d for _, d in made] if any(d for _, d in made) else None)
    assert update_graph.call_specs(prefix, [[]], {}, to_dep) == ([], None)


@dataclass(frozen=True)
class Marker:
    key: str


def test_compute_carries_more_than_65535_dependencies() -> None:
    s = squall.core.Scheduler({"worker-saturation": "inf"})
    c = s.client("c")
    w = s.add_worker("tcp://127.0.0.1:1", 1, now=0.0)
    n = 70_000
    s.submit(c, [f"x-{i}" for i in range(n)], specs=[b""] * n, order="sequential", now=0.0)
    s.take_commands()
    ids = bytes(array("I", [s.lookup(f"x-{i}") for i in range(n)]))
    runs = bytes(array("Q", [s.task_info(t)["run_id"] for t in array("I", ids)]))
    s.tasks_finished(w, ids, runs, bytes(array("q", [8] * n)), now=0.1)
    s.take_commands()
    s.submit(c, ["total"], [[f"x-{i}" for i in range(n)]], specs=[b"sum"], now=0.2)
    addresses, payload, _ = s.encode_compute(s.take_commands())[w]
    [(*_, deps)] = decode_compute(payload, addresses)
    assert len(deps) == n and deps[-1] == (f"x-{n - 1}", 8, ["tcp://127.0.0.1:1"])


def test_finished_reports_are_decoded_from_the_payload() -> None:
    """The scheduler side of docs/protocol.md#finished: the payload as the worker sent
    it, n reports of four packed arrays; a payload of another length is refused."""
    s = squall.core.Scheduler({"validate": True})
    c = s.client("c")
    w = s.add_worker("tcp://127.0.0.1:1", 2, now=0.0)
    s.submit(c, ["a", "b"], now=0.0)
    records = s.take_commands().records()
    tasks = [t for op, _, t, _ in records if op == "compute-task"]
    runs = [r for op, _, _, r in records if op == "compute-task"]
    payload = b"".join(
        [
            array("I", tasks).tobytes(),
            array("Q", runs).tobytes(),
            array("q", [8, 16]).tobytes(),
            array("d", [0.5, 0.25]).tobytes(),
        ]
    )
    for bad in (payload[:-1], payload + b"\0"):
        with pytest.raises(ValueError, match="malformed"):
            s.finished_wire(w, bad, 2, now=1.0)
    with pytest.raises(ValueError, match="malformed"):
        s.finished_wire(w, payload, 3, now=1.0)
    assert s.finished_wire(w, payload, 2, now=1.0) == []
    assert [s.task_info(t)["state"] for t in tasks] == ["memory", "memory"]
    assert s.finished_wire(w, payload, 2, now=1.1) == [], "a repeated report is ignored"
    s.validate()


def test_call_specs_are_read_as_they_are_written() -> None:
    """One implementation of docs/protocol.md#run-specs (squall-wire's ``spec``): what
    ``make_spec`` writes, ``split_call`` (the worker loop's reader) takes apart, and each
    distinct function is unpickled once per process."""
    blob = cloudpickle.dumps(divmod)
    spec, deps = make_spec(call_prefix(blob), (7, 2), {}, lambda _: None)
    assert deps == []
    parts = split_call(spec)
    assert parts is not None
    assert parts[0] == blob
    assert run_spec(spec, {}) == (3, 1)
    assert split_call(b"\x80\x05N.") is None, "a pickle is not a call spec"
    with pytest.raises(ValueError, match="call spec"):
        split_call(spec[:7])
    assert load_function(blob) is load_function(bytes(blob)) is divmod
