"""The scheduler core's CPU per task on a collection graph, after the wire, without I/O:
``python bench/sched_replay.py tree|array [repeats]``.

The workload's ``update-graph`` message is taken once from a real run (the delayed tree
or the array row of ``squall bench e2e``, on an in-process cluster), then replayed on a
fresh core with one one-thread worker as the scheduler process drives it: the graph
through ``submit_wire``; then rounds of the commands drained and encoded
(``encode_notices``, ``encode_compute``), each dispatch reported back finished in
``finished`` batches of the run's size, a ``tick`` per round; at last the client
releases its key. Prints the CPU microseconds per task of each call. Under callgrind
(instructions per task, the figure that holds on a shared machine)::

    valgrind --tool=callgrind python bench/sched_replay.py tree
    callgrind_annotate --inclusive=yes --auto=no cg.out.<pid> | grep __pymethod_
"""

from __future__ import annotations

import sys
import time
from array import array
from collections.abc import Callable
from typing import Any

import squall.core
from squall import Client, LocalCluster
from squall._core import decode_keys
from squall.protocol import messages as m
from squall.scheduler import client_room
from squall.tools.bench_e2e import run_array, run_tree

#: The workloads: (how to run one, its size, finished reports per batch as measured).
WORKLOADS: dict[str, tuple[Callable[[Any, int], int], int, int]] = {
    "tree": (run_tree, 20_000, 800),
    "array": (run_array, 100, 80),
}


def capture(which: str) -> tuple[m.UpdateGraph, bytes]:
    """The one ``update-graph`` message (and payload) the workload sends."""
    run, size, _ = WORKLOADS[which]
    seen: list[tuple[m.UpdateGraph, bytes]] = []
    handler = client_room.ClientRoom._update_graph

    def spy(
        room: client_room.ClientRoom, cid: int, msg: m.UpdateGraph, payload: memoryview
    ) -> tuple[m.Message, bytes] | None:
        seen.append((msg, bytes(payload)))
        return handler(room, cid, msg, payload)

    client_room.ClientRoom._update_graph = spy  # type: ignore[method-assign, assignment]
    try:
        cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False)
        with cluster, Client(cluster) as client:
            run(client, size)
    finally:
        client_room.ClientRoom._update_graph = handler  # type: ignore[method-assign]
    [graph] = seen
    return graph


def replay(msg: m.UpdateGraph, payload: bytes, batch: int, spent: dict[str, float]) -> None:
    """One replay on a fresh core, adding each call's CPU seconds to ``spent``."""

    def timed(name: str, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        out = f(*args, **kwargs)
        spent[name] = spent.get(name, 0.0) + time.process_time() - start
        return out

    s = squall.core.Scheduler()
    c = s.client("c")
    w = s.add_worker("tcp://127.0.0.1:1", 1, now=0.0)
    now = 1.0
    options = {f: getattr(msg, f) for f in msg.__struct_fields__ if f not in ("id", "n")}
    options.pop("keys_bytes")
    timed("submit_wire", s.submit_wire, c, payload, msg.n, msg.keys_bytes, now=now, **options)
    dispatched: list[tuple[bytes, bytes]] = []  # (task ids, run ids), packed

    def drain() -> None:
        cmds = timed("take_commands", s.take_commands)
        if len(cmds):
            timed("encode_notices", s.encode_notices, cmds)
            if "compute-task" in cmds.counts():
                timed("encode_compute", s.encode_compute, cmds)
                _, tasks, runs = cmds.compute()
                dispatched.append((tasks, runs))

    done = 0
    drain()
    while dispatched:
        tasks, runs = dispatched.pop(0)
        n = len(tasks) // 4
        for i in range(0, n, batch):
            k = min(batch, n - i)
            report = b"".join(
                (
                    tasks[4 * i : 4 * (i + k)],
                    runs[8 * i : 8 * (i + k)],
                    array("q", [8] * k).tobytes(),
                    array("d", [1e-4] * k).tobytes(),
                )
            )
            now += 0.001
            timed("finished_wire", s.finished_wire, w, report, k, now=now)
            done += k
            drain()
        now += 0.02
        timed("tick", s.tick, now=now)
    assert done == msg.n, (done, msg.n)
    keys = decode_keys(payload[: msg.keys_bytes])
    wanted = keys if msg.wanted is None else [keys[i] for i in msg.wanted]
    timed("client_releases_keys", s.client_releases_keys, c, wanted, now=now + 1.0)
    drain()


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "tree"
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    msg, payload = capture(which)
    spent: dict[str, float] = {}
    for _ in range(repeats):
        replay(msg, payload, WORKLOADS[which][2], spent)
    per_task = {k: v / (msg.n * repeats) * 1e6 for k, v in spent.items()}
    after = sum(v for k, v in per_task.items() if k != "submit_wire")
    print(f"{which}: {msg.n} tasks x {repeats}, CPU us/task:")
    for k, v in per_task.items():
        print(f"  {k:22s} {v:6.2f}")
    print(f"  {'after intake':22s} {after:6.2f}")


if __name__ == "__main__":
    main()
