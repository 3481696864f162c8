# What a gRPC call says about its client: the SDK's metadata headers and the peer address.
"""The request context of one gRPC call (the proxy's ``ContextInitPipeline``).

RocketMQ 5 SDKs send, as gRPC metadata: ``x-mq-client-id``, ``x-mq-language`` (JAVA, PYTHON,
GO, ...), ``x-mq-client-version``, ``x-mq-protocol`` (GRPC_V2), ``x-mq-namespace``,
``x-mq-request-id``, ``x-mq-date-time`` and ``authorization`` (the ACL signature, see
pybroker/grpc_service/acl.py). A call without a client id is refused CLIENT_ID_REQUIRED
"client id cannot be empty", as the proxy refuses it before any activity runs. The client's
address is the call's peer, or behind the C++ front the peer the front passes on.
"""
import dataclasses

from pybroker.grpc_service.status import Code, GrpcRefused
from pybroker.protocol.constants import LanguageCode, MQVersion

CLIENT_ID = "x-mq-client-id"
LANGUAGE = "x-mq-language"
CLIENT_VERSION = "x-mq-client-version"
NAMESPACE = "x-mq-namespace"
DATE_TIME = "x-mq-date-time"
AUTHORIZATION = "authorization"


@dataclasses.dataclass(frozen=True)
class RequestContext:
    """One call's client: its id, language and version as remoting codes, its address."""
    client_id: str
    language_name: str
    client_version: str
    namespace: str
    remote_address: str
    metadata: dict[str, str]

    @property
    def language(self) -> int:
        """The remoting LanguageCode of ``x-mq-language`` (OTHER when it names none)."""
        member = LanguageCode.__members__.get(self.language_name)
        return int(member) if member is not None else int(LanguageCode.OTHER)

    @property
    def version(self) -> int:
        """The remoting version of ``x-mq-client-version`` as the proxy's parseClientVersion
        reads it: a Version enum name (``V5_0_0``), else Java 5.3.3's current version (the
        SDKs send ``5.0.8``, which names none)."""
        member = MQVersion.__members__.get(self.client_version.upper())
        return int(member) if member is not None else int(MQVersion.V5_3_3)

    def require_client_id(self) -> None:
        if not self.client_id.strip():
            raise GrpcRefused(Code.CLIENT_ID_REQUIRED, "client id cannot be empty")


def peer_address(peer: str) -> str:
    """``ip:port`` of a grpc peer string (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``)."""
    kind, _, address = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        return address
    return peer


def context_of(metadata, peer: str, peer_key: str | None = None) -> RequestContext:
    """The context of a call from its invocation metadata (pairs) and peer string. Behind the
    C++ front (``peer_key`` set: grpc_service/front.py) the caller's peer string is the
    metadata value under ``peer_key``, which only the front sets (grpcio then listens on the
    front's private socket alone)."""
    values: dict[str, str] = {}
    for key, value in metadata or ():
        if isinstance(value, str):
            values[key.lower()] = value
    if peer_key is not None:
        peer = values.pop(peer_key, peer)
    return RequestContext(values.get(CLIENT_ID, ""), values.get(LANGUAGE, ""),
                          values.get(CLIENT_VERSION, ""), values.get(NAMESPACE, ""),
                          peer_address(peer), values)
