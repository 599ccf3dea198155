"""Optional TLS material for the test server, made with the ``openssl`` command line tool.

No Python crypto package is needed: :func:`make_certificates` shells out to
``openssl`` (present on most systems; :func:`openssl_available` tells).  It
creates a throwaway CA and a server certificate for ``127.0.0.1`` and
``localhost``, valid for two days.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Certificates", "make_certificates", "openssl_available", "server_ssl_context"]


@dataclass(frozen=True, slots=True)
class Certificates:
    """Paths of the PEM files written by :func:`make_certificates`."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def openssl_available() -> bool:
    return shutil.which("openssl") is not None


def _run(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(directory: Path, host: str = "127.0.0.1") -> Certificates:
    """Write ``ca.crt``, ``server.crt`` and ``server.key`` into ``directory``.

    Raises :class:`FileNotFoundError` if ``openssl`` is missing and
    :class:`subprocess.CalledProcessError` if it fails.
    """
    if not openssl_available():
        raise FileNotFoundError("the openssl command is needed for TLS")
    directory.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
         "-subj", "/CN=keyqueue-test-ca",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
    _run("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", f"/CN={host}", cwd=directory)
    (directory / "server.ext").write_text(
        f"subjectAltName=IP:{host},DNS:localhost\n"
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
    )
    _run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
         "-out", "server.crt", "-days", "2", "-extfile", "server.ext", cwd=directory)
    return Certificates(directory / "ca.crt", directory / "server.crt", directory / "server.key")


def server_ssl_context(certs: Certificates) -> ssl.SSLContext:
    """A server-side context for ``certs`` (TLS 1.2+)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(certs.server_cert, certs.server_key)
    return ctx
