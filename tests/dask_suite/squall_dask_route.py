"""A pytest plugin that runs dask's own test files with every compute routed through one
client of a real multi-process cluster (docs/dask-suite.md).

    pytest -p squall_dask_route --route squall  <dask test files>
    pytest -p squall_dask_route --route distributed  <dask test files>
    pytest -p squall_dask_route --route none  <dask test files>   # dask's own schedulers

One ``LocalCluster`` (2 workers x 1 thread) per session. The client becomes dask's
default scheduler and the names tests pass to ``compute``/``assert_eq`` ("sync",
"threads", "processes", ...) resolve to it, so ``persist`` goes through the client's
``persist`` as on a real cluster. Tests that dask's local schedulers can run but no
multi-process scheduler can are listed in ``gaps.py`` and marked xfail on the routed
runs.

The probe counts graphs the cluster received per test and every scheduler resolution
that ended somewhere else although the test asked for a default or a named scheduler
(a *bypass*); a routed run with a bypass, or with no graph at all, fails. A test that
calls a local scheduler itself (``dask.threaded.get(dsk, key)``, ``scheduler=callable``,
also through ``dask.config``) asked for that scheduler and is not a bypass.

``--route-report FILE`` writes the route, the counts and each test's outcome and
seconds as JSON; ``run.py compare`` turns three of them into the per-file table.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from squall_dask_gaps import GAPS  # type: ignore[import-not-found]

# The names dask's tests use for its local schedulers.
LOCAL_NAMES = (
    "sync",
    "synchronous",
    "single-threaded",
    "threads",
    "threading",
    "processes",
    "multiprocessing",
)
# Names that must resolve to the session's client: those, and the default clients'.
ROUTED_NAMES = frozenset({*LOCAL_NAMES, "squall", "dask.distributed", "distributed"})


class Route:
    """The session's cluster and client, and the probe's counters."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.cluster: Any = None
        self.client: Any = None
        self.graphs = 0
        self.bypasses: list[str] = []
        self.per_test: Counter[str] = Counter()
        self.current = ""

    def start(self) -> None:
        if self.kind == "squall":
            import squall

            self.cluster = squall.LocalCluster(n_workers=2, threads_per_worker=1)
            self.client = squall.Client(self.cluster)
            self._count_graphs(type(self.client.submission))
        elif self.kind == "distributed":
            import distributed

            self.cluster = distributed.LocalCluster(
                n_workers=2,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                host="127.0.0.1",
            )
            self.client = distributed.Client(self.cluster)
            self._count_graphs(type(self.client))

    def _count_graphs(self, cls: type) -> None:
        """Every compute/persist/get of either client goes through
        ``_graph_to_futures`` (of squall's client's ``submission``): count the calls
        (per test too)."""
        original = cls._graph_to_futures  # type: ignore[attr-defined]
        route = self

        def counted(*args: Any, **kwargs: Any) -> Any:
            route.graphs += 1
            route.per_test[route.current] += 1
            return original(*args, **kwargs)

        cls._graph_to_futures = counted  # type: ignore[attr-defined]

    def healthy(self) -> bool:
        return self.client is None or self.client.status == "running"

    def restart(self) -> None:
        """A test broke the client or cluster: start a fresh pair (later tests must not
        fail for an earlier one's damage)."""
        self.stop()
        self.start()

    def stop(self) -> None:
        for obj in (self.client, self.cluster):
            if obj is not None:
                try:
                    obj.close()
                except Exception as e:  # a broken cluster must not fail the session
                    print(f"squall_dask_route: closing {obj!r}: {e}")
        self.client = self.cluster = None

    def install(self) -> Iterator[None]:
        """Make the client dask's scheduler for one test: the default, and every
        local scheduler name."""
        import dask
        import dask.base

        if self.client is None:
            yield
            return
        get = self.client.get  # a bound method: dask.persist uses client.persist
        saved = dict(dask.base.named_schedulers)
        dask.base.named_schedulers.update(dict.fromkeys(LOCAL_NAMES, get))
        try:
            with dask.config.set(scheduler=get):
                yield
        finally:
            dask.base.named_schedulers.clear()
            dask.base.named_schedulers.update(saved)

    def watch_resolution(self) -> Callable[[], None]:
        """Record a bypass whenever ``dask.base.get_scheduler`` resolves a default or
        named scheduler to something other than the client. Returns the undo."""
        import dask.base

        original = dask.base.get_scheduler
        route = self

        def watched(get: Any = None, scheduler: Any = None, *args: Any, **kwargs: Any) -> Any:
            found = original(get, scheduler, *args, **kwargs)
            asked = scheduler if scheduler is not None else dask.config.get("scheduler", None)
            # A callable, or a name the test registered itself, is the test's choice.
            routed = asked is None or (isinstance(asked, str) and asked in ROUTED_NAMES)
            # A client the test made itself (dask's test_distributed.py starts its own
            # distributed clusters) is the test's choice too.
            own = "Client" in type(getattr(found, "__self__", None)).__name__
            if routed and not own and route.client is not None and not route.is_client(found):
                route.bypasses.append(f"{route.current}: {scheduler!r} -> {found!r}")
            return found

        dask.base.get_scheduler = watched
        return lambda: setattr(dask.base, "get_scheduler", original)

    def is_client(self, found: Any) -> bool:
        """Whether a resolved scheduler is the client's (directly, or squall's name for
        the default client, which the client is)."""
        owner = getattr(found, "__self__", found)
        if owner is self.client:
            return True
        if self.kind != "squall":
            return False
        from squall.client.default import _DefaultClient, default_client

        return isinstance(owner, _DefaultClient) and default_client() is self.client


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("squall dask route")
    group.addoption(
        "--route",
        choices=("squall", "distributed", "none"),
        default="squall",
        help="where computes go: a squall or a distributed LocalCluster, or dask's own",
    )
    group.addoption("--route-report", default=None, help="write outcomes and counts as JSON")
    group.addoption(
        "--route-journal",
        default=None,
        help="append each test's start and outcome as a JSON line (survives a crash)",
    )
    group.addoption("--route-skip", default=None, help="a file of node ids not to run")


_route: Route | None = None
_outcomes: dict[str, str] = {}
_seconds: Counter[str] = Counter()
_errors: dict[str, str] = {}  # the first line of each failure's message
_undo: list[Callable[[], None]] = []
_journal: Any = None


def pytest_configure(config: pytest.Config) -> None:
    global _route, _journal
    journal = config.getoption("--route-journal")
    if journal:
        _journal = open(journal, "a", buffering=1)  # noqa: SIM115  # open for the session
    _route = Route(config.getoption("--route"))
    _route.start()
    if _route.client is not None:
        _undo.append(_route.watch_resolution())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    assert _route is not None
    skip_file = config.getoption("--route-skip")
    if skip_file:
        with open(skip_file) as f:
            skip = set(f.read().splitlines())
        config.hook.pytest_deselected(items=[i for i in items if _short_id(i.nodeid) in skip])
        items[:] = [i for i in items if _short_id(i.nodeid) not in skip]
    if _route.kind == "none":
        return
    for item in items:
        reason = GAPS.get(_short_id(item.nodeid))
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=f"multi-process gap: {reason}"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Setup, call and teardown of each test run with the client installed."""
    assert _route is not None
    _route.current = _short_id(item.nodeid)
    if not _route.healthy():
        _route.restart()
    _log({"start": _route.current})
    install = _route.install()
    next(install)
    try:
        return (yield)
    finally:
        install.close()
        # pytest keeps the last failure's traceback for debuggers: its frames would
        # keep that test's futures (and keys) alive into the next tests.
        for name in ("last_type", "last_value", "last_traceback", "last_exc"):
            if hasattr(sys, name):
                setattr(sys, name, None)
        short = _route.current
        if _outcomes.get(short) not in (None, "passed", "skipped"):
            gc.collect()  # a failure's frames in reference cycles hold futures too
        outcome, seconds = _outcomes.get(short), _seconds[short]
        _log(
            {
                "end": short,
                "outcome": outcome,
                "seconds": seconds,
                "graphs": _route.per_test[short],
                "error": _errors.get(short),
            }
        )


def _log(entry: dict[str, Any]) -> None:
    if _journal is not None:
        _journal.write(json.dumps(entry) + "\n")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    short = _short_id(report.nodeid)
    _seconds[short] += report.duration
    if report.when == "call" or report.outcome != "passed":
        outcome = report.outcome
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
        # The first non-pass wins (a setup error, a call failure), else the call's.
        if _outcomes.get(short) in (None, "passed"):
            _outcomes[short] = outcome
            crash = getattr(report.longrepr, "reprcrash", None)
            if report.failed and crash is not None:
                _errors[short] = str(crash.message).split("\n", 1)[0][:300]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    assert _route is not None
    if _journal is not None:
        _journal.close()
    for undo in _undo:
        undo()
    _route.stop()
    path = session.config.getoption("--route-report")
    if path:
        with open(path, "w") as f:
            json.dump(
                {
                    "route": _route.kind,
                    "graphs": _route.graphs,
                    "bypasses": _route.bypasses,
                    "graphs_per_test": dict(_route.per_test),
                    "outcomes": _outcomes,
                    "seconds": {k: round(v, 3) for k, v in _seconds.items()},
                    "errors": _errors,
                },
                f,
                indent=1,
                sort_keys=True,
            )
    if _route.kind == "none" or not _outcomes:
        return
    problems = []
    if _route.bypasses:
        problems.append(f"{len(_route.bypasses)} computes bypassed the {_route.kind} client")
        problems += [f"  {b}" for b in _route.bypasses[:20]]
    if not _route.graphs:
        problems.append(f"no graph reached the {_route.kind} cluster")
    if problems:
        print("\nsquall_dask_route: " + "\n".join(problems))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _route is not None and _route.kind != "none":
        terminalreporter.write_line(
            f"squall_dask_route: {_route.graphs} graphs through the {_route.kind} "
            f"cluster, {len(_route.bypasses)} bypasses"
        )


def _short_id(nodeid: str) -> str:
    """A node id from ``dask/`` on, whatever directory dask is installed in."""
    path, sep, rest = nodeid.partition("::")
    path = "/" + path.replace(os.sep, "/")
    at = path.rfind("/dask/")
    return (path[at + 1 :] if at >= 0 else path[1:]) + sep + rest
