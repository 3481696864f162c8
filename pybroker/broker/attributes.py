# Topic and subscription-group attributes of RocketMQ 5.x: the attributes Java knows, the
# "+key=value,-key" modification syntax and the rules for applying one.
"""Attributes (RocketMQ 5.x ``TopicAttributes``, ``SubscriptionGroupAttributes``,
``AttributeParser``, ``AttributeUtil``; written from their behaviour, checked against the
Java 5.3.3 broker by ``tests/compat/test_5x_basics.py``).

A topic's attributes are a string map stored unsigned in ``topics.json``
(``{"message.type": "FIFO"}``). UPDATE_AND_CREATE_TOPIC carries a *modification* in its
``attributes`` header field: ``+key=value`` adds or changes a key, ``-key`` removes one
(:func:`parse_modification`). :func:`apply_modification` applies it to the current map:

* creating a topic accepts only ``+`` keys;
* a key must be one of the table's attributes; its value must pass the attribute's check;
* an attribute that is not *changeable* can only be given when the topic is created;
* removing a key the topic does not have is refused.

Refusals raise :class:`AttributeRefused` with Java's message (the broker answers
SYSTEM_ERROR with it). Where several keys are wrong, Java reports the first in the iteration
order of its hash maps; :func:`pybroker.filter.java_lang.put_order` gives the same order, so
the same key is named.

Subscription groups have no attribute in 5.3.3 (an empty table): any key is refused.
"""
import dataclasses

from pybroker.filter.java_lang import JavaError, guava_set_order, parse_long, put_order

__all__ = ["AttributeRefused", "Attribute", "TOPIC_ATTRIBUTES", "GROUP_ATTRIBUTES",
           "MESSAGE_TYPE", "TopicMessageType", "parse_modification", "apply_modification"]

_ADD = "+"
_DELETE = "-"
_SEPARATOR = ","
_EQUALS = "="


class AttributeRefused(ValueError):
    """A modification Java refuses; ``remark`` is its message."""

    def __init__(self, remark: str):
        super().__init__(remark)
        self.remark = remark


class TopicMessageType:
    """Values of the ``message.type`` attribute (Java ``TopicMessageType``)."""
    UNSPECIFIED = "UNSPECIFIED"
    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    MIXED = "MIXED"
    ALL = (UNSPECIFIED, NORMAL, FIFO, DELAY, TRANSACTION, MIXED)


@dataclasses.dataclass(frozen=True)
class Attribute:
    """One attribute: an enumeration (``values``) or a long range (``low``..``high``)."""
    name: str
    changeable: bool
    default: str
    values: tuple[str, ...] = ()
    low: int = 0
    high: int = 0

    def verify(self, value: str) -> None:
        """Raise AttributeRefused unless ``value`` is allowed."""
        if self.values:
            if value not in self.values:
                # Java prints its HashSet (built by Guava's Sets.newHashSet) in hash order.
                shown = ", ".join(guava_set_order(list(self.values)))
                raise AttributeRefused(f"value is not in set: [{shown}]")
            return
        try:
            number = parse_long(value)
        except JavaError as error:
            raise AttributeRefused(str(error.message)) from None
        if not self.low <= number <= self.high:
            raise AttributeRefused(f"value is not in range({self.low}, {self.high})")


MESSAGE_TYPE = Attribute("message.type", True, TopicMessageType.NORMAL, TopicMessageType.ALL)
QUEUE_TYPE = Attribute("queue.type", False, "SimpleCQ", ("BatchCQ", "SimpleCQ"))
CLEANUP_POLICY = Attribute("cleanup.policy", False, "DELETE", ("DELETE", "COMPACTION"))
RESERVE_TIME = Attribute("reserve.time", True, "-1", low=-1, high=(1 << 63) - 1)

TOPIC_ATTRIBUTES: dict[str, Attribute] = {
    attribute.name: attribute
    for attribute in (QUEUE_TYPE, CLEANUP_POLICY, MESSAGE_TYPE, RESERVE_TIME)}
GROUP_ATTRIBUTES: dict[str, Attribute] = {}


def _java_split(text: str, separator: str) -> list[str]:
    # String.split with a one-character literal: no match gives the text itself; otherwise
    # the pieces without the trailing empty ones.
    if separator not in text:
        return [text]
    pieces = text.split(separator)
    while pieces and pieces[-1] == "":
        pieces.pop()
    return pieces


def _index_error(index: int, length: int) -> AttributeRefused:
    # Java reads pieces[0] / pieces[1] unchecked; the broker answers the exception's message.
    return AttributeRefused(f"Index {index} out of bounds for length {length}")


def parse_modification(text: str | None) -> dict[str, str]:
    """``{signed key: value}`` of a modification string (Java ``AttributeParser.parseToMap``);
    empty for None or "". Raises AttributeRefused for a malformed item or a repeated key."""
    modification: dict[str, str] = {}
    if not text:
        return modification
    for item in _java_split(text, _SEPARATOR):
        if _EQUALS in item:
            pieces = _java_split(item, _EQUALS)
            if len(pieces) < 2:
                raise _index_error(len(pieces), len(pieces))
            key, value = pieces[0], pieces[1]
            if _ADD not in key:
                raise AttributeRefused(f"add/alter attribute format is wrong: {key}")
        else:
            key, value = item, ""
            if _DELETE not in key:
                raise AttributeRefused(f"delete attribute format is wrong: {key}")
        if key in modification:
            raise AttributeRefused(f"key duplication: {key}")
        modification[key] = value
    return modification


def _check_real_key(real_key: str, seen: set[str]) -> None:
    if not real_key or _ADD in real_key or _DELETE in real_key:
        raise AttributeRefused("kv string format wrong.")
    if real_key in seen:
        raise AttributeRefused(f"alter duplication key. key: {real_key}")
    seen.add(real_key)


def _validate(table: dict[str, Attribute], changes: dict[str, str], initial: bool,
              deleting: bool) -> None:
    for key in put_order(list(changes)):
        attribute = table.get(key)
        if attribute is None:
            raise AttributeRefused(f"unsupported key: {key}")
        if not initial and not attribute.changeable:
            raise AttributeRefused(f"attempt to update an unchangeable attribute. key: {key}")
        if not deleting:
            attribute.verify(changes[key])


def apply_modification(table: dict[str, Attribute], creating: bool, current: dict[str, str],
                       modification: dict[str, str]) -> dict[str, str]:
    """The attributes after applying ``modification`` (from :func:`parse_modification`, or a
    subscription group body's signed map) to ``current`` (Java
    ``AttributeUtil.alterCurrentAttributes``). ``creating``: the topic or group is new.
    Raises AttributeRefused; ``current`` is never changed."""
    initial: dict[str, str] = {}
    added: dict[str, str] = {}
    updated: dict[str, str] = {}
    deleted: dict[str, str] = {}
    seen: set[str] = set()
    for key in put_order(list(modification)):
        real_key = key[1:]
        _check_real_key(real_key, seen)
        value = modification[key]
        if creating:
            if not key.startswith(_ADD):
                raise AttributeRefused("only add attribute is supported while creating "
                                       f"topic. key: {real_key}")
            initial[real_key] = value
        elif key.startswith(_ADD):
            (updated if real_key in current else added)[real_key] = value
        elif key.startswith(_DELETE):
            if real_key not in current:
                raise AttributeRefused(f"attempt to delete a nonexistent key: {real_key}")
            deleted[real_key] = value
        else:   # only a group body's map can hold an unsigned key
            raise AttributeRefused(f"wrong format key: {real_key}")
    _validate(table, initial, True, False)
    _validate(table, added, False, False)
    _validate(table, updated, False, False)
    _validate(table, deleted, False, True)
    final = {**current, **initial, **added, **updated}
    for key in deleted:
        del final[key]
    return final

