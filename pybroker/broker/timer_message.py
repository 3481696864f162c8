# Timer messages at put time (Java 5.x HookUtils.handleScheduleMessage) and recall handles.
"""The put-time rule of 5.x timer messages, applied to every put Java's store hooks see (a
send, a send-back, a transaction commit; broker/send.py :func:`redirect_scheduled`), and the
recall handle of a parked message.

For a message of transaction type NOT or COMMIT that is not already on ``rmq_sys_wheel_timer``:

1. A delay level wins: with ``DELAY`` > 0, ``TIMER_DELIVER_MS``, ``TIMER_DELAY_SEC`` and
   ``TIMER_DELAY_MS`` are removed and the level applies (SCHEDULE_TOPIC_XXXX).
2. A message already carrying ``TIMER_OUT_MS`` (one the timer delivered) is not a timer
   message again.
3. Otherwise any of the three properties makes it one; refused with WHEEL_TIMER_NOT_ENABLE when
   ``timerWheelEnable=false``. The delivery time is now + ``TIMER_DELAY_SEC`` x 1000, else now +
   ``TIMER_DELAY_MS``, else ``TIMER_DELIVER_MS`` (Java longs, wrapping as Java's do); a value
   that is not a long is WHEEL_TIMER_MSG_ILLEGAL.
4. A delivery time not after now: the message is stored as it is (delivered at once), unless it
   is a cancel mark (``TIMER_DEL_UNIQKEY``): WHEEL_TIMER_MSG_ILLEGAL.
5. Later than now + ``timerMaxDelaySec``: WHEEL_TIMER_MSG_ILLEGAL. Otherwise the slot time is
   the delivery time rounded down to ``timerPrecisionMs`` (one precision less when it is a
   multiple): the timer delivers a slot once the next one begins, so never early. A slot over
   ``timerCongestNumEachSlot`` refuses at random, beyond twice always
   (WHEEL_TIMER_FLOW_CONTROL). The message goes to ``rmq_sys_wheel_timer`` queue 0 with
   ``TIMER_OUT_MS`` = the slot time, ``REAL_TOPIC`` and ``REAL_QID``.

A recall handle (SEND answers carry it for a parked message, RECALL_MESSAGE takes it back) is
URL-safe Base64 with padding of ``"v1 <topic> <brokerName> <TIMER_OUT_MS + 1> <UNIQ_KEY>"``.
"""
import base64
import dataclasses
import random
from collections.abc import Callable

from pybroker.protocol.constants import Property, SystemTopic
from pybroker.protocol.pop import parse_java_long

__all__ = ["TIMER_TOPIC", "CONGEST_NEVER", "TimerRules", "TimerRefused", "redirect_timer",
           "is_timer_message",
           "build_recall_handle", "parse_recall_handle", "RecallHandle", "delete_key",
           "deliver_ms", "parked_slot", "slot_of",
           "TIMER_PROPERTIES"]

TIMER_TOPIC = SystemTopic.WHEEL_TIMER
TIMER_PROPERTIES = (Property.TIMER_DELIVER_MS, Property.TIMER_DELAY_SEC,
                    Property.TIMER_DELAY_MS)
RECALL_HANDLE_VERSION = "v1"
# timerCongestNumEachSlot's default, Integer.MAX_VALUE: no slot can hold more, nothing refuses.
CONGEST_NEVER = (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_random = random.Random()


class TimerRefused(Exception):
    """A put-time refusal; ``status`` is the PutStatus name (WHEEL_TIMER_*)."""

    def __init__(self, status: str):
        super().__init__(status)
        self.status = status


@dataclasses.dataclass(frozen=True)
class TimerRules:
    """What the put-time rule needs: the store's timer settings and, when
    ``timerCongestNumEachSlot`` can be exceeded, the parked count of a slot time (the wheel,
    read-only)."""
    wheel_enable: bool = True
    max_delay_sec: int = 3 * 24 * 3600
    precision_ms: int = 1000
    congest_num_each_slot: int = CONGEST_NEVER
    slot_num: Callable[[int], int] | None = None

    @classmethod
    def of(cls, store, slot_num: Callable[[int], int] | None = None) -> "TimerRules":
        """The rules of a StoreConfig."""
        return cls(store.timer_wheel_enable, store.timer_max_delay_sec,
                   store.timer_precision_effective_ms, store.timer_congest_num_each_slot,
                   slot_num)


def _wrap(value: int) -> int:
    """A Java long's two's-complement wrap of ``value``."""
    return (value + (1 << 63)) % (1 << 64) - (1 << 63)


def is_timer_message(properties: dict[str, str]) -> bool:
    """Steps 1-3's question (Java checkIfTimerMessage); with a delay level it removes the three
    timer properties from ``properties`` and answers False."""
    level = properties.get(Property.DELAY_TIME_LEVEL)
    if level is not None and level.lstrip("-").isdigit() and int(level) > 0:
        for name in TIMER_PROPERTIES:
            properties.pop(name, None)
        return False
    if Property.TIMER_OUT_MS in properties:
        return False
    for name in TIMER_PROPERTIES:       # a loop, not any(): no generator per put
        if name in properties:
            return True
    return False


def deliver_ms(properties: dict[str, str], now_ms: int) -> int:
    """The delivery time (ms) the properties ask for at ``now_ms``; TimerRefused when one is
    not a long. The timer reads a parked message's own time with it at its store time
    (broker/timer_own.py), which is at or after the clock this rule ran at."""
    try:
        if Property.TIMER_DELAY_SEC in properties:
            delay_s = parse_java_long(properties[Property.TIMER_DELAY_SEC])
            return _wrap(now_ms + _wrap(delay_s * 1000))
        if Property.TIMER_DELAY_MS in properties:
            return _wrap(now_ms + parse_java_long(properties[Property.TIMER_DELAY_MS]))
        return parse_java_long(properties[Property.TIMER_DELIVER_MS])
    except ValueError:
        raise TimerRefused("WHEEL_TIMER_MSG_ILLEGAL") from None


def _congested(rules: TimerRules, slot_ms: int) -> bool:
    """Java isReject: refuse always past twice the limit, at random between."""
    limit = rules.congest_num_each_slot
    if rules.slot_num is None or limit >= CONGEST_NEVER:
        return False            # a slot cannot hold more than Integer.MAX_VALUE
    congest = rules.slot_num(slot_ms)
    if congest <= limit:
        return False
    if congest >= limit * 2:
        return True
    return _random.randrange(1000) > 1000 * (congest - limit) / (limit + 0.1)


def redirect_timer(topic: str, queue_id: int, properties: dict[str, str], rules: TimerRules,
                   now_ms: int) -> tuple[str, int]:
    """Steps 1-5 for a NOT/COMMIT-type message (the caller checks the type): the (topic,
    queue id) to store under; ``properties`` changed in place. TimerRefused with the status
    name when refused."""
    if topic == TIMER_TOPIC or not is_timer_message(properties):
        return topic, queue_id
    # The switch is checked before the value is read (Java's order): no value is read off.
    due_ms = deliver_ms(properties, now_ms) if rules.wheel_enable else 0
    slot_ms = parked_slot(due_ms, rules, now_ms, Property.TIMER_DEL_UNIQKEY in properties)
    if slot_ms is None:
        return topic, queue_id
    properties[Property.TIMER_OUT_MS] = str(slot_ms)
    properties[Property.REAL_TOPIC] = topic
    properties[Property.REAL_QUEUE_ID] = str(queue_id)
    return TIMER_TOPIC, 0


def parked_slot(due_ms: int, rules: TimerRules, now_ms: int,
                cancel_mark: bool = False) -> int | None:
    """Steps 3-5 for a timer message due at ``due_ms``: the slot it is parked in, or None when
    it is due already (stored as it is). TimerRefused with the status name when refused
    (``cancel_mark``: it carries TIMER_DEL_UNIQKEY). A caller that made the delivery time
    itself (a revive record, broker/pop/revive_log.py) gives it here without writing and
    reading it back as a property: a time outside a Java long is WHEEL_TIMER_MSG_ILLEGAL, as
    :func:`deliver_ms` finds it."""
    if not rules.wheel_enable:
        raise TimerRefused("WHEEL_TIMER_NOT_ENABLE")
    if due_ms <= now_ms:
        if cancel_mark or due_ms < _LONG_MIN:
            raise TimerRefused("WHEEL_TIMER_MSG_ILLEGAL")
        return None
    if due_ms - now_ms > rules.max_delay_sec * 1000 or due_ms > _LONG_MAX:
        raise TimerRefused("WHEEL_TIMER_MSG_ILLEGAL")
    slot_ms = slot_of(due_ms, rules.precision_ms)
    if _congested(rules, slot_ms):
        raise TimerRefused("WHEEL_TIMER_FLOW_CONTROL")
    return slot_ms


def slot_of(due_ms: int, precision_ms: int) -> int:
    """The slot a message due at ``due_ms`` is parked in (step 5): the due time rounded down
    to the precision, one precision less when it is a multiple; so ``slot < due <= slot +
    precision``."""
    if due_ms % precision_ms == 0:
        return due_ms - precision_ms
    return due_ms // precision_ms * precision_ms


def delete_key(real_topic: str, uniq_key: str) -> str:
    """The TIMER_DEL_UNIQKEY value that cancels ``uniq_key`` of ``real_topic`` (Java
    buildDeleteKey)."""
    return f"{real_topic}+{uniq_key}"


@dataclasses.dataclass(frozen=True)
class RecallHandle:
    """A decoded v1 recall handle; ``timestamp`` is kept as text (Java compares it parsed)."""
    topic: str
    broker_name: str
    timestamp: str
    message_id: str


def build_recall_handle(topic: str, broker_name: str, timer_out_ms: int, uniq_key: str) -> str:
    """The handle of a message parked for slot ``timer_out_ms`` (its time + 1 ms: the floor
    of a recall's delivery time then lands in the same slot)."""
    raw = " ".join((RECALL_HANDLE_VERSION, topic, broker_name, str(timer_out_ms + 1), uniq_key))
    return base64.urlsafe_b64encode(raw.encode()).decode("ascii")


def parse_recall_handle(handle: str | None) -> RecallHandle:
    """Decode a handle; ValueError("recall handle is invalid") as Java's DecoderException."""
    if not handle:
        raise ValueError("recall handle is invalid")
    try:
        raw = base64.urlsafe_b64decode(_padded(handle)).decode("utf-8", "replace")
    except (ValueError, TypeError):
        raise ValueError("recall handle is invalid") from None
    items = raw.split(" ")
    if items[0] != RECALL_HANDLE_VERSION or len(items) < 5:
        raise ValueError("recall handle is invalid")
    return RecallHandle(items[1], items[2], items[3], items[4])


def _padded(handle: str) -> bytes:
    """Java's URL decoder accepts a handle with or without its '=' padding; Python wants it."""
    data = handle.encode("ascii")
    if any(character not in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_="
           for character in data):
        raise ValueError("not URL-safe Base64")
    return data + b"=" * (-len(data) % 4)
