"""How long the scheduler's core holds its caller while taking in a million-task map
in the client's chunks of 20,000 (docs/measurements.md#taking-in-a-million-tasks):
``python bench/intake_stalls.py``.

Each chunk is one ``Scheduler.submit`` (the core call behind an ``update-graph``),
timed alone; the worst chunk is how long the event loop of a scheduler is held at
most. Three runs, each on a fresh core with one worker."""

from __future__ import annotations

import time

from squall._core import Scheduler

CHUNK = 20_000
CHUNKS = 50


def one_run() -> tuple[float, float]:
    """(total seconds, worst chunk's seconds)."""
    core = Scheduler()
    client = core.client("c")
    core.add_worker("tcp://127.0.0.1:1", 1, now=0.0)
    total = worst = 0.0
    for j in range(CHUNKS):
        keys = [f"x-{j}-{i}" for i in range(CHUNK)]
        start = time.perf_counter()
        core.submit(client, keys, None, now=0.0)
        took = time.perf_counter() - start
        total += took
        worst = max(worst, took)
    return total, worst


def main() -> None:
    for _ in range(3):
        total, worst = one_run()
        n = CHUNK * CHUNKS
        print(f"{n:,} tasks in {CHUNKS} chunks: {total:.3f} s, worst {worst * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
