# Python face of pybroker._fast.grpc_front.front (the libgrpc++ relay of the gRPC worker).
from typing import Iterable

PEER_KEY: str  # metadata key of the public caller's grpc peer string on relayed calls

class Front:
    """A started front: public listeners relayed to ``backend``; ``stop`` it once."""
    def __init__(self, plain_addresses: Iterable[str], tls_addresses: Iterable[str],
                 backend: str, *, certificate_chain: bytes = ..., private_key: bytes = ...,
                 trusted: bytes = ..., require_client_auth: bool = ...,
                 max_message_bytes: int = ...) -> None: ...
    @property
    def calls_accepted(self) -> int: ...
    def stop(self, grace_s: float) -> None: ...
