"""The default client, which ``Future(key)``, ``get_client()`` and dask use.

It is the client made current by ``Client.as_current()`` in this context, else the
latest client made with ``set_as_default=True`` that is not closed. Dask's
``scheduler="squall"`` names the client a dask call should use (:func:`dask_client`);
dask's config points at it while a default client or a worker is up in the process
(:func:`squall.config.route_dask`, docs/runtime.md#tasks-that-use-the-cluster).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from squall import config

if TYPE_CHECKING:
    from squall.client.client import Client

# Clients made with ``set_as_default=True``, latest last (``default_client()``).
_defaults: list[Client] = []
# The client of ``Client.as_current()`` in this context.
current: ContextVar[Client | None] = ContextVar("squall_current_client", default=None)


def default_client(c: Client | None = None) -> Client:
    """``c`` if given, else the current client (``as_current``), else the latest client
    made with ``set_as_default=True`` that is not closed; ``ValueError`` if none."""
    if c is not None:
        return c
    client = current.get()
    if client is not None:
        return client
    for c in reversed(_defaults):
        if c.status != "closed":
            return c
    raise ValueError("no squall Client is running: create one with Client(address)")


def become_default(client: Client) -> None:
    """As ``distributed.Client(set_as_default=True)``: plain ``compute()``/``persist()``
    calls run on the latest such client until it closes."""
    _defaults.append(client)
    config.route_dask(client)


def stop_being_default(client: Client) -> None:
    if client in _defaults:
        _defaults.remove(client)
    config.unroute_dask(client)


#: ``get_client`` without arguments: the worker's client in a task, else the default
#: client. ``squall.client.client`` installs it on import (it sits above this module).
get_client: Callable[[], Client] = default_client


def dask_client() -> Client:
    """The client of a dask call made with ``scheduler="squall"``: the current one
    (``as_current``), else ``get_client()``'s — on a worker (in its tasks above all)
    the worker's client, elsewhere the default client."""
    client = current.get()
    return client if client is not None else get_client()


class _DefaultClient:
    """``scheduler="squall"`` in dask: :func:`dask_client`'s ``get``, as a bound
    method so that ``dask.persist`` finds ``persist`` beside it (and persists to
    futures)."""

    def get(self, dsk: Any, keys: Any, **kwargs: Any) -> Any:
        return dask_client().get(dsk, keys, **kwargs)

    def persist(self, collections: Any, **kwargs: Any) -> Any:
        return dask_client().persist(collections, **kwargs)


def _register_scheduler_name() -> None:
    from dask.base import named_schedulers

    named_schedulers["squall"] = _DefaultClient().get


_register_scheduler_name()


def prefer_task_shuffle() -> None:
    """Dataframe shuffles default to dask's "disk" method when no distributed client
    exists, which needs one shared machine; squall has no shuffle service, so the
    default becomes the task-based method (an explicit user setting still wins)."""
    import dask

    dask.config.update_defaults({"dataframe": {"shuffle": {"method": "tasks"}}})
