"""How the processes a LocalCluster starts die with the process that started them.

Each gets as stdin the read end of a pipe whose write end only the starting process
holds, and runs with ``--watch-stdin``, which shuts it down when stdin reaches end of
file (:func:`watch_stdin`), however the starter ends (SIGKILL included); forks of the
starting process close their copy of the write end. A pipe is portable and follows the
process, where Linux's ``PR_SET_PDEATHSIG`` follows the *thread* that started the child:
a ``Client()`` made on a thread that then ends would take its cluster down with it.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import os
import signal
import threading
from collections.abc import Callable
from typing import ParamSpec

from dask.utils import parse_timedelta

from squall import config, preload
from squall._core import __version__
from squall._core import watch_stdin as watch_stdin_natively

# (read end, write end) of this process's lifeline pipe, made on first use. Both ends
# are non-inheritable: children get the read end only as their stdin, and the write end
# stays open in this process until it exits.
_lifeline_fds: tuple[int, int] | None = None
_lifeline_lock = threading.Lock()


def lifeline() -> int:
    """The read end of this process's lifeline pipe, for a child's stdin."""
    global _lifeline_fds
    with _lifeline_lock:
        if _lifeline_fds is None:
            _lifeline_fds = os.pipe()
        return _lifeline_fds[0]


def _forget_lifeline() -> None:
    """In a forked child: the parent's pipe must not keep the parent's cluster alive
    (and the lock may have been held by another thread of the parent)."""
    global _lifeline_fds, _lifeline_lock
    _lifeline_lock = threading.Lock()
    if _lifeline_fds is not None:
        for fd in _lifeline_fds:
            os.close(fd)
        _lifeline_fds = None


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_forget_lifeline)

WATCH_STDIN_HELP = (
    "shut down when stdin reaches end of file (LocalCluster's processes: when the "
    "process that started them ends)"
)

#: How long a process shutting down because its stdin closed may take (then it exits).
STDIN_CLOSED_GRACE = 10.0


def watch_stdin() -> None:
    """``--watch-stdin``: shut this process down (SIGTERM to itself, the graceful path of
    ``squall scheduler`` and ``squall worker``) once stdin reaches end of file, i.e. once
    the process that started it is gone; exit regardless after
    ``STDIN_CLOSED_GRACE`` seconds. The watcher is a native thread, so that it acts even
    when a stuck thread holds the GIL."""
    watch_stdin_natively(STDIN_CLOSED_GRACE)


_P = ParamSpec("_P")


def server_main(main: Callable[_P, int]) -> Callable[_P, int]:
    """A server's command (``squall scheduler``, ``squall worker``, ``dask_spec``): once
    it returns, its loop has closed (which restores SIGTERM's default) and the process is
    exiting. A SIGTERM in that window (its deployer stopping it meanwhile, or
    ``--watch-stdin``) asks for what is already happening, so it is ignored: the exit
    code stays the server's own rather than -SIGTERM."""

    @functools.wraps(main)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> int:
        try:
            return main(*args, **kwargs)
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)

    return run


#: What ``--version`` prints, in the form of distributed's programs ("dask, version X").
VERSION = f"squall, version {__version__}"

#: The protocols squall speaks (``--protocol``).
PROTOCOLS = ("tcp", "tls")


def protocol(value: str | None) -> str | None:
    """``--protocol`` checked: ``tcp`` or ``tls`` (``tcp://`` too), None if not given;
    ``ValueError`` naming the flag for another (ucx, ws, inproc) or for distributed's
    list of several, which would need a listener each."""
    if value is None:
        return None
    name = value.removesuffix("://")
    if name not in PROTOCOLS:
        raise ValueError(f"--protocol {value}: squall speaks tcp and tls only, over one listener")
    return name


def split_host(flag: str, text: str) -> tuple[str | None, str, int | None]:
    """A ``--host`` as distributed takes it: ``HOST``, ``HOST:PORT``, ``[IPv6]:PORT``,
    ``tcp://HOST:PORT`` or ``tls://`` → (protocol or None, host ("" if none), port or
    None); ``ValueError`` naming ``flag`` for another protocol."""
    scheme = None
    if "://" in text:
        given, text = text.split("://", 1)
        try:
            scheme = protocol(given)
        except ValueError:
            raise ValueError(
                f"{flag} {given}://{text}: squall speaks tcp:// and tls:// only"
            ) from None
    port = None
    name, sep, digits = text.rpartition(":")
    if sep and digits.isdigit() and (":" not in name or name.startswith("[")):
        text, port = name, int(digits)
    return scheme, text.strip("[]"), port


_pid_file: str | None = None


def write_pid_file(path: str) -> None:
    """``--pid-file``: this process's pid, removed when it exits (:func:`remove_pid_file`
    for an exit that skips ``atexit``)."""
    global _pid_file
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    _pid_file = path
    atexit.register(remove_pid_file)


def remove_pid_file() -> None:
    if _pid_file is not None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(_pid_file)


def parse_duration(text: str) -> float:
    """A duration flag (``--idle-timeout``, ``--lifetime``): seconds or "1 hour"."""
    try:
        seconds = float(parse_timedelta(text, default="s"))
    except (KeyError, TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}") from None
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"a duration must be >= 0, not {text!r}")
    return seconds


def add_process_flags(p: argparse.ArgumentParser, *, nanny: bool = False) -> None:
    """The flags ``squall scheduler`` and ``squall worker`` both take: ``--log-level``,
    ``--print-level``, ``--watch-stdin``, ``--protocol``, ``--pid-file``, ``--version``,
    the preload flags, with ``--preload-nanny`` if ``nanny``
    (docs/deploy.md#command-lines)."""
    p.add_argument("--protocol", help="tcp or tls (default: tls with --tls-* flags, else tcp)")
    p.add_argument("--pid-file", help="write this process's pid to this file (removed at exit)")
    p.add_argument("--version", action="version", version=VERSION)
    p.add_argument("--log-level", help="default: squall.logging.level")
    p.add_argument(
        "--print-level",
        help="print only lines of this level or above on stderr; the process still keeps "
        "those of --log-level for get_scheduler_logs/get_worker_logs (default: --log-level)",
    )
    p.add_argument("--watch-stdin", action="store_true", help=WATCH_STDIN_HELP)
    preload.add_cli_options(p, nanny=nanny)


def parse_process_args(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The arguments of ``squall scheduler`` or ``squall worker`` (a parser with
    :func:`add_process_flags`); stdin is watched if asked, the pid file written."""
    args, extra = p.parse_known_args(argv)
    # As distributed's programs, arguments they do not know go to a --preload's click
    # command; so do those after --preload-argv.
    if extra and not args.preload:
        p.error(f"unrecognized arguments: {' '.join(extra)}")
    args.preload_argv = [*extra, *args.preload_argv]
    if args.preload_argv and not args.preload:
        p.error("--preload-argv without a --preload")
    try:
        args.protocol = protocol(args.protocol)
    except ValueError as e:
        p.error(str(e))
    if args.watch_stdin:
        watch_stdin()
    if args.pid_file:
        write_pid_file(args.pid_file)
    return args


def log_levels(args: argparse.Namespace) -> tuple[str, str | None]:
    """``--log-level`` (else ``squall.logging.level``) and ``--print-level`` (None if
    unset), checked (``ConfigError``), for :func:`squall.config.setup_logging`."""
    printed = None if args.print_level is None else config.log_level(args.print_level)
    return config.log_level(args.log_level), printed
