# grpcNativeFront: the libgrpc++ front on grpcServerPort, grpcio behind it on a private socket.
"""How a gRPC worker serves grpcServerPort through the C++ front (docs/architecture/grpc.md).

The worker's grpcio server then listens only on a private abstract unix socket
(:func:`backend_address`); the front (``pybroker._fast.grpc_front``) binds the public
listeners and relays every call there, with the caller's grpc peer string in the metadata
key ``PEER_KEY``, which the service reads as the caller's address (request_context.py; the
front replaces any value a client sent under that key). TLS as the tls.* settings say
(tls.py): plain, TLS only (the front's own TLS listener), or permissive, where the worker's
first-byte relay (permissive.py) holds the port and hands each connection to the front's plain
or TLS unix listener; the front then sees the relay's unix socket (``unix:``) as the peer, as
grpcio does without the front.

The front is built only where libgrpc++ was found (setup.py); :func:`front_type` warns once
and answers None when it is missing, and grpcio serves the port itself.
"""
import importlib.util
import logging
import os

from pybroker.grpc_service.tls import GrpcTls

log = logging.getLogger("pybroker.grpc.front")


FRONT_MODULE = "pybroker._fast.grpc_front.front"


def built() -> bool:
    """Whether this build has the front (setup.py found libgrpc++)."""
    return importlib.util.find_spec(FRONT_MODULE) is not None


def front_type():
    """The front's class, or None (logged) when this build has no front."""
    try:
        from pybroker._fast.grpc_front.front import Front
    except ImportError as error:
        log.warning("grpcNativeFront=true but the gRPC front is not built (%s; build it with "
                    "libgrpc++-dev installed): grpcio serves grpcServerPort", error)
        return None
    return Front


def peer_key() -> str:
    from pybroker._fast.grpc_front.front import PEER_KEY
    return PEER_KEY


def backend_address(index: int) -> str:
    """The private address of gRPC worker ``index``'s grpcio server behind the front."""
    return f"unix-abstract:pybroker-grpc-{os.getpid()}-{index}-backend"


def start_front(front, config, index: int, backend: str):
    """Start the front before ``backend`` on the configured listeners; returns what it
    serves (for the log), the front, and in permissive mode the first-byte relay to start."""
    tls = GrpcTls.from_config(config.tls)
    address = f"{config.remoting.bind_address}:{config.grpc.grpc_server_port}"
    size_max = config.grpc.grpc_max_inbound_message_size
    options = {"certificate_chain": tls.certificate_chain, "private_key": tls.private_key,
               "trusted": tls.trusted or b"", "require_client_auth": tls.require_client_auth,
               "max_message_bytes": size_max}
    relay = None
    if tls.mode == "plain":
        plain, secure, served = [address], [], f"{address} (plain, C++ front)"
    elif tls.mode == "tls":
        plain, secure, served = [], [address], f"{address} (TLS only, C++ front)"
    else:
        from pybroker.grpc_service.permissive import relay_for
        relay = relay_for(config, index)
        inner_plain, inner_tls = relay.grpc_addresses()
        plain, secure = [inner_plain], [inner_tls]
        served = f"{address} (TLS and plain by first byte, C++ front)"
    return served, front(plain, secure, backend, **options), relay
