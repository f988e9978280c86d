"""Programs of the ``squall`` command beside the processes: ``bench`` (the core's
benchmarks), ``bench_e2e`` (squall against distributed) and ``demo``."""
