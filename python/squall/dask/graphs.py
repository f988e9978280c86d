"""Dask collections as squall graphs.

An expression is materialised the way dask's own schedulers do it
(``__dask_graph__()`` then ``convert_legacy_graph``) on the client, so the scheduler
never unpickles anything. Each task node is pickled on its own (workers call it with
its dependencies' values); functions are pickled once per graph, as bytes inside each
task's pickle, which workers turn back into functions through a per-process cache
(:func:`squall.protocol.specs.load_function`). Those bytes are the graph's blobs:
``update-graph`` sends each once and cuts it out of the specs, the scheduler holds it
once per task group and puts specs back together for workers (docs/protocol.md#run-specs).
Ordering happens in the scheduler's core.
"""

from __future__ import annotations

import copy
import functools
import io
import pickle
import sys
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
from dask._task_spec import (
    Alias,
    GraphNode,
    _execute_subgraph,
    convert_legacy_graph,
)

from squall._core import RESTORE_NODE_CODE, NodeReducer, restore_node
from squall.dask.gc_pause import gc_paused
from squall.dask.subgraph import execute_subgraph
from squall.protocol.nested import DESCEND, rebuild

Key = Hashable

# Annotation names the core understands, as the scheduler's per-task option names.
_OPTION_NAMES = {
    "priority": "priority",
    "retries": "retries",
    "workers": "workers",
    "resources": "resources",
    "allow_other_workers": "allow_other_workers",
}


#: What opens each node's pickle: protocol 5, then ``restore_node`` from copyreg's
#: extension cache (EXT1 with its code, MEMOIZE as memo index 0, POP). The pickler's
#: memo starts each node holding the function at index 0, so the node's calls of it
#: are two-byte memo reads: neither side names it, which would import its module each
#: time (docs/runtime.md#fused-tasks). The pickle still starts with 0x80, which marks a
#: node spec (docs/protocol.md#run-specs).
_HEADER = pickle.PROTO + bytes([5]) + pickle.EXT1 + bytes([RESTORE_NODE_CODE])
_HEADER += pickle.MEMOIZE + pickle.POP
_MEMO_START = {id(restore_node): (0, restore_node)}


class _GraphPickler(pickle.Pickler):
    """Pickles the nodes of one graph, one after another (each from the same memo).

    What cloudpickle adds over pickle is kept: its dispatch table, classes by value
    unless importable, and functions by value. The C pickler asks ``reducer_override``
    about every object but atoms and built-in containers; squall's is compiled
    (:class:`squall._core.NodeReducer`): dask's nodes travel as calls of one global,
    and each function a graph shares is pickled once, as bytes embedded in the specs
    that use it (the graph's blobs)."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=5)
        # A dict (ChainMap lookups are Python calls), read at each graph so late
        # copyreg registrations count.
        self.dispatch_table = dict(cloudpickle.Pickler.dispatch_table)
        self.blobs: list[bytes] = []  # the functions' pickles, in the order made
        classes = cloudpickle.Pickler(io.BytesIO(), protocol=5)
        reducer = NodeReducer(functools.partial(_blob, self.blobs), classes.reducer_override)
        # The C pickler looks it up at each dump, so an instance attribute serves.
        self.reducer_override = reducer  # type: ignore[method-assign]

    @classmethod
    def pickle_nodes(cls, nodes: Iterable[GraphNode]) -> tuple[list[bytes], list[bytes]]:
        """Each node pickled on its own, and the blobs the pickles hold."""
        buf = io.BytesIO()
        pickler = cls(buf)
        seek, truncate, write, getvalue = buf.seek, buf.truncate, buf.write, buf.getvalue
        dump = pickler.dump
        out = []
        for node in nodes:
            seek(0)
            truncate()
            write(_HEADER)
            pickler.memo = _MEMO_START
            dump(node)
            out.append(getvalue())
        return out, pickler.blobs


def _blob(blobs: list[bytes], function: Any) -> bytes:
    """A shared function's pickle, added to ``blobs``."""
    # dask's fused-task function travels as squall's (faster, the same value).
    blob: bytes = cloudpickle.dumps(
        execute_subgraph if function is _execute_subgraph else function, protocol=5
    )
    blobs.append(blob)
    return blob


@dataclass
class Graph:
    """What ``update-graph`` carries for a materialised collection graph."""

    keys: list[Key] = field(default_factory=list)
    specs: list[bytes] = field(default_factory=list)
    deps: list[list[Key]] = field(default_factory=list)
    # (options, task indices): tasks sharing one set of annotations.
    task_options: list[tuple[dict[str, Any], list[int]]] = field(default_factory=list)
    data_producers: list[int] = field(default_factory=list)
    # Bytes the specs share (the pickled functions), sent once per graph.
    blobs: list[bytes] = field(default_factory=list)

    def without(self, drop: list[int]) -> Graph:
        """The graph less the tasks at indices ``drop`` (others may still depend on
        their keys, which the scheduler must then know)."""
        gone = set(drop)
        keep = [i for i in range(len(self.keys)) if i not in gone]
        new_index = {old: new for new, old in enumerate(keep)}

        def renumber(indices: list[int]) -> list[int]:
            return [new_index[i] for i in indices if i in new_index]

        options = [(o, renumber(ix)) for o, ix in self.task_options]
        return Graph(
            keys=[self.keys[i] for i in keep],
            specs=[self.specs[i] for i in keep],
            deps=[self.deps[i] for i in keep],
            task_options=[(o, ix) for o, ix in options if ix],
            data_producers=renumber(self.data_producers),
            blobs=self.blobs,
        )


def expr_of_graph(dsk: Any) -> tuple[Any, bool]:
    """``Client.get``'s input (a dict, a HighLevelGraph or an expression) as an
    expression, and whether it needs culling (raw dicts do)."""
    from dask._expr import HLGExpr, LLGExpr
    from dask.highlevelgraph import HighLevelGraph

    if isinstance(dsk, dict):
        return LLGExpr(dsk), True  # type: ignore[no-untyped-call]
    if isinstance(dsk, HighLevelGraph):
        return HLGExpr(dsk), False  # type: ignore[no-untyped-call]
    return dsk, False


def compute_expr(collections: list[Any], optimize_graph: bool, **kwargs: Any) -> Any:
    """The optimised expression ``dask.compute`` would run for ``collections``."""
    from dask._expr import FinalizeCompute
    from dask.base import collections_to_expr

    expr = FinalizeCompute(collections_to_expr(collections, optimize_graph, **kwargs))  # type: ignore[no-untyped-call]
    return expr.optimize()


def persist_expr(collections: list[Any], optimize_graph: bool) -> Any:
    """The optimised expression ``dask.persist`` would run for ``collections``."""
    from dask.base import collections_to_expr

    return collections_to_expr(collections, optimize_graph).optimize()


def flatten_keys(keys: Any) -> list[Key]:
    """``__dask_keys__()`` output (nested lists of keys) as a flat list."""
    if type(keys) is not list:
        return [keys]
    out: list[Key] = []
    for k in keys:
        out.extend(flatten_keys(k))
    return out


def refuse_p2p(expr: Any) -> None:
    """Raises if ``expr`` holds distributed's P2P dataframe shuffle or merge: squall runs
    no P2P service, so its tasks would each fail on the workers with distributed's "not
    running on a Worker"; the task-based shuffle is squall's (docs/runtime.md)."""
    if "dask.dataframe.dask_expr" not in sys.modules:
        return  # no dataframe expression can exist
    from dask.dataframe.dask_expr._merge import HashJoinP2P
    from dask.dataframe.dask_expr._shuffle import P2PShuffle

    if next(expr.find_operations((P2PShuffle, HashJoinP2P)), None) is not None:
        raise ValueError(
            "squall runs no P2P shuffle service: shuffle_method='p2p' (or the "
            "'dataframe.shuffle.method' setting 'p2p') is not available; use 'tasks', "
            "squall's default"
        )


def materialize(expr: Any, keys: Iterable[Key], cull: bool = False) -> Graph:
    """Tasks of ``expr`` (a dask expression) as a :class:`Graph`; ``cull`` drops tasks
    the ``keys`` do not need (dask's expressions cull themselves; raw dicts do not)."""
    refuse_p2p(expr)
    with gc_paused():
        delayed = _delayed_layers(expr)
        annotations: Mapping[str, Mapping[Key, Any]]
        if delayed is not None:
            # dask.delayed's optimizer culls its graph layer by layer, one layer per
            # delayed call: most of a large delayed graph's client time. The same
            # culling, on the merged layers, is one pass over the tasks.
            outputs = {k for op in expr.operands for k in flatten_keys(op.__dask_keys__())}
            dsk = _cull(_graph_nodes(_merged(delayed)), outputs)
            annotations = _layer_annotations(delayed)
        else:
            dsk = _graph_nodes(expr.__dask_graph__())
            if cull:
                dsk = _cull(dsk, set(keys))
            annotations = expr.__dask_annotations__()
        return pack(dsk, annotations)


def _delayed_layers(expr: Any) -> list[Any] | None:
    """The graph layers of ``expr`` when it is dask.delayed's graphs only, whose
    optimizer (without linear fusion, off by default) only culls them; else None."""
    import dask
    from dask._expr import HLGExpr, _HLGExprGroup, _HLGExprSequence
    from dask.delayed import optimize

    if type(expr) is not _HLGExprSequence or dask.config.get("optimization.fuse.delayed"):
        return None
    ops = expr.operands
    if not all(
        type(op) in (HLGExpr, _HLGExprGroup) and op.low_level_optimizer is optimize for op in ops
    ):
        return None
    unique = {id(layer): layer for op in ops for layer in op.hlg.layers.values()}
    return list(unique.values())


def _merged(layers: list[Any]) -> dict[Key, Any]:
    """The tasks of graph layers, as ``dask.utils.ensure_dict`` merges them."""
    from dask.highlevelgraph import MaterializedLayer

    out: dict[Key, Any] = {}
    for layer in layers:
        # A materialised layer's own dict updates in C; a Layer is a Python Mapping.
        out.update(layer.mapping if type(layer) is MaterializedLayer else layer)
    return out


def _layer_annotations(layers: list[Any]) -> dict[str, dict[Key, Any]]:
    """Per-key annotations of graph layers, as ``HLGExpr.__dask_annotations__``
    reads them (a callable annotation is called with each key; tombstones drop)."""
    from dask._expr import _AnnotationsTombstone

    out: dict[str, dict[Key, Any]] = {}
    for layer in layers:
        for name, value in (layer.annotations or {}).items():
            per_key = out.setdefault(name, {})
            for k in layer:
                v = value(k) if callable(value) else value
                if not isinstance(v, _AnnotationsTombstone):
                    per_key[k] = v
    return {name: values for name, values in out.items() if values}


def _graph_nodes(dsk: Mapping[Key, Any]) -> dict[Key, GraphNode]:
    """``convert_legacy_graph(dsk)``, skipping its per-task work when dask's expressions
    already gave task-spec nodes (they do but for legacy graphs)."""
    if type(dsk) is not dict or not all(isinstance(v, GraphNode) for v in dsk.values()):
        return convert_legacy_graph(dsk)  # type: ignore[no-any-return]
    # convert_legacy_graph drops aliases of a key to itself.
    loops = [k for k, v in dsk.items() if type(v) is Alias and v.target == k]
    if loops:
        dsk = dict(dsk)
        for k in loops:
            del dsk[k]
    return dsk


def pack(dsk: Mapping[Key, GraphNode], annotations: Mapping[str, Mapping[Key, Any]]) -> Graph:
    nodes = list(dsk.values())
    keys = list(dsk)
    specs, blobs = _GraphPickler.pickle_nodes(nodes)
    return Graph(
        keys=keys,
        specs=specs,
        blobs=blobs,
        deps=[list(node.dependencies) for node in nodes],
        task_options=_option_classes(keys, annotations),
        data_producers=[i for i, node in enumerate(nodes) if node.data_producer],
    )


def _option_classes(
    keys: list[Key], annotations: Mapping[str, Mapping[Key, Any]]
) -> list[tuple[dict[str, Any], list[int]]]:
    per_key: dict[Key, dict[str, Any]] = {}
    for name, values in annotations.items():
        option = _OPTION_NAMES.get(name)
        if option is None:
            continue  # other annotations only matter to plugins dask may have
        for key, value in values.items():
            per_key.setdefault(key, {})[option] = _option_value(option, value)
    if not per_key:
        return []
    classes: dict[str, tuple[dict[str, Any], list[int]]] = {}
    for i, key in enumerate(keys):
        opts = per_key.get(key)
        if opts:
            classes.setdefault(repr(sorted(opts.items())), (opts, []))[1].append(i)
    return list(classes.values())


def _option_value(option: str, value: Any) -> Any:
    if option == "workers":
        return [value] if isinstance(value, str) else list(value)
    if option == "resources":
        return [(str(k), float(v)) for k, v in dict(value).items()]
    if option in ("priority", "retries"):
        return int(value)
    return bool(value)


def _cull(dsk: Mapping[Key, GraphNode], keys: set[Key]) -> dict[Key, GraphNode]:
    out: dict[Key, GraphNode] = {}
    work = [k for k in keys if k in dsk]
    while work:
        k = work.pop()
        if k in out:
            continue
        out[k] = node = dsk[k]
        work.extend(d for d in node.dependencies if d in dsk and d not in out)
    return out


def insert_futures(collection: Any, graph: Mapping[Key, Any], futures: Mapping[Key, Any]) -> Any:
    """A copy of ``collection`` whose graph has ``futures`` (references to computed
    keys) in place of those keys' tasks, culled to what its keys still need
    (``Client.normalize_collection``); a future standing for its own key is an
    external dependency once materialised."""
    from dask.delayed import Delayed

    dsk: dict[Key, Any] = {**_graph_nodes(graph), **futures}
    out: dict[Key, Any] = {}
    work = [k for k in flatten_keys(collection.__dask_keys__()) if k in dsk]
    while work:
        k = work.pop()
        if k not in out:
            out[k] = node = dsk[k]
            if isinstance(node, GraphNode):
                work.extend(d for d in node.dependencies if d in dsk and d not in out)
    if isinstance(collection, Delayed):
        return Delayed(collection.key, out)  # type: ignore[no-untyped-call]
    copied = copy.copy(collection)
    copied.dask = out
    return copied


def pack_data(o: Any, d: Mapping[Key, Any]) -> Any:
    """``o`` (keys, possibly nested in lists, tuples and dicts) with each key replaced by
    its value in ``d``; dask array keys are tuples, so a tuple is first tried as a key."""

    def value(x: Any) -> Any:
        try:
            if x in d:
                return d[x]
        except TypeError:
            pass  # unhashable: a container
        return DESCEND

    return rebuild(o, value)
