"""A cluster across hosts (docs/deploy.md#across-hosts): network namespaces on one
private bridge (squall.tools.netns), the scheduler on one, a worker on each of two
more, the client on a fourth. The programs are started as a user types them; the
client is a script run inside its host, so every connection crosses the bridge as it
would between machines and nothing reaches beyond the namespaces. Skipped where
namespaces cannot be made (not root, no iproute2)."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from squall.tools import netns

WHY = netns.unavailable()
pytestmark = pytest.mark.skipif(WHY is not None, reason=WHY or "")

#: Short timeouts so that a test of a lost peer ends in seconds (each process's config).
ENV = {
    "DASK_SQUALL__COMM__TIMEOUTS__CONNECT": "3s",
    "DASK_SQUALL__SCHEDULER__WORKER_TTL": "3s",
    "DASK_SQUALL__WORKER__HEARTBEAT_INTERVAL": "250ms",
}


@pytest.fixture(scope="module")
def net() -> Iterator[netns.Network]:
    netns.remove_stale()
    with netns.Network(4) as network:
        yield network


@dataclass
class Cluster:
    net: netns.Network
    scheme: str = "tcp"
    scheduler: subprocess.Popen[str] | None = None
    #: Config of every process, beside ``ENV``.
    config: dict[str, str] = field(default_factory=dict)

    @property
    def hosts(self) -> list[netns.Host]:
        return self.net.hosts

    @property
    def address(self) -> str:
        return f"{self.scheme}://{self.hosts[0].ip}:8786"

    def start_scheduler(self, *flags: str) -> None:
        """``squall scheduler`` on host 0, as typed (no --host, the default port)."""
        self.scheduler = self.hosts[0].popen(
            [sys.executable, "-m", "squall.cli", "scheduler", *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env(self.config),
        )
        assert self.scheduler.stdout is not None
        line = self.scheduler.stdout.readline()
        assert line.rsplit(" ", 1)[-1].strip() == self.address, line

    def start_worker(self, host: int, *flags: str) -> None:
        """``squall worker SCHEDULER --nthreads 2`` on ``host``, as typed."""
        argv = [sys.executable, "-m", "squall.cli", "worker", self.address, "--nthreads", "2"]
        self.hosts[host].popen([*argv, *flags], env=env(self.config), stderr=subprocess.DEVNULL)

    #: The client's ``Security(...)``, as Python source.
    security: str = "None"
    #: Where the client finds the scheduler (``Client``'s arguments, as Python source;
    #: default: ``address``).
    connect: str | None = None

    def start_client(self, body: str, **values: Any) -> subprocess.Popen[str]:
        """Start ``body`` in a client of the cluster on host 3 (``c``; ``values`` as
        names); it assigns its result to ``out``. Its stdin and stdout are pipes."""
        script = CLIENT.format(
            connect=self.connect or repr(self.address),
            values=json.dumps(values),
            security=self.security,
            body=textwrap.indent(textwrap.dedent(body), "    "),
        )
        return self.hosts[3].popen(
            [sys.executable, "-c", script],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env(self.config),
        )

    def client(self, body: str, timeout: float = 60, **values: Any) -> Any:
        """Run ``body`` in a client (``start_client``) and return its ``out``."""
        return result(self.start_client(body, **values), timeout)

    def stop(self) -> None:
        for host in self.hosts:
            host.kill_all()


CLIENT = """
import json, time
import dask.array as da
import squall
from squall.protocol.comm import CommError
from squall.security import Security
globals().update(json.loads({values!r}))
with squall.Client({connect}, security={security}) as c:
    c.wait_for_workers(2, timeout=20)
{body}
print(json.dumps(out))
"""


def result(client: subprocess.Popen[str], timeout: float) -> Any:
    """The ``out`` of a client started with ``start_client``, once it ends."""
    stdout, stderr = client.communicate(timeout=timeout)
    assert client.returncode == 0, stderr[-6000:]
    return json.loads(stdout.splitlines()[-1])


def wait_for_line(client: subprocess.Popen[str], line: str) -> None:
    assert client.stdout is not None
    assert client.stdout.readline() == line + "\n"


def env(config: dict[str, str] | None = None) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("DASK_", "SQUALL_"))}
    return {**keep, **ENV, **(config or {})}


@pytest.fixture
def cluster(net: netns.Network) -> Iterator[Cluster]:
    """The scheduler on host 0 and a worker on each of hosts 1 and 2."""
    c = Cluster(net)
    try:
        c.start_scheduler()
        c.start_worker(1)
        c.start_worker(2)
        yield c
    finally:
        c.stop()


def worker_hosts(cluster: Cluster) -> list[str]:
    return [h.ip for h in cluster.hosts[1:3]]


def test_default_commands_compute_a_map(cluster: Cluster) -> None:
    out = cluster.client(
        """
        workers = sorted(c.scheduler_info()["workers"])
        nannies = sorted(w["nanny"] for w in c.scheduler_info()["workers"].values())
        out = [workers, nannies, c.gather(c.map(lambda x: x + 1, range(200)))]
        """
    )
    workers, nannies, results = out
    # Each worker (and nanny) listens on, and advertises, its host's bridge address.
    expected = [f"tcp://{ip}" for ip in worker_hosts(cluster)]
    assert [w.rsplit(":", 1)[0] for w in workers] == expected
    assert [n.rsplit(":", 1)[0] for n in nannies] == expected
    assert results == list(range(1, 201))


def test_a_dask_array_moves_between_worker_hosts(cluster: Cluster) -> None:
    out = cluster.client(
        """
        a, b = sorted(c.scheduler_info()["workers"])
        x = da.random.RandomState(0).random((1000, 1000), chunks=(250, 250))
        y = da.random.RandomState(1).random((1000, 1000), chunks=(250, 250))
        x, y = x.persist(workers=[a]), y.persist(workers=[b])
        got = float((x + y.T).sum().compute())
        xs, ys = x.compute(), y.compute()
        want = float((xs + ys.T).sum())
        moved = c.run(lambda dask_worker: dask_worker.transfers.incoming_bytes_total)
        out = [got, want, moved]
        """
    )
    got, want, moved = out
    assert got == pytest.approx(want)
    hosts = sorted(a.split("://")[1].rsplit(":", 1)[0] for a in moved)
    assert hosts == worker_hosts(cluster)
    # Each sum of two chunks needs one from the other host: half an array at least.
    assert sum(moved.values()) >= 1000 * 1000 * 8, moved


SLOW_MAP = """
def slow(x):
    time.sleep(0.25)
    return x + 1
futures = c.map(slow, range(60))
next(iter(squall.as_completed(futures)))
print("running", flush=True)  # the workers on both hosts are busy: ~3 s of work left
out = c.gather(futures)
"""


def start_slow_map(cluster: Cluster) -> subprocess.Popen[str]:
    """A client on host 3 computing ``SLOW_MAP``; returns once its tasks run."""
    running = cluster.start_client(SLOW_MAP)
    wait_for_line(running, "running")
    return running


def finish_slow_map(running: subprocess.Popen[str], timeout: float) -> None:
    assert result(running, timeout) == list(range(1, 61))


def test_a_worker_host_killed_mid_computation(cluster: Cluster) -> None:
    running = start_slow_map(cluster)
    cluster.hosts[2].kill_all()
    finish_slow_map(running, timeout=60)


def test_a_partitioned_worker_host_is_a_bounded_loss(cluster: Cluster) -> None:
    """Host 2's link goes down mid-computation (its processes live on, unreachable):
    the scheduler drops the silent worker after the worker TTL and the work finishes on
    host 1; nothing waits for host 2 forever."""
    running = start_slow_map(cluster)
    cluster.hosts[2].link(up=False)
    try:
        finish_slow_map(running, timeout=60)
    finally:
        running.kill()
        cluster.hosts[2].link(up=True)


def test_a_partitioned_holder_is_recovered_or_a_bounded_error(net: netns.Network) -> None:
    """With the default worker TTL, host 2's link goes down while it holds a result
    the client fetched from before (a connection is open): within the TCP and connect
    timeouts the scheduler drops the worker (its connection dies) and the result is
    computed again on host 1, or the gather errs naming host 2's worker; never a hang."""
    cluster = Cluster(net, config={
        "DASK_SQUALL__SCHEDULER__WORKER_TTL": "5 minutes",
        "DASK_SQUALL__COMM__TIMEOUTS__TCP": "8s",
    })  # fmt: skip
    try:
        cluster.start_scheduler()
        cluster.start_worker(1)
        cluster.start_worker(2)
        client = cluster.start_client(
            """
            (far,) = [a for a in c.scheduler_info()["workers"] if host2 in a]
            first = c.submit(lambda: 1, workers=[far], pure=False)
            held = c.submit(lambda: 2, workers=[far], allow_other_workers=True, pure=False)
            assert first.result() == 1 and not squall.wait(held).not_done
            print("held", flush=True)
            input()  # host 2 is cut off
            start = time.monotonic()
            try:
                out = [held.result(timeout=60), far, time.monotonic() - start]
            except CommError as e:
                out = [str(e), far, time.monotonic() - start]
            """,
            host2=net.hosts[2].ip,
        )
        wait_for_line(client, "held")
        net.hosts[2].link(up=False)
        assert client.stdin is not None
        client.stdin.write("\n")
        client.stdin.flush()
        got, far, waited = result(client, timeout=90)
    finally:
        net.hosts[2].link(up=True)
        cluster.stop()
    assert got == 2 or (far in got and "could not get" in got)
    assert waited < 8 + 3 + 3 + 5  # the TCP timeout, two connect timeouts, and rounds


def test_the_scheduler_restarted(cluster: Cluster) -> None:
    assert cluster.client("out = c.submit(lambda: 1).result()") == 1
    assert cluster.scheduler is not None
    cluster.scheduler.terminate()
    cluster.scheduler.wait(20)
    cluster.start_scheduler()
    # The workers rejoin the new scheduler (the client waits for both).
    out = cluster.client("out = c.gather(c.map(lambda x: 2 * x, range(20)))", timeout=90)
    assert out == [2 * x for x in range(20)]


def test_the_scheduler_file_flow(net: netns.Network, tmp_path: Path) -> None:
    """A batch system's flow on a shared file system: the workers start first and wait
    for the file, the scheduler writes it, the client reads it; every address in it is
    one the other hosts reach."""
    path = str(tmp_path / "scheduler.json")
    c = Cluster(net, connect=f"scheduler_file={path!r}")
    argv = [sys.executable, "-m", "squall.cli"]
    try:
        for host in (1, 2):
            worker = [*argv, "worker", "--scheduler-file", path, "--nthreads", "1"]
            net.hosts[host].popen(worker, env=env(), stderr=subprocess.DEVNULL)
        net.hosts[0].popen(
            [*argv, "scheduler", "--scheduler-file", path],
            env=env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        out = c.client("out = [c.address, c.gather(c.map(abs, [-1, -2, -3]))]")
    finally:
        c.stop()
    assert out == [c.address, [1, 2, 3]]


def test_tls_with_a_certificate_for_each_host(net: netns.Network, tmp_path: Path) -> None:
    ca, ca_key = certificate("squall-test-ca", None)
    files = {"ca": write_pem(tmp_path / "ca.pem", ca)}
    for i, host in enumerate(net.hosts):
        cert, key = certificate(f"host{i}", host.ip, (ca, ca_key))
        files[f"{i}.cert"] = write_pem(tmp_path / f"{i}.pem", cert)
        files[f"{i}.key"] = write_pem(tmp_path / f"{i}.key", key)

    def tls(i: int) -> list[str]:
        return ["--tls-ca-file", files["ca"], "--tls-cert", files[f"{i}.cert"],
                "--tls-key", files[f"{i}.key"]]  # fmt: skip

    c = Cluster(net, scheme="tls")
    c.security = (
        f"Security(tls_ca_file={files['ca']!r}, tls_client_cert={files['3.cert']!r}, "
        f"tls_client_key={files['3.key']!r}, require_encryption=True)"
    )
    try:
        c.start_scheduler(*tls(0))
        c.start_worker(1, *tls(1))
        c.start_worker(2, *tls(2))
        out = c.client(
            """
            a, b = sorted(c.scheduler_info()["workers"])
            big = c.submit(lambda: b"x" * 100_000, workers=[a], pure=False)
            out = [a, b, c.submit(len, big, workers=[b]).result()]
            """
        )
    finally:
        c.stop()
    a, b, n = out
    assert [a.rsplit(":", 1)[0], b.rsplit(":", 1)[0]] == [f"tls://{ip}" for ip in worker_hosts(c)]
    assert n == 100_000


def certificate(
    name: str, ip: str | None, issuer: tuple[str, str] | None = None
) -> tuple[str, str]:
    """A key and a certificate as PEM: a CA's (``issuer`` None) or one for ``ip``
    (in its subject alternative names) signed by the CA ``issuer``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if issuer is None:
        builder = builder.issuer_name(subject).add_extension(
            x509.BasicConstraints(ca=True, path_length=None), critical=True
        )
        signer: Any = key
    else:
        ca = x509.load_pem_x509_certificate(issuer[0].encode())
        signer = serialization.load_pem_private_key(issuer[1].encode(), None)
        assert ip is not None
        san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))])
        builder = builder.issuer_name(ca.subject).add_extension(san, critical=False)
    cert = builder.sign(signer, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()  # fmt: skip
    return cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem


def write_pem(path: Path, pem: str) -> str:
    path.write_text(pem)
    path.chmod(0o600)
    return str(path)


def test_bench_hosts_json(capsys: pytest.CaptureFixture[str]) -> None:
    """``squall bench hosts`` at a smoke-test size: a row per workload, in its units."""
    from squall.cli import main

    flags = ["--systems", "squall", "--map-tasks", "2000", "--transfer", "64MiB", "--json"]
    assert main(["bench", "hosts", *flags]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["workload"], r["unit"]) for r in rows] == [
        ("transfer", "GiB/s"),
        ("map", "tasks/s"),
    ]
    assert [r["size"] for r in rows] == [64 * 2**20, 2000]
    assert all(r["seconds"] > 0 and r["rate"] > 0 for r in rows)
