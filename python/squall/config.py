"""squall's configuration: ``dask.config`` under the ``squall`` key (docs/config.md).

The defaults ship in ``squall.yaml`` next to this module and are registered with
``dask.config.update_defaults`` on import, so Dask's usual sources override them: YAML
files in ``~/.config/dask`` (or ``$DASK_CONFIG``), environment variables such as
``DASK_SQUALL__SCHEDULER__WORKER_SATURATION=inf``, and ``dask.config.set``. Values are
read when an object is created (a scheduler, worker, client or connection), never on hot
paths.
"""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import dask.config
import yaml  # type: ignore[import-untyped]
from dask.utils import parse_bytes, parse_timedelta

from squall._core import check_config, core_settings

_DEFAULTS_FILE = pathlib.Path(__file__).with_name("squall.yaml")


class ConfigError(ValueError):
    """A configuration value is missing or cannot be used."""


def _load_defaults() -> Mapping[str, Any]:
    with _DEFAULTS_FILE.open() as f:
        tree = yaml.safe_load(f)
    dask.config.update_defaults(tree)
    return tree["squall"]  # type: ignore[no-any-return]


_SQUALL_DEFAULTS = _load_defaults()


# ----- Dask's own keys (docs/config.md#dasks-distributed-keys) --------------------------


class DaskKey(NamedTuple):
    """The key under ``distributed`` whose meaning a squall key shares, and how its
    value reads as squall's (None: as it is)."""

    key: str
    translate: Callable[[Any], Any] | None = None


# squall keys with the same path under ``distributed``.
_SAME_PATH = (
    *(
        f"scheduler.{name}"
        for name in (
            "worker-saturation",
            "rootish-taskgroup",
            "rootish-taskgroup-dependencies",
            "work-stealing",
            "work-stealing-interval",
            "allowed-failures",
            "unknown-task-duration",
            "default-task-durations",
            "default-data-size",
            "bandwidth",
            "worker-ttl",
            "no-workers-timeout",
            "validate",
            "preload",
            "preload-argv",
            "dashboard.tls.cert",
            "dashboard.tls.key",
            "active-memory-manager.start",
            "active-memory-manager.interval",
        )
    ),
    *(f"worker.memory.{n}" for n in ("target", "spill", "pause", "terminate", "monitor-interval")),
    *(f"worker.memory.rebalance.{n}" for n in ("measure", "sender-min", "recipient-max")),
    "worker.memory.rebalance.sender-recipient-gap",
    *(f"worker.profile.{name}" for name in ("enabled", "interval", "cycle")),
    *(f"worker.lifetime.{name}" for name in ("duration", "stagger", "restart")),
    "worker.preload",
    "worker.preload-argv",
    "worker.resources",
    "nanny.preload",
    "nanny.preload-argv",
    *(f"adaptive.{n}" for n in ("interval", "target-duration", "minimum", "maximum")),
    "adaptive.wait-count",
    "comm.timeouts.connect",
    "comm.timeouts.tcp",
    "admin.log-length",
)

#: Every squall key whose meaning a ``distributed`` key shares, with that key: where
#: squall's is not set, Dask's applies (``get`` and the readers below; the rule is in
#: docs/config.md). tests/test_dask_config.py checks it against docs/config.md's table.
DASK_KEYS: dict[str, DaskKey] = {
    **{name: DaskKey(name) for name in _SAME_PATH},
    "scheduler.transition-log-length": DaskKey("admin.low-level-log-length"),
    "scheduler.erred-tasks-max-history": DaskKey("diagnostics.erred-tasks.max-history"),
    "scheduler.memory-terminate": DaskKey("worker.memory.terminate", bool),
    "admin.events-log-length": DaskKey("admin.low-level-log-length"),
    "admin.events-cleanup-delay": DaskKey("scheduler.events-cleanup-delay"),
    "diagnostics.task-stream.capacity": DaskKey("scheduler.dashboard.tasks.task-stream-length"),
}

_IDENTITIES = ("client", "scheduler", "worker")  # as security.IDENTITIES

#: Keys under ``distributed`` that squall reads as they are, having none of its own
#: (through ``dask_value``, where the comment beside each says).
DASK_DIRECT = frozenset(
    {
        "comm.require-encryption",  # security.Security
        "comm.tls.ca-file",
        "comm.tls.ciphers",
        "comm.tls.min-version",
        "comm.tls.max-version",
        *(f"comm.tls.{part}.{kind}" for part in _IDENTITIES for kind in ("cert", "key")),
        "nanny.environ",  # worker/nanny.py: the worker's environment
        "nanny.pre-spawn-environ",
        "dashboard.link",  # client/display.py
        "scheduler.http.routes",  # http/scheduler_routes.py: /api/v1
        "scheduler.idle-timeout",  # scheduler/launcher.py: --idle-timeout's default
    }
)

_MISSING: Any = object()


def _at(tree: Any, path: str) -> Any:
    """The value at dotted ``path`` in a nested mapping (keys with - or _), or _MISSING."""
    for part in path.split("."):
        if not isinstance(tree, Mapping):
            return _MISSING
        for key in (part, part.replace("-", "_")):
            if key in tree:
                tree = tree[key]
                break
        else:
            return _MISSING
    return tree


def _dask_defaults() -> list[Mapping[str, Any]]:
    """The defaults distributed registered with dask.config (none unless imported)."""
    return [d["distributed"] for d in dask.config.defaults if "distributed" in d]


def dask_value(key: str, default: Any = None) -> Any:
    """Dask's ``distributed.<key>`` where it is set, else ``default``. Set means it
    differs from the default distributed registers when imported; in a process that has
    not imported distributed, any value present is set."""
    value = _at(dask.config.config.get("distributed"), key)
    if value is _MISSING:
        return default
    for tree in reversed(_dask_defaults()):
        registered = _at(tree, key)
        if registered is not _MISSING:
            return default if value == registered else value
    return value


def lookup(name: str) -> tuple[Any, str]:
    """The value in effect for ``squall.<name>`` and the key it came from: squall's
    where set (not its default), else Dask's twin where set, else squall's default."""
    value = _at(dask.config.config.get("squall"), name)
    if value is _MISSING:
        raise ConfigError(f"no configuration value squall.{name}")
    return _resolve(name, value)


def _resolve(name: str, value: Any) -> tuple[Any, str]:
    twin = DASK_KEYS.get(name)
    if twin is None or value != _at(_SQUALL_DEFAULTS, name):
        return value, f"squall.{name}"
    theirs = dask_value(twin.key, _MISSING)
    if theirs is _MISSING:
        return value, f"squall.{name}"
    translated = theirs if twin.translate is None else twin.translate(theirs)
    return translated, f"distributed.{twin.key}"


def get(name: str) -> Any:
    """The value of ``squall.<name>``, e.g. ``get("scheduler.port")``, or of its Dask
    twin (``DASK_KEYS``) where squall's is not set and Dask's is."""
    return lookup(name)[0]


def seconds(name: str) -> float:
    """``squall.<name>`` as a non-negative duration in seconds ("100ms", or seconds)."""
    return _duration(*lookup(name))


def nbytes(name: str) -> int:
    """``squall.<name>`` as a non-negative number of bytes ("1GiB", or bytes)."""
    return _bytes(*lookup(name))


def integer(name: str, minimum: int = 0) -> int:
    """``squall.<name>`` as an integer >= ``minimum``."""
    return _count(*lookup(name), minimum)


def flag(name: str) -> bool:
    """``squall.<name>`` as true or false."""
    return _flag(*lookup(name))


def port(name: str) -> int:
    """``squall.<name>`` as a TCP port (0 picks a free one)."""
    value = integer(name)
    if value > 65535:
        raise ConfigError(f"squall.{name}: expected a port in 0..65535, got {value!r}")
    return value


_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


#: Every line of the programs' logs: when, how serious, which part, what.
LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def log_level(value: str | None = None) -> str:
    """A logging level name (``value``, else ``squall.logging.level``), upper-cased."""
    where = "log level" if value is not None else "squall.logging.level"
    level = get("logging.level") if value is None else value
    return _level(level, where)


def _level(level: Any, where: str) -> str:
    if not isinstance(level, str) or level.upper() not in _LEVELS:
        raise ConfigError(f"{where}: expected one of {', '.join(_LEVELS)}, got {level!r}")
    return level.upper()


def setup_logging(level: str, printed: str | None = None) -> None:
    """The programs' logging: ``level`` (``--log-level`` or ``squall.logging.level``)
    for everything, ``LOG_FORMAT`` on stderr (only ``printed`` and above there, if
    given: what a LocalCluster's processes print, while they keep ``level``'s lines
    for ``get_*_logs``), and per logger the levels given beside ``level`` under
    ``squall.logging`` (``{"squall.comm": "debug"}``), as Dask's
    ``distributed.logging`` takes them."""
    logging.basicConfig(level=level, format=LOG_FORMAT)
    if printed is not None:
        for handler in logging.getLogger().handlers:
            handler.setLevel(printed)
    for name, value in dict(get("logging")).items():
        if name != "level":
            logging.getLogger(str(name)).setLevel(_level(value, f"squall.logging.{name}"))


# ----- the core's scheduling knobs ------------------------------------------------------

# Keys of squall.scheduler that configure the scheduler process, not its core.
_SERVER_KEYS = frozenset(
    {
        "host",
        "port",
        "tick-interval",
        "nanny-report-timeout",
        "dashboard",
        "preload",
        "preload-argv",
        "replicas-timeout",
        "active-memory-manager",
    }
)


def _duration(value: Any, where: str, unit: str = "s") -> float:
    try:
        if isinstance(value, bool):
            raise TypeError
        out = float(parse_timedelta(value, default=unit))
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ConfigError(f"{where}: expected a duration like '500ms', got {value!r}") from None
    if not out >= 0:
        raise ConfigError(f"{where}: expected a duration >= 0, got {value!r}")
    return out


def _bytes(value: Any, where: str) -> int:
    try:
        if isinstance(value, bool):
            raise TypeError
        out = int(parse_bytes(value))
    except (TypeError, ValueError, AttributeError, OverflowError):
        raise ConfigError(f"{where}: expected a size like '1kiB', got {value!r}") from None
    if out < 0:
        raise ConfigError(f"{where}: expected a size >= 0, got {value!r}")
    return out


def _count(value: Any, where: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{where}: expected an integer >= {minimum}, got {value!r}")
    return value


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    return value


def _task_durations(value: Any, where: str) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping of task prefix to duration")
    return {str(k): _duration(v, f"{where}.{k}") for k, v in value.items()}


def _ms_duration(value: Any, where: str) -> float:
    return _duration(value, where, unit="ms")  # Dask reads bare numbers as milliseconds


def _as_is(value: Any, where: str) -> Any:
    return value  # a number or "inf": the core reads it


# How users write each kind of the core's settings (squall_core::Kind's names).
_PARSERS: dict[str, Callable[[Any, str], Any]] = {
    "flag": _flag,
    "count": _count,
    "number-or-inf": _as_is,
    "duration": _duration,
    "duration-ms": _ms_duration,
    "bytes": _bytes,
    "bytes-per-second": _bytes,
    "durations-by-prefix": _task_durations,
}


def _parser(kind: str, nullable: bool) -> Callable[[Any, str], Any]:
    parse = _PARSERS[kind]
    if not nullable:
        return parse
    return lambda value, where: None if value is None else parse(value, where)


# The core's settings (their names, kinds and defaults are the core's table, docs/config.md).
_CORE_KEYS = {name: _parser(kind, nullable) for name, kind, nullable, _ in core_settings()}


def core_config(overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The config dict for ``squall._core.Scheduler``: every core knob of
    ``squall.scheduler`` (or its Dask twin, as ``get``), with ``overrides``
    (``worker_saturation`` or ``worker-saturation``) taking precedence, as the core
    reads them (seconds, bytes and numbers)."""
    section = dask.config.get("squall.scheduler")
    if not isinstance(section, Mapping):
        raise ConfigError(f"squall.scheduler: expected a mapping, got {section!r}")
    raw = {
        name: _resolve(f"scheduler.{name}", v)
        for k, v in section.items()
        if (name := _canonical(k)) not in _SERVER_KEYS
    }
    for k, v in (overrides or {}).items():
        name = _canonical(k)
        if name not in _CORE_KEYS:
            raise ConfigError(_unknown(repr(k), "scheduler option", _CORE_KEYS))
        raw[name] = (v, f"squall.scheduler.{name}")
    parsed: dict[str, Any] = {}
    for name, (value, where) in raw.items():
        parse = _CORE_KEYS.get(name)
        if parse is None:
            known = _CORE_KEYS.keys() | _SERVER_KEYS
            raise ConfigError(_unknown(f"squall.scheduler.{name}", "configuration key", known))
        parsed[name] = parse(value, where)
    try:
        return check_config(parsed)  # the knobs' ranges live in the core (Config::check)
    except ValueError as e:
        name, _, why = str(e).partition(":")
        where = raw[name][1] if name in raw else f"squall.scheduler.{name}"
        raise ConfigError(f"{where}:{why}") from None


def inherit(scheduler: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Environment variables passing this process's ``squall`` config, with
    ``scheduler`` overrides of ``squall.scheduler``, and the ``distributed`` keys set
    here (``dask_value``) to a child process: a ``dask.config.set`` here then applies
    to the processes a LocalCluster starts."""
    core_config(scheduler)  # refuse bad overrides here, not in the child
    tree = dict(dask.config.get("squall"))
    section = {_canonical(k): v for k, v in tree["scheduler"].items()}
    section.update({_canonical(k): v for k, v in (scheduler or {}).items()})
    tree["scheduler"] = section
    inherited = {"squall": tree, "distributed": _set_here(dask.config.config.get("distributed"))}
    return {"DASK_INTERNAL_INHERIT_CONFIG": dask.config.serialize(inherited)}


def _set_here(tree: Any, path: str = "") -> dict[str, Any]:
    """The part of the ``distributed`` subtree ``tree`` (at ``path``) that is set."""
    out: dict[str, Any] = {}
    for key, value in (tree or {}).items():
        where = f"{path}{key}"
        if isinstance(value, Mapping) and value:
            inner = _set_here(value, f"{where}.")
            if inner:
                out[key] = inner
        elif dask_value(where, _MISSING) is not _MISSING:
            out[key] = value
    return out


def _canonical(key: Any) -> str:
    return str(key).replace("_", "-")


def _unknown(key: str, what: str, known: Iterable[str]) -> str:
    return f"unknown {what} {key}; known: {', '.join(sorted(known))}"


# What keeps dask's ``scheduler`` config at "squall" in this process (default clients,
# running workers), and the config that setting replaced.
_dask_holders: list[object] = []
_dask_before: Any = None


def route_dask(holder: object) -> None:
    """Point dask's default scheduler at squall (``scheduler="squall"``, which resolves to
    a client at each dask call: docs/runtime.md#tasks-that-use-the-cluster) while
    ``holder`` — a default client, or a worker started in this process — is up."""
    global _dask_before
    _dask_holders.append(holder)
    if _dask_before is None:
        _dask_before = dask.config.set(scheduler="squall")


def unroute_dask(holder: object) -> None:
    """``holder`` is gone; the previous config comes back once no holder is left."""
    global _dask_before
    if holder in _dask_holders:
        _dask_holders.remove(holder)
    if not _dask_holders and _dask_before is not None:
        _dask_before.__exit__(None, None, None)
        _dask_before = None
