"""``Variable``: one value shared by name, futures inside it kept alive
(docs/primitives.md)."""

from __future__ import annotations

import uuid
from typing import Any

from squall.client.client import Client
from squall.errors import TimeoutError
from squall.primitives.requests import Bound, Primitive, seconds
from squall.protocol import messages as m


class Variable(Primitive):
    """distributed's ``Variable``: a value named ``name`` (random if not given) that
    clients and tasks set and get. The value is pickled and kept on the scheduler (keep
    it small: share large data as a future); futures inside it stay alive while it is
    set, and a getter receives futures of its own client. Picklable into tasks by
    name."""

    def __init__(self, name: str | None = None, client: Client | None = None) -> None:
        self.name = name or f"variable-{uuid.uuid4().hex}"
        self._bound = Bound(client)

    async def _set(self, payload: bytes, n_data: int) -> None:
        await self._bound.ask(m.VariableSet(name=self.name, n_data=n_data), payload)

    def set(self, value: Any, timeout: float | str | None = "30 s", **kwargs: Any) -> Any:
        """Set the value (``timeout`` is accepted: futures are known to the scheduler
        when the set arrives, no wait is needed)."""
        return self._bound.call(self._set, *self._bound.pack(value))

    async def _get(self, timeout: float | None) -> Any:
        reply, payload = await self._bound.ask(m.VariableGet(name=self.name, timeout=timeout))
        if not reply.ok:
            raise TimeoutError(f"variable {self.name!r} not set within {timeout} s")
        return self._bound.unpack(reply, payload)[0]

    def get(self, timeout: float | str | None = None, **kwargs: Any) -> Any:
        """The value, waiting up to ``timeout`` (None: as long as it takes) for one to
        be set; TimeoutError after that."""
        return self._bound.call(self._get, seconds(timeout))

    def delete(self) -> None:
        """Forget the value for everyone (its futures are released)."""
        self._bound.tell(m.VariableDelete(name=self.name))

    def __reduce__(self) -> Any:
        return (Variable, (self.name,))

    def __repr__(self) -> str:
        return f"<Variable: {self.name}>"
