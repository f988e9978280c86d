"""Events from tasks (docs/runtime.md#events-and-printing-from-tasks): ``print`` and
``warn`` as distributed's, the check an event's message passes, and the log handler
``Client.forward_logging`` installs on workers."""

from __future__ import annotations

import builtins
import logging
import sys
import warnings
from collections.abc import Collection
from typing import Any, TextIO

import cloudpickle  # type: ignore[import-untyped]
import msgspec

from squall.protocol import messages as m
from squall.worker.context import get_worker

__all__ = ["print", "warn"]

_encoder = msgspec.msgpack.Encoder()


def log_event_message(topic: str | Collection[str], msg: Any) -> m.LogEvent:
    """The ``log-event`` message logging ``msg`` under ``topic`` (one or several);
    TypeError if ``msg`` is no msgpack value, as distributed checks."""
    try:
        _encoder.encode(msg)
    except (TypeError, ValueError, OverflowError):
        why = f"Message must be msgpack serializable. Got {type(msg)=} instead."
        raise TypeError(why) from None
    topics = [topic] if isinstance(topic, str) else [str(t) for t in topic]
    return m.LogEvent(topics=topics, msg=msg)


def print(
    *args: Any,
    sep: str | None = " ",
    end: str | None = "\n",
    file: TextIO | None = None,
    flush: bool = False,
) -> None:
    """``builtins.print``, and from a task also on every client connected to the
    worker's scheduler (``file`` must then be None, ``sys.stdout`` or ``sys.stderr``):
    the event ``{"args", "sep", "end", "flush", "file"}`` under topic ``"print"``."""
    try:
        worker = get_worker()
    except ValueError:
        pass
    else:
        msg: dict[str, Any] = {"args": tuple(map(str, args)), "sep": sep, "end": end}
        msg["flush"] = flush
        if file is sys.stdout:
            msg["file"] = 1
        elif file is sys.stderr:
            msg["file"] = 2
        elif file is not None:
            raise TypeError(
                f"a task prints remotely only to sys.stdout or sys.stderr, not to {file!r}"
            )
        worker.log_event("print", msg)
    builtins.print(*args, sep=sep, end=end, file=file, flush=flush)


def warn(
    message: str | Warning,
    category: type[Warning] | None = UserWarning,
    stacklevel: int = 1,
    source: Any = None,
) -> None:
    """``warnings.warn``, and from a task also on every client connected to the
    worker's scheduler (there without ``stacklevel`` and ``source``, which name the
    task's frames): the event ``{"message", "category"}`` (cloudpickled: a category
    defined in a submitted module arrives too) under ``"warn"``."""
    try:
        worker = get_worker()
    except ValueError:
        pass
    else:
        worker.log_event(
            "warn",
            {"message": cloudpickle.dumps(message), "category": cloudpickle.dumps(category)},
        )
    warnings.warn(message, category, stacklevel + 1, source)


_PLAIN = (str, int, float, bool, type(None))


class ForwardingHandler(logging.Handler):
    """Logs each record its logger handles as an event under ``topic`` (the record's
    attributes, its message formatted, values that are no plain scalars as text)."""

    def __init__(self, topic: str, level: int | str = logging.NOTSET) -> None:
        super().__init__(level)
        self.topic = topic

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.format(record)  # fills record.exc_text
        attributes = {
            k: v if isinstance(v, _PLAIN) else str(v) for k, v in record.__dict__.items()
        }
        attributes.update(msg=record.getMessage(), args=None, exc_info=None)
        attributes.pop("message", None)
        try:
            worker = get_worker()
        except ValueError:
            return  # the worker closed
        worker.log_event(self.topic, attributes)


def forward_logging(logger_name: str | None, level: int | str, topic: str) -> None:
    """Run on a worker: forward ``logger_name``'s records as events under ``topic``
    (again: replaces the handler, so each record is forwarded once)."""
    stop_forwarding(logger_name, topic)
    logging.getLogger(logger_name).addHandler(ForwardingHandler(topic, level))


def stop_forwarding(logger_name: str | None, topic: str) -> None:
    logger = logging.getLogger(logger_name)
    for h in list(logger.handlers):
        if isinstance(h, ForwardingHandler) and h.topic == topic:
            logger.removeHandler(h)
