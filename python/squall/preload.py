"""Preloads: user modules a scheduler, worker or nanny imports and runs as it starts and
closes (``--preload``, Dask's ``distributed.<role>.preload``; docs/runtime.md#preload).

A preload is a module name, a path to a ``.py`` file, or the text of a module. Its
``dask_setup(server)`` runs once the server listens, before it serves anyone, and its
``dask_teardown(server)`` when the server closes; either may be a coroutine function.
A ``dask_setup`` that is a click command takes its options from the preload's argv.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import itertools
import logging
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from squall import config

logger = logging.getLogger("squall.preload")

#: The roles that take preloads, each with its config section (squall's and Dask's).
ROLES = ("scheduler", "worker", "nanny")

_text_modules = itertools.count()


class PreloadError(ValueError):
    """A preload cannot be used: it does not import, or its argv does not parse."""


def configured(role: str) -> tuple[list[str], list[str] | list[list[str]]]:
    """The preloads and their argv configured for ``role``: ``squall.<role>.preload``
    (and ``-argv``), or Dask's ``distributed.<role>.preload`` (``config.get``)."""
    names, argv = (config.get(f"{role}.{key}") or [] for key in ("preload", "preload-argv"))
    return [names] if isinstance(names, str) else list(names), list(argv)


def per_preload(
    names: Sequence[str], argv: Sequence[str] | Sequence[Sequence[str]]
) -> list[list[str]]:
    """One argv per preload, as distributed takes them: a flat list is every preload's,
    a list of lists one each."""
    if not argv:
        return [[] for _ in names]
    if all(isinstance(a, str) for a in argv):
        return [[str(a) for a in argv] for _ in names]
    if len(argv) != len(names):
        raise PreloadError(
            f"{len(names)} preloads but {len(argv)} preload argument lists: give one per preload"
        )
    return [[str(a) for a in each] for each in argv]


def _import(name: str) -> ModuleType:
    if name.startswith(("http://", "https://")):
        raise PreloadError(
            f"preload {name!r}: squall does not download code; install the module or pass "
            "the path of its file"
        )
    if name.endswith(".py"):
        path = os.path.abspath(name)
        directory, file = os.path.split(path)
        if directory not in sys.path:  # so the file imports its neighbours, as distributed
            sys.path.insert(0, directory)
        spec = importlib.util.spec_from_file_location(file.removesuffix(".py"), path)
        if spec is None or spec.loader is None:
            raise PreloadError(f"preload {name!r}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    if any(c.isspace() for c in name):  # the text of a module
        module = ModuleType(f"squall_preload_{next(_text_modules)}")
        exec(compile(name, "<preload>", "exec"), module.__dict__)
        return module
    return importlib.import_module(name)


def _click_command(setup: Any) -> Any:
    """``setup`` if it is a click command (click is imported if it is), else None."""
    click = sys.modules.get("click")
    return setup if click is not None and isinstance(setup, click.Command) else None


class Preload:
    """One preload, imported (``PreloadError`` if it fails, naming it), with its argv
    parsed if its ``dask_setup`` is a click command."""

    def __init__(self, name: str, argv: Sequence[str] = ()) -> None:
        self.name = name
        self.argv = list(argv)
        logger.info("importing preload %s", name)
        try:
            self.module = _import(name)
        except PreloadError:
            raise
        except (Exception, SystemExit) as e:  # anything its module level raises
            raise PreloadError(
                f"preload {name!r} failed to import: {type(e).__name__}: {e}"
            ) from e
        #: ``dask_setup`` if it is a click command (which alone reads the argv).
        self.command = _click_command(getattr(self.module, "dask_setup", None))
        self._params: dict[str, Any] = {}
        if self.command is not None:
            try:
                context = self.command.make_context("dask_setup", self.argv)
            except Exception as e:  # click's usage errors, or --help
                raise PreloadError(f"preload {name!r}: bad arguments {self.argv}: {e}") from e
            self._params = dict(context.params)

    async def setup(self, server: object) -> None:
        setup = getattr(self.module, "dask_setup", None)
        if setup is None:
            return
        logger.info("running dask_setup of preload %s", self.name)
        if self.command is not None:
            result = self.command.callback(server, **self._params)
        else:
            result = setup(server)
        if inspect.isawaitable(result):
            await result

    async def teardown(self, server: object) -> None:
        teardown = getattr(self.module, "dask_teardown", None)
        if teardown is None:
            return
        logger.info("running dask_teardown of preload %s", self.name)
        result = teardown(server)
        if inspect.isawaitable(result):
            await result


class Preloads:
    """A server's preloads, imported on creation (``PreloadError`` naming the one that
    fails, or for arguments that no click-command ``dask_setup`` takes). As in
    distributed, an error in ``dask_setup`` or ``dask_teardown`` is logged
    and the server carries on; teardowns run in reverse order."""

    def __init__(
        self, names: str | Sequence[str], argv: Sequence[str] | Sequence[Sequence[str]] = ()
    ) -> None:
        names = [names] if isinstance(names, str) else list(names)
        argvs = per_preload(names, argv)
        self.preloads = [Preload(n, a) for n, a in zip(names, argvs, strict=True)]
        given = [p.argv for p in self.preloads if p.argv]
        if given and not any(p.command is not None for p in self.preloads):
            raise PreloadError(
                f"preload arguments {given[0]} but no preload's dask_setup is a click command"
            )
        self._set_up = False

    @classmethod
    def of(
        cls,
        role: str,
        names: str | Sequence[str] | None = None,
        argv: Sequence[str] | Sequence[Sequence[str]] | None = None,
    ) -> Preloads:
        """The preloads given, else those configured for ``role`` (as distributed's
        servers: an empty argument reads the config)."""
        config_names, config_argv = configured(role)
        return cls(names or config_names, argv or config_argv)

    async def setup(self, server: object) -> None:
        self._set_up = True
        for p in self.preloads:
            try:
                await p.setup(server)
            except Exception:
                logger.exception("dask_setup of preload %s failed", p.name)

    async def teardown(self, server: object) -> None:
        """Once, and only after ``setup``."""
        if not self._set_up:
            return
        self._set_up = False
        for p in reversed(self.preloads):
            try:
                await p.teardown(server)
            except Exception:
                logger.exception("dask_teardown of preload %s failed", p.name)


def add_cli_options(p: argparse.ArgumentParser, *, nanny: bool = False) -> None:
    """``--preload`` (repeatable), ``--preload-nanny`` if ``nanny``, and
    ``--preload-argv``, which takes every argument after it."""
    p.add_argument(
        "--preload",
        action="append",
        default=[],
        help="module name or .py file to run in the process (repeatable); default: "
        "squall.<role>.preload, else Dask's distributed.<role>.preload",
    )
    if nanny:
        p.add_argument(
            "--preload-nanny",
            action="append",
            default=[],
            help="module name or .py file to run in the nanny (repeatable)",
        )
    p.add_argument(
        "--preload-argv",
        nargs=argparse.REMAINDER,
        default=[],
        help="(last) the arguments after it go to the click command dask_setup of a --preload",
    )


def worker_flags(
    preload: str | Sequence[str] | None,
    argv: Sequence[str] | Sequence[Sequence[str]] | None,
    flag: str = "--preload",
) -> list[str]:
    """``squall worker`` flags running these preloads, last (``--preload-argv`` takes
    the rest of the line); one argv serves all of them there (``TypeError`` if they
    differ)."""
    names = [preload] if isinstance(preload, str) else list(preload or ())
    flags = [f for name in names for f in (flag, name)]
    argvs = {tuple(a) for a in per_preload(names, argv or ())}
    if len(argvs) > 1:
        raise TypeError("a squall worker process takes one preload argv for all its preloads")
    shared = [*argvs.pop()] if argvs else []
    return flags + (["--preload-argv", *shared] if shared else [])
