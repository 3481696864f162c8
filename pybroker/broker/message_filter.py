# What a pull filters by: tag codes on the consume queue, an SQL92 selector on each record.
"""The message filter of a pull (Java ``ExpressionMessageFilter``), built from its subscription.

A TAG subscription filters consume-queue units by tag hash code (the store does it with numpy).
An SQL92 subscription (broker setting ``enablePropertyFilter``) filters each candidate record
by its properties: the selector is compiled once per expression text
(:func:`pybroker.filter.cached_selector`) and the store calls :func:`record_filter_of`'s
closure with the record's bytes. Refusals use the Java broker's codes and remarks; the retry
topic has its own TAG ``*`` subscription, so retried messages pass unfiltered as in Java.
"""
from typing import Callable, NamedTuple

from pybroker._fast import record as record_codec
from pybroker.filter import CompiledSelector, SelectorError, cached_selector
from pybroker.protocol import constants
from pybroker.protocol.bodies import SubscriptionData, build_subscription
from pybroker.protocol.codes import ResponseCode
from pybroker.protocol.properties import decode_properties

__all__ = ["MessageFilter", "FilterRefused", "message_filter", "pop_message_filter",
           "record_filter_of", "UNSUPPORTED_REMARK"]

UNSUPPORTED_REMARK = "The broker does not support consumer to filter message by "
_FILTER_DATA_NOT_EXIST = ("The broker's consumer filter data is not exist!Your expression may "
                          "be wrong!")
_PARSE_FAILED = "parse the consumer's subscription failed"


class FilterRefused(Exception):
    """A pull refused because of its subscription's expression (code and Java's remark)."""

    def __init__(self, code: int, remark: str):
        super().__init__(remark)
        self.code = code
        self.remark = remark


class MessageFilter(NamedTuple):
    """``tag_codes``: consume-queue tag codes to match (None: all). ``record_filter``: the
    per-record test the store calls (None: none). ``selector``: the compiled SQL92 selector."""
    tag_codes: frozenset[int] | None
    record_filter: Callable | None = None
    selector: CompiledSelector | None = None

    @property
    def filters(self) -> bool:
        """Whether some messages may be skipped."""
        return self.tag_codes is not None or self.record_filter is not None


def _is_tag_type(expression_type: str | None) -> bool:
    return expression_type is None or expression_type == constants.EXPRESSION_TYPE_TAG


def record_filter_of(selector: CompiledSelector) -> Callable:
    """The store's per-record test for ``selector``: properties read from the record bytes,
    decoded as Java decodes them, evaluated; a record that does not decode is not matched."""
    read, decode, matches = record_codec.read_properties, decode_properties, selector.matches

    def record_filter(view) -> bool:
        try:
            return matches(decode(read(view, 0)))
        except ValueError:
            return False
    return record_filter


def message_filter(subscription: SubscriptionData, from_request: bool,
                   property_filter_enabled: bool) -> MessageFilter:
    """The filter of a pull's subscription; FilterRefused as the Java broker refuses it.

    ``from_request``: the expression came with the pull (SUBSCRIPTION flag) rather than from
    the consumer's heartbeat. Java's order: a pull's own expression is refused at once when
    property filtering is off; a heartbeat expression that does not compile is "filter data
    not exist"; a pull expression that does not compile is a parse failure (Java 4.9 would then
    deliver unfiltered: docs/compatibility.md); anything else non-TAG needs enablePropertyFilter.
    """
    expression_type = subscription.expression_type
    if _is_tag_type(expression_type):
        if subscription.class_filter_mode or subscription.sub_string == constants.SUBSCRIBE_ALL:
            return MessageFilter(None)
        return MessageFilter(subscription.code_set)
    unsupported = FilterRefused(ResponseCode.SYSTEM_ERROR, UNSUPPORTED_REMARK + expression_type)
    if from_request and not property_filter_enabled:
        raise unsupported
    if expression_type != constants.EXPRESSION_TYPE_SQL92:
        if from_request:
            raise unsupported
        raise FilterRefused(ResponseCode.FILTER_DATA_NOT_EXIST, _FILTER_DATA_NOT_EXIST)
    try:
        selector = cached_selector(subscription.sub_string or "")
    except SelectorError:
        if from_request:
            raise FilterRefused(ResponseCode.SUBSCRIPTION_PARSE_FAILED, _PARSE_FAILED) from None
        raise FilterRefused(ResponseCode.FILTER_DATA_NOT_EXIST, _FILTER_DATA_NOT_EXIST) from None
    if not property_filter_enabled:
        raise unsupported
    return MessageFilter(None, record_filter_of(selector), selector)


def pop_message_filter(topic: str, expression: str | None,
                       expression_type: str | None) -> MessageFilter:
    """The filter of a POP's ``exp``/``expType`` (Java PopMessageProcessor: FilterAPI.build,
    ConsumerFilterManager.build). Unlike a pull, an SQL92 expression is compiled whatever
    enablePropertyFilter says, as Java does; one that does not compile, or another type,
    is SUBSCRIPTION_PARSE_FAILED. It filters the group's retry topic too."""
    if not expression:
        return MessageFilter(None)
    if _is_tag_type(expression_type):
        try:
            subscription = build_subscription(topic, expression, constants.EXPRESSION_TYPE_TAG,
                                              0)
        except ValueError:
            raise FilterRefused(ResponseCode.SUBSCRIPTION_PARSE_FAILED, _PARSE_FAILED) from None
        if subscription.sub_string == constants.SUBSCRIBE_ALL:
            return MessageFilter(None)
        return MessageFilter(subscription.code_set)
    if expression_type != constants.EXPRESSION_TYPE_SQL92:
        raise FilterRefused(ResponseCode.SUBSCRIPTION_PARSE_FAILED, _PARSE_FAILED)
    try:
        selector = cached_selector(expression)
    except SelectorError:
        raise FilterRefused(ResponseCode.SUBSCRIPTION_PARSE_FAILED, _PARSE_FAILED) from None
    return MessageFilter(None, record_filter_of(selector), selector)
