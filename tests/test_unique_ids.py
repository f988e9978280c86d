"""Keys of impure calls: uuid-shaped, unique, and not repeated by a forked child."""

from __future__ import annotations

import multiprocessing
import uuid

from squall.client.unique import UniqueIds, unique_ids


def _child_ids(q: multiprocessing.Queue[list[str]]) -> None:
    q.put([unique_ids.next() for _ in range(3)])


def test_ids_are_uuid_shaped_and_unique() -> None:
    ids = UniqueIds()
    got = [ids.next() for _ in range(10_000)]
    assert len(set(got)) == len(got)
    assert all(str(uuid.UUID(i)) == i for i in got[:100])
    assert UniqueIds().next()[:24] != got[0][:24]  # another random prefix


def test_a_forked_child_draws_its_own_prefix() -> None:
    ours = [unique_ids.next() for _ in range(3)]
    ctx = multiprocessing.get_context("fork")
    q: multiprocessing.Queue[list[str]] = ctx.Queue()
    p = ctx.Process(target=_child_ids, args=(q,))
    p.start()
    theirs = q.get(timeout=30)
    p.join(30)
    assert {i[:24] for i in theirs} != {i[:24] for i in ours}
    assert not set(theirs) & set(ours)
