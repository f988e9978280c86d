"""Hosts made of Linux network namespaces, for multi-host tests and benchmarks
(docs/deploy.md#across-hosts).

:class:`Network` makes N namespaces ("hosts"), each with one ``eth0`` (a veth) into a
private bridge that lives in a namespace of its own: no uplink, no default route, no
address in the caller's namespace, so traffic between the hosts stays among them. Names
carry the creating process's id (``squall-PID-...``): :func:`remove_stale` removes what
a crashed run left behind, and :meth:`Network.close` (also on failure, as a context
manager) what this run made. Making namespaces needs root and ``ip`` (iproute2);
:func:`unavailable` says why they cannot be made here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

PREFIX = "squall-"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def unavailable() -> str | None:
    """Why namespaces cannot be made here (not root, no ``ip``), or None."""
    if os.name != "posix" or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "network namespaces need `ip` (iproute2)"
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _namespaces() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_namespace(ns: str) -> None:
    """SIGKILL every process in namespace ``ns``."""
    for pid in _ip("netns", "pids", ns, check=False).stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def _remove(ns: str) -> None:
    _kill_namespace(ns)
    _ip("netns", "del", ns, check=False)


def remove_stale() -> list[str]:
    """Remove the namespaces (and so their links and processes) of runs whose process
    is gone; returns their names."""
    removed = []
    for ns in _namespaces():
        owner = ns.removeprefix(PREFIX).split("-", 1)[0]
        if ns.startswith(PREFIX) and owner.isdigit() and not _pid_alive(int(owner)):
            _remove(ns)
            removed.append(ns)
    return removed


@dataclass
class Host:
    """One namespace on the bridge: ``ip`` is its ``eth0`` address."""

    name: str
    ns: str
    ip: str
    #: Its veth's end on the bridge (in the switch namespace).
    port: str
    switch: str
    procs: list[subprocess.Popen[Any]] = field(default_factory=list)

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside this host."""
        return ["ip", "netns", "exec", self.ns, *argv]

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside this host (``kwargs``: ``subprocess.Popen``'s)."""
        proc: subprocess.Popen[Any] = subprocess.Popen(self.command(argv), **kwargs)
        self.procs.append(proc)
        return proc

    def run(
        self, argv: Sequence[str], timeout: float, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside this host to its end (killed after ``timeout`` seconds),
        capturing its output as text."""
        return subprocess.run(
            self.command(argv), timeout=timeout, capture_output=True, text=True, **kwargs
        )

    def kill_all(self) -> None:
        """SIGKILL every process of this host (a host that died)."""
        _kill_namespace(self.ns)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)

    def link(self, up: bool) -> None:
        """Take this host's link to the bridge down (a partitioned or hung host: its
        packets and its peers' are dropped silently) or back up."""
        _ip("-n", self.switch, "link", "set", self.port, "up" if up else "down")


class Network:
    """``n`` hosts on one private bridge, addressed ``10.231.X.1``, ``.2``, ...:
    ``with Network(3) as net: net.hosts[0].popen([...])``."""

    def __init__(self, n: int, subnet: int | None = None) -> None:
        pid = os.getpid()
        self._base = f"{PREFIX}{pid}-{id(self) % 10_000}"
        self.switch = f"{self._base}-sw"
        third = (pid % 200) + 20 if subnet is None else subnet
        self.hosts: list[Host] = []
        self._made: list[str] = []
        try:
            self._add(self.switch)
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
            for i in range(n):
                self.hosts.append(self._host(i, f"10.231.{third}.{i + 1}"))
        except BaseException:
            self.close()
            raise

    def _add(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self._made.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")

    def _host(self, i: int, ip: str) -> Host:
        ns = f"{self._base}-h{i}"
        self._add(ns)
        port = f"p{i}"
        sw = self.switch
        _ip("-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("-n", sw, "link", "set", port, "master", "br0", "up")
        _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        return Host(name=f"h{i}", ns=ns, ip=ip, port=port, switch=sw)

    def close(self) -> None:
        """Kill every process of the hosts and remove the namespaces."""
        for host in self.hosts:
            host.kill_all()
        for ns in reversed(self._made):
            _remove(ns)
        self._made.clear()

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
