"""``get_task_metadata`` and ``span``: blocks that mark the tasks submitted in them
(docs/runtime.md#tasks-that-use-the-cluster)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from dask.base import annotate, get_annotations

from squall.client.futures import FutureState, Key

if TYPE_CHECKING:
    from squall.client.connection import ClientConnection

#: The ``get_task_metadata`` blocks open in this process; submissions check it once
#: per graph.
active: list[get_task_metadata] = []


class get_task_metadata:
    """Collects, for the tasks whose results are asked for (the keys of ``submit``,
    ``map``, ``compute``, ``persist``, …) by the clients of this process while the
    block is open, how they ended: on leaving it, ``state`` maps each of them that
    finished to ``"memory"`` or ``"erred"`` and ``metadata`` maps it to its metadata
    (``{}``: squall's tasks carry none); ``keys`` is every key asked for."""

    def __init__(self) -> None:
        self.name = f"task-metadata-{uuid.uuid4().hex}"
        self.keys: set[Key] = set()
        self.metadata: dict[Key, Any] | None = None
        self.state: dict[Key, str] | None = None
        self._states: dict[Key, FutureState] = {}

    def __enter__(self) -> get_task_metadata:
        active.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        active.remove(self)
        ended = {"finished": "memory", "error": "erred"}
        self.state = {k: ended[st.status] for k, st in self._states.items() if st.status in ended}
        self.metadata = {k: {} for k in self.state}

    async def __aenter__(self) -> get_task_metadata:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__(*exc)


def record(connection: ClientConnection, keys: Iterable[Key]) -> None:
    """A graph asking for ``keys`` is being submitted while blocks are open."""
    keys = list(keys)
    with connection.refcount_lock:
        states = {k: st for k in keys if (st := connection.futures.get(k)) is not None}
    for block in active:
        block.keys.update(keys)
        block._states.update(states)


@contextmanager
def span(*tags: str) -> Iterator[str]:
    """Tag the collections built in the block (nested blocks extend the parent's tags)
    with the dask annotation ``span`` (``{"name": tags, "ids": ids}``), as distributed
    does; yields the new span's id. squall's scheduler keeps no spans: the annotation
    is only seen by what reads the graph's annotations."""
    if not tags:
        raise ValueError("Must specify at least one span tag")
    parent = get_annotations().get("span")
    names = (parent["name"] if parent else ()) + tags
    ids = (parent["ids"] if parent else ()) + tuple(str(uuid.uuid4()) for _ in tags)
    with annotate(span={"name": names, "ids": ids}):
        yield ids[-1]
