"""``Client.has_what``, ``processing``, ``who_has``, ``nbytes`` and ``story`` on a live
cluster, in distributed's shapes."""

from __future__ import annotations

import sys
import time

import cloudpickle  # type: ignore[import-untyped]

from squall import Client, LocalCluster

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def inc(x: int) -> int:
    return x + 1


def sleeper() -> int:
    time.sleep(2)
    return 0


def test_what_the_cluster_holds_and_did(cluster: LocalCluster) -> None:
    with Client(cluster) as c:
        futures = c.map(inc, range(10), key=[("inc", i) for i in range(10)])
        c.gather(futures)
        held = c.has_what()
        assert set(held) == set(c.nthreads())
        assert sorted(k for keys in held.values() for k in keys) == [("inc", i) for i in range(10)]
        a = next(iter(held))
        assert set(c.has_what(workers=[a])) == {a}
        name = c.scheduler_info()["workers"][a]["name"]
        assert c.has_what(workers=[name]) == {a: held[a]}, "a name means its worker"
        assert c.has_what(workers=["tcp://127.0.0.1:1"]) == {"tcp://127.0.0.1:1": ()}
        with Client(cluster) as other:  # who_has() covers every client's results
            assert other.who_has() == {k: [w] for w, keys in held.items() for k in keys}
        sizes = c.nbytes(summary=False)
        assert set(sizes) == {f.key for f in futures} and all(n > 0 for n in sizes.values())
        assert c.nbytes() == {"inc": sum(sizes.values())}
        assert c.nbytes(keys=futures[:2], summary=False) == {
            futures[0].key: sizes[futures[0].key],
            futures[1].key: sizes[futures[1].key],
        }
        slow = c.submit(sleeper, pure=False)
        deadline = time.monotonic() + 10
        while not any(slow.key in keys for keys in c.processing().values()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        story = c.story(futures[0])
        assert [(s, f) for _, _, s, f, _, _, _ in story][-1] == ("processing", "memory")
        assert all(where == "scheduler" and key == futures[0].key for where, key, *_ in story)
        assert all(isinstance(stimulus, str) for *_, stimulus, _ in story)
        assert all(abs(time.time() - at) < 60 for *_, at in story), "epoch seconds"
        assert c.story("no-such-key", on_error="ignore") == []
        assert slow.result(timeout=10) == 0
