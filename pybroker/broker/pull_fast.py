# What the pull fast path may do on its own: its (group, topic) table and its answer template.
"""The Python side of the pull fast path (docs/architecture/reads.md).

:mod:`pybroker._fast.pull_path` answers a PULL_MESSAGE without the Python handler only when the
handler (:mod:`pybroker.broker.pull`) would answer it FOUND with the very same records. This
module states that contract in two pieces, both derived from the Python path itself:

* :func:`fast_subscriptions` - the (group, topic) pairs whose checks in ``pull.process_pull``
  pass without doubt for a pull without the SUBSCRIPTION flag: the broker readable, the group
  known (as ``subscription_group`` finds it, auto-creation included) and allowed to consume,
  the topic known and readable, and the group's heartbeat subscription to it filtering by tag
  (``message_filter`` gives no per-record filter and refuses nothing). The C side checks the
  rest per request (the header parses as headers.py parses it, queue id below readQueueNums,
  subVersion not newer than the heartbeat's, no SUBSCRIPTION flag, not oneway) and answers
  only FOUND; every other pull goes to the handler.
* :func:`response_template` - the header of a FOUND answer to PULL_MESSAGE, made by the same
  ``create_response``, ``encode_header`` and JSON encoder as the handler's answer, with
  sentinels where suggestWhichBrokerId, nextBeginOffset, minOffset, maxOffset and opaque go,
  then cut at the sentinels. The C side fills them in, so a fast answer's header is byte for
  byte the handler's.
"""
from pybroker.broker.message_filter import FilterRefused, message_filter
from pybroker.config import BrokerRole
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response, encode_json_header
from pybroker.protocol.constants import Perm
from pybroker.protocol.headers import PULL_MESSAGE_RESPONSE, encode_header
from pybroker.store.status import GetStatus, pull_response

__all__ = ["fast_subscriptions", "response_template", "fast_pulls_enabled"]

# Sentinel values: distinct, and each written exactly once by the encoder.
_SENTINELS = (7_000_000_001, 7_000_000_002, 7_000_000_003, 7_000_000_004)
_OPAQUE = 2_000_000_003


def fast_pulls_enabled(config) -> bool:
    """Whether pulls may take the fast path at all: a master (a slave's answers differ:
    broker/slave_role.py), no ACL (its guard checks every request), the broker readable."""
    return (config.store.broker_role != BrokerRole.SLAVE and not config.broker.acl_enable
            and bool(config.broker.broker_permission & Perm.READ))


def fast_subscriptions(config, metadata) -> list[tuple]:
    """``[(group, topic, read_queue_nums, sub_version, tag_codes or None, broker_id,
    slowly_broker_id)]`` for :meth:`PullPath.set_subscriptions`, from what ``metadata`` (a
    MetadataReplica) holds now; empty when :func:`fast_pulls_enabled` is false."""
    if not fast_pulls_enabled(config):
        return []
    property_filter = config.broker.enable_property_filter
    entries = []
    for group, subscriptions in metadata.consumer_subscriptions().items():
        group_config = metadata.subscription_group(group)
        if group_config is None or not group_config.consume_enable:
            continue
        for topic, subscription in subscriptions.items():
            topic_config = metadata.topic_config(topic)
            if topic_config is None or not topic_config.perm & Perm.READ:
                continue
            try:
                pull_filter = message_filter(subscription, False, property_filter)
            except FilterRefused:
                continue
            if pull_filter.record_filter is not None:
                continue          # SQL92: a per-record filter, the handler's
            codes = None if pull_filter.tag_codes is None else sorted(pull_filter.tag_codes)
            entries.append((group, topic, topic_config.read_queue_nums,
                            subscription.sub_version, codes, group_config.broker_id,
                            group_config.which_broker_when_consume_slowly))
    return entries


def response_template() -> tuple[bytes, ...]:
    """The 6 pieces of a FOUND PULL_MESSAGE answer's JSON header: ``piece0 suggest piece1
    nextBeginOffset piece2 minOffset piece3 maxOffset piece4 opaque piece5`` (the handler's
    fields, pull._read_store)."""
    code, _ = pull_response(GetStatus.FOUND, 0)
    assert code == ResponseCode.SUCCESS
    suggest, next_offset, min_offset, max_offset = _SENTINELS
    fields = encode_header(PULL_MESSAGE_RESPONSE, {
        "suggest_which_broker_id": suggest, "next_begin_offset": next_offset,
        "min_offset": min_offset, "max_offset": max_offset})
    request = RemotingCommand(RequestCode.PULL_MESSAGE, opaque=_OPAQUE)
    header = encode_json_header(create_response(request, code, GetStatus.FOUND.name, fields))
    pieces, rest = [], header
    for marker in [*(str(value).encode() for value in _SENTINELS), str(_OPAQUE).encode()]:
        if rest.count(marker) != 1:
            raise ValueError(f"pull answer template: marker {marker!r} is not unique")
        before, _, rest = rest.partition(marker)
        pieces.append(before)
    pieces.append(rest)
    return tuple(pieces)
