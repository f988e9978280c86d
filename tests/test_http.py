"""The HTTP listener of schedulers and workers (docs/dashboard.md): addresses and flags,
``/health``, the dashboard link and reprs, and the API routes — on live processes."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask.config
import pytest
from conftest import eventually, start_scheduler, start_worker
from prometheus_client.parser import text_string_to_metric_families

import squall
from squall.security import Security
from squall.worker.memory import system_memory


def get(url: str, body: Any = None) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(url, data=data, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture(scope="module")
def api_cluster() -> Iterator[tuple[squall.LocalCluster, squall.Client, str]]:
    """3 workers; the scheduler serves the API routes (turned on as Kubernetes' Dask
    operator does, through Dask's routes list)."""
    routes = "['distributed.http.scheduler.api', 'distributed.http.health']"
    os.environ["DASK_DISTRIBUTED__SCHEDULER__HTTP__ROUTES"] = routes
    try:
        cluster = squall.LocalCluster(n_workers=3, threads_per_worker=1, nanny=False)
    finally:
        del os.environ["DASK_DISTRIBUTED__SCHEDULER__HTTP__ROUTES"]
    with cluster, squall.Client(cluster) as client:
        assert client.dashboard_link is not None
        yield cluster, client, client.dashboard_link.removesuffix("/status")


def test_health_link_and_repr_of_a_live_cluster(
    api_cluster: tuple[squall.LocalCluster, squall.Client, str],
) -> None:
    cluster, client, base = api_cluster
    assert get(base + "/health") == (200, b"ok")
    assert client.dashboard_link == cluster.dashboard_link == base + "/status"
    assert re.fullmatch(
        rf"<Client: '{cluster.scheduler_address}' processes=3 threads=3, "
        rf"memory=[\d.]+ GiB, dashboard={base}/status>",
        repr(client),
    )
    html = client._repr_html_()
    assert f'<a href="{base}/status"' in html and "<th" in html
    # As Dask's LocalCluster, "auto" shares the machine's memory among the workers.
    limits = [w["memory_limit"] for w in client.scheduler_info()["workers"].values()]
    assert limits == [system_memory() // 3] * 3
    other = squall.Client(cluster)
    other.close()
    assert repr(other) == "<Client: No scheduler connected>"
    # Every worker serves /health on the port it registered.
    for w in client.scheduler_info()["workers"].values():
        host = w["host"]
        assert get(f"http://{host}:{w['services']['dashboard']}/health") == (200, b"ok")


def test_metrics_and_json_routes(
    api_cluster: tuple[squall.LocalCluster, squall.Client, str],
) -> None:
    _, client, base = api_cluster
    futures = client.map(lambda x: x + 1, range(50))
    client.gather(futures)
    status, body = get(base + "/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    tasks = {s.labels["state"]: s.value for s in families["dask_scheduler_tasks"].samples}
    assert tasks["memory"] == 50
    assert families["dask_scheduler_clients"].samples[0].value >= 1
    workers = {s.labels["state"]: s.value for s in families["dask_scheduler_workers"].samples}
    assert sum(workers.values()) == 3

    identity = json.loads(get(base + "/json/identity.json")[1])
    assert identity["type"] == "Scheduler" and identity["n_workers"] == 3
    assert identity["services"]["dashboard"] == int(base.rsplit(":", 1)[1])
    counts = json.loads(get(base + "/json/counts.json")[1])
    assert counts["workers"] == 3 and counts["memory"] == 50 and counts["tasks"] == 50

    # The page's data: the stream comes after the cursor it was given.
    eventually(
        lambda: (
            len(json.loads(get(base + "/dashboard/data.json?cursor=0")[1])["stream"]["records"])
            == 50
        )
    )
    data = json.loads(get(base + "/dashboard/data.json?cursor=0")[1])
    cursor = data["stream"]["cursor"]
    assert (
        json.loads(get(f"{base}/dashboard/data.json?cursor={cursor}")[1])["stream"]["records"]
        == []
    )
    assert "stream" not in json.loads(get(base + "/dashboard/data.json")[1])
    assert get(base + "/dashboard/data.json?cursor=x")[0] == 400

    # A result moves from one worker to another: both count the transfer.
    a, b = sorted(client.scheduler_info()["workers"])[:2]
    big = client.submit(bytes, 1_000_000, workers=[a], pure=False)
    assert client.submit(len, big, workers=[b], pure=False).result(timeout=30) == 1_000_000

    def scrape(w: dict[str, Any]) -> dict[str, float]:
        status, body = get(f"http://{w['host']}:{w['services']['dashboard']}/metrics")
        assert status == 200
        found = list(text_string_to_metric_families(body.decode()))
        names = {f.name for f in found}
        assert {"dask_worker_tasks", "dask_worker_threads", "dask_worker_memory_bytes"} <= names
        return {s.name: s.value for f in found for s in f.samples}

    workers = client.scheduler_info()["workers"].values()
    # Each worker's latency is its last heartbeat's round trip, once one was answered.
    eventually(lambda: all(scrape(w)["dask_worker_latency_seconds"] > 0 for w in workers))
    scraped = [scrape(w) for w in workers]
    assert all(s["dask_worker_latency_seconds"] < 5 for s in scraped)
    sent = sum(s["dask_worker_transfer_outgoing_bytes_total"] for s in scraped)
    received = sum(s["squall_worker_transfer_incoming_bytes_total"] for s in scraped)
    assert sent >= 1_000_000 and received >= 1_000_000
    del big
    del futures


def test_api_routes(api_cluster: tuple[squall.LocalCluster, squall.Client, str]) -> None:
    _, client, base = api_cluster
    status, body = get(base + "/api/v1/get_workers")
    assert status == 200
    listing = json.loads(body)
    assert listing["num_workers"] == 3
    assert {w["address"] for w in listing["workers"]} == set(client.scheduler_info()["workers"])
    assert json.loads(get(base + "/api/v1/adaptive_target")[1]) == {"workers": 0}
    idle = json.loads(get(base + "/api/v1/check_idle")[1])["idle_since"]
    assert isinstance(idle, float)

    # Busy: no idle time.
    futures = client.map(time.sleep, [0.5] * 6, pure=False)
    eventually(lambda: json.loads(get(base + "/api/v1/check_idle")[1])["idle_since"] is None)
    client.gather(futures)
    del futures

    # Bad input is refused with its reason; nothing is retired.
    assert get(base + "/api/v1/retire_workers", {"workers": ["tcp://nowhere:1"]})[0] == 400
    status, body = get(base + "/api/v1/retire_workers", [1, 2])
    assert status == 400 and b"expected" in body
    assert len(client.scheduler_info()["workers"]) == 3

    victim = sorted(client.scheduler_info()["workers"])[0]
    status, body = get(base + "/api/v1/retire_workers", {"workers": [victim]})
    assert status == 200 and list(json.loads(body)) == [victim]
    status, body = get(base + "/api/v1/retire_workers", {"n": 1})
    assert status == 200 and len(json.loads(body)) == 1
    eventually(lambda: len(client.scheduler_info()["workers"]) == 1)


def test_api_routes_are_off_by_default() -> None:
    with squall.LocalCluster(n_workers=0, processes=False) as cluster:
        base = str(cluster.dashboard_link).removesuffix("/status")
        status, body = get(base + "/api/v1/get_workers")
        assert status == 403 and b"squall.scheduler.dashboard.api" in body
        assert get(base + "/api/v1/retire_workers", {"n": 1})[0] == 403


def test_dashboard_address_flags_and_a_taken_port() -> None:
    # A taken port falls back to a free one, with a warning naming both.
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    proc, address = start_scheduler(
        "--dashboard-address", f":{port}", "--log-level", "info", stderr=subprocess.PIPE
    )
    try:
        with squall.Client(address) as client:
            link = client.dashboard_link
            assert link is not None and f":{port}/" not in link
            assert get(link.replace("/status", "/health")) == (200, b"ok")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        taken.close()
    assert proc.stderr is not None
    assert f"port {port} is already in use" in proc.stderr.read()

    # --no-dashboard: nothing served, no link; a worker without one still joins.
    proc, address = start_scheduler("--no-dashboard")
    worker = start_worker(address, "--no-nanny", "--no-dashboard")
    try:
        with squall.Client(address) as client:
            assert client.dashboard_link is None
            client.wait_for_workers(1, timeout=20)
            (w,) = client.scheduler_info()["workers"].values()
            assert w["services"] == {}
            assert client.submit(sum, [1, 2]).result(timeout=20) == 3
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=20)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


def test_dashboard_address_forms() -> None:
    from squall.http.server import parse_http_address

    assert parse_http_address(":8787", "127.0.0.5") == ("127.0.0.5", 8787)
    assert parse_http_address("0.0.0.0:0", "127.0.0.1") == ("0.0.0.0", 0)
    assert parse_http_address(8790, "127.0.0.1") == ("127.0.0.1", 8790)
    assert parse_http_address("http://[::1]:81", "127.0.0.1") == ("::1", 81)
    assert parse_http_address("9000", "h") == ("h", 9000)
    with pytest.raises(ValueError, match="invalid dashboard address"):
        parse_http_address(":http", "h")


def test_the_dashboard_over_https(tmp_path: Path) -> None:
    temporary = Security.temporary()  # a self-signed certificate, in memory
    cert, key = str(temporary.tls_scheduler_cert), str(temporary.tls_scheduler_key)
    (tmp_path / "cert.pem").write_text(cert)
    (tmp_path / "key.pem").write_text(key)
    tls = {
        "squall.scheduler.dashboard.tls.cert": str(tmp_path / "cert.pem"),
        "squall.scheduler.dashboard.tls.key": str(tmp_path / "key.pem"),
    }
    with (
        dask.config.set(tls),
        squall.LocalCluster(n_workers=1, processes=False) as cluster,
        squall.Client(cluster) as client,
    ):
        link = client.dashboard_link
        assert link is not None and link.startswith("https://")
        assert cluster.dashboard_link == link
        trusted = ssl.create_default_context(cadata=cert)
        trusted.check_hostname = False  # a self-signed certificate, reached by IP
        health = link.replace("/status", "/health")
        with urllib.request.urlopen(health, context=trusted, timeout=10) as r:
            assert r.read() == b"ok"
        # The worker serves its routes with the same certificate, and the workers page
        # links to them over HTTPS.
        with urllib.request.urlopen(
            link.replace("/status", "/dashboard/data.json"), context=trusted, timeout=10
        ) as r:
            (worker,) = json.load(r)["workers"]
        assert worker["dashboard"].startswith("https://")
        with urllib.request.urlopen(worker["dashboard"], context=trusted, timeout=10) as r:
            assert "dask_worker_tasks" in r.read().decode()
        # Without trusting its certificate, a client refuses it: it is TLS indeed.
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(health, timeout=10)
