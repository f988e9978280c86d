"""What a worker's task threads are running: call stacks now, and a sampling profile
over time (docs/runtime.md#call-stacks-and-profiles).

Both read ``sys._current_frames()`` for the threads the compiled task loop reports
running a call (``WorkerCore.running_calls``: thread ident and task), cut below the
task (the worker's own ``_run_tasks`` frame and what called it are left out). A profile
is distributed's tree: nodes ``{"identifier", "description": {"filename", "name",
"line_number", "line"}, "count", "children": {identifier: node}}`` under a ``"root"``
node, each count the samples that passed through the node.

The sampler is one daemon thread per worker waking every
``squall.worker.profile.interval``; it costs the worker nothing per task, and while no
task runs a wake is one call into the compiled loop. Samples gather in a tree per
``squall.worker.profile.cycle``, kept (with one tree per key prefix) for
``squall.worker.profile.history`` cycles.
"""

from __future__ import annotations

import linecache
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any

from dask.utils import key_split

from squall import config

if TYPE_CHECKING:
    from squall._core import WorkerCore

Tree = dict[str, Any]


def create() -> Tree:
    """An empty profile."""
    return {"identifier": "root", "description": describe(None), "count": 0, "children": {}}


def describe(frame: FrameType | None) -> dict[str, Any]:
    if frame is None:
        return {"filename": "", "name": "", "line_number": 0, "line": ""}
    code, line = frame.f_code, frame.f_lineno or frame.f_code.co_firstlineno
    text = linecache.getline(code.co_filename, line, frame.f_globals).lstrip()
    return {"filename": code.co_filename, "name": code.co_name, "line_number": line, "line": text}


def identifier(code: CodeType) -> str:
    """A function's node name, as distributed's: ``name;filename;first line``."""
    return f"{code.co_name};{code.co_filename};{code.co_firstlineno}"


def task_frames(frame: FrameType | None, stop: CodeType) -> list[FrameType]:
    """The frames of a task thread's stack from the task's outermost call inward:
    those below the ``stop`` frame (the task loop), outermost first; none if the
    thread is not inside the loop (it left the call meanwhile)."""
    frames: list[FrameType] = []
    while frame is not None and frame.f_code is not stop:
        frames.append(frame)
        frame = frame.f_back
    if frame is None:
        return []
    frames.reverse()
    return frames


def add(tree: Tree, frames: Iterable[FrameType]) -> None:
    """Count one sample of a stack in ``tree``."""
    node = tree
    node["count"] += 1
    for frame in frames:
        name = identifier(frame.f_code)
        child = node["children"].get(name)
        if child is None:
            child = {"identifier": name, "description": describe(frame), "count": 0}
            child["children"] = {}
            node["children"][name] = child
        child["count"] += 1
        node = child


def merge(*trees: Tree) -> Tree:
    """One tree counting the samples of all of ``trees`` (of the same root)."""
    merged = create()
    pending = [(merged, list(trees))]
    while pending:
        into, parts = pending.pop()
        if parts:
            into["identifier"] = parts[0]["identifier"]
            into["description"] = parts[0]["description"]
        into["count"] = sum(p["count"] for p in parts)
        by_name: dict[str, list[Tree]] = {}
        for p in parts:
            for name, child in p["children"].items():
                by_name.setdefault(name, []).append(child)
        for name, children in by_name.items():
            node: Tree = {"children": {}}
            into["children"][name] = node
            pending.append((node, children))
    return merged


def format_stack(frames: Iterable[FrameType]) -> list[str]:
    """A stack as distributed's ``call_stack`` lines (``File "f", line n, in name``,
    a newline, a tab and the source line)."""
    lines = []
    for frame in frames:
        d = describe(frame)
        where = f'  File "{d["filename"]}", line {d["line_number"]}, in {d["name"]}'
        lines.append(f"{where}\n\t{d['line']}")
    return lines


def call_stacks(
    core: WorkerCore, stop: CodeType, keys: Iterable[Any] | None = None
) -> dict[Any, list[str]]:
    """``{key: stack lines}`` of the tasks running now (of ``keys``, if given)."""
    wanted = None if keys is None else set(keys)
    stacks = {}
    frames = sys._current_frames()
    for ident, task in core.running_calls():
        key = core.task_key(task)
        if key is None or (wanted is not None and key not in wanted):
            continue
        stack = task_frames(frames.get(ident), stop)
        if stack:
            stacks[key] = format_stack(stack)
    return stacks


class Profiler:
    """Samples the task threads of one worker (``core``, whose loop runs in ``stop``'s
    frames) until ``stop()``."""

    def __init__(self, core: WorkerCore, stop: CodeType) -> None:
        self._core, self._stop = core, stop
        self.interval = config.seconds("worker.profile.interval")
        self.cycle = config.seconds("worker.profile.cycle")
        length = config.integer("worker.profile.history", minimum=1)
        self._lock = threading.Lock()
        #: Past cycles: (end time, whole tree, {key prefix: tree}).
        self._history: deque[tuple[float, Tree, dict[str, Tree]]] = deque(maxlen=length)
        self._recent, self._recent_keys = create(), dict[str, Tree]()
        self._cycle_end = time.time() + self.cycle
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="squall-profile", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def get(
        self, start: float | None = None, stop: float | None = None, key: str | None = None
    ) -> Tree:
        """The samples of the cycles that ended in ``start``..``stop`` (epoch seconds;
        the running cycle counts as ending now), of tasks of key prefix ``key`` if
        given."""
        now = time.time()
        start = 0.0 if start is None else start
        stop = now if stop is None else stop
        with self._lock:
            cycles = [*self._history, (now, self._recent, self._recent_keys)]
            trees = [
                tree if key is None else by_key[key]
                for end, tree, by_key in cycles
                if start <= end <= stop and (key is None or key in by_key)
            ]
            return merge(*trees)

    def _run(self) -> None:
        while not self._stopped.wait(self.interval):
            try:
                self.sample()
            except Exception:  # never let a sample end the profiler
                continue

    def sample(self) -> None:
        """Count one sample of every running task, starting a new cycle if due."""
        now = time.time()
        calls = self._core.running_calls()
        with self._lock:
            if now >= self._cycle_end:
                if self._recent["count"]:
                    self._history.append((now, self._recent, self._recent_keys))
                    self._recent, self._recent_keys = create(), {}
                self._cycle_end = now + self.cycle
            if not calls:
                return
            frames = sys._current_frames()
            for ident, task in calls:
                key = self._core.task_key(task)
                stack = task_frames(frames.get(ident), self._stop)
                if key is None or not stack:
                    continue
                add(self._recent, stack)
                prefix = key_split(key)
                tree = self._recent_keys.get(prefix)
                if tree is None:
                    tree = self._recent_keys[prefix] = create()
                add(tree, stack)
            del frames
