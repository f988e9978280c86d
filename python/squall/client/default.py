"""The default client, which ``Future(key)``, ``get_client()`` and dask use.

It is the latest client made with ``set_as_default=True`` that is not closed; dask's
``scheduler="squall"`` names it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from squall.client.client import Client

# Clients made with ``set_as_default=True``, latest last (``default_client()``), and the
# dask config they replaced, restored when the last of them closes.
_defaults: list[Client] = []
_config_before_defaults: Any = None


def default_client() -> Client:
    """The latest client made with ``set_as_default=True`` that is not closed."""
    for c in reversed(_defaults):
        if c.status != "closed":
            return c
    raise ValueError("no squall Client is running: create one with Client(address)")


def become_default(client: Client) -> None:
    """As ``distributed.Client(set_as_default=True)``: plain ``compute()``/``persist()``
    calls run on the latest such client until it closes."""
    global _config_before_defaults
    import dask

    _defaults.append(client)
    if _config_before_defaults is None:
        _config_before_defaults = dask.config.set(scheduler="squall")


def stop_being_default(client: Client) -> None:
    global _config_before_defaults
    if client in _defaults:
        _defaults.remove(client)
    if _config_before_defaults is not None and not any(c.status != "closed" for c in _defaults):
        _defaults.clear()
        _config_before_defaults.__exit__(None, None, None)
        _config_before_defaults = None


class _DefaultClient:
    """``scheduler="squall"`` in dask: the default client's ``get``, as a bound method
    so that ``dask.persist`` finds ``persist`` beside it (and persists to futures)."""

    def get(self, dsk: Any, keys: Any, **kwargs: Any) -> Any:
        return default_client().get(dsk, keys, **kwargs)

    def persist(self, collections: Any, **kwargs: Any) -> Any:
        return default_client().persist(collections, **kwargs)


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
