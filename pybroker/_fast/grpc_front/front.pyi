# Python face of pybroker._fast.grpc_front.front (the libgrpc++ relay of the gRPC worker).
from typing import Iterable

PEER_KEY: str  # metadata key of the public caller's grpc peer string on relayed calls

class Front:
    """A started front: public listeners relayed to ``backend``; ``stop`` it once."""
    def __init__(self, plain_addresses: Iterable[str], tls_addresses: Iterable[str],
                 backend: str, *, certificate_chain: bytes = ..., private_key: bytes = ...,
                 trusted: bytes = ..., require_client_auth: bool = ...,
                 max_message_bytes: int = ..., handoff_methods: Iterable[str] = ...,
                 handoff_eventfd: int = ...) -> None: ...
    @property
    def calls_accepted(self) -> int: ...
    @property
    def calls_handed_off(self) -> int: ...
    def take(self) -> list[tuple[int, str, bytes, tuple[tuple[str, str | bytes], ...], str]]:
        ...
    def answer(self, handle: int, response: bytes, code: int = ..., details: str = ...) -> None:
        ...
    def stop(self, grace_s: float) -> None: ...
