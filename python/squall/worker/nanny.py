"""The nanny: a ``squall worker`` process that runs the worker in a child process and
starts a new one when it dies (docs/runtime.md#supervision-the-nanny).

It lives beside the worker program because it *is* that program by default (``squall
worker`` = ``squall worker --nanny``), whatever starts it: LocalCluster, ``--nworkers``,
a user; the deployment code only chooses ``--nanny`` or ``--no-nanny``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import tempfile
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
from dask.utils import format_bytes

from squall import config, log_ring
from squall._core import read_executing_record
from squall.deploy.lifeline import lifeline
from squall.errors import TimeoutError
from squall.preload import Preloads
from squall.protocol import comm, dispatch, liveness
from squall.protocol import messages as m
from squall.protocol.bounded import within
from squall.protocol.run_calls import run_function
from squall.worker import serving
from squall.worker.memory import local_directory, thresholds
from squall.worker.plugins import PluginHost

logger = logging.getLogger("squall.nanny")

#: A worker that dies sooner than this (seconds) after it started died quickly.
QUICK_DEATH = 10.0
#: Seconds to wait before starting a new worker after the 1st, 2nd, ... quick death in
#: a row (the last repeats): the first at once, as Dask's nanny, then doubling, so that
#: a worker that cannot live does not spin.
BACKOFF = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)
#: How long a worker told to stop (SIGTERM) may take before it is killed.
STOP_GRACE = 5.0
#: How long a worker over the memory terminate threshold may take to exit after
#: SIGTERM before it is killed: short, since its memory may still be growing.
MEMORY_GRACE = 1.0
#: The exit code of a worker whose preload failed (docs/runtime.md#preload): the nanny
#: does not start another, which would fail the same way, and exits with it.
PRELOAD_FAILED = 3


def backoff(quick_deaths: int) -> float:
    """The delay before a restart after ``quick_deaths`` (≥ 1) quick deaths in a row."""
    return BACKOFF[min(quick_deaths, len(BACKOFF)) - 1]


def describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


class Nanny:
    """Supervises one worker process, ``worker_command`` (a ``squall worker
    --no-nanny`` command line), until it leaves on its own (exit code 0: it gave up on
    its scheduler or was closed), its preload fails (``PRELOAD_FAILED``), the scheduler
    stays away for ``death_timeout``, or the nanny is told to close. Its own preloads
    (``preload``) get the nanny as their server (docs/runtime.md#preload).

    The nanny holds a connection to the scheduler as role ``nanny``: it sends
    ``worker-died`` whenever its worker's process ends, with the exit code and the tasks
    the worker was running then (kept in a file they share), and takes ``restart`` and
    ``close``; it reconnects to a lost scheduler as its worker does
    (docs/runtime.md#reconnection-and-liveness), and a message from it that does not
    validate closes that connection (and reconnects). It also serves peers ``run``
    (``Client.run(..., nanny=True)``), and refuses their other requests (it holds no
    data). With a ``memory_limit`` (bytes) it watches the
    worker's memory and kills it above the terminate threshold (docs/runtime.md#memory).
    Nanny plugins arrive as peer requests (``plugin-add``, ``plugin-remove``) and with
    its registration; one with ``restart`` set restarts the worker, which starts with
    the nanny's ``env`` (docs/runtime.md#worker-and-nanny-plugins)."""

    def __init__(
        self,
        scheduler_address: str,
        worker_command: list[str],
        death_timeout: float | str | None = None,
        memory_limit: int = 0,
        *,
        handle_signals: bool = True,
        preload: str | Sequence[str] | None = None,
        preload_argv: Sequence[str] | Sequence[Sequence[str]] | None = None,
    ) -> None:
        #: The nanny's own preloads (``--preload-nanny``), else ``squall.nanny.preload``,
        #: else Dask's ``distributed.nanny.preload``; imported here, so a failing one
        #: fails the nanny at once.
        self.preloads = Preloads.of("nanny", preload, preload_argv)
        self.scheduler_address = scheduler_address
        #: SIGINT/SIGTERM close it (its own process); not when run inside another's
        #: (``squall.Nanny``), whose signals are the user's.
        self._handle_signals = handle_signals
        self.death_timeout = liveness.death_timeout(death_timeout)
        self.address = comm.format_address(comm.worker_host(scheduler_address), 0)
        self._command = worker_command
        self._process: asyncio.subprocess.Process | None = None
        self._scheduler: comm.Comm | None = None
        self._listener: comm.Listener | None = None
        self._closing = asyncio.Event()
        self._restarting = False
        self._bg: set[asyncio.Task[Any]] = set()
        fd, record = tempfile.mkstemp(prefix="squall-executing-")
        os.close(fd)
        self._record = Path(record)
        self.memory_limit = memory_limit
        #: The worker process was killed for its memory: a death, whatever its exit code.
        self._memory_killed = False
        #: Variables set in its worker's environment beside its own (``Environ``).
        self.env: dict[str, str] = {}
        self._local_directory: str | None = None
        #: Set when a worker process has started (a plugin's restart waits for it).
        self._started = asyncio.Event()
        #: Its nanny plugins (docs/runtime.md#worker-and-nanny-plugins).
        self.plugin_host = PluginHost(self, after_setup=self._after_plugin_setup)
        self._on_scheduler: dispatch.Handlers[bool] = dispatch.Handlers(
            m.Route.SCHEDULER_TO_NANNY,
            {
                m.Restart: self._restart,
                m.Close: self._close_requested,
                m.Error: self._refused,
                m.NannyRegistered: self._registered_again,
            },
            malformed=self._malformed,
        )
        self._requests: serving.Requests = dispatch.Handlers(
            m.Route.PEER_TO_WORKER,
            {
                m.Run: self._run,
                m.GetData: self._holds_no_data,
                m.UpdateData: self._holds_no_data,
                m.ActorCall: self._holds_no_data,
                m.ActorAttribute: self._holds_no_data,
                m.PluginAdd: self.plugin_host.answer_add,
                m.PluginRemove: self.plugin_host.answer_remove,
            },
            malformed=serving.refuse_malformed,
        )

    async def run(self) -> int:
        """Supervise until done; the exit code of the ``squall worker`` program."""
        log_ring.install()
        self._listener = await comm.listen(
            self.address, self._serve_peer, roles=frozenset({"peer"})
        )
        self.address = self._listener.address
        logger.info("        Start Nanny at: %r", self.address)  # docs/deploy.md#startup-lines
        await self.preloads.setup(self)
        if not await self._join():
            logger.error(
                "nanny %s: no scheduler at %s within the death timeout of %ss",
                self.address,
                self.scheduler_address,
                self.death_timeout,
            )
            await self.preloads.teardown(self)
            await self._listener.close()
            self._record.unlink(missing_ok=True)
            return 1
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM) if self._handle_signals else ():
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.close)
        reader = loop.create_task(self._read_scheduler())
        keep_alive = loop.create_task(self._keep_alive())
        try:
            code = await self._supervise()
        finally:
            await self._stop_worker()
            await self.plugin_host.close()
            await self.preloads.teardown(self)
            for task in (reader, keep_alive):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self._scheduler_comm().close()
            await self._listener.close()
            self._record.unlink(missing_ok=True)
            if self._local_directory is not None:
                shutil.rmtree(self._local_directory, ignore_errors=True)
        return code

    @property
    def plugins(self) -> dict[str, Any]:
        """The nanny plugins set up here, by name."""
        return self.plugin_host.plugins

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    @property
    def local_directory(self) -> str:
        """The nanny's own scratch directory (made on first use, removed when it
        closes), beside its workers' under ``squall.worker.local-directory``."""
        if self._local_directory is None:
            base = local_directory(None)
            self._local_directory = tempfile.mkdtemp(prefix="squall-nanny-", dir=base)
        return self._local_directory

    async def _after_plugin_setup(self, plugin: Any) -> None:
        """A plugin with ``restart`` set restarts the worker once set up (as
        distributed's): it starts with what the plugin installed or set."""
        if getattr(plugin, "restart", False) and self._process is not None:
            await self.restart_worker()

    async def restart_worker(self) -> None:
        """Stop the worker process and wait until the next one has started (or the
        nanny closes)."""
        logger.info("nanny %s: restarting its worker", self.address)
        self._started.clear()
        self._restarting = True
        await self._stop_worker()
        waits = [asyncio.ensure_future(e.wait()) for e in (self._started, self._closing)]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    @property
    def listening(self) -> bool:
        """Whether it serves peers yet (``address`` is then where)."""
        return self._listener is not None

    async def _keep_alive(self) -> None:
        """The scheduler closes connections that stay silent (``squall.comm.timeouts.idle``),
        and a nanny may have nothing to report for days: say something every quarter of
        ``squall.comm.timeouts.tcp``."""
        while True:
            await asyncio.sleep(liveness.silence_timeout() / 4)
            with contextlib.suppress(comm.CommError, AssertionError):
                await self._scheduler_comm().write(m.HeartbeatClient())

    async def _join(self) -> bool:
        """Register with the scheduler, retrying with backoff for ``death_timeout``;
        False if that passed first."""
        what = f"nanny {self.address} joining {self.scheduler_address}"
        return await liveness.retry(self._register, self.death_timeout, what)

    async def _register(self) -> None:
        info = {"address": self.address}
        self._scheduler, reply = await liveness.register(
            self.scheduler_address, "nanny", info, m.NannyRegistered
        )
        # Before the (first) worker starts: it starts with what they set up.
        await self.plugin_host.add_all(reply.plugins)

    def close(self) -> None:
        """Stop the worker, then the nanny."""
        if not self._closing.is_set():
            logger.info("nanny %s: closing", self.address)
            self._closing.set()
            self._spawn(self._stop_worker())

    async def _supervise(self) -> int:
        """Start workers until done; the nanny's exit code."""
        loop = asyncio.get_running_loop()
        quick_deaths = 0
        while not self._closing.is_set():
            started = loop.time()
            self._restarting = False  # a restart asked for while none ran is done
            self._record.write_bytes(b"")  # nothing of the previous worker's
            self._memory_killed = False
            program, arguments = self._command[:3], self._command[3:]
            self._process = await asyncio.create_subprocess_exec(
                # After the program (python -m squall.worker): the command ends with
                # its preload argv, which takes the rest of the line.
                *program,
                "--no-nanny",
                "--watch-stdin",  # the worker dies with its nanny, even a SIGKILLed one
                *("--nanny-address", self.address),
                *("--executing-record", str(self._record)),
                *arguments,
                stdin=lifeline(),
                env=_worker_environment(self.env),
            )
            self._started.set()
            logger.info("nanny %s: started worker process %d", self.address, self._process.pid)
            if self._closing.is_set():  # closed while it started
                await self._stop_worker()
            watch = self._watch_memory(self._process)
            code = await self._process.wait()
            if watch is not None:
                watch.cancel()
            await self._report_exit(self._process.pid, code)
            if self._closing.is_set():
                return 0
            if self._restarting:
                quick_deaths = 0
                continue
            if code == 0 and not self._memory_killed:
                logger.info("nanny %s: the worker left, closing", self.address)
                return 0
            if code == PRELOAD_FAILED:
                logger.error("nanny %s: the worker's preload failed, closing", self.address)
                return code
            quick = loop.time() - started < QUICK_DEATH
            quick_deaths = quick_deaths + 1 if quick else 1
            delay = backoff(quick_deaths)
            logger.warning(
                "nanny %s: worker process %d died (%s); restarting in %.1fs",
                self.address,
                self._process.pid,
                describe_exit(code),
                delay,
            )
            with contextlib.suppress(TimeoutError):
                await within(self._closing.wait(), delay)
        return 0

    async def _report_exit(self, pid: int, code: int) -> None:
        """Tell the scheduler the worker process ended, with what it was running (None
        if unknown: the record was not kept or overflowed). Killed for its memory, it
        died, however it exited (a SIGTERMed worker closes cleanly)."""
        try:
            executing = read_executing_record(self._record.read_bytes())
        except OSError:
            executing = None
        if self._memory_killed and code == 0:
            code = -signal.SIGTERM
        report = m.WorkerDied(pid=pid, exit_code=code, executing=executing)
        with contextlib.suppress(comm.CommError):
            await self._scheduler_comm().write(report)

    def _watch_memory(self, p: asyncio.subprocess.Process) -> asyncio.Task[None] | None:
        """Watch ``p``'s memory if there is a limit and a terminate threshold."""
        limits = thresholds()
        if not self.memory_limit or limits.terminate is None:
            return None
        task = asyncio.get_running_loop().create_task(
            self._memory_watch(p, limits.terminate * self.memory_limit, limits.interval)
        )
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)
        return task

    async def _memory_watch(
        self, p: asyncio.subprocess.Process, limit: float, interval: float
    ) -> None:
        """Kill the worker (SIGTERM, SIGKILL after ``MEMORY_GRACE``) once its process
        memory passes ``limit``; the nanny then reports the death and restarts it."""
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(p.pid)
            while p.returncode is None:
                rss = process.memory_info().rss
                if rss > limit:
                    logger.warning(
                        "nanny %s: worker process %d uses %s, above the terminate threshold "
                        "(%s of its memory limit %s): restarting it",
                        self.address,
                        p.pid,
                        format_bytes(rss),
                        format_bytes(int(limit)),
                        format_bytes(self.memory_limit),
                    )
                    self._memory_killed = True
                    await self._stop_worker(MEMORY_GRACE)
                    return
                await asyncio.sleep(interval)

    async def _stop_worker(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM (the worker's graceful exit), SIGKILL after ``grace`` seconds."""
        p = self._process
        if p is None or p.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            p.terminate()
        try:
            await within(p.wait(), grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            await p.wait()

    def _scheduler_comm(self) -> comm.Comm:
        assert self._scheduler is not None, "the nanny has not joined its scheduler"
        return self._scheduler

    async def _read_scheduler(self) -> None:
        """Take the scheduler's messages; reconnect when the connection ends. The nanny
        watches no silence of its own: its worker does, and leaves (exit code 0) when
        it gives up, and the nanny with it."""
        while True:
            try:
                while True:
                    for msg, payload in await self._scheduler_comm().read_messages():
                        if not self._on_scheduler(msg, payload):
                            return
            except comm.CommError as e:
                logger.warning("nanny %s: lost the scheduler (%s); reconnecting", self.address, e)
                self._scheduler_comm().abort()
            if not await self._join():
                logger.error(
                    "nanny %s: no scheduler at %s for the death timeout of %ss; closing",
                    self.address,
                    self.scheduler_address,
                    self.death_timeout,
                )
                self.close()
                return

    # Scheduler messages: each handler says whether to keep reading.

    def _restart(self, msg: m.Restart, payload: memoryview) -> bool:
        logger.info("nanny %s: restart requested", self.address)
        self._restarting = True
        self._spawn(self._stop_worker())
        return True

    def _close_requested(self, msg: m.Close, payload: memoryview) -> bool:
        """Retired or shut down: no new worker."""
        logger.info("nanny %s: closed by the scheduler", self.address)
        self.close()
        return False

    def _refused(self, msg: m.Error, payload: memoryview) -> bool:
        """The scheduler refuses this nanny, then closes the connection."""
        logger.warning("nanny %s: the scheduler says: %s", self.address, msg.message)
        return True

    def _registered_again(self, msg: m.NannyRegistered, payload: memoryview) -> bool:
        raise comm.ProtocolError("the scheduler sent a second registered")

    def _malformed(self, bad: m.Malformed) -> bool:
        raise comm.ProtocolError(f"from the scheduler: {bad.error}")

    # Peer requests.

    async def _serve_peer(self, c: comm.Comm) -> None:
        try:
            while True:
                for msg, payload in await c.read_messages():
                    await serving.answer(c, self._requests, msg, payload)
        except comm.CommError as e:
            if not isinstance(e, comm.CommClosedError):
                logger.info("nanny %s: peer %s: %s", self.address, c.peer, e)

    def _run(self, msg: m.Run, payload: memoryview) -> Awaitable[serving.Answer]:
        return run_function(self, msg, payload, self._spawn)

    def _holds_no_data(
        self, msg: m.GetData | m.UpdateData | m.ActorCall | m.ActorAttribute, payload: memoryview
    ) -> Awaitable[serving.Answer]:
        return serving.refuse(f"{msg.op()!r}: a nanny holds no data (ask its worker)")

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)


def _worker_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """The worker's environment: this one over Dask's
    ``distributed.nanny.pre-spawn-environ`` where set, then Dask's
    ``distributed.nanny.environ`` (as distributed sets those in the worker's process),
    then the nanny plugins' ``env`` over all. Unlike Dask's nanny, none is added by
    default: ``MALLOC_TRIM_THRESHOLD_=65536`` cost 18 % of a tiny-task map's throughput
    (docs/measurements.md#supervision-and-tls), and large results, which glibc maps on
    their own, return their memory at once without it."""
    before = config.dask_value("nanny.pre-spawn-environ") or {}
    after = config.dask_value("nanny.environ") or {}
    return {
        **{str(k): str(v) for k, v in before.items()},
        **os.environ,
        **{str(k): str(v) for k, v in after.items()},
        **(env or {}),
    }


def run_nanny(
    scheduler_address: str,
    worker_command: list[str],
    death_timeout: str | None = None,
    memory_limit: int = 0,
    preload: Sequence[str] | None = None,
    address: str | None = None,
) -> int:
    """``squall worker`` (``--nanny``): supervise a worker run by ``worker_command``,
    with the nanny's ``preload``, serving on ``address`` if given (``--nanny-port``)."""
    nanny = Nanny(scheduler_address, worker_command, death_timeout, memory_limit, preload=preload)
    if address is not None:
        nanny.address = address
    return asyncio.run(nanny.run())
