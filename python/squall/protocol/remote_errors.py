"""How an exception raised on a worker travels to the client.

A task's exception (or ``Client.run``'s) is sent as ``cloudpickle(exception)``
(``n_exception`` bytes) followed by ``pickle(traceback)`` with tblib's traceback
pickling, so the client re-raises the remote frames; the header's ``exception_text``
(``repr``) and ``traceback_text`` (the formatted traceback) still describe an exception
that cannot be unpickled. Tracebacks start in the user's code (:mod:`squall.protocol.tracebacks`),
as distributed's workers send them.

An exception that does not survive a pickle round trip (arguments that cannot be
pickled, a constructor that does not take them back) keeps its type: it travels as its
class's module, qualified name and message, and is rebuilt on arrival as an instance of
that class if the class can be imported there, else of a stand-in subclass of
:class:`~squall.errors.RemoteError` with the same name and module.
"""

from __future__ import annotations

import contextlib
import copyreg
import importlib
import pickle
import sys
import traceback
import types
from collections.abc import Hashable
from typing import Any, TypeVar

import cloudpickle  # type: ignore[import-untyped]
from tblib import pickling_support  # type: ignore[import-untyped]

from squall._core import decode_keys
from squall.errors import KilledWorker, RemoteError
from squall.protocol import messages as m
from squall.protocol import tracebacks

# Pickle tracebacks with tblib (as distributed does), so clients can re-raise remotely.
copyreg.pickle(types.TracebackType, pickling_support.pickle_traceback)


def pack_error(e: BaseException) -> tuple[str, str, bytes, bytes]:
    """``(repr, formatted traceback, pickled exception, pickled traceback)``; an
    exception that cannot be shown or pickled is described by its type instead."""
    try:
        exc_text = repr(e)
    except Exception:
        exc_text = f"<{type(e).__name__}: its repr() failed>"
    tb = tracebacks.trim(e.__traceback__)
    try:
        tb_text = "".join(traceback.format_exception(type(e), e, tb))
    except Exception:
        tb_text = exc_text
    try:
        exc_blob = cloudpickle.dumps(e)
        pickle.loads(exc_blob)
    except Exception:
        exc_blob = pickle.dumps(_Rebuilt(type(e), _message(e, exc_text)))
    try:
        tb_blob = pickle.dumps(tb)
    except Exception:
        tb_blob = pickle.dumps(None)
    return exc_text, tb_text, exc_blob, tb_blob


def _message(e: BaseException, fallback: str) -> str:
    try:
        return str(e)
    except Exception:
        return fallback


class _Rebuilt:
    """Pickles as a call of :func:`rebuild_exception` with plain strings."""

    def __init__(self, cls: type[BaseException], message: str) -> None:
        self.args = (cls.__module__, cls.__qualname__, message)

    def __reduce__(self) -> tuple[Any, tuple[str, str, str]]:
        return rebuild_exception, self.args


_stand_ins: dict[tuple[str, str], type[RemoteError]] = {}


def rebuild_exception(module: str, qualname: str, message: str) -> BaseException:
    """An exception of class ``module.qualname`` carrying ``message``: of that class if
    it can be imported and made without its constructor, else of a stand-in."""
    with contextlib.suppress(Exception):
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            exc = cls.__new__(cls)
            exc.args = (message,)
            str(exc)  # a __str__ that wants what __init__ sets would fail later
            return exc
    stand_in = _stand_ins.get((module, qualname))
    if stand_in is None:
        name = qualname.rsplit(".", 1)[-1]
        doc = f"Stands for {module}.{qualname}, which cannot be imported here."
        attrs = {"__module__": module, "__qualname__": qualname, "__doc__": doc}
        stand_in = _stand_ins[module, qualname] = type(name, (RemoteError,), attrs)
    return stand_in(message)


E = TypeVar("E", bound=m.ErrorReport)


def error_fields(report: E, err: tuple[str, str, bytes, bytes]) -> tuple[E, bytes]:
    """``report`` with its error fields set from a :func:`pack_error` result, and the
    payload that carries the pickles."""
    exc_text, tb_text, exc_blob, tb_blob = err
    report.exception_text = exc_text
    report.traceback_text = tb_text
    report.n_exception = len(exc_blob)
    return report, exc_blob + tb_blob


def unpack_error(
    report: m.ErrorReport, payload: memoryview, where: str
) -> tuple[BaseException, types.TracebackType | None]:
    """The exception (a :class:`~squall.errors.RemoteError` with the remote text if it
    cannot be unpickled here) and traceback of a message carrying :func:`error_fields`;
    ``where`` names what failed in the note that holds the remote traceback's text."""
    n_exc, text, tb_text = report.n_exception, report.exception_text, report.traceback_text
    try:
        loaded: Any = pickle.loads(payload[:n_exc]) if n_exc else None
    except Exception:
        loaded = None
    exc = loaded if isinstance(loaded, BaseException) else RemoteError(text or f"{where} failed")
    tb: types.TracebackType | None = None
    with contextlib.suppress(Exception):
        rest = payload[n_exc:]
        obj: Any = pickle.loads(rest) if len(rest) else None
        if hasattr(obj, "as_traceback"):
            obj = obj.as_traceback()
        if isinstance(obj, types.TracebackType):
            tb = obj
    if tb_text:
        add_note(exc, f"Remote traceback ({where}):\n{tb_text.rstrip()}")
    return exc, tb


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``. Python 3.10 has no notes: there it is kept in
    ``__notes__`` as later Pythons keep it, though 3.10's tracebacks leave it out."""
    if sys.version_info >= (3, 11):
        exc.add_note(note)
    else:
        setattr(exc, "__notes__", [*getattr(exc, "__notes__", ()), note])  # noqa: B010


def parse_task_erred(
    h: m.TaskErred, payload: memoryview
) -> tuple[Hashable, BaseException, types.TracebackType | None]:
    """A ``task-erred`` notice (the key, then :func:`error_fields`' payload) as
    ``(key, exception to raise, traceback)``; a task that killed too many workers
    (``error_kind`` KilledWorker) comes as text only."""
    [key] = decode_keys(bytes(payload[: h.n_key]))
    if h.error_kind == "KilledWorker":
        text = h.exception_text or f"task {key!r} killed too many workers"
        return key, KilledWorker(text, key), None
    if h.error_kind == "ActorLost":  # as distributed reports it (docs/actors.md)
        return key, RuntimeError(h.exception_text or "Worker holding Actor was lost"), None
    exc, tb = unpack_error(h, payload[h.n_key :], f"task {key!r}")
    return key, exc, tb
