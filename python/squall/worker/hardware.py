"""Bandwidths a worker measures for ``Client.benchmark_hardware`` (bytes per second by
transfer size, as distributed reports them): writing files to its local directory,
copying memory, and sending data to another worker over the peer connection."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import cloudpickle  # type: ignore[import-untyped]
from dask.utils import format_bytes, parse_bytes

if TYPE_CHECKING:
    from squall.worker.worker import Worker

DISK_SIZES = ("1 kiB", "100 kiB", "1 MiB", "10 MiB", "100 MiB")
MEMORY_SIZES = ("2 kiB", "10 kiB", "100 kiB", "1 MiB", "10 MiB")
NETWORK_SIZES = ("1 kiB", "10 kiB", "100 kiB", "1 MiB", "10 MiB", "50 MiB")


def _label(size: str) -> str:
    return format_bytes(parse_bytes(size))


def _rate(nbytes: int, duration: float, once: Callable[[], None]) -> float:
    """Bytes per second of calling ``once`` (moving ``nbytes``) for ``duration``."""
    start = time.perf_counter()
    count = 0
    while True:
        once()
        count += 1
        elapsed = time.perf_counter() - start
        if elapsed >= duration:
            return nbytes * count / elapsed


def benchmark_disk(
    directory: str, sizes: tuple[str, ...] = DISK_SIZES, duration: float = 1.0
) -> dict[str, float]:
    """Writing (and syncing) files of each size under ``directory``."""
    rates = {}
    with tempfile.TemporaryDirectory(prefix="squall-benchmark-", dir=directory) as where:
        path = os.path.join(where, "data")
        for size in sizes:
            data = os.urandom(parse_bytes(size))

            def write(data: bytes = data) -> None:
                with open(path, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())

            rates[_label(size)] = _rate(len(data), duration / len(sizes), write)
    return rates


def benchmark_memory(
    sizes: tuple[str, ...] = MEMORY_SIZES, duration: float = 0.2
) -> dict[str, float]:
    """Copying buffers of each size."""
    rates = {}
    for size in sizes:
        data = bytearray(os.urandom(parse_bytes(size)))

        def copy(data: bytearray = data) -> None:
            bytes(data)

        rates[_label(size)] = _rate(len(data), duration / len(sizes), copy)
    return rates


def _received(data: bytes) -> int:
    return len(data)


async def benchmark_network(
    worker: Worker, address: str, sizes: tuple[str, ...] = NETWORK_SIZES, duration: float = 1.0
) -> dict[str, float]:
    """Sending payloads of each size to the worker at ``address`` (one peer request each)."""
    rates = {}
    for size in sizes:
        nbytes = parse_bytes(size)
        blob = cloudpickle.dumps((_received, (os.urandom(nbytes),), {}))
        start, count = time.perf_counter(), 0
        while (elapsed := time.perf_counter() - start) < duration / len(sizes) or not count:
            await worker._fetcher.peers.run(address, blob)
            count += 1
        rates[_label(size)] = nbytes * count / max(elapsed, 1e-9)
    return rates


def average(rows: list[dict[str, float]]) -> dict[str, float]:
    """The mean bandwidth per size over the workers' measurements."""
    sums: dict[str, list[float]] = {}
    for row in rows:
        for size, rate in row.items():
            sums.setdefault(size, []).append(rate)
    return {size: sum(rates) / len(rates) for size, rates in sums.items()}
