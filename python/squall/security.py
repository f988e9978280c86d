"""Who may talk to a squall cluster: TLS with the standard ``ssl`` module, and a shared
token proven in the handshake (docs/security.md).

``Security`` takes distributed's field names; unset fields come from distributed's config
keys (``distributed.comm.tls.*``, ``distributed.comm.require-encryption``), the token
from ``squall.comm.token`` or the ``SQUALL_TOKEN`` environment variable. Certificates
and keys are file paths or PEM text (``Security.temporary()`` makes PEM text).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import ssl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dask.config

from squall import config

#: What a process is, for the certificate it shows: ``squall scheduler`` and ``squall
#: worker`` (and its nanny) say so when they start; anything else is a client.
IDENTITIES = ("client", "scheduler", "worker")
_identity = "client"

_TLS_KEYS = {
    "tls_ca_file": "ca-file",
    "tls_ciphers": "ciphers",
    "tls_client_cert": "client.cert",
    "tls_client_key": "client.key",
    "tls_scheduler_cert": "scheduler.cert",
    "tls_scheduler_key": "scheduler.key",
    "tls_worker_cert": "worker.cert",
    "tls_worker_key": "worker.key",
}
_TOKEN_ENV = "SQUALL_TOKEN"


def set_identity(identity: str) -> None:
    """Declare what this process is (its programs call this once)."""
    global _identity
    if identity not in IDENTITIES:
        raise ValueError(f"identity must be one of {IDENTITIES}, not {identity!r}")
    _identity = identity


def identity() -> str:
    return _identity


_TLS_VERSIONS = {1.2: ssl.TLSVersion.TLSv1_2, 1.3: ssl.TLSVersion.TLSv1_3}


def _tls_version(key: str, default: ssl.TLSVersion) -> ssl.TLSVersion:
    """Dask's ``distributed.comm.tls.<key>`` (1.2 or 1.3; unset: ``default``)."""
    value = config.dask_value(f"comm.tls.{key}")
    if value is None:
        return default
    try:
        return _TLS_VERSIONS[float(value)]
    except (KeyError, TypeError, ValueError):
        raise ValueError(
            f"distributed.comm.tls.{key}: expected 1.2 or 1.3, got {value!r}"
        ) from None


class Security:
    """TLS certificates and a shared token for a cluster's connections.

    With ``tls_ca_file`` and a certificate for the process's part (``tls_scheduler_*``,
    ``tls_worker_*`` or ``tls_client_*``), ``tls://`` addresses work: both sides show a
    certificate signed by the CA (mutual TLS). ``require_encryption`` refuses plain
    ``tcp://``. With ``token``, each connection proves on both sides, by an HMAC over
    fresh nonces, that it holds the same secret; it never travels."""

    require_encryption: bool
    tls_ca_file: str | None
    tls_ciphers: str | None
    tls_client_cert: str | None
    tls_client_key: str | None
    tls_scheduler_cert: str | None
    tls_scheduler_key: str | None
    tls_worker_cert: str | None
    tls_worker_key: str | None
    token: str | None

    def __init__(
        self, require_encryption: bool | None = None, token: str | None = None, **tls: Any
    ) -> None:
        unknown = set(tls) - set(_TLS_KEYS)
        if unknown:
            raise TypeError(f"unknown Security fields: {', '.join(sorted(unknown))}")
        for field, key in _TLS_KEYS.items():
            value = tls.get(field)
            if value is None:
                value = config.dask_value(f"comm.tls.{key}")
            setattr(self, field, None if value is None else str(value))
        if require_encryption is None:
            require_encryption = bool(config.dask_value("comm.require-encryption"))
        self.require_encryption = require_encryption
        if token is None:
            token = os.environ.get(_TOKEN_ENV) or dask.config.get("squall.comm.token", None)
        self.token = token or None
        self._contexts: dict[bool, ssl.SSLContext] = {}

    @classmethod
    def temporary(cls, **kwargs: Any) -> Security:
        """A self-signed certificate for every part of a cluster, kept in memory: a
        quick mutual-TLS local cluster (``LocalCluster(security=Security.temporary())``)."""
        cert, key = _self_signed()
        fields = {f"tls_{part}_{kind}": pem for part in IDENTITIES for kind, pem in
                  (("cert", cert), ("key", key))}  # fmt: skip
        return cls(require_encryption=True, tls_ca_file=cert, **fields, **kwargs)

    def __repr__(self) -> str:
        shown = [
            f"{f}={'<PEM>' if _is_pem(v) else v!r}"
            for f in _TLS_KEYS
            if (v := getattr(self, f)) is not None
        ]
        if self.token:
            shown.append("token=<hidden>")
        return f"Security(require_encryption={self.require_encryption}, {', '.join(shown)})"

    @property
    def tls(self) -> bool:
        """Whether ``tls://`` can be used: a CA and a certificate for this process."""
        return self.tls_ca_file is not None and self._cert_and_key() is not None

    def _cert_and_key(self) -> tuple[str, str] | None:
        """This process's certificate: its identity's, else any given (one process may
        be several parts, as an embedded cluster is)."""
        order = [_identity, *(i for i in IDENTITIES if i != _identity)]
        for part in order:
            cert, key = getattr(self, f"tls_{part}_cert"), getattr(self, f"tls_{part}_key")
            if cert is not None and key is not None:
                return cert, key
        return None

    def ssl_context(self, server: bool) -> ssl.SSLContext:
        """The context of one side of a mutual-TLS connection: this process's
        certificate shown, the peer's required and checked against the CA. Names are
        not checked (cluster members are addressed by IP), as in distributed. Made
        once per side: loading keys costs milliseconds, which every connection
        would pay."""
        if server not in self._contexts:
            self._contexts[server] = self._new_context(server)
        return self._contexts[server]

    def _new_context(self, server: bool) -> ssl.SSLContext:
        pair = self._cert_and_key()
        if self.tls_ca_file is None or pair is None:
            raise ValueError(
                "tls:// needs a CA and a certificate with its key for this "
                f"{_identity} (Security(tls_ca_file=, tls_{_identity}_cert=, "
                f"tls_{_identity}_key=) or distributed.comm.tls.*)"
            )
        # Not create_default_context: the system's CAs must not vouch for anyone here.
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.minimum_version = _tls_version("min-version", ssl.TLSVersion.TLSv1_2)
        ctx.maximum_version = _tls_version("max-version", ssl.TLSVersion.MAXIMUM_SUPPORTED)
        if _is_pem(self.tls_ca_file):
            ctx.load_verify_locations(cadata=self.tls_ca_file)
        else:
            ctx.load_verify_locations(cafile=self.tls_ca_file)
        with _as_files(*pair) as (cert, key):
            ctx.load_cert_chain(cert, key)
        if self.tls_ciphers:
            ctx.set_ciphers(self.tls_ciphers)
        return ctx

    def to_env(self, directory: Path) -> dict[str, str]:
        """Environment variables giving this security to a child process (its config
        and ``SQUALL_TOKEN``); PEM text is written to private files in ``directory``."""
        env = {"DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": str(self.require_encryption)}
        for field, key in _TLS_KEYS.items():
            value = getattr(self, field)
            if value is None:
                continue
            if _is_pem(value):
                path = directory / f"{field}.pem"
                path.touch(mode=0o600)
                path.write_text(value)
                value = str(path)
            name = "__".join(part.replace("-", "_").upper() for part in key.split("."))
            env[f"DASK_DISTRIBUTED__COMM__TLS__{name}"] = value
        if self.token:
            env[_TOKEN_ENV] = self.token
        return env

    def prove(self, side: str, *nonces: bytes) -> str:
        """The HMAC that shows ``side`` ("client" or "server") holds the token."""
        assert self.token is not None
        message = side.encode() + b"".join(nonces)
        return hmac.new(self.token.encode(), message, hashlib.sha256).hexdigest()

    def check(self, proof: Any, side: str, *nonces: bytes) -> bool:
        return isinstance(proof, str) and hmac.compare_digest(proof, self.prove(side, *nonces))


def _is_pem(value: str | None) -> bool:
    return value is not None and "-----BEGIN" in value


@contextmanager
def _as_files(*values: str) -> Iterator[list[str]]:
    """Paths for certificates and keys given as files or PEM text (``ssl`` loads
    chains from files only): PEM text goes to a private directory for the call."""
    if not any(_is_pem(v) for v in values):
        yield list(values)
        return
    with tempfile.TemporaryDirectory(prefix="squall-tls-") as d:
        paths = []
        for i, v in enumerate(values):
            if _is_pem(v):
                path = Path(d) / f"{i}.pem"
                path.write_text(v)
                path.chmod(0o600)
                v = str(path)
            paths.append(v)
        yield paths


def _self_signed() -> tuple[str, str]:
    """A fresh RSA key and a self-signed certificate for it, as PEM text."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "squall-temporary")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem


#: ``squall scheduler`` and ``squall worker`` options, as distributed's programs have them.
CLI_OPTIONS = ("--tls-ca-file", "--tls-cert", "--tls-key", "--token-file")


def add_cli_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tls-ca-file", help="CA certificate(s) for mutual TLS (tls://)")
    parser.add_argument("--tls-cert", help="this process's certificate, signed by that CA")
    parser.add_argument("--tls-key", help="the private key of --tls-cert")
    parser.add_argument("--token-file", help="a file holding the cluster's shared token")


def apply_cli_options(args: argparse.Namespace, identity: str) -> None:
    """Make the options the process's security, as config (``distributed.comm.tls.*``,
    ``squall.comm.token``), for a process that is ``identity``."""
    set_identity(identity)
    tls = {"ca-file": args.tls_ca_file, f"{identity}.cert": args.tls_cert,
           f"{identity}.key": args.tls_key}  # fmt: skip
    settings: dict[str, Any] = {
        f"distributed.comm.tls.{k}": v for k, v in tls.items() if v is not None
    }
    if args.token_file is not None:
        settings["squall.comm.token"] = Path(args.token_file).read_text().strip()
    if settings:
        dask.config.set(settings)
    reset_default()


def cli_arguments(args: argparse.Namespace) -> list[str]:
    """The options again, for a child process of the same program."""
    out: list[str] = []
    for option in CLI_OPTIONS:
        value = getattr(args, option[2:].replace("-", "_"))
        if value is not None:
            out += [option, str(value)]
    return out


_default: Security | None = None


def default() -> Security:
    """The process's security from config and environment, made on first use (a
    program's flags set the config before anything connects)."""
    global _default
    if _default is None:
        _default = Security()
    return _default


def reset_default() -> None:
    """Forget the default, so it is read from config again (after flags change it)."""
    global _default
    _default = None
