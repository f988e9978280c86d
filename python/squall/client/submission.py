"""Submitting work: ``submit``, ``map``, ``get``, ``compute``, ``persist`` and their
``update-graph`` messages, ``cancel`` and ``retry``.

Protocol choices (see the message table in docs/runtime.md):

* every batch of ``map`` sends ONE ``update-graph`` (a ``map`` without ``batch_size``
  sends chunks of ``MAP_CHUNK`` items while it builds the next ones, each chunk a new
  FIFO generation so they run in order), and so does a burst of ``submit`` calls with
  the same options that the loop has not come to yet (docs/runtime.md#submit).
  Dependencies are the futures found in the arguments (also nested in lists, tuples,
  sets and dicts); those not defined by the graph itself are sent as *external* keys
  (indices ``>= n`` in ``deps``), appended after the ``n`` task keys in the keys
  payload. Keys this client already holds a future for are
  not resubmitted.
* Run specs are :mod:`squall.protocol.specs` call specs (the pickled function's bytes,
  then ``pickle((args, kwargs))`` with ``Dep`` markers). ``map`` pickles the function
  once and every per-item spec shares those bytes; workers unpickle the function once
  per process (cached by content).
* ``map`` keys are ``{funcname}-{token}{i:08x}`` (``map_keys``): 24 hex digits of token,
  one hash per batch over the pickled function and the batch's specs (pure) or 96
  random bits (``pure=False``), then the item's index in the map in hex (32 hex digits
  in all, as long as a uuid's, below 2**32 items).
* ``submit`` and ``map`` keep no reference to their futures, which die on ``del``. A
  ``map`` makes its futures and states in bulk, under one lock acquisition per batch
  and without cyclic GC runs while it does.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import secrets
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import cloudpickle  # type: ignore[import-untyped]
from dask.base import is_dask_collection, tokenize
from dask.delayed import delayed
from dask.utils import funcname

from squall._core import encode_keys, encode_map_chunk
from squall.client import task_metadata
from squall.client.actor import actor_spec
from squall.client.connection import ClientConnection
from squall.client.data import DataMovement
from squall.client.futures import Future, Key, dep_key, futures_of
from squall.client.loop import timeout_seconds
from squall.client.unique import unique_ids
from squall.dask.gc_pause import gc_paused
from squall.dask.graphs import (
    Graph,
    compute_expr,
    expr_of_graph,
    flatten_keys,
    materialize,
    pack_data,
    persist_expr,
)
from squall.diagnostics.dask_progress import dask_progress_bars
from squall.protocol import messages as m
from squall.protocol import update_graph
from squall.protocol.specs import call_prefix, function_prefix, make_spec
from squall.worker import context

if TYPE_CHECKING:
    from squall.client.client import Client

#: Items per ``update-graph`` of a ``map`` without ``batch_size``: sent as built, so the
#: scheduler and workers start early, and large enough that per-message costs vanish.
MAP_CHUNK = 20_000


class CallOptions(NamedTuple):
    """Where and how the tasks of one call run: the options ``submit``, ``map`` and the
    collection methods share, sent in the ``update-graph`` header."""

    workers: Any
    resources: dict[str, float] | None
    retries: int | None
    priority: int
    fifo_timeout: float | str
    allow_other_workers: bool

    def header(self) -> dict[str, Any]:
        """The header fields; raises on a combination distributed refuses."""
        workers, allow_other_workers = self.workers, self.allow_other_workers
        if allow_other_workers not in (True, False):
            raise TypeError("allow_other_workers= must be True or False")
        if allow_other_workers and workers is None:
            raise ValueError("Only use allow_other_workers= if using workers=")
        if isinstance(workers, str):
            workers = [workers]
        return {
            "priority": int(self.priority),
            "fifo_timeout": timeout_seconds(self.fifo_timeout) or 0.0,
            "retries": self.retries,
            "workers": None if workers is None else list(workers),
            "resources": (
                [(k, float(v)) for k, v in self.resources.items()] if self.resources else None
            ),
            "allow_other_workers": allow_other_workers,
        }


#: The per-task option of an actor task (docs/actors.md): only actor tasks carry it.
ACTOR: dict[str, Any] = {"actor": True}


#: Hex digits of a ``map`` chunk's key token (96 bits).
MAP_TOKEN_DIGITS = 24


def pure_token(function: bytes, specs: bytes) -> str:
    """A pure ``map`` chunk's key token: a digest of the pickled function, then of the
    chunk's specs (concatenated)."""
    h = hashlib.sha1(function, usedforsecurity=False)
    h.update(specs)
    return h.hexdigest()[:MAP_TOKEN_DIGITS]


def random_token() -> str:
    """An impure ``map`` chunk's key token."""
    return secrets.token_hex(MAP_TOKEN_DIGITS // 2)


def map_head(name: str, token: str) -> str:
    """What every key of a ``map`` chunk with ``token`` starts with."""
    return f"{name}-{token}"


def map_keys(name: str, token: str, start: int, n: int) -> list[Key]:
    """The keys of items ``start`` to ``start + n`` of a ``map`` whose chunk has
    ``token``; ``encode_map_chunk`` names the keys of a plain chunk alike
    (docs/runtime.md#map)."""
    head = map_head(name, token)
    return [f"{head}{i:08x}" for i in range(start, start + n)]


def mark_actors(g: Graph, actors: Iterable[Key]) -> None:
    """Make the tasks of ``g`` named in ``actors`` actor tasks: their specs build the
    actor, and their per-task options say so (merged into the options they had)."""
    index = {k: i for i, k in enumerate(g.keys)}
    marked = {index[k] for k in actors if k in index}
    if not marked:
        return
    for i in marked:
        g.specs[i] = actor_spec(g.specs[i], g.deps[i] if g.deps else [])
    classes: list[tuple[dict[str, Any], list[int]]] = []
    for opts, indices in g.task_options:
        plain = [i for i in indices if i not in marked]
        if plain:
            classes.append((opts, plain))
        both = [i for i in indices if i in marked]
        if both:
            classes.append(({**opts, **ACTOR}, both))
            marked.difference_update(both)
    if marked:
        classes.append((ACTOR, sorted(marked)))
    g.task_options = classes


#: A ``submit`` call waiting for the loop: its key, spec and dependencies.
Submitted = tuple[Key, bytes, list[Key]]


class Submission:
    """The methods of :class:`~squall.client.client.Client` that submit work, over its
    connection; the futures they make are ``client``'s, and ``data`` gathers the
    results of the calls that wait for them. The public methods are documented on
    ``Client``'s of the same names."""

    def __init__(self, client: Client, connection: ClientConnection, data: DataMovement) -> None:
        self.client = client
        self.connection = connection
        self.data = data

    def _send_graph(
        self,
        keys: list[Key],
        specs: list[bytes],
        deps: list[list[Key]] | None,
        options: CallOptions,
        *,
        order: str = "sequential",
        wanted: list[Key] | None = None,
        task_options: list[tuple[dict[str, Any], list[int]]] | None = None,
        data_producers: list[int] | None = None,
        keep: object = None,
        blobs: list[bytes] | None = None,
    ) -> None:
        """Queue one ``update-graph`` (``send_soon``: releases of the futures it
        defines or depends on follow it, however soon they are dropped)."""
        n, keys_bytes, payload, index = update_graph.encode(keys, specs, deps, blobs or ())
        self._send_encoded(
            keys,
            (n, keys_bytes, payload),
            options,
            order=order,
            wanted_keys=wanted,
            # Indices of the keys the client holds futures for (default: all).
            wanted=None if wanted is None else [index[k] for k in wanted if k in index],
            task_options=task_options,
            data_producers=data_producers,
            keep=keep,
        )

    def _send_encoded(
        self,
        keys: list[Key],
        encoded: tuple[int, int, bytes],
        options: CallOptions,
        *,
        order: str = "sequential",
        wanted_keys: list[Key] | None = None,
        wanted: list[int] | None = None,
        task_options: list[tuple[dict[str, Any], list[int]]] | None = None,
        data_producers: list[int] | None = None,
        keep: object = None,
    ) -> None:
        """``_send_graph`` of a graph already encoded as ``(n, keys_bytes, payload)``;
        ``wanted`` as indices into ``keys`` (of ``wanted_keys``)."""
        if task_metadata.active:  # get_task_metadata blocks are open
            task_metadata.record(self.connection, keys if wanted_keys is None else wanted_keys)
        n, keys_bytes, payload = encoded
        msg = m.UpdateGraph(
            id=self.connection.track_graph(keys),
            n=n,
            keys_bytes=keys_bytes,
            order=order,
            wanted=wanted,
            task_options=task_options or None,
            data_producers=data_producers or None,
            **options.header(),
        )
        self.connection.send_soon(msg, payload, keep)

    def _check_running(self) -> None:
        status = self.connection.status
        if status != "running":
            hint = " (await the client first)" if status == "newly-created" else ""
            raise RuntimeError(f"the client is {status}{hint}")

    def submit(
        self,
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        key: Key | None,
        pure: bool,
        options: CallOptions,
        actor: bool,
    ) -> Future:
        """``Client.submit``, its placement options gathered in ``options``."""
        if not callable(func):
            raise TypeError("First input to submit must be a callable function")
        self._check_running()
        pure = pure and not actor  # an actor is stateful: each submission is new
        if key is None:
            if pure:
                key = f"{funcname(func)}-{tokenize(func, kwargs, *args)}"
            else:
                key = f"{funcname(func)}-{unique_ids.next()}"
        client = self.client
        with self.connection.refcount_lock:
            if key in self.connection.futures:
                return Future(key, client)
            future = Future(key, client)
        spec, deps = make_spec(function_prefix(func), args, kwargs, dep_key)
        if actor or task_metadata.active:
            if actor:
                spec = actor_spec(spec, deps)
            self._send_graph(
                [key], [spec], [deps], options, task_options=[(ACTOR, [0])] if actor else None
            )
        else:
            # A burst of submits with the same options leaves as one graph.
            header, call = options.header(), (key, spec, deps)
            self.connection.call_soon_batched(self._send_submits, header, call, len(spec))
        return future

    def _send_submits(self, header: dict[str, Any], calls: list[Submitted]) -> None:
        """On the loop: one ``update-graph`` of a burst of ``submit`` calls, in their
        order. If the scheduler refuses it (a call depends on a key it no longer has),
        each call still held is sent again alone, so that only those at fault fail."""
        msg, payload = self._submits_graph(header, calls)
        if len(calls) > 1 and msg.id is not None:
            again = functools.partial(self._send_apart, header, calls)
            self.connection.refused_apart(msg.id, again)
        self.connection.send(msg, payload)

    def _send_apart(self, header: dict[str, Any], calls: list[Submitted]) -> None:
        futures = self.connection.futures
        with self.connection.refcount_lock:
            held = [call for call in calls if call[0] in futures]
        for call in held:
            self.connection.send(*self._submits_graph(header, [call]))

    def _submits_graph(
        self, header: dict[str, Any], calls: list[Submitted]
    ) -> tuple[m.UpdateGraph, bytes]:
        keys = [key for key, _, _ in calls]
        n, keys_bytes, payload, _ = update_graph.encode(
            keys, [spec for _, spec, _ in calls], [deps for _, _, deps in calls]
        )
        msg = m.UpdateGraph(
            id=self.connection.track_graph(keys),
            n=n,
            keys_bytes=keys_bytes,
            order="sequential",
            **header,
        )
        return msg, payload

    def map(
        self,
        func: Callable[..., Any],
        iterables: tuple[Iterable[Any], ...],
        kwargs: dict[str, Any],
        key: str | list[Key] | None,
        pure: bool,
        batch_size: int | None,
        options: CallOptions,
        actor: bool,
    ) -> list[Future]:
        """``Client.map``, its placement options gathered in ``options``."""
        if not callable(func):
            raise TypeError("First input to map must be a callable function")
        pure = pure and not actor
        if iterables and all(isinstance(it, Iterator) for it in iterables):
            raise TypeError(
                "Dask no longer supports mapping over Iterators or Queues."
                "Consider using a normal for loop and Client.submit"
            )
        self._check_running()
        # Batches are columns (a list per iterable): no tuple per item to allocate.
        sources = [iter(it) for it in iterables]
        keys_given = list(key) if isinstance(key, list) else None
        if keys_given is not None:
            lists = [list(it) for it in sources]
            if len(keys_given) != min(map(len, lists), default=0):
                raise ValueError("key= list must have one key per item")
            set(keys_given)  # an unhashable key raises TypeError before anything is held
            sources = [iter(x) for x in lists]
        size = batch_size if batch_size and batch_size > 0 else MAP_CHUNK
        blob = cloudpickle.dumps(func)
        prefix_spec = call_prefix(blob)
        prefix = key if isinstance(key, str) else funcname(func)
        out: list[Future] = []

        def chunk_options(start: int) -> CallOptions:
            # Chunks of one map run in order: each after the previous one (a new FIFO
            # generation), as the tasks of a single graph would.
            return options if batch_size or not start else options._replace(fifo_timeout=0)

        with gc_paused():
            while sources:
                # The scheduler takes the chunks sent so far before more are made.
                self.connection.wait_for_room()
                columns = [list(itertools.islice(it, size)) for it in sources]
                n = min(map(len, columns))
                if n < size:  # the shortest iterable ends here, as zip's items do
                    columns = [c[:n] for c in columns]
                    sources = []
                if not n:
                    break
                start = len(out)
                # Plain arguments (the usual map): specs, keys and payload in one call.
                fast = None
                token_of = functools.partial(pure_token, blob) if pure else None
                if not kwargs and keys_given is None and not actor:
                    token = token_of or random_token()
                    fast = encode_map_chunk(prefix_spec, columns, prefix, start, token)
                specs: list[bytes] | None = None
                deps: list[list[Key]] | None = None
                run: tuple[str, int] | None = None  # the keys' head and first index
                if fast is not None:
                    keys, run = fast[0], (fast[4], start)
                elif keys_given is not None:
                    specs, deps = update_graph.call_specs(prefix_spec, columns, kwargs, dep_key)
                    keys = keys_given[start : start + n]
                else:
                    specs, deps = update_graph.call_specs(prefix_spec, columns, kwargs, dep_key)
                    token = token_of(b"".join(specs)) if token_of else random_token()
                    keys, run = map_keys(prefix, token, start, n), (map_head(prefix, token), start)
                futures, fresh = self.connection.acquire_many(keys, self.client, run)
                out += futures
                if fast is not None and fresh is None:
                    self._send_encoded(keys, (fast[1], fast[2], fast[3]), chunk_options(start))
                    continue
                if specs is None:  # encoded, but some keys are held: the others again
                    specs, deps = update_graph.call_specs(prefix_spec, columns, kwargs, dep_key)
                if fresh is not None:
                    keys = [keys[i] for i in fresh]
                    specs = [specs[i] for i in fresh]
                    deps = None if deps is None else [deps[i] for i in fresh]
                if keys and actor:
                    specs = [
                        actor_spec(s, d)
                        for s, d in zip(specs, deps or [[]] * len(specs), strict=True)
                    ]
                if keys:
                    self._send_graph(
                        keys,
                        specs,
                        deps,
                        chunk_options(start),
                        task_options=[(ACTOR, list(range(len(keys))))] if actor else None,
                        blobs=[blob],
                    )
        return out

    def _graph_to_futures(
        self,
        expr: Any,
        keys: Iterable[Key],
        options: CallOptions,
        *,
        cull: bool = False,
        actors: Any = None,
    ) -> dict[Key, Future]:
        """Submit a dask expression's tasks; futures for ``keys``; ``actors`` (True: all
        of ``keys``, or some keys) are built as actors.

        Callers hold the cyclic collector paused until they have dropped ``expr`` too:
        the expression caches its materialised graph, and the collector's first pass
        after a pause walks every object made meanwhile that is still alive (2.4 µs a
        task of the dask.array row), where by then only the futures are."""
        self._check_running()
        keys = list(dict.fromkeys(keys))
        g = materialize(expr, keys, cull=cull)
        # A key whose last future was dropped is released now, as in distributed (its
        # release still queued for the loop would otherwise make it look held): the
        # graph defines it again, and the release reaches the scheduler before it.
        self.connection.settle_releases()
        client = self.client
        with self.connection.refcount_lock:
            futures = {k: Future(k, client) for k in keys}
            # Keys this client holds are known to the scheduler: depend on them instead
            # of defining them again, and hold them until the graph is queued (from
            # then on ``send_soon`` orders their releases after it), so that a future
            # dropped meanwhile by another thread cannot release them first.
            held = [k in self.connection.futures and k not in futures for k in g.keys]
            holds = [Future(k, client) for k, h in zip(g.keys, held, strict=True) if h]
        if holds:
            g = g.without([i for i, h in enumerate(held) if h])
        if actors:
            mark_actors(g, keys if actors is True else flatten_keys([actors]))
        if g.keys:
            self._send_graph(
                g.keys,
                g.specs,
                g.deps,
                options,
                order="compute",
                wanted=keys,
                task_options=g.task_options,
                data_producers=g.data_producers,
                keep=holds,
                blobs=g.blobs,
            )
        return futures

    def get(
        self,
        dsk: Any,
        keys: Any,
        options: CallOptions,
        actors: Any,
        sync: bool,
        asynchronous: bool | None,
    ) -> Any:
        """``Client.get``, its placement options gathered in ``options``."""
        with gc_paused():
            expr, cull = expr_of_graph(dsk)
            futures = self._graph_to_futures(
                expr, flatten_keys([keys]), options, cull=cull, actors=actors
            )
            del expr  # see _graph_to_futures
        packed = pack_data(keys, futures)
        if not sync:
            return packed
        # Called from a task (``x.compute()`` in it), the task waits out of its
        # worker's thread pool, as distributed's: the worker runs the graph meanwhile.
        blocking = asynchronous is not True and not self.connection.asynchronous
        seceded = blocking and context.secede_task()
        try:
            with dask_progress_bars(self.client, futures.values(), asynchronous):
                return self.data.gather(packed, asynchronous=asynchronous)
        finally:
            for f in futures.values():
                f.release()
            if seceded:
                context.rejoin()

    def compute(
        self,
        collections: Any,
        options: CallOptions,
        actors: Any,
        sync: bool,
        optimize_graph: bool,
        traverse: bool,
        kwargs: dict[str, Any],
    ) -> Any:
        """``Client.compute``, its placement options gathered in ``options``."""
        singleton = not isinstance(collections, (list, tuple, set, frozenset))
        items = [collections] if singleton else list(collections)
        if traverse:
            items = [
                delayed(a) if isinstance(a, (list, set, tuple, dict, Iterator)) else a
                for a in items
            ]
        variables = [a for a in items if is_dask_collection(a)]
        futures: dict[Key, Future] = {}
        names: list[Key] = []
        if variables:
            with gc_paused():
                expr = compute_expr(variables, optimize_graph, **kwargs)
                names = flatten_keys(expr.__dask_keys__())
                futures = self._graph_to_futures(expr, names, options, actors=actors)
                del expr  # see _graph_to_futures
        found = iter(names)
        out = [futures[next(found)] if is_dask_collection(a) else a for a in items]
        result = self.data.gather(out) if sync else out
        return result[0] if singleton else result

    def persist(
        self, collections: Any, options: CallOptions, actors: Any, optimize_graph: bool
    ) -> Any:
        """``Client.persist``, its placement options gathered in ``options``."""
        singleton = not isinstance(collections, (tuple, list, set, frozenset))
        items = [collections] if singleton else list(collections)
        if not all(map(is_dask_collection, items)):
            raise TypeError("persist takes dask collections")
        with gc_paused():
            expr = persist_expr(items, optimize_graph)
            keys = expr.__dask_keys__()
            futures = self._graph_to_futures(expr, flatten_keys(keys), options, actors=actors)
            del expr  # see _graph_to_futures
        result = [
            rebuild({k: futures[k] for k in flatten_keys(ks)}, *args)
            for (rebuild, args), ks in zip(
                (c.__dask_postpersist__() for c in items), keys, strict=True
            )
        ]
        return result[0] if singleton else result

    def cancel(
        self,
        futures: Any,
        asynchronous: bool | None = None,
        force: bool = False,
        reason: str | None = None,
        msg: str | None = None,
    ) -> Any:
        keys = list(dict.fromkeys(f.key for f in futures_of(futures)))

        async def run() -> None:
            self.connection.send(m.Cancel(force=force), encode_keys(keys))
            for k in keys:
                with self.connection.refcount_lock:
                    st = self.connection.futures.pop(k, None)
                if st is not None:
                    st.cancel(k, reason or "cancelled by the client", msg)

        return self.connection.sync(run, asynchronous=asynchronous)

    def retry(self, futures: Any, asynchronous: bool | None = None) -> Any:
        keys = list(dict.fromkeys(f.key for f in futures_of(futures)))

        async def run() -> None:
            with self.connection.refcount_lock:
                states = [st for st in map(self.connection.futures.get, keys) if st is not None]
            for st in states:
                if st.status == "error":
                    st.retry()
            self.connection.send(m.Retry(), encode_keys(keys))

        return self.connection.sync(run, asynchronous=asynchronous)
