"""deploy/kubernetes/daskcluster.yaml without a Kubernetes cluster (docs/deploy.md#kubernetes):
its scheduler's and workers' containers run as local processes, with the environment the
Dask operator and Kubernetes give them, their ports mapped to free loopback ports; the
operator's probe and scaling calls are made as it makes them."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import squall
from tests.conftest import eventually

MANIFEST = Path(__file__).parent.parent / "deploy" / "kubernetes" / "daskcluster.yaml"
#: The pod's address (the downward API's status.podIP): here, loopback.
POD_IP = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of ``$(VAR)`` in args: defined variables are replaced,
    others left as written, ``$$`` escapes."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, text)


class Container:
    """One container of the manifest, run as a local process: its declared ports mapped
    to free ones (in its args too), its environment as Kubernetes would set it."""

    def __init__(self, spec: dict[str, Any], extra_env: dict[str, str]) -> None:
        self.spec = spec
        self.ports = {p["containerPort"]: free_port() for p in spec.get("ports", [])}
        self.named = {p["name"]: self.ports[p["containerPort"]] for p in spec.get("ports", [])}
        env: dict[str, str] = {}
        for var in spec.get("env", []):
            if "value" in var:
                env[var["name"]] = str(var["value"])
            else:
                assert var["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
                env[var["name"]] = POD_IP
        env.update(extra_env)
        self.env = env
        args = [self.mapped(expand(str(a), env)) for a in spec["args"]]
        assert args[0] == "squall"  # the image's console script; here, this tree's
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "squall.cli", *args[1:]], env={**os.environ, **env}
        )

    def mapped(self, arg: str) -> str:
        for port, local in self.ports.items():
            if arg == str(port) or arg.endswith(f":{port}"):
                return arg[: -len(str(port))] + str(local)
        return arg

    def http(self, probe: dict[str, Any]) -> str:
        """The URL of an httpGet (a probe's), on the mapped port."""
        port = probe["port"]
        local = self.named[port] if isinstance(port, str) else self.ports[port]
        return f"http://127.0.0.1:{local}{probe['path']}"

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=20)


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        assert r.status == 200
        body = r.read().decode()
    return json.loads(body) if r.headers.get_content_type() == "application/json" else body


def post(url: str, body: Any) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        assert r.status == 200
        return json.loads(r.read())


def ready(url: str) -> bool:
    try:
        return bool(get(url) == "ok")
    except OSError:
        return False


@pytest.fixture
def manifest() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    assert spec["apiVersion"] == "kubernetes.dask.org/v1" and spec["kind"] == "DaskCluster"
    return spec


@pytest.fixture
def running(manifest: dict[str, Any]) -> Iterator[tuple[Container, list[Container]]]:
    """The scheduler, ready by its readiness probe, and the manifest's replicas of
    workers, named and pointed at it as the operator does."""
    name = manifest["metadata"]["name"]
    started: list[Container] = []
    try:
        (spec,) = manifest["spec"]["scheduler"]["spec"]["containers"]
        scheduler = Container(spec, {})
        started.append(scheduler)
        eventually(lambda: ready(scheduler.http(spec["readinessProbe"]["httpGet"])), 20)
        address = f"tcp://127.0.0.1:{scheduler.named['tcp-comm']}"
        group = manifest["spec"]["worker"]
        workers = []
        for _ in range(group["replicas"]):
            (spec,) = group["spec"]["containers"]
            operator_env = {
                "DASK_WORKER_NAME": f"{name}-default-worker-{uuid.uuid4().hex[:10]}",
                "DASK_SCHEDULER_ADDRESS": address,
            }
            workers.append(Container(spec, operator_env))
            started.append(workers[-1])
        yield scheduler, workers
    finally:
        for c in reversed(started):
            c.stop()


def test_probes_and_scaling_routes(
    manifest: dict[str, Any], running: tuple[Container, list[Container]]
) -> None:
    scheduler, workers = running
    (spec,) = manifest["spec"]["scheduler"]["spec"]["containers"]
    assert get(scheduler.http(spec["livenessProbe"]["httpGet"])) == "ok"
    api = scheduler.http({"port": "http-dashboard", "path": "/api/v1"})
    names = {w.env["DASK_WORKER_NAME"] for w in workers}
    eventually(lambda: get(f"{api}/get_workers")["num_workers"] == len(workers), 30)
    listed = get(f"{api}/get_workers")["workers"]
    assert {w["name"] for w in listed} == names
    # Peers reach each worker at its pod's address.
    assert all(w["address"].startswith(f"tcp://{POD_IP}:") for w in listed)

    with squall.Client(f"tcp://127.0.0.1:{scheduler.named['tcp-comm']}") as client:
        assert client.gather(client.map(lambda x: x * x, range(10))) == [x * x for x in range(10)]
    assert isinstance(get(f"{api}/adaptive_target")["workers"], int)
    assert "idle_since" in get(f"{api}/check_idle")

    # Scaling down by one: the operator asks the scheduler to retire one, then deletes
    # the Deployment of the worker named in the answer.
    retired = post(f"{api}/retire_workers", {"n": 1})
    (gone,) = [info["name"] for info in retired.values()]
    assert gone in names
    eventually(lambda: get(f"{api}/get_workers")["num_workers"] == len(workers) - 1, 30)
    assert {w["name"] for w in get(f"{api}/get_workers")["workers"]} == names - {gone}
    (deleted,) = [w for w in workers if w.env["DASK_WORKER_NAME"] == gone]
    assert deleted.stop() == 0


def test_expansion_as_kubernetes_does() -> None:
    env = {"A": "x"}
    assert expand("$(A)-$(B)-$$(A)", env) == "x-$(B)-$(A)"
