# What each request code needs under ACL: the one classification table.
"""Every request code a client may send, with what ACL 1.0 asks of it.

* :data:`Rule.RESOURCES`: a signed account (or a whitelisted peer) holding the permission on each
  topic and group the request names (Java's ``PlainAccessValidator.parse`` table, plus the
  codes Java forgot: SEND_BATCH_MESSAGE, LITE_PULL_MESSAGE, SEND_REPLY_MESSAGE(_V2) and
  QUERY_CONSUMER_OFFSET name their topic and group like their siblings).
* :data:`Rule.AUTHENTICATED`: a signed account or a whitelisted peer; no resource check (reads
  that name no topic, or that Java leaves unchecked).
* :data:`Rule.ADMIN`: a signed admin account; IP whitelists never admit these. Java's admin set
  (create/delete topic and group, broker config update) plus what changes or reveals state
  beyond a client's own: GET_BROKER_CONFIG, resetting a group's offsets, CONSUME_MESSAGE_DIRECTLY.
* anything else: refused to everybody but signed admin accounts (default deny), so a code
  added later is closed until it is classified here.

A topic named ``%RETRY%<group>`` stands for the group, as in Java.
"""
import enum
from typing import Callable, Optional

from pybroker.acl.plain_config import Perm
from pybroker.protocol.bodies import decode_heartbeat
from pybroker.protocol.pop_bodies import decode_batch_ack_body, decode_query_assignment_request
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.command import RemotingCommand
from pybroker.protocol.constants import RETRY_GROUP_TOPIC_PREFIX


class Rule(enum.Enum):
    RESOURCES = "resources"
    AUTHENTICATED = "authenticated"
    ADMIN = "admin"
    UNCLASSIFIED = "unclassified"
    OPEN = "open"    # served to everybody, signed or not (the NameServer's reads)
    BROKER = "broker"   # a broker's registration: an allowed address, or a signed admin


# (is_group, name, permission needed)
Need = tuple[bool, str, Perm]
Extractor = Callable[[RemotingCommand], list[Need]]


def topic_needs(name: Optional[str], perm: Perm) -> list[Need]:
    """What using topic ``name`` with ``perm`` needs (a retry topic stands for its group)."""
    return _topic(name, perm)


def _topic(name: Optional[str], perm: Perm) -> list[Need]:
    if not name:
        return []
    if name.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return [(True, name[len(RETRY_GROUP_TOPIC_PREFIX):], Perm.SUB)]
    return [(False, name, perm)]


def _group(name: Optional[str]) -> list[Need]:
    return [(True, name, Perm.SUB)] if name else []


def _fields(request: RemotingCommand) -> dict:
    return request.ext_fields or {}


def _send(topic_key: str) -> Extractor:
    return lambda request: _topic(_fields(request).get(topic_key), Perm.PUB)


def _pull(request: RemotingCommand) -> list[Need]:
    fields = _fields(request)
    return _topic(fields.get("topic"), Perm.SUB) + _group(fields.get("consumerGroup"))


def _group_field(key: str) -> Extractor:
    return lambda request: _group(_fields(request).get(key))


def _query(request: RemotingCommand) -> list[Need]:
    return _topic(_fields(request).get("topic"), Perm.SUB)


def _heartbeat(request: RemotingCommand) -> list[Need]:
    if not request.body:
        return []
    heartbeat = decode_heartbeat(request.body)   # ValueError for a malformed body
    needs: list[Need] = []
    for consumer in heartbeat.consumer_datas:
        needs += _group(consumer.group_name)
        for subscription in consumer.subscriptions:
            needs += _topic(subscription.topic, Perm.SUB)
    return needs


def _batch_ack(request: RemotingCommand) -> list[Need]:
    # 5.x (ACL 2.0 names the topic and group of each ack; 1.0 had no POP codes).
    _, acks = decode_batch_ack_body(request.body or b"{}")   # ValueError for a bad body
    needs: list[Need] = []
    for ack in acks or ():
        needs += _topic(ack.topic, Perm.SUB) + _group(ack.consumer_group)
    return needs


def _query_assignment(request: RemotingCommand) -> list[Need]:
    body = decode_query_assignment_request(request.body or b"{}")
    return _topic(body.topic, Perm.SUB) + _group(body.consumer_group)


RESOURCE_CODES: dict[int, Extractor] = {
    RequestCode.SEND_MESSAGE: _send("topic"),
    RequestCode.SEND_MESSAGE_V2: _send("b"),
    RequestCode.SEND_BATCH_MESSAGE: _send("b"),
    RequestCode.SEND_REPLY_MESSAGE: _send("topic"),
    RequestCode.SEND_REPLY_MESSAGE_V2: _send("b"),
    RequestCode.CONSUMER_SEND_MSG_BACK: _group_field("group"),
    RequestCode.PULL_MESSAGE: _pull,
    RequestCode.LITE_PULL_MESSAGE: _pull,
    RequestCode.QUERY_MESSAGE: _query,
    RequestCode.HEART_BEAT: _heartbeat,
    RequestCode.UNREGISTER_CLIENT: _group_field("consumerGroup"),
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _group_field("consumerGroup"),
    RequestCode.UPDATE_CONSUMER_OFFSET: _pull,
    RequestCode.QUERY_CONSUMER_OFFSET: _pull,
    # 5.x POP: the topic and group of the header, as the pull's.
    RequestCode.POP_MESSAGE: _pull,
    RequestCode.ACK_MESSAGE: _pull,
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: _pull,
    RequestCode.PEEK_MESSAGE: _pull,
    RequestCode.NOTIFICATION: _pull,
    RequestCode.POLLING_INFO: _pull,
    RequestCode.BATCH_ACK_MESSAGE: _batch_ack,
    RequestCode.QUERY_ASSIGNMENT: _query_assignment,
    # 5.x: recalling a timer message needs the right to send to its topic (Java's ACL 2.0).
    RequestCode.RECALL_MESSAGE: _send("topic"),
}

AUTHENTICATED_CODES = frozenset({
    RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.GET_EARLIEST_MSG_STORETIME,
    RequestCode.VIEW_MESSAGE_BY_ID, RequestCode.END_TRANSACTION, RequestCode.CHECK_CLIENT_CONFIG,
    RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ,
    RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.GET_TOPIC_STATS_INFO,
    RequestCode.GET_CONSUME_STATS, RequestCode.GET_CONSUMER_CONNECTION_LIST,
    RequestCode.GET_PRODUCER_CONNECTION_LIST, RequestCode.GET_BROKER_RUNTIME_INFO,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, RequestCode.GET_ALL_CONSUMER_OFFSET,
    RequestCode.GET_ALL_DELAY_OFFSET, RequestCode.GET_CONSUMER_RUNNING_INFO,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
    RequestCode.VIEW_BROKER_STATS_DATA, RequestCode.QUERY_DATA_VERSION,
    # Controller mode: an unsigned role notification is refused under aclEnable (a forged one
    # could send the broker after a fake master); the role then comes from the periodic
    # replica-info read (syncBrokerMetadataPeriod).
    RequestCode.GET_BROKER_EPOCH_CACHE, RequestCode.NOTIFY_BROKER_ROLE_CHANGED,
    # RocketMQ 5.x protocol basics
    RequestCode.GET_TOPIC_CONFIG, RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG,
    RequestCode.GET_ALL_MESSAGE_REQUEST_MODE,
    # 5.x timer (a slave syncs both)
    RequestCode.GET_TIMER_CHECK_POINT, RequestCode.GET_TIMER_METRICS,
    RequestCode.GET_BROKER_CONSUME_STATS, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER,
    RequestCode.GET_BROKER_HA_STATUS,
})

ADMIN_CODES = frozenset({
    RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.UPDATE_BROKER_CONFIG,
    RequestCode.GET_BROKER_CONFIG, RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RequestCode.DELETE_SUBSCRIPTIONGROUP,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, RequestCode.CONSUME_MESSAGE_DIRECTLY,
    RequestCode.SET_MESSAGE_REQUEST_MODE,   # 5.x
    RequestCode.DELETE_EXPIRED_COMMITLOG, RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE,
})

assert not (set(RESOURCE_CODES) & AUTHENTICATED_CODES or set(RESOURCE_CODES) & ADMIN_CODES
            or AUTHENTICATED_CODES & ADMIN_CODES), "a code has exactly one rule"


def rule_of(code: int) -> Rule:
    """The rule for request ``code`` (UNCLASSIFIED for codes not in the table)."""
    if code in RESOURCE_CODES:
        return Rule.RESOURCES
    if code in AUTHENTICATED_CODES:
        return Rule.AUTHENTICATED
    if code in ADMIN_CODES:
        return Rule.ADMIN
    return Rule.UNCLASSIFIED


# The NameServer under aclEnable (a pybroker extension: Java's NameServer checks nothing). Route
# reads stay open because clients without credentials must keep working. A broker's
# registration changes routes: it comes from an address of brokerRegistrationAllowedAddresses
# (Java 4.x brokers never sign it) or is signed by an admin account (a pybroker broker with
# innerClientAuthenticationCredentials, a Java 5.x broker with its AuthConfig credentials).
# Everything else -- the KV writes, WIPE_WRITE_PERM_OF_BROKER, DELETE_TOPIC_IN_NAMESRV and any
# code added later -- needs a signed admin account.
NAMESRV_OPEN_CODES = frozenset({
    RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.GET_BROKER_CLUSTER_INFO,
    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, RequestCode.GET_TOPICS_BY_CLUSTER,
    RequestCode.GET_KV_CONFIG, RequestCode.GET_KVLIST_BY_NAMESPACE,
    RequestCode.QUERY_DATA_VERSION,
})
NAMESRV_BROKER_CODES = frozenset({
    RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER, RequestCode.BROKER_HEARTBEAT,
})


def namesrv_rule_of(code: int) -> Rule:
    """The NameServer's rule for ``code``: OPEN for reads, BROKER for registration, else
    ADMIN."""
    if code in NAMESRV_OPEN_CODES:
        return Rule.OPEN
    return Rule.BROKER if code in NAMESRV_BROKER_CODES else Rule.ADMIN


def needed(request: RemotingCommand) -> list[Need]:
    """The topics and groups ``request`` names, with the permission each needs.
    ValueError when a body that names them cannot be read."""
    extractor = RESOURCE_CODES.get(request.code)
    return extractor(request) if extractor is not None else []
