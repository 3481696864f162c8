# Test certificates made at test time with the openssl command: a CA, a server and a client.
"""Certificates for TLS tests (never shipped, never reused): :func:`make_certificates` writes a
throwaway CA and server/client key pairs signed by it into a directory, with the openssl
command-line tool. EC P-256 keys, valid one day, server name 127.0.0.1 / localhost.
"""
import dataclasses
import pathlib
import shutil
import subprocess

OPENSSL_TIMEOUT_S = 60


@dataclasses.dataclass(frozen=True)
class CertificateSet:
    """Paths of the PEM files. ``server_key_encrypted`` is the server key under
    ``key_password`` (PKCS#8, AES-256)."""
    ca_cert: pathlib.Path
    server_cert: pathlib.Path
    server_key: pathlib.Path
    server_key_encrypted: pathlib.Path
    key_password: str
    client_cert: pathlib.Path
    client_key: pathlib.Path


def openssl_missing() -> str | None:
    """Why certificates cannot be made here, or None."""
    return None if shutil.which("openssl") else "the openssl command is not on PATH"


def _openssl(*args, cwd) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True,
                   timeout=OPENSSL_TIMEOUT_S)


def _signed_pair(directory: pathlib.Path, name: str, subject: str, extensions: str) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=directory)
    (directory / f"{name}.ext").write_text(extensions)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "1", "-out", f"{name}.pem", "-extfile", f"{name}.ext",
             cwd=directory)


def make_certificates(directory, key_password: str = "test-key-password") -> CertificateSet:
    """Write ca.pem, server.pem/key, server-encrypted.key, client.pem/key into directory."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
             "-subj", "/CN=pybroker test CA", cwd=directory)
    _signed_pair(directory, "server", "/CN=127.0.0.1",
                 "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _signed_pair(directory, "client", "/CN=pybroker test client",
                 "extendedKeyUsage=clientAuth\n")
    _openssl("pkcs8", "-topk8", "-in", "server.key", "-out", "server-encrypted.key",
             "-v2", "aes-256-cbc", "-passout", f"pass:{key_password}", cwd=directory)
    return CertificateSet(directory / "ca.pem", directory / "server.pem",
                            directory / "server.key", directory / "server-encrypted.key",
                            key_password, directory / "client.pem", directory / "client.key")
