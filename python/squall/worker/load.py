"""What a worker's heartbeat says (docs/runtime.md#task-stream): the running tasks, its
bandwidth and memory, its load (CPU and network use since the previous heartbeat, task
and key counts), and the sampled task stream the compiled task loop kept meanwhile."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psutil  # type: ignore[import-untyped]

from squall._core import WorkerCore
from squall.protocol import messages as m


class LoadMeter:
    """CPU use of this process and the host's network throughput (psutil counters, as
    Dask's workers read them), each averaged since the previous reading."""

    def __init__(self, process: psutil.Process) -> None:
        self._process = process
        self._process.cpu_percent()  # the first reading only starts the interval
        self._net = _net_bytes()
        self._time = time.monotonic()

    def figures(self, core: WorkerCore) -> dict[str, float]:
        """The heartbeat's ``load``."""
        now, net = time.monotonic(), _net_bytes()
        elapsed = max(now - self._time, 1e-6)
        read, write = ((new - old) / elapsed for new, old in zip(net, self._net, strict=True))
        self._time, self._net = now, net
        executing, ready, in_flight, in_memory = core.counts()
        return {
            "cpu": self._process.cpu_percent(),
            "read_bps": max(read, 0.0),  # counters may wrap or reset with an interface
            "write_bps": max(write, 0.0),
            "executing": executing,
            "ready": ready,
            "in_flight": in_flight,
            "in_memory": in_memory,
        }


@dataclass
class Transfers:
    """Data transfers with other workers, as ``/metrics`` shows them: open now and
    made since start, each way (counted per request, not per key)."""

    incoming_open: int = 0
    incoming_total: int = 0
    incoming_bytes_total: int = 0
    outgoing_open: int = 0
    outgoing_open_bytes: int = 0
    outgoing_total: int = 0
    outgoing_bytes_total: int = 0

    @contextmanager
    def incoming(self) -> Iterator[None]:
        """Around a ``get-data`` request to a peer (its size is known only after)."""
        self.incoming_open += 1
        self.incoming_total += 1
        try:
            yield
        finally:
            self.incoming_open -= 1

    def received(self, nbytes: int) -> None:
        self.incoming_bytes_total += nbytes

    @contextmanager
    def outgoing(self, nbytes: int) -> Iterator[None]:
        """Around sending ``nbytes`` to a peer (counted even if the send fails)."""
        self.outgoing_open += 1
        self.outgoing_open_bytes += nbytes
        self.outgoing_total += 1
        self.outgoing_bytes_total += nbytes
        try:
            yield
        finally:
            self.outgoing_open -= 1
            self.outgoing_open_bytes -= nbytes


def _net_bytes() -> tuple[int, int]:
    """Bytes received and sent over all interfaces (0, 0 where psutil cannot tell)."""
    counters = psutil.net_io_counters()
    return (0, 0) if counters is None else (counters.bytes_recv, counters.bytes_sent)


def heartbeat(
    core: WorkerCore, meter: LoadMeter, bandwidth: float | None, memory: m.Memory
) -> tuple[m.Heartbeat, bytes]:
    """A heartbeat and its payload: the running tasks' elapsed seconds, the measured
    ``bandwidth`` (None until a transfer measured it), ``memory``, the load, and the
    tasks sampled since the last heartbeat (``stream``: epoch seconds, the result's
    size and type name, 0 and "" for a failure; ``stream_tasks``: how many tasks ran,
    which the samples stand for), their keys the payload (``encode_keys`` form)."""
    keys, samples, ran = core.take_task_stream()
    msg = m.Heartbeat(
        executing=core.executing(),
        bandwidth=bandwidth,
        memory=memory,
        load=meter.figures(core),
        stream=samples,
        stream_tasks=ran,
    )
    return msg, keys
