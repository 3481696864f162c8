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
  only FOUND; every other pull goes to the handler. A pull with the SUBSCRIPTION flag
  brings its own expression instead of the heartbeat's: :func:`request_tag_codes` says
  whether that one filters by tag only (the handler's ``request_subscription`` and
  ``message_filter``), and the subVersion is then not compared (nor does the handler); its
  (group, topic) need no heartbeat subscription: :func:`own_expression_entry` makes the
  entry of a pair the table lacks from the same group and topic checks.
* :func:`response_template` - the header of a FOUND answer to PULL_MESSAGE, made by the same
  ``create_response``, ``answer_fields`` and JSON encoder as the handler's answer, with
  sentinels where suggestWhichBrokerId, nextBeginOffset, minOffset, maxOffset and opaque go,
  then cut at the sentinels. The C side fills them in, so a fast answer's header is byte for
  byte the handler's. A LITE_PULL_MESSAGE (361, Java 5.x's DefaultLitePullConsumer) answer
  also names the topic's and the group's sysFlag: each (group, topic) of the table carries its
  own template for 361, or None while litePullMessageEnable is off (the handler refuses).
"""
import functools

from pybroker.broker.message_filter import FilterRefused, message_filter
from pybroker.broker.pull import answer_fields, request_subscription
from pybroker.config import BrokerRole
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand, create_response, encode_json_header
from pybroker.protocol.constants import Perm
from pybroker.protocol.headers import PULL_MESSAGE_REQUEST
from pybroker.store.status import GetStatus, pull_response

__all__ = ["fast_subscriptions", "own_expression_entry", "response_template",
           "fast_pulls_enabled", "request_tag_codes"]

_SUBSCRIPTION_FIELD = PULL_MESSAGE_REQUEST.field("subscription")
_EXPRESSION_TYPE_FIELD = PULL_MESSAGE_REQUEST.field("expression_type")
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
    slowly_broker_id, lite_template or None)]`` for :meth:`PullPath.set_subscriptions`, from
    what ``metadata`` (a MetadataReplica) holds now; empty when :func:`fast_pulls_enabled` is
    false."""
    if not fast_pulls_enabled(config):
        return []
    property_filter = config.broker.enable_property_filter
    entries = []
    for group, subscriptions in metadata.consumer_subscriptions().items():
        for topic, subscription in subscriptions.items():
            checked = _group_and_topic(config, metadata, group, topic)
            if checked is None:
                continue
            try:
                pull_filter = message_filter(subscription, False, property_filter)
            except FilterRefused:
                continue
            if pull_filter.record_filter is not None:
                continue          # SQL92: a per-record filter, the handler's
            codes = None if pull_filter.tag_codes is None else sorted(pull_filter.tag_codes)
            read_queue_nums, broker_id, slowly, lite_template = checked
            entries.append((group, topic, read_queue_nums, subscription.sub_version, codes,
                            broker_id, slowly, lite_template))
    return entries


def own_expression_entry(config, metadata, group: str, topic: str) -> tuple | None:
    """An entry as :func:`fast_subscriptions` makes them, for pulls with the SUBSCRIPTION
    flag only (their own expression filters; no heartbeat subscription is needed, nor its
    subVersion compared): the (group, topic) checks of ``process_pull`` pass, or None."""
    if not fast_pulls_enabled(config):
        return None
    checked = _group_and_topic(config, metadata, group, topic)
    if checked is None:
        return None
    read_queue_nums, broker_id, slowly, lite_template = checked
    return group, topic, read_queue_nums, 0, None, broker_id, slowly, lite_template


def _group_and_topic(config, metadata, group: str, topic: str) -> tuple | None:
    """``(read_queue_nums, broker_id, slowly_broker_id, lite_template or None)`` when the
    group (as ``subscription_group`` finds it) may consume and the topic is readable."""
    group_config = metadata.subscription_group(group)
    if group_config is None or not group_config.consume_enable:
        return None
    topic_config = metadata.topic_config(topic)
    if topic_config is None or not topic_config.perm & Perm.READ:
        return None
    lite_template = None
    if config.broker.lite_pull_message_enable:
        lite_template = _lite_template(topic_config.topic_sys_flag, group_config.group_sys_flag)
    return (topic_config.read_queue_nums, group_config.broker_id,
            group_config.which_broker_when_consume_slowly, lite_template)


@functools.lru_cache(maxsize=64)
def _lite_template(topic_sys_flag: int, group_sys_flag: int) -> tuple[bytes, ...]:
    return response_template((topic_sys_flag, group_sys_flag))


def request_tag_codes(config, expression: str | None,
                      expression_type: str | None) -> tuple[bool, list[int] | None]:
    """For a pull with the SUBSCRIPTION flag: ``(True, tag codes or None for all)`` when its
    own expression filters by tag and the handler accepts it, else ``(False, None)`` (a
    parse failure, a refusal, or SQL92's per-record filter: the handler's). ``expression``
    and ``expression_type`` as the frame has them (None: absent); an empty one is absent and
    an absent one its field's default, as the handler's header parse reads them."""
    expression = expression or _SUBSCRIPTION_FIELD.default
    expression_type = expression_type or _EXPRESSION_TYPE_FIELD.default
    try:
        subscription = request_subscription("", expression, expression_type, 0)
        pull_filter = message_filter(subscription, True, config.broker.enable_property_filter)
    except (ValueError, FilterRefused):
        return False, None
    if pull_filter.record_filter is not None:
        return False, None
    return True, None if pull_filter.tag_codes is None else sorted(pull_filter.tag_codes)


def response_template(lite_flags: tuple[int, int] | None = None) -> tuple[bytes, ...]:
    """The 6 pieces of a FOUND PULL_MESSAGE answer's JSON header: ``piece0 suggest piece1
    nextBeginOffset piece2 minOffset piece3 maxOffset piece4 opaque piece5`` (the handler's
    fields, pull._read_store); with ``lite_flags`` (topicSysFlag, groupSysFlag) those of a
    LITE_PULL_MESSAGE answer."""
    code, _ = pull_response(GetStatus.FOUND, 0)
    assert code == ResponseCode.SUCCESS
    request_code = RequestCode.PULL_MESSAGE if lite_flags is None else \
        RequestCode.LITE_PULL_MESSAGE
    topic_sys_flag, group_sys_flag = lite_flags or (0, 0)
    fields = answer_fields(request_code, *_SENTINELS, topic_sys_flag, group_sys_flag)
    request = RemotingCommand(request_code, opaque=_OPAQUE)
    header = encode_json_header(create_response(request, code, GetStatus.FOUND.name, fields))
    pieces, rest = [], header
    for marker in [*(str(value).encode() for value in _SENTINELS), str(_OPAQUE).encode()]:
        if rest.count(marker) != 1:
            raise ValueError(f"pull answer template: marker {marker!r} is not unique")
        before, _, rest = rest.partition(marker)
        pieces.append(before)
    pieces.append(rest)
    return tuple(pieces)
