"""Published datasets (docs/runtime.md#datasets): a table of named values, a store with
no policy.

A value arrives pickled by its client and is kept as those bytes: the scheduler never
unpickles it. With it come the keys of the futures inside; the core keeps them alive
for a pseudo-client per dataset (``published-<repr(name)>``), so they outlive the
client that published them, until the dataset is unpublished or replaced."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from squall._core import decode_keys, encode_keys
from squall.protocol import messages as m

if TYPE_CHECKING:
    from squall.scheduler.server import SchedulerServer

Answer = tuple[m.Message, bytes] | None


@dataclass
class Dataset:
    data: bytes
    keys: list[Any]


def holder(name: Any) -> str:
    """The pseudo-client keeping a dataset's keys alive. ``repr`` tells the name ``1``
    from ``"1"``."""
    return f"published-{name!r}"


class Datasets:
    """The datasets of one scheduler, and the handlers of the clients' messages."""

    def __init__(self, server: SchedulerServer) -> None:
        self._server = server
        self.table: dict[Any, Dataset] = {}

    def publish(self, cid: int, msg: m.PublishDatasets, payload: memoryview) -> Answer:
        """All of them or, if a name is taken (without ``override``) or a key unknown,
        none."""
        s = self._server
        data = bytes(payload)
        names_end = msg.names_bytes
        keys_end = names_end + msg.keys_bytes
        names = decode_keys(data[:names_end])
        keys = decode_keys(data[names_end:keys_end])
        if not (len(names) == len(msg.counts) == len(msg.sizes)):
            raise ValueError("publish-datasets needs one count and one size per name")
        if sum(msg.counts) != len(keys) or keys_end + sum(msg.sizes) != len(data):
            raise ValueError("publish-datasets: counts or sizes do not match the payload")
        if not msg.override:
            taken = [n for n in names if n in self.table]
            if taken:
                error = f"Dataset {taken[0]} already exists"
                return m.PublishDatasetsReply(id=msg.id, error=error), b""
        unknown = [k for k in keys if s.core.lookup(k) is None]
        if unknown:
            error = f"cannot publish futures the scheduler does not know, e.g. {unknown[0]!r}"
            return m.RequestFailed(id=msg.id, error=error), b""
        start, offset = keys_end, 0
        for name, count, size in zip(names, msg.counts, msg.sizes, strict=True):
            mine = keys[offset : offset + count]
            offset += count
            pseudo = s.core.client(holder(name))
            # The new keys first: those the old value shares stay wanted throughout.
            s.core.client_desires_keys(pseudo, mine, now=s.now())
            old = self.table.get(name)
            if old is not None:
                kept = set(mine)
                dropped = [k for k in old.keys if k not in kept]
                s.core.client_releases_keys(pseudo, dropped, now=s.now())
            self.table[name] = Dataset(data[start : start + size], mine)
            start += size
        return m.PublishDatasetsReply(id=msg.id), b""

    def get(self, cid: int, msg: m.GetDatasets, payload: memoryview) -> Answer:
        """The values, their futures handed over: the getter's client holds their keys
        from this step on, and its reply goes out before any notice about them
        (docs/protocol.md#futures-handed-over)."""
        s = self._server
        found = [self.table.get(n) for n in decode_keys(bytes(payload))]
        keys = [k for d in found if d is not None for k in d.keys]
        s.core.client_desires_keys(cid, list(dict.fromkeys(keys)), now=s.now())
        reply = m.GetDatasetsReply(
            id=msg.id,
            sizes=[-1 if d is None else len(d.data) for d in found],
            n_keys=[0 if d is None else len(d.keys) for d in found],
        )
        data = b"".join(d.data for d in found if d is not None)
        return reply, data + (encode_keys(keys) if keys else b"")

    def unpublish(self, cid: int, msg: m.UnpublishDatasets, payload: memoryview) -> Answer:
        s = self._server
        for name in decode_keys(bytes(payload)):
            old = self.table.pop(name, None)
            if old is not None:
                s.core.client_releases_keys(s.core.client(holder(name)), old.keys, now=s.now())
        return m.UnpublishDatasetsReply(id=msg.id), b""

    def names(self, cid: int, msg: m.ListDatasets, payload: memoryview) -> Answer:
        return m.ListDatasetsReply(id=msg.id), encode_keys(sorted(self.table, key=str))
