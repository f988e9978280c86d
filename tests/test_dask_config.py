"""Dask's own ``distributed.*`` keys (docs/config.md#dasks-distributed-keys): the table
lists every key of distributed's defaults; each honoured key takes effect from
``dask.config.set``, YAML files and environment variables, in this process and in a
LocalCluster's; squall's key wins where both are set."""

from __future__ import annotations

import importlib.util
import math
import os
import pathlib
import re
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import dask.config
import pytest
import yaml
from conftest import cli_scheduler, eventually, start_worker, submit_map

import squall
from squall import config, preload
from squall.client import display
from squall.http import scheduler_routes
from squall.http.server import dashboard_tls
from squall.protocol import liveness
from squall.scheduler import launcher as scheduler_launcher
from squall.scheduler.server import SchedulerServer
from squall.security import Security, _self_signed
from squall.worker import launcher, nanny
from squall.worker.memory import rebalance_settings, thresholds
from squall.worker.worker import Worker

DOCS = pathlib.Path(__file__).parents[1] / "docs" / "config.md"
STATUSES = {"honoured", "not applicable", "not yet"}
# Values that are one key although mappings: names of the user's choosing inside.
VALUE_MAPPINGS = {
    "scheduler.default-task-durations",
    "scheduler.dashboard.bokeh-application",
    "nanny.pre-spawn-environ",
}


def distributed_leaves() -> list[str]:
    """The keys of distributed's own defaults, read from its file (distributed is not
    imported: that would register its defaults in this process)."""
    spec = importlib.util.find_spec("distributed")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("distributed is not installed")
    path = pathlib.Path(next(iter(spec.submodule_search_locations))) / "distributed.yaml"
    tree = yaml.safe_load(path.read_text())["distributed"]

    def walk(node: Mapping[str, Any], prefix: str) -> Iterator[str]:
        for key, value in node.items():
            path = f"{prefix}{key}"
            if isinstance(value, Mapping) and value and path not in VALUE_MAPPINGS:
                yield from walk(value, f"{path}.")
            else:
                yield path

    return list(walk(tree, ""))


def table() -> dict[str, tuple[str, str]]:
    """docs/config.md's rows: Dask's key (without ``distributed.``) -> (status, text)."""
    rows: dict[str, tuple[str, str]] = {}
    for line in DOCS.read_text().splitlines():
        found = re.match(r"\| `distributed\.([^`]+)` \| ([^|]+) \| (.*) \|$", line)
        if found:
            assert found[1] not in rows, f"{found[1]} twice"
            rows[found[1]] = (found[2].strip(), found[3])
    return rows


def test_the_table_lists_exactly_distributeds_keys() -> None:
    rows = table()
    leaves = distributed_leaves()
    assert sorted(rows) == sorted(leaves)
    assert {status for status, _ in rows.values()} <= STATUSES


def test_the_honoured_rows_are_the_mapping() -> None:
    rows = table()
    honoured = {key for key, (status, _) in rows.items() if status == "honoured"}
    mapped = {twin.key for twin in config.DASK_KEYS.values()}
    assert honoured == mapped | config.DASK_DIRECT
    assert not mapped & config.DASK_DIRECT
    for name, twin in config.DASK_KEYS.items():
        assert f"`squall.{name}`" in rows[twin.key][1], (name, twin.key)
    for key in config.DASK_DIRECT:
        assert "read as it is" in rows[key][1], key


# ----- each honoured key's effect, set with dask.config.set ------------------------------


def core(name: str) -> Callable[[], Any]:
    """The knob ``name`` of the config the scheduler's core is made with."""
    return lambda: config.core_config()[name]


def worker() -> Worker:
    return Worker("tcp://127.0.0.1:1", memory_limit=0)


def profiler_setting(attr: str) -> Callable[[], Any]:
    return lambda: getattr(Worker("tcp://127.0.0.1:1", memory_limit=0).profiler, attr)


def tls_files(tmp: pathlib.Path) -> tuple[str, str]:
    cert, key = _self_signed()
    (tmp / "cert.pem").write_text(cert)
    (tmp / "key.pem").write_text(key)
    return str(tmp / "cert.pem"), str(tmp / "key.pem")


def tls_context() -> ssl.SSLContext:
    return Security.temporary()._new_context(server=True)


# (Dask's key, a value other than its default, what shows it, what that shows). One
# case (at least) per squall key of DASK_KEYS and per key of DASK_DIRECT: see below.
CASES: list[tuple[str, Any, Callable[[], Any], Any]] = [
    ("scheduler.worker-saturation", 2.5, core("worker-saturation"), 2.5),
    ("scheduler.rootish-taskgroup", 7, core("rootish-taskgroup"), 7),
    ("scheduler.rootish-taskgroup-dependencies", 9, core("rootish-taskgroup-dependencies"), 9),
    ("scheduler.work-stealing", False, core("work-stealing"), False),
    ("scheduler.work-stealing-interval", 250, core("work-stealing-interval"), 0.25),
    ("scheduler.allowed-failures", 7, core("allowed-failures"), 7),
    ("scheduler.unknown-task-duration", "2s", core("unknown-task-duration"), 2.0),
    (
        "scheduler.default-task-durations",
        {"slow": "1h"},
        lambda: config.core_config()["default-task-durations"].get("slow"),
        3600.0,
    ),
    ("scheduler.default-data-size", "2kiB", core("default-data-size"), 2048),
    ("scheduler.bandwidth", 500_000_000, core("bandwidth"), 500_000_000),
    ("scheduler.worker-ttl", "10 minutes", core("worker-ttl"), 600.0),
    ("scheduler.no-workers-timeout", "30s", core("no-workers-timeout"), 30.0),
    ("scheduler.validate", True, core("validate"), True),
    ("admin.low-level-log-length", 77, core("transition-log-length"), 77),
    (
        "admin.low-level-log-length",
        77,
        lambda: SchedulerServer("tcp://127.0.0.1:0").events._length,
        77,
    ),
    ("diagnostics.erred-tasks.max-history", 5, core("erred-tasks-max-history"), 5),
    ("worker.memory.terminate", False, core("memory-terminate"), False),
    ("worker.memory.terminate", False, lambda: thresholds().terminate, None),
    ("worker.memory.target", 0.3, lambda: thresholds().target, 0.3),
    ("worker.memory.spill", 0.4, lambda: thresholds().spill, 0.4),
    ("worker.memory.pause", 0.5, lambda: thresholds().pause, 0.5),
    ("worker.memory.monitor-interval", "20ms", lambda: thresholds().interval, 0.02),
    ("worker.profile.enabled", False, lambda: worker().profiler is None, True),
    ("worker.profile.interval", "50ms", profiler_setting("interval"), 0.05),
    ("worker.profile.cycle", "3s", profiler_setting("cycle"), 3.0),
    ("worker.resources", {"GPU": 2}, lambda: worker().resources, {"GPU": 2.0}),
    (
        "worker.lifetime.duration",
        "1 hour",
        lambda: launcher.configured_lifetime(None, None, None).duration,
        3600.0,
    ),
    (
        "worker.lifetime.stagger",
        "5 minutes",
        lambda: launcher.configured_lifetime(None, None, None).stagger,
        300.0,
    ),
    (
        "worker.lifetime.restart",
        True,
        lambda: launcher.configured_lifetime(None, None, None).restart,
        True,
    ),
    ("scheduler.preload", ["mod_a"], lambda: preload.configured("scheduler")[0], ["mod_a"]),
    ("scheduler.preload-argv", ["--x"], lambda: preload.configured("scheduler")[1], ["--x"]),
    ("worker.preload", "mod_b", lambda: preload.configured("worker")[0], ["mod_b"]),
    ("worker.preload-argv", ["--y"], lambda: preload.configured("worker")[1], ["--y"]),
    ("nanny.preload", ["mod_c"], lambda: preload.configured("nanny")[0], ["mod_c"]),
    ("nanny.preload-argv", ["--z"], lambda: preload.configured("nanny")[1], ["--z"]),
    ("adaptive.interval", "3s", lambda: config.seconds("adaptive.interval"), 3.0),
    ("adaptive.target-duration", "1m", lambda: config.seconds("adaptive.target-duration"), 60.0),
    ("adaptive.minimum", 2, lambda: config.integer("adaptive.minimum"), 2),
    ("adaptive.maximum", 8, lambda: config.get("adaptive.maximum"), 8),
    ("adaptive.wait-count", 5, lambda: config.integer("adaptive.wait-count"), 5),
    ("comm.timeouts.connect", "3s", lambda: config.seconds("comm.timeouts.connect"), 3.0),
    ("comm.timeouts.tcp", "45s", liveness.silence_timeout, 45.0),
    ("admin.log-length", 123, lambda: config.integer("admin.log-length"), 123),
    (
        "scheduler.events-cleanup-delay",
        "2h",
        lambda: SchedulerServer("tcp://127.0.0.1:0").events._cleanup_delay,
        7200.0,
    ),
    (
        "scheduler.dashboard.tasks.task-stream-length",
        50,
        lambda: SchedulerServer("tcp://127.0.0.1:0").task_stream._rows.maxlen,
        50,
    ),
    ("comm.require-encryption", True, lambda: Security().require_encryption, True),
    ("comm.tls.ciphers", "ECDHE+AESGCM", lambda: Security().tls_ciphers, "ECDHE+AESGCM"),
    ("comm.tls.ca-file", "/ca.pem", lambda: Security().tls_ca_file, "/ca.pem"),
    *(
        (f"comm.tls.{part}.{kind}", f"/{part}.{kind}", getter, f"/{part}.{kind}")
        for part in ("client", "scheduler", "worker")
        for kind in ("cert", "key")
        for getter in [lambda p=part, k=kind: getattr(Security(), f"tls_{p}_{k}")]
    ),
    ("comm.tls.min-version", 1.3, lambda: tls_context().minimum_version, ssl.TLSVersion.TLSv1_3),
    ("comm.tls.max-version", 1.2, lambda: tls_context().maximum_version, ssl.TLSVersion.TLSv1_2),
    ("nanny.environ", {"SQUALL_T1": 1}, lambda: nanny._worker_environment().get("SQUALL_T1"), "1"),
    (
        "nanny.pre-spawn-environ",
        {"SQUALL_T2": "x"},
        lambda: nanny._worker_environment().get("SQUALL_T2"),
        "x",
    ),
    (
        "dashboard.link",
        "https://proxy/{port}/status",
        lambda: display.dashboard_link("tcp://127.0.0.1:8786", 8787),
        "https://proxy/8787/status",
    ),
    ("scheduler.idle-timeout", "1 hour", scheduler_launcher.default_idle_timeout, 3600.0),
    (
        "scheduler.http.routes",
        ["distributed.http.scheduler.api"],
        scheduler_routes.api_enabled,
        True,
    ),
    (
        "scheduler.active-memory-manager.interval",
        "5s",
        lambda: SchedulerServer("tcp://127.0.0.1:0").replicas.amm_interval,
        5.0,
    ),
    (
        "worker.memory.rebalance.measure",
        "managed",
        lambda: rebalance_settings()["measure"],
        "managed",
    ),
    *(
        (f"worker.memory.rebalance.{name}", 0.05, getter, 0.05)
        for name in ("sender-min", "recipient-max", "sender-recipient-gap")
        for getter in [lambda n=name: rebalance_settings()[n.replace("-", "_")]]
    ),
]


@pytest.mark.parametrize(
    ("key", "value", "observe", "expected"),
    CASES,
    ids=[f"{key}-{i}" for i, (key, *_) in enumerate(CASES)],
)
def test_a_dask_key_takes_effect(key: str, value: Any, observe: Any, expected: Any) -> None:
    before = observe()
    assert before != expected, "the default already shows it: the case shows nothing"
    with dask.config.set({f"distributed.{key}": value}):
        assert observe() == expected
    assert observe() == before


# Honoured keys whose effect a test of its own shows. Dask's AMM ``start`` is true by
# default, so in this process (which imports distributed) only the default's opposite
# would count as set: tests/test_replicas.py sets it in a LocalCluster's environment.
SHOWN_APART = {
    "scheduler.dashboard.tls.cert",
    "scheduler.dashboard.tls.key",
    "scheduler.active-memory-manager.start",
}


def test_every_honoured_key_has_a_case() -> None:
    cased = {key for key, *_ in CASES} | SHOWN_APART
    assert cased == {t.key for t in config.DASK_KEYS.values()} | config.DASK_DIRECT


def test_dashboard_tls_from_dasks_keys(tmp_path: pathlib.Path) -> None:
    cert, key = tls_files(tmp_path)
    assert dashboard_tls() is None
    with dask.config.set(
        {
            "distributed.scheduler.dashboard.tls.cert": cert,
            "distributed.scheduler.dashboard.tls.key": key,
        }
    ):
        assert isinstance(dashboard_tls(), ssl.SSLContext)


def test_dasks_worker_saturation_queues_tasks_in_the_core() -> None:
    def n_queued() -> int:
        core = SchedulerServer("tcp://127.0.0.1:0").core
        core.add_worker("tcp://127.0.0.1:1", 1, now=0.0)
        submit_map(core, core.client("c"), 10, now=0.0)
        return int(core.n_queued)

    assert n_queued() == 8  # ceil(1.1 * 1) = 2 run
    with dask.config.set({"distributed.scheduler.worker-saturation": math.inf}):
        assert n_queued() == 0


# ----- the rule ---------------------------------------------------------------------------


def test_squalls_key_wins_where_both_are_set() -> None:
    with dask.config.set(
        {
            "distributed.scheduler.worker-saturation": 2.0,
            "squall.scheduler.worker-saturation": 3.0,
            "distributed.comm.timeouts.connect": "20s",
            "squall.comm.timeouts.connect": "4s",
            "distributed.worker.memory.spill": 0.5,
            "squall.worker.memory.spill": 0.65,
        }
    ):
        assert config.core_config()["worker-saturation"] == 3.0
        assert config.seconds("comm.timeouts.connect") == 4.0
        assert thresholds().spill == 0.65
        # Keyword arguments win over both.
        assert config.core_config({"worker_saturation": 5.0})["worker-saturation"] == 5.0


def test_an_unset_dask_key_leaves_squalls_default() -> None:
    assert config.seconds("comm.timeouts.connect") == 10.0  # distributed's is 30s
    assert config.dask_value("comm.timeouts.connect") is None
    # A value equal to the default distributed registers counts as not set; in a
    # process where distributed has registered none, any value present is set.
    defaults = {"distributed": {"comm": {"timeouts": {"connect": "30s"}}}}
    dask.config.defaults.append(defaults)
    try:
        with dask.config.set({"distributed.comm.timeouts.connect": "30s"}):
            assert config.seconds("comm.timeouts.connect") == 10.0
        with dask.config.set({"distributed.comm.timeouts.connect": "25s"}):
            assert config.seconds("comm.timeouts.connect") == 25.0
    finally:
        dask.config.defaults.remove(defaults)
    with dask.config.set({"distributed.comm.timeouts.connect": "30s"}):
        if not any("distributed" in d for d in dask.config.defaults):
            assert config.seconds("comm.timeouts.connect") == 30.0


def test_a_bad_dask_value_names_dasks_key() -> None:
    with (
        dask.config.set({"distributed.scheduler.worker-saturation": "lots"}),
        pytest.raises(config.ConfigError, match=r"^distributed\.scheduler\.worker-saturation"),
    ):
        config.core_config()
    with (
        dask.config.set({"distributed.scheduler.worker-saturation": 0}),
        pytest.raises(config.ConfigError, match=r"^distributed\.scheduler\.worker-saturation"),
    ):
        config.core_config()
    with (
        dask.config.set({"distributed.worker.memory.pause": "high"}),
        pytest.raises(config.ConfigError, match=r"distributed\.worker\.memory\.pause"),
    ):
        thresholds()


# ----- other sources, other processes -----------------------------------------------------


PROBE = (
    "from squall import config\n"
    "from squall.worker.memory import thresholds\n"
    "print(config.core_config()['worker-saturation'], config.seconds('comm.timeouts.connect'),"
    " thresholds().pause, config.core_config()['worker-ttl'])"
)


def probe(**env: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.split()


def test_yaml_files_and_environment_variables(tmp_path: pathlib.Path) -> None:
    (tmp_path / "distributed.yaml").write_text(
        "distributed:\n"
        "  scheduler:\n    worker-saturation: 4.0\n    worker-ttl: 1 minute\n"
        "  worker:\n    memory:\n      pause: 0.55\n"
    )
    assert probe(DASK_CONFIG=str(tmp_path)) == ["4.0", "10.0", "0.55", "60.0"]
    assert probe(
        DASK_CONFIG=str(tmp_path),
        DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="7s",
        DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION="inf",
        DASK_SQUALL__WORKER__MEMORY__PAUSE="0.9",
    ) == ["inf", "7.0", "0.9", "60.0"]


def test_a_local_clusters_processes_see_dasks_keys() -> None:
    settings = {
        "distributed.scheduler.worker-saturation": 3.0,
        "distributed.admin.low-level-log-length": 7,
        "distributed.scheduler.events-cleanup-delay": "2h",
        "distributed.worker.resources": {"GPU": 2},
        "distributed.worker.memory.pause": 0.5,
        "distributed.dashboard.link": "https://proxy.example/{port}/status",
    }

    def knobs() -> list[Any]:
        knobs = config.core_config()
        return [knobs["worker-saturation"], knobs["transition-log-length"]]

    def resources(dask_scheduler: Any) -> list[dict[str, float]]:
        return [w.resources for w in dask_scheduler.workers.values()]

    with (
        dask.config.set(settings),
        squall.LocalCluster(n_workers=1, threads_per_worker=1) as cluster,
        squall.Client(cluster) as client,
    ):
        assert client.run_on_scheduler(knobs) == [3.0, 7]
        assert client.run_on_scheduler(resources) == [{"GPU": 2.0}]
        assert list(client.run(lambda: thresholds().pause).values()) == [0.5]
        port = client.dashboard_link.split("/")[3] if client.dashboard_link else None
        assert client.dashboard_link == f"https://proxy.example/{port}/status"
        assert "https://proxy.example/" in repr(client)
        # The resources the workers declare take effect: a task asking for more waits.
        assert client.submit(lambda: 1, resources={"GPU": 2}).result(timeout=30) == 1


def test_a_squall_worker_retires_after_dasks_lifetime() -> None:
    with cli_scheduler() as address, squall.Client(address, timeout=30) as client:
        env = {**os.environ, "DASK_DISTRIBUTED__WORKER__LIFETIME__DURATION": "1s"}
        proc = start_worker(address, "--no-nanny", env=env)
        try:
            eventually(lambda: len(client.scheduler_info()["workers"]) == 1, timeout=20)
            assert proc.wait(timeout=20) == 0  # it retired, and left
            eventually(lambda: client.scheduler_info()["workers"] == {})
        finally:
            proc.kill()
            proc.wait(timeout=10)
