"""Tracebacks that show the user's frames rather than squall's.

A task's error reaches the user through the worker's task loop and the client's result
plumbing (its event loop thread, asyncio, ``concurrent.futures``). Like distributed,
squall leaves those frames out: the user sees where they called squall and where their
function failed. Workers trim an error's traceback before sending it; the client's
blocking and awaitable entry points trim what they raise with :class:`user_frames`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import os
import sys
from types import FrameType, TracebackType

import dask._task_spec

#: The squall package (this module is in its protocol/), asyncio and concurrent.futures.
_PLUMBING_DIRS = tuple(
    os.path.dirname(path) + os.sep
    for path in (os.path.dirname(__file__), asyncio.__file__, concurrent.futures.__file__)
)
# dask's task-spec nodes call a collection task's function on workers.
_PLUMBING_FILES = frozenset({dask._task_spec.__file__})


def _plumbing(tb: TracebackType) -> bool:
    name = tb.tb_frame.f_code.co_filename
    return name.startswith(_PLUMBING_DIRS) or name in _PLUMBING_FILES


def trim(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without squall's, asyncio's, ``concurrent.futures``' and dask task-spec
    frames; the last frame (where the error was raised) always stays. A new chain:
    ``tb``'s entries are left as they are."""
    kept = []
    while tb is not None:
        if tb.tb_next is None or not _plumbing(tb):
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for entry in reversed(kept):
        out = TracebackType(out, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return out


def _release_locals(frame: FrameType) -> None:
    """Set ``frame``'s plain locals to None (its cells stay: a closure may outlive it).
    CPython 3.10 has no public call for an executing frame's locals but this one."""
    code = frame.f_code
    names = frame.f_locals  # a snapshot, written back below
    for name in code.co_varnames:
        if name in names and name not in code.co_cellvars:
            names[name] = None
    ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))


class user_frames:
    """Trims (:func:`trim`) the traceback of an exception leaving the ``with`` block,
    which must be its function's last statement.

    The frame holding the block goes too on Python >= 3.11 (it re-raises the exception
    with the traceback as set here), so no frame of squall's is left holding the futures
    of the call: an erred future's exception, which keeps its last traceback, would
    otherwise keep the future alive, reachable from the client's table of states. Python
    3.10 re-raises the traceback object it holds, whose first entry is that frame: the
    entry stays (one frame of squall's, as distributed shows), the rest is trimmed in
    place, and the frame's locals are released (docs/install.md#supported-pythons)."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        typ: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            return
        if sys.version_info >= (3, 11):
            exc.__traceback__ = trim(exc.__traceback__)
        elif tb is not None:
            tb.tb_next = trim(tb.tb_next)
            _release_locals(tb.tb_frame)
