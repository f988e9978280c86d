"""TLS and the shared token (docs/security.md): on the comm layer, on LocalClusters
(processes and embedded) and on the programs' flags."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import eventually, start_scheduler, start_worker

from squall import Client, LocalCluster
from squall.protocol import comm
from squall.protocol import messages as m
from squall.security import Security

TEMPORARY = Security.temporary()  # making a key takes a moment: once per module


async def echo(c: comm.Comm) -> None:
    msg, _ = await c.read()
    assert isinstance(msg, m.Versions)
    await c.write(m.Error(message=msg.packages[0]))


async def talk(address: str, security: Security, role: str = "client") -> str:
    c = await comm.connect(address, role=role, security=security, timeout=5)
    try:
        await c.write(m.Versions(packages=["hi"]))
        reply, _ = await c.read()
        assert isinstance(reply, m.Error)
        return reply.message
    finally:
        await c.close()


async def one_connection(listen_as: Security, connect_as: Security, scheme: str) -> str:
    listener = await comm.listen(
        f"{scheme}://127.0.0.1:0", echo, roles=frozenset({"client"}), security=listen_as
    )
    try:
        return await talk(listener.address, connect_as)
    finally:
        await listener.close()


def connect(listen_as: Security, connect_as: Security, scheme: str = "tcp") -> str:
    return asyncio.run(one_connection(listen_as, connect_as, scheme))


def test_mutual_tls_admits_only_certificates_of_the_ca() -> None:
    assert connect(TEMPORARY, TEMPORARY, "tls") == "hi"
    with pytest.raises(comm.HandshakeError, match="CERTIFICATE_VERIFY_FAILED"):
        connect(TEMPORARY, Security.temporary(), "tls")  # another CA
    with pytest.raises(ValueError, match="tls:// needs a CA and a certificate"):
        connect(TEMPORARY, Security(), "tls")
    with pytest.raises(comm.CommError, match="encryption is required"):
        connect(Security(), TEMPORARY, "tcp")


def test_the_token_is_proven_both_ways() -> None:
    assert connect(Security(token="s3cret"), Security(token="s3cret")) == "hi"
    with pytest.raises(comm.HandshakeError, match="wrong token"):
        connect(Security(token="s3cret"), Security(token="guess"))
    with pytest.raises(comm.HandshakeError, match="requires a token"):
        connect(Security(token="s3cret"), Security())
    # A client holding the token will not talk to a listener that cannot prove it.
    with pytest.raises(comm.HandshakeError, match="holds no token"):
        connect(Security(), Security(token="s3cret"))
    both = Security.temporary(token="s3cret")
    assert connect(both, both, "tls") == "hi"


def test_handshake_costs() -> None:
    async def timed(listen_as: Security, connect_as: Security, scheme: str) -> float:
        listener = await comm.listen(
            f"{scheme}://127.0.0.1:0", echo, roles=frozenset({"client"}), security=listen_as
        )
        await talk(listener.address, connect_as)  # contexts made once
        start = time.perf_counter()
        for _ in range(20):
            await talk(listener.address, connect_as)
        await listener.close()
        return (time.perf_counter() - start) / 20 * 1e3

    token = Security(token="s3cret")
    for name, (sec, scheme) in {
        "tcp": (Security(), "tcp"),
        "token": (token, "tcp"),
        "tls": (TEMPORARY, "tls"),
    }.items():
        print(f"{name}: {asyncio.run(timed(sec, sec, scheme)):.2f} ms per connection")


@pytest.mark.parametrize("processes", [True, False])
def test_a_tls_cluster_refuses_a_client_without_a_certificate(processes: bool) -> None:
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=processes, security=TEMPORARY
    ) as cluster:
        assert cluster.scheduler_address.startswith("tls://")
        with Client(cluster) as client:  # the cluster's security
            assert client.gather(client.map(lambda x: x + 1, range(10))) == list(range(1, 11))
            workers = client.scheduler_info()["workers"]
            assert all(a.startswith("tls://") for a in workers)
            # Workers fetch from each other over TLS too.
            a, b = sorted(workers)
            big = client.submit(lambda: b"x" * 1000, workers=[a], pure=False)
            assert client.submit(len, big, workers=[b]).result(timeout=20) == 1000
        with pytest.raises(ValueError, match="tls:// needs a CA"):
            Client(cluster.scheduler_address, timeout=5)
        with pytest.raises(comm.CommError, match="CERTIFICATE_VERIFY_FAILED"):
            Client(cluster.scheduler_address, security=Security.temporary(), timeout=5)


@contextmanager
def token_programs(tmp_path: Path, token: str) -> Iterator[str]:
    """``squall scheduler`` and a ``squall worker`` given ``--token-file``."""
    secret = tmp_path / "token"
    secret.write_text(token + "\n")
    secret.chmod(0o600)
    flags = ["--token-file", str(secret)]
    sched, address = start_scheduler(*flags)
    worker = start_worker(address, *flags)
    try:
        yield address
    finally:
        for p in (worker, sched):
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=20) == 0


def test_programs_with_a_token_file_refuse_a_wrong_token(tmp_path: Path) -> None:
    with token_programs(tmp_path, "tok-123") as address:
        with Client(address, security=Security(token="tok-123"), timeout=10) as client:
            eventually(lambda: len(client.nthreads()) == 1, timeout=30)
            assert client.submit(sum, [1, 2], pure=False).result(timeout=20) == 3
            [worker] = client.nthreads()
        with pytest.raises(comm.CommError, match="wrong token"):
            Client(address, security=Security(token="nope"), timeout=5)
        with pytest.raises(comm.CommError, match="requires a token"):
            Client(address, timeout=5)
        # A worker's peer port (get-data, run) asks for the token too.
        for stranger in (Security(), Security(token="nope")):
            with pytest.raises(comm.HandshakeError, match="token"):
                asyncio.run(talk(worker, stranger, "peer"))


def test_a_wildcard_bind_warns_and_is_never_advertised() -> None:
    # Only bound and printed here: nothing dials the host's own address.
    # The dashboard binds the same interface; its API routes, on, are warned about too.
    env = {**os.environ, "DASK_SQUALL__SCHEDULER__DASHBOARD__API": "true"}
    sched, address = start_scheduler("--host", "0.0.0.0", stderr=subprocess.PIPE, env=env)
    try:
        assert address.startswith("tcp://") and "0.0.0.0" not in address
    finally:
        sched.send_signal(signal.SIGTERM)
        _, err = sched.communicate(timeout=20)
    assert "without TLS or a token: anyone who can reach it" in err
    assert "serving the API routes on http://" in err and "can retire workers" in err


def test_a_worker_advertises_its_contact_address() -> None:
    sched, address = start_scheduler()
    # 127.0.0.2 is loopback too: the worker listens on every address, and says this one.
    worker = start_worker(
        address, "--no-nanny", "--listen", "tcp://0.0.0.0:0", "--contact-address", "127.0.0.2"
    )
    try:
        with Client(address, timeout=10) as client:
            eventually(lambda: len(client.nthreads()) == 1, timeout=30)
            [advertised] = client.nthreads()
            assert advertised.startswith("tcp://127.0.0.2:")
            assert client.submit(sum, [1, 2], pure=False).result(timeout=20) == 3
    finally:
        for p in (worker, sched):
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=20)
