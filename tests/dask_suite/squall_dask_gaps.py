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
LOCAL_TARGET = (
    "store() writes into an array (or memmap) of the test's own process; on a cluster "
    "the workers write into copies"
)
NESTED_RESULTS = (
    "compute_as_if_collection on nested keys: dask's local schedulers give tuples, a "
    "cluster client gives lists (as distributed does)"
)
CLIENT_CONFIG = (
    "the test sets dask config or registers an extension in its own process; the "
    "workers run with their own"
)

_ARRAY = "dask/array/tests/test_array_core.py::"
_GRAPH = "dask/tests/test_graph_manipulation.py::"

GAPS: dict[str, str] = {
    _ARRAY + "test_from_array_getitem[False-True]": CLIENT_STATE,
    _ARRAY + "test_from_array_getitem[True-True]": CLIENT_STATE,
    _ARRAY + "test_from_array_no_asarray[False-False-matrix]": NESTED_RESULTS,
    _ARRAY + "test_from_array_no_asarray[False-True-ndarray]": NESTED_RESULTS,
    _ARRAY + "test_from_array_no_asarray[True-False-matrix]": NESTED_RESULTS,
    _ARRAY + "test_from_array_no_asarray[True-True-ndarray]": NESTED_RESULTS,
    _ARRAY + "test_from_array_with_lock[False]": CLIENT_STATE,
    _ARRAY + "test_from_array_with_lock[True]": CLIENT_STATE,
    _ARRAY + "test_memmap": LOCAL_TARGET,
    _ARRAY + "test_store": LOCAL_TARGET,
    _ARRAY + "test_store_compute_false": LOCAL_TARGET,
    _ARRAY + "test_store_delayed_target": LOCAL_TARGET,
    _ARRAY + "test_store_regions": LOCAL_TARGET,
    _ARRAY + "test_store_locks_count_calls[False]": UNPICKLABLE,
    _ARRAY + "test_store_locks_count_calls[True]": UNPICKLABLE,
    _ARRAY + "test_store_locks_dont_assume_threadsafe": UNPICKLABLE,
    _ARRAY + "test_store_locks_failure_lock_released": UNPICKLABLE,
    _ARRAY + "test_store_locks_no_lock": UNPICKLABLE,
    _ARRAY + "test_store_locks_one_lock_two_stores": UNPICKLABLE,
    _ARRAY + "test_store_sources_unoptimized_nocompute": CLIENT_STATE,
    "dask/array/tests/test_reductions.py::"
    "test_array_cumreduction_axis[blelloch-None-False-cumprod]": WARNING_IN_TASK,
    "dask/array/tests/test_reductions.py::"
    "test_array_cumreduction_axis[blelloch-None-False-nancumprod]": WARNING_IN_TASK,
    "dask/array/tests/test_reductions.py::"
    "test_array_cumreduction_axis[blelloch-None-True-cumprod]": WARNING_IN_TASK,
    "dask/array/tests/test_reductions.py::"
    "test_array_cumreduction_axis[blelloch-None-True-nancumprod]": WARNING_IN_TASK,
    "dask/array/tests/test_routines.py::test_average_raises": WARNING_IN_TASK,
    "dask/array/tests/test_ufunc.py::test_frompyfunc": UNPICKLABLE,
    "dask/array/tests/test_wrap.py::test_full_detects_da_dtype": WARNING_IN_TASK,
    "dask/bag/tests/test_text.py::test_files_per_partition": WARNING_IN_TASK,
    "dask/dataframe/tests/test_dataframe.py::test_head_npartitions_warn": WARNING_IN_TASK,
    "dask/dataframe/tests/test_extensions.py::test_register_extension_type": CLIENT_CONFIG,
    "dask/dataframe/tests/test_shuffle.py::test_disk_shuffle_with_unknown_compression": (
        CLIENT_CONFIG
    ),
    "dask/tests/test_composite_expr.py::test_composite_expr_persist_rebuilds_collection": (
        PERSIST_FUTURES
    ),
    "dask/tests/test_distributed.py::test_get_scheduler_default_client_config_interleaving": (
        SCHEDULER_CHOICE
    ),
    "dask/tests/test_distributed.py::test_get_scheduler_lock[None-expected_classes0]": (
        SCHEDULER_CHOICE
    ),
    "dask/tests/test_distributed.py::test_get_scheduler_lock[processes-expected_classes2]": (
        SCHEDULER_CHOICE
    ),
    _GRAPH + "test_bind[False]": CLIENT_STATE,
    _GRAPH + "test_bind[True]": CLIENT_STATE,
    _GRAPH + "test_checkpoint[False]": CLIENT_STATE,
    _GRAPH + "test_checkpoint[True]": CLIENT_STATE,
    _GRAPH + "test_checkpoint_collections": CLIENT_STATE,
    _GRAPH + "test_wait_on_many[False]": CLIENT_STATE,
    _GRAPH + "test_wait_on_many[True]": CLIENT_STATE,
    _GRAPH + "test_wait_on_one[False]": CLIENT_STATE,
    _GRAPH + "test_wait_on_one[True]": CLIENT_STATE,
    "dask/tests/test_multiprocessing.py::"
    "test_process_initializer[processes-proc_init-expected_results2]": SCHEDULER_CHOICE,
    "dask/tests/test_multiprocessing.py::"
    "test_process_initializer[threading-None-expected_results0]": SCHEDULER_CHOICE,
    "dask/tests/test_traceback.py::test_persist_shorten_traceback[processes]": PERSIST_FUTURES,
    "dask/tests/test_traceback.py::test_persist_shorten_traceback[sync]": PERSIST_FUTURES,
    "dask/tests/test_traceback.py::test_persist_shorten_traceback[threads]": PERSIST_FUTURES,
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
