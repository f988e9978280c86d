"""Published datasets on a real cluster, as distributed's tests/test_publish.py
describes them: one client publishes, another gets (after the first left) with live
futures of its own, persisted collections recompute elsewhere, the mapping view,
``default=``, and unpublishing lets the scheduler forget the keys."""

from __future__ import annotations

import asyncio
import sys
import uuid

import cloudpickle  # type: ignore[import-untyped]
import dask
import dask.array as da
import dask.dataframe as dd
import pandas as pd
import pytest

from squall import Client, LocalCluster
from squall.client.futures import futures_of
from tests.conftest import eventually

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def inc(x: int) -> int:
    return x + 1


def held_keys(client: Client) -> set[object]:
    """Every key some worker holds."""
    return set(client.who_has())


def test_publish_lists_and_refuses_a_taken_name(cluster: LocalCluster) -> None:
    with Client(cluster) as c, Client(cluster) as f:
        data = c.scatter([0, 1, 2])
        c.publish_dataset(data=data)
        try:
            assert c.list_datasets() == ["data"] == f.list_datasets()
            with pytest.raises(KeyError, match=r"data.*exists"):
                c.publish_dataset(data=[1])
            assert f.gather(f.get_dataset("data")) == [0, 1, 2]
            c.publish_dataset(data=[7], override=True)
            assert f.get_dataset("data") == [7]
        finally:
            c.unpublish_dataset("data")


def test_another_client_gets_live_futures_after_the_publisher_left(
    cluster: LocalCluster,
) -> None:
    name = f"left-{uuid.uuid4().hex}"
    with Client(cluster) as c:
        x = c.submit(inc, 1, key=f"{name}-x")
        c.publish_dataset(x, name=name)
    with Client(cluster) as f:
        got = f.get_dataset(name)
        assert got.client is f and got.result(timeout=20) == 2
        assert got.key in f.refcount
        f.unpublish_dataset(name)
        # f's own future keeps the key alive after the unpublish.
        assert f.submit(inc, got).result(timeout=20) == 3
        key = got.key
        del got
        eventually(lambda: key not in held_keys(f), timeout=20)


def test_persisted_collections_recompute_in_another_client(cluster: LocalCluster) -> None:
    df = pd.DataFrame({"a": range(10), "b": range(10, 20)})
    with Client(cluster) as c:
        arr = da.arange(12, chunks=4).persist()
        ddf = dd.from_pandas(df, npartitions=2).persist()
        c.publish_dataset(arr=arr, ddf=ddf)
        assert len(futures_of(arr)) == 3  # pickling left the original alone
    with Client(cluster) as f:
        arr2, ddf2 = f.get_dataset(["arr", "ddf"])
        assert {g.key for g in futures_of(arr2)} == {g.key for g in futures_of(arr)}
        assert all(g.client is f for g in futures_of(arr2))
        assert (arr2 + 1).sum().compute() == sum(range(1, 13))
        assert f.compute(ddf2.a.sum()).result(timeout=20) == df.a.sum()
        f.unpublish_dataset(["arr", "ddf"])


def test_get_dataset_default_and_missing_names(cluster: LocalCluster) -> None:
    with Client(cluster) as c:
        with pytest.raises(KeyError, match=r"nonexistent.*not found"):
            c.get_dataset("nonexistent")
        assert c.get_dataset("nonexistent", default=None) is None
        c.publish_dataset(here=1)
        assert c.get_dataset(["here", "gone"], default=0) == [1, 0]
        c.unpublish_dataset(["here", "gone"])  # unknown names are ignored
        assert c.list_datasets() == []


def test_several_at_once_and_the_call_forms(cluster: LocalCluster) -> None:
    with Client(cluster) as c:
        c.publish_dataset({"d": 1}, e=dask.delayed(inc)(1))
        c.publish_dataset(1, 2, name="pair")
        assert c.list_datasets() == ["d", "e", "pair"]
        assert c.get_dataset("pair") == (1, 2)
        assert c.get_dataset("e").compute() == 2
        with pytest.raises(ValueError):
            c.publish_dataset(1, 2)
        with pytest.raises(ValueError):
            c.publish_dataset(name="x")
        c.unpublish_dataset(["d", "e", "pair"])


def test_unpublish_lets_the_scheduler_forget_the_keys(cluster: LocalCluster) -> None:
    with Client(cluster) as c:
        data = c.scatter([10, 11, 12])
        keys = {d.key for d in data}
        c.publish_dataset(data=data)
        del data
        assert keys <= held_keys(c)  # the dataset alone keeps them
        c.unpublish_dataset("data")
        eventually(lambda: not keys & held_keys(c), timeout=20)
        with pytest.raises(KeyError, match="data"):
            c.get_dataset("data")


def test_the_datasets_mapping(cluster: LocalCluster) -> None:
    with Client(cluster) as c:
        c.datasets["key"] = "value"
        assert c.datasets["key"] == "value" == c.get_dataset("key")
        assert "key" in c.datasets and "other" not in c.datasets
        del c.datasets["key"]
        assert "key" not in c.list_datasets()
        c.publish_dataset(**{str(n): n for n in range(10)})
        assert list(c.datasets) == [str(n) for n in range(10)] == list(c.datasets.keys())
        assert len(c.datasets) == 10
        c.unpublish_dataset([str(n) for n in range(10)])


def test_an_asynchronous_client(cluster: LocalCluster) -> None:
    async def main() -> None:
        async with Client(cluster.scheduler_address, asynchronous=True) as c:
            x = c.submit(inc, 41)
            await c.publish_dataset(x=x)
            got = await c.datasets["x"]
            assert await got == 42
            assert [n async for n in c.datasets] == ["x"]
            with pytest.raises(TypeError):
                c.datasets["y"] = 1
            with pytest.raises(TypeError):
                len(c.datasets)
            await c.unpublish_dataset("x")

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_get_then_an_unpublish_leaves_the_getter_live_futures(cluster: LocalCluster) -> None:
    """The getter holds the keys from the step its get is answered: an unpublish the
    scheduler reads right after (here on the same stream, before the reply arrives)
    cannot make it forget them."""
    name = f"window-{uuid.uuid4().hex}"
    with Client(cluster) as c:
        x = c.submit(inc, 1, key=f"{name}-x")
        x.result(timeout=20)
        c.publish_dataset(x, name=name)
        del x  # the dataset alone keeps the key

        async def main() -> int:
            async with Client(cluster.scheduler_address, asynchronous=True) as f:
                got, _ = await asyncio.gather(f.get_dataset(name), f.unpublish_dataset(name))
                assert got.client is f
                return int(await got)

        assert asyncio.run(asyncio.wait_for(main(), 60)) == 2
