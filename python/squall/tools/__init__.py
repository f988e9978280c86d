"""Programs of the ``squall`` command that are not squall's processes.

``bench`` (the core's benchmarks), ``bench_e2e`` (squall against distributed) and
``demo``.
"""
