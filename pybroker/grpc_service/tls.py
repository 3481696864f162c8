# TLS of the gRPC port: grpcio server credentials from the tls.* settings of the remoting ports.
"""How grpcServerPort is bound, from ``tls.server.mode`` and the server certificate.

* ``disabled``, or no ``tls.server.certPath``: plain HTTP/2 only (the remoting ports serve
  plain TCP only then too).
* ``enforcing``: TLS only, with tls.server.certPath / keyPath; client certificates as
  ``tls.server.need.client.auth`` (or ``tls.server.authClient``) says, checked against
  tls.server.trustCertPath.
* ``permissive`` with a certificate: TLS and plain connections on the same port, told apart
  by their first byte as on the remoting ports (pybroker/grpc_service/permissive.py).

grpcio reads PEM files and cannot decrypt a private key: ``tls.server.keyPassword`` with gRPC
is refused at start (:func:`tls_problem`).
"""
import dataclasses

from pybroker.config import ClientAuth, TlsMode


@dataclasses.dataclass(frozen=True)
class GrpcTls:
    """What the gRPC port serves: ``plain``, ``tls`` or both (``permissive``)."""
    mode: str
    certificate_chain: bytes = b""
    private_key: bytes = b""
    trusted: bytes | None = None
    require_client_auth: bool = False

    @classmethod
    def from_config(cls, tls) -> "GrpcTls":
        if tls.tls_server_mode == TlsMode.DISABLED or not tls.tls_server_cert_path:
            return cls("plain")
        assert tls.tls_server_key_path is not None   # config.check_tls: cert and key together
        with open(tls.tls_server_cert_path, "rb") as cert, \
                open(tls.tls_server_key_path, "rb") as key:
            chain, private_key = cert.read(), key.read()
        trusted = None
        need = tls.tls_server_need_client_auth
        asks = need != ClientAuth.NONE or tls.tls_server_auth_client
        if asks:
            assert tls.tls_server_trust_cert_path is not None   # config.check_tls
            with open(tls.tls_server_trust_cert_path, "rb") as trust:
                trusted = trust.read()
        mode = "tls" if tls.tls_server_mode == TlsMode.ENFORCING else "permissive"
        return cls(mode, chain, private_key, trusted, asks and need != ClientAuth.OPTIONAL)

    def credentials(self):
        import grpc
        return grpc.ssl_server_credentials([(self.private_key, self.certificate_chain)],
                                           root_certificates=self.trusted,
                                           require_client_auth=self.require_client_auth)


def tls_problem(config) -> str | None:
    """Why the gRPC port cannot serve the configured TLS, or None."""
    if config.grpc.grpc_workers == 0:
        return None
    tls = config.tls
    if tls.tls_server_mode != TlsMode.DISABLED and tls.tls_server_cert_path \
            and tls.tls_server_key_password:
        return ("tls.server.keyPassword: the gRPC port (grpcWorkers > 0) needs an unencrypted "
                "PEM key (grpcio cannot decrypt one)")
    try:
        GrpcTls.from_config(tls)
    except OSError as error:
        return f"gRPC TLS files: {error}"
    return None


def bind_port(server, config, index: int):
    """Bind grpcServerPort on ``server`` (a grpc.aio server) as configured; returns what it
    serves (for the log) and, in permissive mode, the relay to start after the server."""
    tls = GrpcTls.from_config(config.tls)
    address = f"{config.remoting.bind_address}:{config.grpc.grpc_server_port}"
    if tls.mode == "plain":
        server.add_insecure_port(address)
        return f"{address} (plain, grpcio)", None
    if tls.mode == "tls":
        server.add_secure_port(address, tls.credentials())
        return f"{address} (TLS only, grpcio)", None
    from pybroker.grpc_service.permissive import serve_permissive
    return serve_permissive(server, tls, config, index)
