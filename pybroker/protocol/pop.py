# 5.x POP wire facts: retry topic names, receipt handles (extraInfo) and the answer's offset infos.
"""What a POP answer and its acknowledgements carry (Java KeyBuilder, ExtraInfoUtil).

* **Retry topics.** Unacknowledged popped messages come back on ``%RETRY%<group>_<topic>``
  (V1) or, with ``enableRetryTopicV2``, ``%RETRY%<group>+<topic>`` (V2). A topic's *retry
  flag* says which: ``"0"`` normal, ``"1"`` V1 (any ``%RETRY%`` topic that is not V2), ``"2"``.
* **extraInfo** (the receipt handle, property ``POP_CK`` of a popped message): space-separated
  ``ckQueueOffset popTime invisibleTime reviveQid retryFlag brokerName queueId [queueOffset]``.
  ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME send it back.
* **Offset infos** of the POP answer, one ``;``-separated entry per popped queue:
  ``startOffsetInfo`` ``retryFlag queueId startOffset``, ``msgOffsetInfo``
  ``retryFlag queueId o1,o2,...``, and for an order POP ``orderCountInfo``, entries
  ``retryFlag qo<queueId>%<offset> count`` per message consumed before plus
  ``retryFlag queueId minCount`` per queue.

Builders return the text Java's broker sends; parsers raise ValueError where Java throws.
"""
from typing import NamedTuple

from pybroker.protocol.constants import KEY_SEPARATOR, RETRY_GROUP_TOPIC_PREFIX, PopConstants

__all__ = ["retry_topic", "retry_topic_v1", "retry_topic_v2", "is_retry_topic_v2",
           "normal_topic_of", "normal_topic_of_retry", "retry_flag", "real_topic",
           "polling_key", "revive_topic", "ExtraInfo", "build_extra_info", "parse_extra_info",
           "split_extra_info", "HandleError", "HandleNumberError", "CLIENT_READS", "ACK_READS",
           "CHANGE_READS",
           "OffsetInfos", "parse_start_offset_info", "parse_msg_offset_info",
           "parse_order_count_info", "queue_offset_key", "RETRY_FLAG_NORMAL",
           "RETRY_FLAG_V1", "RETRY_FLAG_V2"]

RETRY_FLAG_NORMAL = "0"
RETRY_FLAG_V1 = "1"
RETRY_FLAG_V2 = "2"
_QUEUE_OFFSET_PREFIX = "qo"
_ENTRY_SEPARATOR = ";"


# --- names ---------------------------------------------------------------------------------------

def retry_topic_v1(topic: str, group: str) -> str:
    """``%RETRY%<group>_<topic>``."""
    return RETRY_GROUP_TOPIC_PREFIX + group + PopConstants.RETRY_SEPARATOR_V1 + topic


def retry_topic_v2(topic: str, group: str) -> str:
    """``%RETRY%<group>+<topic>``."""
    return RETRY_GROUP_TOPIC_PREFIX + group + PopConstants.RETRY_SEPARATOR_V2 + topic


def retry_topic(topic: str, group: str, v2: bool) -> str:
    """The POP retry topic of ``group`` on ``topic`` (``v2``: enableRetryTopicV2)."""
    return retry_topic_v2(topic, group) if v2 else retry_topic_v1(topic, group)


def is_retry_topic_v2(topic: str) -> bool:
    """A ``%RETRY%`` topic with a ``+`` in it (Java KeyBuilder.isPopRetryTopicV2)."""
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and PopConstants.RETRY_SEPARATOR_V2 in topic


def normal_topic_of(topic: str, group: str) -> str:
    """The topic a check-point's topic (normal or one of ``group``'s retry topics) came from
    (Java KeyBuilder.parseNormalTopic(topic, cid))."""
    if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return topic
    v2_prefix = RETRY_GROUP_TOPIC_PREFIX + group + PopConstants.RETRY_SEPARATOR_V2
    if topic.startswith(v2_prefix):
        return topic[len(v2_prefix):]
    return topic[len(RETRY_GROUP_TOPIC_PREFIX + group + PopConstants.RETRY_SEPARATOR_V1):]


def normal_topic_of_retry(topic: str) -> str:
    """The normal topic of a V2 retry topic (its part after ``+``); any other topic as is
    (Java KeyBuilder.parseNormalTopic(retryTopic): V1 names cannot be split reliably)."""
    if is_retry_topic_v2(topic):
        parts = topic.split(PopConstants.RETRY_SEPARATOR_V2)
        if len(parts) == 2:
            return parts[1]
    return topic


def retry_flag(topic: str) -> str:
    """``"2"`` for a V2 retry topic, ``"1"`` for any other ``%RETRY%`` topic, else ``"0"``."""
    if is_retry_topic_v2(topic):
        return RETRY_FLAG_V2
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return RETRY_FLAG_V1
    return RETRY_FLAG_NORMAL


def real_topic(topic: str, group: str, flag: str) -> str:
    """The topic a receipt handle names: ``topic`` itself or its retry topic by ``flag``
    (ValueError for another flag, as Java's ExtraInfoUtil.getRealTopic)."""
    if flag == RETRY_FLAG_NORMAL:
        return topic
    if flag == RETRY_FLAG_V1:
        return retry_topic_v1(topic, group)
    if flag == RETRY_FLAG_V2:
        return retry_topic_v2(topic, group)
    raise ValueError("getRetry fail, format is wrong")


def polling_key(topic: str, group: str, queue_id: int) -> str:
    """``topic@group@queueId`` (Java KeyBuilder.buildPollingKey, the queue lock's key too)."""
    return f"{topic}{PopConstants.SPLIT}{group}{PopConstants.SPLIT}{queue_id}"


def revive_topic(cluster_name: str) -> str:
    """``rmq_sys_REVIVE_LOG_<cluster>``: where check-points and acks are written."""
    return PopConstants.REVIVE_TOPIC_PREFIX + cluster_name


# --- receipt handles ------------------------------------------------------------------------------

class ExtraInfo(NamedTuple):
    """A parsed receipt handle (``POP_CK``). ``queue_offset`` is None in the 7-field form."""
    ck_queue_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    retry: str
    broker_name: str
    queue_id: int
    queue_offset: int | None

    @property
    def is_order(self) -> bool:
        """An order POP's handle (no check-point: revive queue 999)."""
        return self.revive_qid == PopConstants.ORDER_REVIVE_QUEUE


def build_extra_info(ck_queue_offset: int, pop_time: int, invisible_time: int, revive_qid: int,
                     topic: str, broker_name: str, queue_id: int,
                     queue_offset: int | None = None) -> str:
    """The receipt handle of a message popped from ``topic`` (its retry flag is derived)."""
    fields = [str(ck_queue_offset), str(pop_time), str(invisible_time), str(revive_qid),
              retry_flag(topic), broker_name, str(queue_id)]
    if queue_offset is not None:
        fields.append(str(queue_offset))
    return KEY_SEPARATOR.join(fields)


_LONG_BOUND = 1 << 63
_INT_BOUND = 1 << 31


def _java_long(text: str, bound: int = _LONG_BOUND) -> int:
    # Long.valueOf (Integer.valueOf with bound _INT_BOUND): optional sign and ASCII digits
    # only, the value in [-bound, bound).
    body = text[1:] if text[:1] in "+-" else text
    if not body or not body.isascii() or not body.isdigit():
        raise ValueError(f'For input string: "{text}"')
    value = int(text)
    if not -bound <= value < bound:
        raise ValueError(f'For input string: "{text}"')
    return value


def parse_java_long(text: str) -> int:
    """Long.parseLong (ValueError with Java's NumberFormatException message)."""
    return _java_long(text)


def _java_int(text: str) -> int:
    return _java_long(text, _INT_BOUND)


class HandleError(ValueError):
    """A receipt handle Java's ExtraInfoUtil refuses. ``str()`` is the exception's message;
    ``java_text`` is the exception as the Java broker prints it in a remark."""

    java_class = "java.lang.IllegalArgumentException"

    @property
    def java_text(self) -> str:
        return f"{self.java_class}: {self}"


class HandleNumberError(HandleError):
    """A field Long.valueOf / Integer.valueOf refuses."""

    java_class = "java.lang.NumberFormatException"


# Java's ExtraInfoUtil getters: the field each reads and how. A Java processor calls them in its
# own order, and the first that fails names the exception (its remark): the reads below.
_GETTERS = {"getCkQueueOffset": (0, _java_long), "getPopTime": (1, _java_long),
            "getInvisibleTime": (2, _java_long), "getReviveQid": (3, _java_int),
            "getRetry": (4, None), "getBrokerName": (5, None), "getQueueId": (6, _java_int),
            "getQueueOffset": (7, _java_long)}
#: A client's reads (processPopResponse's handle, 7 or 8 fields): every field in order.
CLIENT_READS = ("getCkQueueOffset", "getPopTime", "getInvisibleTime", "getReviveQid",
                "getRetry", "getBrokerName", "getQueueId")
#: AckMessageProcessor.appendAck's order (a single ack).
ACK_READS = ("getBrokerName", "getReviveQid", "getCkQueueOffset", "getPopTime",
             "getInvisibleTime", "getRetry")
#: ChangeInvisibleTimeProcessor's order (isOrder first, then the check-point's and the ack's).
CHANGE_READS = ("getReviveQid", "getBrokerName", "getCkQueueOffset", "getPopTime",
                "getInvisibleTime", "getRetry")


def split_extra_info(extra_info: str) -> list[str]:
    """ExtraInfoUtil.split: Java's String.split, which drops trailing empty fields."""
    parts = extra_info.split(KEY_SEPARATOR)
    while parts and not parts[-1]:
        parts.pop()
    return parts


def parse_extra_info(extra_info: str | None, reads: tuple[str, ...] = CLIENT_READS) -> ExtraInfo:
    """Parse a receipt handle reading its fields as Java does, getter by getter in ``reads``'
    order: HandleError (HandleNumberError) with Java's message at the first that fails.
    Fields no getter of ``reads`` names are not looked at (queue id 0, queue offset None)."""
    if extra_info is None:
        raise HandleError("split extraInfo is null")
    parts = split_extra_info(extra_info)
    values: list = [0, 0, 0, 0, "", "", 0, None]
    for name in reads:
        index, parse = _GETTERS[name]
        if len(parts) <= index:
            raise HandleError(f"{name} fail, extraInfoStrs length {len(parts)}")
        if parse is None:
            values[index] = parts[index]
            continue
        try:
            values[index] = parse(parts[index])
        except ValueError as error:
            raise HandleNumberError(str(error)) from None
    if "getQueueId" in reads and "getQueueOffset" not in reads and len(parts) > 7:
        # processPopResponse's 8-field handle
        try:
            values[7] = _java_long(parts[7])
        except ValueError as error:
            raise HandleNumberError(str(error)) from None
    return ExtraInfo(*values)


# --- the answer's offset infos --------------------------------------------------------------------

class OffsetInfos:
    """The three ``;``-joined texts of one POP answer, appended queue by queue."""

    __slots__ = ("start", "messages", "order_counts")

    def __init__(self, order: bool):
        self.start: list[str] = []
        self.messages: list[str] = []
        self.order_counts: list[str] | None = [] if order else None

    def add_queue(self, topic: str, queue_id: int, start_offset: int,
                  queue_offsets: list[int]) -> None:
        """A popped queue: where its check-point starts and its messages' queue offsets."""
        flag = retry_flag(topic)
        self.start.append(f"{flag}{KEY_SEPARATOR}{queue_id}{KEY_SEPARATOR}{start_offset}")
        self.messages.append(f"{flag}{KEY_SEPARATOR}{queue_id}{KEY_SEPARATOR}"
                             + ",".join(map(str, queue_offsets)))

    def add_order_count(self, topic: str, queue_id: int, queue_offset: int | None,
                        count: int) -> None:
        """A consumed-count entry: per message (``queue_offset``) or per queue (None)."""
        assert self.order_counts is not None, "an order POP's answer only"
        key = str(queue_id) if queue_offset is None else \
            f"{_QUEUE_OFFSET_PREFIX}{queue_id}%{queue_offset}"
        self.order_counts.append(f"{retry_flag(topic)}{KEY_SEPARATOR}{key}{KEY_SEPARATOR}{count}")

    def texts(self) -> tuple[str, str, str | None]:
        """(startOffsetInfo, msgOffsetInfo, orderCountInfo or None)."""
        order = None if self.order_counts is None else _ENTRY_SEPARATOR.join(self.order_counts)
        return (_ENTRY_SEPARATOR.join(self.start), _ENTRY_SEPARATOR.join(self.messages), order)


def queue_offset_key(retry: str, queue_id: int, queue_offset: int) -> str:
    """The orderCountInfo map key of one message (Java getQueueOffsetMapKey)."""
    return f"{retry}@{_QUEUE_OFFSET_PREFIX}{queue_id}%{queue_offset}"


def _entries(text: str | None, what: str) -> list[list[str]]:
    if not text:
        return []
    entries = []
    for entry in text.split(_ENTRY_SEPARATOR):
        fields = entry.split(KEY_SEPARATOR)
        if len(fields) != 3:
            raise ValueError(f"parse {what} error, {text}")
        entries.append(fields)
    return entries


def _keyed(text: str | None, what: str, convert) -> dict:
    table: dict = {}
    for flag, queue, value in _entries(text, what):
        key = f"{flag}@{queue}"
        if key in table:
            raise ValueError(f"parse {what} error, duplicate, {text}")
        table[key] = convert(value)
    return table


def parse_start_offset_info(text: str | None) -> dict[str, int]:
    """``{"<retryFlag>@<queueId>": startOffset}``."""
    return _keyed(text, "startOffsetInfo", _java_long)


def parse_msg_offset_info(text: str | None) -> dict[str, list[int]]:
    """``{"<retryFlag>@<queueId>": [queue offsets]}``."""
    return _keyed(text, "msgOffsetMap", lambda value: [_java_long(part)
                                                       for part in value.split(",")])


def parse_order_count_info(text: str | None) -> dict[str, int]:
    """``{"<retryFlag>@<queueId>" or "<retryFlag>@qo<queueId>%<offset>": count}``."""
    return _keyed(text, "orderCountInfo", _java_int)
