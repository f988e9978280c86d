"""Moving data between the client and the workers: ``gather`` and ``scatter``.

Results are fetched with ``who-has`` to the scheduler, then ``get-data`` to one holder
per key (a size of -1 or a failed worker makes the client ask again); scattered data
goes straight to the workers (``update-data``), then the scheduler registers it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import operator
import pickle
import random
import time
import uuid
from array import array
from collections.abc import Callable, Collection, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import cloudpickle  # type: ignore[import-untyped]
from dask.base import tokenize

from squall._core import distinct_attributes, encode_keys
from squall.client.connection import ClientConnection
from squall.client.futures import (
    DONE,
    Future,
    FutureState,
    Key,
    flat_futures,
    futures_of,
    pack_results,
)
from squall.client.loop import timeout_seconds
from squall.client.workers import ClusterOps
from squall.errors import RemoteError
from squall.protocol import comm
from squall.protocol import messages as m
from squall.protocol.peers import Pickled
from squall.protocol.remote_errors import add_note
from squall.protocol.tracebacks import user_frames

if TYPE_CHECKING:
    from squall.client.client import Client

logger = logging.getLogger("squall.client")


class WhoHas(NamedTuple):
    """A ``who-has`` reply: the workers holding each key."""

    keys: list[Key]
    holders: list[list[str]]


#: Keys per ``who-has`` and ``get-data`` round of a gather.
GATHER_SLICE = 100_000


class DataMovement:
    """The methods of :class:`~squall.client.client.Client` that move data, over its
    connection; the futures they take and make are ``client``'s, and the workers
    data is scattered to are found by ``cluster``. ``gather`` and ``scatter`` are
    documented on ``Client``'s of the same names."""

    def __init__(self, client: Client, connection: ClientConnection, cluster: ClusterOps) -> None:
        self.client = client
        self.connection = connection
        self.cluster = cluster

    def gather(
        self,
        futures: Any,
        errors: str = "raise",
        direct: bool | None = None,
        asynchronous: bool | None = None,
    ) -> Any:
        if errors not in ("raise", "skip"):
            raise ValueError(f"errors must be 'raise' or 'skip', not {errors!r}")
        if isinstance(futures, Iterator):
            return (self.gather(f, errors=errors, asynchronous=asynchronous) for f in futures)
        with user_frames():
            return self.connection.sync(self._gather, futures, errors, asynchronous=asynchronous)

    async def _gather(self, futures: Any, errors: str = "raise") -> Any:
        # A map's futures as they are (no pass to drop repeats: the states are unique).
        found = futures if flat_futures(futures) else futures_of(futures)
        try:  # the slot, read in C (the ``client`` property is a call per future)
            foreign = any(map(operator.is_not, map(_CLIENT, found), itertools.repeat(self.client)))
        except RuntimeError:  # an unpickled future: bound to no client
            foreign = True
        if foreign:
            raise ValueError("Cannot gather Futures created by another client")
        # Each key once: the futures of a key share its state. A map's states are
        # distinct, checked without a dict of millions of entries, and the fast path
        # makes no list of them (docs/runtime.md#futures-in-bulk).
        if distinct_attributes(found, "_state"):
            keys = list(map(_KEY, found))
            if found is futures:  # a map's futures, each its own key: no dict of values
                values = await self._in_order(keys, found, errors)
                if values is not None:
                    return values if type(futures) is list else type(futures)(values)
            states = list(map(_STATE, found))
        else:
            by_state = dict(zip(map(_STATE, found), map(_KEY, found), strict=True))
            states, keys = list(by_state), list(by_state.values())
        data = await self.gather_keys(keys, states, errors)
        return pack_results(futures, data)

    async def _in_order(
        self, keys: list[Key], futures: Collection[Future], errors: str
    ) -> list[Any] | None:
        """The values of ``keys`` (of these futures, one per key) in their order,
        fetched in one round once every one is finished; None if one is not (erred or
        cancelled) or a value did not come: :meth:`gather_keys`'s rounds then take
        over, asking again."""
        if not await _settled(functools.partial(map, _STATE, futures), errors):
            return None
        values, failed = await self._fetch(keys)
        if failed or any(map(operator.is_, values, itertools.repeat(_MISSING))):
            return None
        return values

    async def gather_keys(
        self, keys: list[Key], states: list[FutureState], errors: str
    ) -> dict[Key, Any]:
        """Wait for the keys (of these futures' states), then fetch the finished ones
        from workers. A key whose holders cannot be reached for longer than the client's
        connect timeout (``squall.comm.timeouts.connect`` unless given) raises CommError
        naming them (with ``errors="skip"``, is left out) rather than being asked for
        forever. Per-key work is in C loops: a gather may be of millions of keys."""
        data: dict[Key, Any] = {}
        skipped = False
        delay = 0.02  # between rounds that miss keys, doubling: no busy loop
        unreachable = Unreachable(self.connection.timeout)
        while keys:
            await _settled(functools.partial(iter, states), errors)
            statuses = list(map(_STATUS, states))
            if statuses.count("finished") == len(keys):
                want = keys
            else:
                finished = map(operator.eq, statuses, itertools.repeat("finished"))
                want = list(itertools.compress(keys, finished))
            if want:
                values, failed = await self._fetch(want)
                got = dict(
                    itertools.compress(
                        zip(want, values, strict=True),
                        map(operator.is_not, values, itertools.repeat(_MISSING)),
                    )
                )
                if data:
                    data.update(got)
                else:
                    data = got  # the first round: no copy
                lost = unreachable.update(failed)
                if lost and errors == "raise":
                    raise lost[0][1]
                if lost:
                    skipped = True
                    data.update((k, _SKIPPED) for k, _ in lost)
                if len(got) == len(keys):
                    break  # all there: the common case, no second pass over the keys
            # Left: keys not fetched that may still come (pending, lost, or asked for
            # again); erred ones only with errors="raise" (raised at the top).
            again = [
                i
                for i, (k, s) in enumerate(zip(keys, statuses, strict=True))
                if k not in data and s != "cancelled" and (s != "error" or errors == "raise")
            ]
            keys, states = [keys[i] for i in again], [states[i] for i in again]
            if keys and not any(s == "error" for s in map(_STATUS, states)):
                await asyncio.sleep(delay)
                delay = min(2 * delay, 1.0)
        return {k: v for k, v in data.items() if v is not _SKIPPED} if skipped else data

    async def holders(self, keys: list[Key]) -> WhoHas:
        """Asks the scheduler which workers hold ``keys``."""
        addresses, packed = await self._who_has(keys)
        return WhoHas(keys, holders_of(addresses, packed, len(keys)))

    async def _who_has(self, keys: list[Key]) -> tuple[list[str], bytes]:
        reply, payload = await self.connection.request(
            m.WhoHas(), m.WhoHasReply, encode_keys(keys)
        )
        return reply.addresses, bytes(payload)

    async def _fetch(self, keys: list[Key]) -> tuple[list[Any], dict[Key, comm.CommError]]:
        """One round: ask who has the keys and get them. Returns their values in key
        order (``_MISSING`` for a key not got), and the keys whose holder failed with
        its error. Asked for in slices of ``GATHER_SLICE`` keys, so that what each
        process holds for the requests (keys decoded, replies, pickles) stays bounded
        whatever the gather's size."""
        values: list[Any] = []
        failed: dict[Key, comm.CommError] = {}
        for i in range(0, len(keys), GATHER_SLICE):
            got, lost = await self._fetch_slice(keys[i : i + GATHER_SLICE])
            if values:
                values += got
            else:
                values = got  # the first (often the only) slice's: no copy
            failed.update(lost)
        return values, failed

    async def _fetch_slice(self, keys: list[Key]) -> tuple[list[Any], dict[Key, comm.CommError]]:
        by_worker = pick_holders(*await self._who_has(keys), keys)
        failed: dict[Key, comm.CommError] = {}
        results = await asyncio.gather(
            *(self._get_data(w, ks) for w, ks in by_worker.items()), return_exceptions=True
        )
        one = results[0] if len(results) == 1 else None
        if isinstance(one, list) and next(iter(by_worker.values())) is keys:
            return one, failed  # one holder of all: its values in key order
        values = [_MISSING] * len(keys)
        at = {k: i for i, k in enumerate(keys)}
        for (w, ks), r in zip(by_worker.items(), results, strict=True):
            if isinstance(r, BaseException):
                if not isinstance(r, comm.CommError):
                    raise r
                logger.warning("could not get data from %s: %s", w, r)
                failed.update((k, r) for k in ks)
            else:
                for i, v in zip(map(at.__getitem__, ks), r, strict=True):
                    values[i] = v
        return values, failed

    async def _get_data(self, address: str, keys: list[Key]) -> list[Any]:
        """The values ``address`` holds of ``keys``, in their order (``_MISSING`` for
        one it lacks); a value it cannot pickle errs its future with the worker's error
        (no retrying what can never arrive)."""
        reply = await self.connection.peers.get_data(address, keys)
        if reply.whole:
            return reply.loaded()
        values: list[Any] = []
        for k, blob in zip(keys, reply.values(), strict=True):
            if isinstance(blob, Pickled):
                values.append(blob.load())
                continue
            if isinstance(blob, tuple):
                self._unpicklable(k, address, *blob)
            values.append(_MISSING)
        return values

    def _unpicklable(self, key: Key, address: str, text: str, blob: bytes) -> None:
        exc: BaseException
        try:
            exc = pickle.loads(blob)
        except Exception:
            exc = RemoteError(text)
        add_note(exc, f"The result of {key!r} on {address} could not be pickled to send it.")
        with self.connection.refcount_lock:
            st = self.connection.futures.get(key)
        if st is not None:
            st.set_error(exc, None)

    def scatter(
        self,
        data: Any,
        workers: Any = None,
        broadcast: bool | int = False,
        direct: bool | None = None,
        hash: bool = True,
        timeout: float | str | None = None,
        asynchronous: bool | None = None,
    ) -> Any:
        seconds = self.connection.timeout if timeout is None else timeout_seconds(timeout)
        return self.connection.sync(
            self._scatter, data, workers, broadcast, hash, seconds, asynchronous=asynchronous
        )

    async def _scatter(
        self, data: Any, workers: Any, broadcast: bool | int, hash: bool, timeout: float | None
    ) -> Any:
        if isinstance(data, range | Iterator):
            data = list(data)
        is_namedtuple = isinstance(data, tuple) and hasattr(data, "_fields")
        unpack = type(data) not in (dict, list, tuple, set, frozenset) and not is_namedtuple
        seq: list[Any] = [data] if unpack else list(data)
        if type(data) is dict:
            items: dict[Key, Any] = data
        else:
            names = [
                f"{type(x).__name__}-{tokenize(x) if hash else uuid.uuid4().hex}" for x in seq
            ]
            items = dict(zip(names, seq, strict=True))
        blobs = {k: cloudpickle.dumps(v) for k, v in items.items()}
        targets = await self.cluster.running_workers(workers, timeout)
        keys = list(items)
        holders = [_place(targets, broadcast) for _ in keys]
        by_worker: dict[str, list[Key]] = {}
        for k, hs in zip(keys, holders, strict=True):
            for a in hs:
                by_worker.setdefault(a, []).append(k)
        replies = await asyncio.gather(
            *(self._update_data(a, ks, blobs) for a, ks in by_worker.items()),
            return_exceptions=True,
        )
        nbytes: dict[Key, int] = {}
        errors = []
        for a, r in zip(by_worker, replies, strict=True):
            if isinstance(r, BaseException):
                errors.append(f"{a}: {r!r}")
            else:
                nbytes.update(r)
        request = m.Scatter(holders=holders, nbytes=[nbytes.get(k, -1) for k in keys])
        if errors:
            # Still tell the scheduler: it has the workers drop what they staged.
            request.error = "; ".join(errors)
            with contextlib.suppress(RuntimeError, comm.CommError):
                await self.connection.request(request, m.ScatterDone, encode_keys(keys))
            raise RuntimeError(f"could not scatter to {'; '.join(errors)}")
        await self.connection.request(request, m.ScatterDone, encode_keys(keys))
        futures = {k: Future(k, self.client) for k in keys}
        for k, f in futures.items():
            f._state.type = type(items[k])
            f._state.finish()
        if unpack:
            return futures[keys[0]]
        if type(data) is dict:
            return futures
        out = [futures[k] for k in names]
        return type(data)(*out) if is_namedtuple else type(data)(out)

    async def _update_data(
        self, address: str, keys: list[Key], blobs: dict[Key, bytes]
    ) -> dict[Key, int]:
        """Stage values on a worker (``update-data``); returns their sizes there."""
        kb = encode_keys(keys)
        request = m.UpdateData(keys_bytes=len(kb), sizes=[len(blobs[k]) for k in keys])
        reply, _ = await self.connection.peers.request(
            address,
            request,
            b"".join([kb, *(blobs[k] for k in keys)]),
            reply=m.DataUpdated,
        )
        if reply.error is not None:
            raise RuntimeError(reply.error)
        return dict(zip(keys, reply.nbytes, strict=True))


def holders_of(addresses: list[str], packed: bytes, n: int) -> list[list[str]]:
    """A ``who-has`` reply's holders per key: per key a u16 count, then that many u16
    indices into ``addresses``."""
    table = array("H", packed)
    out: list[list[str]] = []
    pos = 0
    for _ in range(n):
        count = table[pos]
        out.append([addresses[i] for i in table[pos + 1 : pos + 1 + count]])
        pos += 1 + count
    if pos != len(table):
        raise comm.ProtocolError("who-has reply does not match the keys asked for")
    return out


def pick_holders(addresses: list[str], packed: bytes, keys: list[Key]) -> dict[str, list[Key]]:
    """A ``who-has`` reply (:func:`holders_of`) as the keys to ask each worker for, one
    holder per key, chosen at random among its holders (keys no one holds are left
    out). When each key has one holder (the usual case) the keys are grouped in C
    loops, not key by key."""
    table = array("H", packed)
    n = len(keys)
    if len(table) == 2 * n and table[0::2].count(1) == n:
        at = table[1::2]
        if any(i >= len(addresses) for i in set(at)):
            raise comm.ProtocolError("who-has reply names an unknown worker")
        if len(set(at)) == 1:
            return {addresses[at[0]]: keys} if n else {}
        return {
            addresses[i]: list(itertools.compress(keys, map(operator.eq, at, itertools.repeat(i))))
            for i in sorted(set(at))
        }
    by_worker: dict[str, list[Key]] = {}
    for k, holders in zip(keys, holders_of(addresses, packed, n), strict=True):
        if holders:
            by_worker.setdefault(random.choice(holders), []).append(k)
    return by_worker


#: A key left out of a gather (``errors="skip"``) after its holders stayed unreachable.
_SKIPPED = object()
#: A key a round of a gather did not get (no holder had it, or its holder failed).
_MISSING = object()


_STATUS = operator.attrgetter("status")
_KEY, _STATE, _CLIENT = map(operator.attrgetter, ("key", "_state", "_client"))
_FAILED = frozenset({"error", "cancelled"})


async def _settled(states: Callable[[], Iterator[FutureState]], errors: str) -> bool:
    """Whether all of ``states`` (a fresh iterator of them per call) are finished,
    once each is done; with ``errors="raise"``, the first failed one (in their order)
    raises its exception. Passes in C over the states, which may be millions."""
    pending = map(operator.not_, map(DONE.__contains__, map(_STATUS, states())))
    for st in itertools.compress(states(), pending):
        await st.wait()
        if st.status in _FAILED and errors == "raise":
            break  # raised below, the first failed in key order
    if errors == "raise":
        failing = map(_FAILED.__contains__, map(_STATUS, states()))
        failed = next(itertools.compress(states(), failing), None)
        if failed is not None:
            assert failed.exception is not None
            raise failed.exception.with_traceback(failed.traceback)
    return all(map("finished".__eq__, map(_STATUS, states())))


class Unreachable:
    """Keys whose holders failed to deliver round after round, since when: those
    failing for longer than ``bound`` seconds are lost."""

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self._since: dict[Key, float] = {}

    def update(self, failed: dict[Key, comm.CommError]) -> list[tuple[Key, comm.CommError]]:
        """Note a round's failed keys (any other key's count starts again); those now
        lost, each with an error naming its holder."""
        now = time.monotonic()
        self._since = {k: self._since.get(k, now) for k in failed}
        lost = []
        for k, e in failed.items():
            waited = now - self._since[k]
            if waited >= self.bound:
                lost.append((k, comm.CommError(
                    f"could not get {k!r} from the workers holding it for {waited:.1f}s "
                    f"(the connect timeout is {self.bound}s): {e}"
                )))  # fmt: skip
        return lost


def _place(targets: list[str], broadcast: bool | int) -> list[str]:
    """The workers for one scattered item: round robin, as Dask, or a broadcast."""
    if broadcast is True:
        return list(targets)
    n = min(max(int(broadcast), 1), len(targets))
    start = next(_round_robin)
    return [targets[(start + i) % len(targets)] for i in range(n)]


_round_robin = itertools.count()
