# ACL on the gRPC port: ACL 1.0 accounts (plain_acl.yml) with the 5.x SDKs' request signature.
"""The ACL check of gRPC calls (docs/security.md, "gRPC").

Flavour: ACL 1.0, the one pybroker has: the accounts, white addresses and topic/group
permissions of plain_acl.yml (aclEnable=true), checked by the same
:class:`~pybroker.acl.validator.AccessValidator` as the remoting ports. What differs is how a
5.x SDK signs: every call carries ``x-mq-date-time`` and ``authorization: MQv2-HMAC-SHA1
Credential=<AccessKey>, SignedHeaders=x-mq-date-time, Signature=<hex HMAC-SHA1 of the date-time
with the SecretKey>`` (Java's DefaultAuthenticationContextBuilder reads it the same way). The
resources each RPC needs are those Java 5.x's ACL 1.0 validator derives from the request:
publishing a topic (send, end transaction, recall, a producer's settings), subscribing a topic
and a group (receive, ack, invisible time, DLQ, assignment, a consumer's settings and
heartbeat), any permission on a queried topic. A refusal is UNAUTHORIZED with the ACL's message.
"""
import hashlib
import hmac

from pybroker.acl.plain_config import Perm
from pybroker.acl.validator import AccessValidator, AclDenied
from pybroker.grpc_service.request_context import AUTHORIZATION, DATE_TIME, RequestContext
from pybroker.grpc_service.status import Code, GrpcRefused

_ALGORITHM = "MQv2-HMAC-SHA1"


def parse_authorization(text: str) -> tuple[str | None, str | None]:
    """(access key, hex signature) of an ``authorization`` value; Nones when absent."""
    scheme, _, rest = text.strip().partition(" ")
    if scheme != _ALGORITHM:
        return None, None
    access_key = signature = None
    for part in rest.split(","):
        key, _, value = part.strip().partition("=")
        if key == "Credential":
            access_key = value.split("/")[0] or None
        elif key == "Signature":
            signature = value
    return access_key, signature


def signature_matches(secret_key: str, date_time: str, signature_hex: str | None) -> bool:
    if not signature_hex or not date_time:
        return False
    expected = hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()
    return hmac.compare_digest(expected.lower(), signature_hex.lower())


def _topic(name: str, perm: Perm) -> tuple[bool, str, Perm]:
    return (False, name, perm)


def _group(name: str) -> tuple[bool, str, Perm]:
    return (True, name, Perm.SUB)


def _settings_needs(settings) -> list:
    if settings.HasField("publishing"):
        return [_topic(topic.name, Perm.PUB) for topic in settings.publishing.topics]
    if settings.HasField("subscription"):
        return [_group(settings.subscription.group.name)] + [
            _topic(entry.topic.name, Perm.SUB) for entry in settings.subscription.subscriptions]
    return []


def needs_of(rpc: str, request) -> list:
    """The (is_group, name, perm) a call needs."""
    if rpc == "SendMessage":
        return [_topic(message.topic.name, Perm.PUB) for message in request.messages]
    if rpc in ("EndTransaction", "RecallMessage"):
        return [_topic(request.topic.name, Perm.PUB)]
    if rpc == "QueryRoute":
        return [_topic(request.topic.name, Perm.ANY)]
    if rpc == "ReceiveMessage":
        return [_group(request.group.name),
                _topic(request.message_queue.topic.name, Perm.SUB)]
    if rpc in ("AckMessage", "ChangeInvisibleDuration", "ForwardMessageToDeadLetterQueue",
               "QueryAssignment"):
        return [_group(request.group.name), _topic(request.topic.name, Perm.SUB)]
    if rpc in ("Heartbeat", "NotifyClientTermination"):
        return [_group(request.group.name)] if request.group.name else []
    if rpc == "Telemetry" and request.WhichOneof("command") == "settings":
        return _settings_needs(request.settings)
    return []


class GrpcAccessCheck:
    """The gRPC face of a worker's AccessValidator."""

    def __init__(self, validator: AccessValidator):
        self.validator = validator

    def check(self, rctx: RequestContext, rpc: str, request) -> None:
        access_key, signature = parse_authorization(rctx.metadata.get(AUTHORIZATION, ""))
        date_time = rctx.metadata.get(DATE_TIME, "")
        try:
            self.validator.check_signed(
                access_key, rctx.remote_address,
                lambda secret: signature_matches(secret, date_time, signature),
                needs_of(rpc, request))
        except AclDenied as denied:
            raise GrpcRefused(Code.UNAUTHORIZED, denied.message) from None
