# How a consumer selects messages of a topic: a tag expression or an SQL92 selector.
"""``MessageSelector`` (Java ``MessageSelector``): what ``subscribe`` accepts besides a tag
expression string.

``MessageSelector.by_sql("a > 5 AND TAGS IN ('TagA')")`` makes the broker evaluate the selector
against every message's properties (the broker needs ``enablePropertyFilter=true``);
``MessageSelector.by_tag("TagA || TagB")`` is the same as passing the string.
The broker filters a TAG subscription by hash code only: :func:`matches` checks the tag text
again in the client (the push consumer's pull loop, the POP consumers).
"""
import dataclasses

from pybroker.client.message import MessageExt
from pybroker.protocol import bodies
from pybroker.protocol.constants import (EXPRESSION_TYPE_SQL92, EXPRESSION_TYPE_TAG,
                                         SUBSCRIBE_ALL)

__all__ = ["MessageSelector", "matches", "subscription_of"]


@dataclasses.dataclass(frozen=True)
class MessageSelector:
    """``expression_type``: ``"TAG"`` or ``"SQL92"``; ``expression``: its text."""
    expression_type: str
    expression: str

    @classmethod
    def by_sql(cls, sql: str) -> "MessageSelector":
        """An SQL92 selector over message properties (``TAGS`` is the tag)."""
        return cls(EXPRESSION_TYPE_SQL92, sql)

    @classmethod
    def by_tag(cls, tags: str = SUBSCRIBE_ALL) -> "MessageSelector":
        """A tag expression: ``"*"`` or ``"TagA || TagB"``."""
        return cls(EXPRESSION_TYPE_TAG, tags)


def subscription_of(topic: str, selector: "str | MessageSelector",
                    sub_version: int) -> bodies.SubscriptionData:
    """The subscription data a heartbeat and a pull carry for ``selector``; ValueError for an
    empty SQL92 expression or an unknown type."""
    if isinstance(selector, MessageSelector):
        return bodies.build_subscription(topic, selector.expression, selector.expression_type,
                                         sub_version)
    return bodies.build_subscription(topic, selector, EXPRESSION_TYPE_TAG, sub_version)


def matches(subscription: bodies.SubscriptionData, message: MessageExt) -> bool:
    """True when ``message``'s tag passes a TAG subscription (the broker filters by hash code
    only, so the client checks the tag text again)."""
    if not subscription.tags_set:
        return True
    return message.tags in subscription.tags_set
