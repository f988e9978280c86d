"""dask tests that pass on dask's local schedulers but that no multi-process scheduler
can pass: each is listed with why, and was checked to fail routed through distributed
too (docs/dask-suite.md). Keys are node ids from ``dask/`` on; routed runs mark them
xfail (not strict: a fix that makes one pass is welcome)."""

from __future__ import annotations

# Why, in a few words each.
CLIENT_STATE = (
    "the task changes an object of the test's own process (a counter, a list, a file "
    "the test expects); on a cluster it changes a copy in a worker"
)
IDENTITY = (
    "the test relies on the identity of a value that crossed processes (``is``, or "
    "list equality of numpy arrays, which holds locally only because they are the "
    "same objects)"
)
WARNING_IN_TASK = "the warning is raised inside a task, in a worker process"
PERSIST_FUTURES = (
    "persist on a cluster returns collections backed by futures (and raises, if at "
    "all, when they are computed), not by the computed values"
)
SCHEDULER_CHOICE = (
    "the test inspects which local scheduler dask picks, or its pool size; a client "
    "is the scheduler here"
)
TASK_SHUFFLE = (
    "with a cluster client dask.bag groups by its task-based shuffle (the disk one "
    "needs one shared machine), which rejects a non-callable grouper and keeps "
    "npartitions"
)
UNPICKLABLE = "the graph holds objects that cannot cross processes (generators, locks)"
UNORDERABLE = "the test sorts persisted results, which are futures on a cluster"

GAPS: dict[str, str] = {
    "dask/bag/tests/test_bag.py::test_bag_with_single_callable": IDENTITY,
    "dask/bag/tests/test_bag.py::test_groupby_with_indexer": TASK_SHUFFLE,
    "dask/bag/tests/test_bag.py::test_groupby_with_npartitions_changed": TASK_SHUFFLE,
    "dask/bag/tests/test_bag.py::test_msgpack_unicode": TASK_SHUFFLE,
    "dask/bag/tests/test_bag.py::test_reductions_are_lazy": UNPICKLABLE,
    "dask/bag/tests/test_bag.py::test_repartition_partition_size_complex_dtypes": IDENTITY,
    "dask/bag/tests/test_bag.py::test_take_npartitions_warn": WARNING_IN_TASK,
    "dask/bag/tests/test_bag.py::test_temporary_directory": CLIENT_STATE,
    "dask/bag/tests/test_bag.py::test_to_delayed_optimize_graph": CLIENT_STATE,
    "dask/tests/test_base.py::test_compute_array_bag": SCHEDULER_CHOICE,
    "dask/tests/test_base.py::test_compute_no_opt": CLIENT_STATE,
    "dask/tests/test_base.py::test_custom_collection": UNORDERABLE,
    "dask/tests/test_base.py::test_get_scheduler": SCHEDULER_CHOICE,
    "dask/tests/test_base.py::test_num_workers_config[processes]": SCHEDULER_CHOICE,
    "dask/tests/test_base.py::test_num_workers_config[threads]": SCHEDULER_CHOICE,
    "dask/tests/test_base.py::test_persist_array_bag": SCHEDULER_CHOICE,
    "dask/tests/test_base.py::test_persist_delayed_custom_key[a]": PERSIST_FUTURES,
    "dask/tests/test_base.py::test_persist_delayed_custom_key[key1]": PERSIST_FUTURES,
    "dask/tests/test_delayed.py::test_callable_obj": IDENTITY,
    "dask/tests/test_delayed.py::test_p2p_as_delayed": UNPICKLABLE,
    "dask/tests/test_delayed.py::test_traverse_false": IDENTITY,
}
