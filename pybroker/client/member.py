"""What the client's producers and consumers share as members of a ClientInstance.

One implementation of ``async with`` (start, then shut down) for every member, and of the
consumer's heartbeat entry and route topics, which differ between consumer kinds only in the
consume type (Java's ConsumeType: CONSUME_PASSIVELY push, CONSUME_ACTIVELY lite pull,
CONSUME_POP pop) and the message model.
"""
from typing import Any, ClassVar, Optional, Self

from pybroker.client.instance import ClientInstance
from pybroker.protocol.bodies import ConsumerData, SubscriptionData
from pybroker.protocol.constants import ConsumeFromWhere, ConsumeType, MessageModel

__all__ = ["InstanceMember", "ConsumerMember", "member_instance"]


def member_instance(namesrv_addr: Optional[str], instance: Optional[ClientInstance],
                    instance_options: dict[str, Any]) -> ClientInstance:
    """The shared ``instance`` a member was given, else a new one for ``namesrv_addr``."""
    if instance is not None:
        return instance
    if namesrv_addr is None:
        raise ValueError("give namesrv_addr or an instance")
    return ClientInstance(namesrv_addr, **instance_options)


class InstanceMember:
    """A producer, consumer or admin: ``async with member:`` starts it and shuts it down."""

    async def start(self) -> None:
        raise NotImplementedError

    async def shutdown(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.shutdown()


class ConsumerMember(InstanceMember):
    """A consumer group's member: its heartbeat entry and the topics whose routes it needs."""

    CONSUME_TYPE: ClassVar[ConsumeType]
    group: str
    subscriptions: dict[str, SubscriptionData]
    consume_from_where: ConsumeFromWhere
    message_model: MessageModel = MessageModel.CLUSTERING

    def consumer_data(self) -> ConsumerData:
        """This group's entry in the heartbeat."""
        return ConsumerData(group_name=self.group, consume_type=self.CONSUME_TYPE,
                            message_model=self.message_model,
                            consume_from_where=self.consume_from_where,
                            subscriptions=list(self.subscriptions.values()))

    def route_topics(self) -> list[str]:
        """Topics whose routes the instance keeps fresh for this consumer."""
        return list(self.subscriptions)
