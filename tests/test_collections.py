"""Dask collections on a real squall cluster, checked against dask's own synchronous
scheduler: arrays, dataframes, delayed, futures inside graphs, persist, annotations."""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from squall import Client, wait
from squall.deploy.local import LocalCluster
from squall.tools import bench_e2e

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster) as c:
        yield c


def _array() -> da.Array:
    return da.random.RandomState(42).random((120, 120), chunks=(30, 40))


def _frame(npartitions: int = 5) -> dd.DataFrame:
    rng = np.random.default_rng(0)
    pdf = pd.DataFrame(
        {
            "k": rng.integers(0, 7, 400),
            "v": rng.random(400),
            "w": rng.integers(0, 100, 400),
        }
    )
    return dd.from_pandas(pdf, npartitions=npartitions)


def _other_frame() -> dd.DataFrame:
    return dd.from_pandas(
        pd.DataFrame({"k": np.arange(7), "name": [f"n{i}" for i in range(7)]}), npartitions=3
    )


def _tree() -> Any:
    leaves = [dask.delayed(operator.mul)(i, 3) for i in range(64)]
    while len(leaves) > 1:
        leaves = [
            dask.delayed(operator.add)(a, b)
            for a, b in zip(leaves[::2], leaves[1::2], strict=True)
        ]
    return leaves[0]


def _sort(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(list(df.columns)).reset_index(drop=True)


WORKLOADS: dict[str, Callable[[], Any]] = {
    "array-sum": lambda: _array().sum(),
    "array-mean-axis": lambda: _array().mean(axis=0),
    "array-x-plus-xT-sum": lambda: (_array() + _array().T).sum(),
    "array-matmul": lambda: _array() @ _array().T,
    "array-map-overlap": lambda: _array().map_overlap(lambda b: b * 2, depth=1, boundary=0),
    "array-rechunk": lambda: _array().rechunk((60, 20)).sum(axis=1),
    "array-anom-mean": lambda: (_array() - _array().mean(axis=0)).mean(axis=1),
    "frame-groupby": lambda: _frame().groupby("k").v.sum(),
    "frame-groupby-agg": lambda: _frame().groupby("k").agg({"v": "mean", "w": "max"}),
    "frame-merge": lambda: _frame().merge(_other_frame(), on="k", how="inner"),
    "frame-shuffle": lambda: _frame().shuffle("w"),
    "frame-set-index": lambda: _frame().set_index("w"),
    "delayed-tree": _tree,
}


def _same(a: Any, b: Any) -> None:
    if isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(_sort(a), _sort(b))
    elif isinstance(a, pd.Series):
        pd.testing.assert_series_equal(a.sort_index(), b.sort_index())
    else:
        np.testing.assert_allclose(a, b)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_results_equal_dask_sync_scheduler(client: Client, name: str) -> None:
    expected = WORKLOADS[name]().compute(scheduler="sync")
    _same(WORKLOADS[name]().compute(scheduler=client), expected)


@pytest.mark.parametrize("method", [None, "tasks"])
def test_shuffles_equal_dask_sync_scheduler(client: Client, method: str | None) -> None:
    """``shuffle`` and ``set_index`` by squall's default and by the task-based method,
    on 40 partitions (more than dask's 32-way split: a shuffle in two stages)."""
    frame = _frame(40)
    shuffled = frame.shuffle("w", shuffle_method=method)
    _same(shuffled.compute(scheduler=client), shuffled.compute(scheduler="sync"))
    # Each key in one output partition: distinct per partition, distinct overall.
    keys = shuffled.w.map_partitions(lambda w: w.drop_duplicates()).compute(scheduler=client)
    assert keys.is_unique and len(keys) == frame.w.nunique().compute(scheduler="sync")
    indexed = frame.set_index("w", shuffle_method=method)
    got = indexed.compute(scheduler=client)
    assert got.index.is_monotonic_increasing
    _same(got.reset_index(), indexed.compute(scheduler="sync").reset_index())


def test_p2p_shuffle_is_refused_naming_tasks(client: Client) -> None:
    """squall has no P2P service: asked for it, explicitly or by the setting, every entry
    point says so before sending anything."""
    frame = _frame(10)
    with pytest.raises(ValueError, match=r"no P2P shuffle service.*'tasks'"):
        frame.shuffle("w", shuffle_method="p2p").compute(scheduler=client)
    with pytest.raises(ValueError, match="no P2P"):
        client.compute(frame.set_index("w", shuffle_method="p2p"))
    with pytest.raises(ValueError, match="no P2P"):
        client.persist(frame.merge(_other_frame(), on="k", shuffle_method="p2p"))
    with dask.config.set({"dataframe.shuffle.method": "p2p"}), pytest.raises(ValueError):
        frame.shuffle("w").compute(scheduler=client)


def test_the_bench_frame_rows_on_both_systems(client: Client) -> None:
    """``squall bench e2e``'s frame rows at their warm-up size (10 partitions): squall
    shuffles by tasks even in a ``-p2p`` row, distributed by P2P, and each run checks
    its result."""
    import distributed

    for name in ("frame-shuffle-100-p2p", "frame-set-index-100-tasks"):
        rows, tasks = bench_e2e.WARM_UPS[name](client)
        assert rows == 10_000 and tasks > 10
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as dask_client,
    ):
        for name in ("frame-shuffle-100-p2p", "frame-set-index-100-p2p"):
            assert bench_e2e.WARM_UPS[name](dask_client)[0] == 10_000


def test_every_entry_point(client: Client) -> None:
    x = _array()
    expected = float(x.sum().compute(scheduler="sync"))
    assert float(dask.compute(x.sum(), scheduler=client)[0]) == pytest.approx(expected)
    assert float(client.compute(x.sum()).result()) == pytest.approx(expected)
    assert float(client.compute(x.sum(), sync=True)) == pytest.approx(expected)
    with dask.config.set(scheduler=client):
        assert float(x.sum().compute()) == pytest.approx(expected)
    assert float(x.sum().compute(scheduler="squall")) == pytest.approx(expected)
    assert client.get({"a": 1, "b": (operator.add, "a", 2), "c": (operator.neg, "z")}, "b") == 3


def test_compute_keeps_non_collections_and_shapes(client: Client) -> None:
    a, b = dask.delayed(operator.add)(1, 2), dask.delayed(operator.mul)(3, 4)
    futures = client.compute([a, 7, b])
    assert futures[1] == 7
    assert [futures[0].result(), futures[2].result()] == [3, 12]


def test_persist_returns_collections_backed_by_futures(client: Client) -> None:
    x = _array()
    (y,) = dask.persist(x, scheduler=client)
    z = client.persist(x + 1)
    assert isinstance(y, da.Array) and isinstance(z, da.Array)
    assert all(hasattr(v, "key") for v in dict(z.__dask_graph__()).values())
    np.testing.assert_allclose(
        (y + z).sum().compute(scheduler=client), (2 * x + 1).sum().compute(scheduler="sync")
    )


def test_futures_inside_delayed_graphs(client: Client) -> None:
    f = client.submit(operator.add, 20, 1)
    g = dask.delayed(operator.mul)(f, 2)
    assert g.compute(scheduler=client) == 42
    assert dask.delayed(sum)([f, f, 1]).compute(scheduler=client) == 43


def test_lambdas_and_local_classes_in_arguments(client: Client) -> None:
    class Box:
        def __init__(self, v: int) -> None:
            self.v = v

    boxes = [dask.delayed(Box)(i) for i in range(5)]
    values = dask.delayed(list)(dask.delayed(map)(lambda b: b.v * 2, boxes))
    assert values.compute(scheduler=client) == [0, 2, 4, 6, 8]
    assert dask.delayed(type)(boxes[0]).compute(scheduler=client).__name__ == "Box"


def test_annotations_restrict_workers_and_retry(client: Client, cluster: LocalCluster) -> None:
    workers = cluster.scheduler_info()["workers"]
    second = sorted(w["address"] for w in workers)[1]
    with dask.annotate(workers=[second]):
        x = da.ones((40, 40), chunks=(10, 10)) + 1
    # dask's low-level array fusion drops layer annotations, as it does for
    # distributed; unfused graphs keep them.
    y = client.persist(x, optimize_graph=False)
    with dask.annotate(workers=second):
        d = [dask.delayed(operator.add)(i, 1) for i in range(6)]
    ds = client.persist(d)
    wait([y, ds])
    holders = client.who_has([y, ds])
    assert len(holders) == 16 + 6 and all(h == [second] for h in holders.values())

    def flaky(path: str) -> int:
        import os

        if not os.path.exists(path):
            open(path, "w").close()
            raise RuntimeError("first attempt fails")
        return 5

    import tempfile

    marker = tempfile.mktemp()
    with dask.annotate(retries=1):
        v = dask.delayed(flaky, pure=False)(marker)
    assert v.compute(scheduler=client) == 5


def test_errors_in_collection_tasks_reraise(client: Client) -> None:
    def boom(x: Any) -> Any:
        raise ValueError("bad chunk")

    x = da.ones((10, 10), chunks=5).map_blocks(boom, dtype=float)
    with pytest.raises(ValueError, match="bad chunk"):
        x.compute(scheduler=client)
