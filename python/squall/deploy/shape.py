"""How many workers and threads a machine gets by default."""

from __future__ import annotations


def default_shape(n_cores: int) -> tuple[int, int]:
    """(workers, threads per worker) for a machine, as Dask sizes its LocalCluster."""
    if n_cores <= 4:
        return n_cores, 1
    workers = max(2, int(n_cores**0.5))
    return workers, max(1, n_cores // workers)
