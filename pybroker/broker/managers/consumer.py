# Live consumer connections and their subscriptions by group (Java ConsumerManager).
"""Consumer groups registered by heartbeat: members (channels) and subscriptions.

When a group's membership or subscriptions change, ``on_ids_changed(group)`` is called (Java's
ConsumerIdsChangeListener: the owner decides whether to notify the members); whenever any
group's subscriptions change, :attr:`ConsumerManager.subscription_version` moves and
``on_change()`` is called (the owner pushes a snapshot to the workers).
"""
import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import Any

from pybroker.broker.managers.client_channel import ClientChannelInfo
from pybroker.protocol.bodies import SubscriptionData
from pybroker.protocol.constants import ConsumeFromWhere, ConsumeType, MessageModel

__all__ = ["ConsumerManager", "ConsumerGroupInfo", "subscription_to_json",
           "subscriptions_from_snapshot"]

log = logging.getLogger("pybroker.broker.metadata")


@dataclasses.dataclass
class ConsumerGroupInfo:
    """The live members of one consumer group and what they subscribe to."""
    group_name: str
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    channels: dict[str, ClientChannelInfo] = dataclasses.field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = dataclasses.field(default_factory=dict)
    last_update_ms: int = 0

    def client_ids(self) -> list[str]:
        """Client ids of the live members, in registration order."""
        return [info.client_id for info in self.channels.values()]


# --- subscription JSON (snapshots, and ConsumerConnection bodies) ------------------------------
def subscription_to_json(subscription: SubscriptionData) -> dict:
    """A SubscriptionData as Java's JSON object (field names of protocol.md §7.3)."""
    return {"topic": subscription.topic, "subString": subscription.sub_string,
            "tagsSet": sorted(subscription.tags_set), "codeSet": sorted(subscription.code_set),
            "subVersion": subscription.sub_version,
            "expressionType": subscription.expression_type,
            "classFilterMode": subscription.class_filter_mode}


def _subscription_from_json(value: dict) -> SubscriptionData:
    return SubscriptionData(
        topic=value["topic"], sub_string=value["subString"],
        tags_set=frozenset(value["tagsSet"]), code_set=frozenset(value["codeSet"]),
        sub_version=value["subVersion"], expression_type=value["expressionType"],
        class_filter_mode=value["classFilterMode"])


def subscriptions_from_snapshot(value: Any) -> dict[str, dict[str, SubscriptionData]]:
    """Group -> topic -> subscription of a :meth:`ConsumerManager.snapshot`."""
    return {group: {s["topic"]: _subscription_from_json(s) for s in subscriptions}
            for group, subscriptions in value.items()}


class ConsumerManager:
    """Consumer groups of one broker; ``now_ms`` is the clock (ms)."""

    def __init__(self, now_ms: Callable[[], int], on_ids_changed: Callable[[str], object],
                 on_change: Callable[[], None]):
        self.now_ms = now_ms
        self.on_ids_changed = on_ids_changed
        self.on_change = on_change
        self.consumer_groups: dict[str, ConsumerGroupInfo] = {}
        self.subscription_version = 0      # bumped whenever any group's subscriptions change
        # 5.x heartbeat V2: the last fingerprint each consumer group sent.
        self.heartbeat_fingerprints: dict[str, int] = {}

    # --- reads ----------------------------------------------------------------------------------
    def consumer_group_info(self, group: str) -> ConsumerGroupInfo | None:
        """Live members and subscriptions of ``group``, or None."""
        return self.consumer_groups.get(group)

    def consumer_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        """The subscription of ``group`` to ``topic`` its members registered by heartbeat."""
        info = self.consumer_groups.get(group)
        return None if info is None else info.subscriptions.get(topic)

    def consumer_client_ids(self, group: str) -> list[str]:
        """Client ids of the live consumers of ``group`` (empty when none)."""
        info = self.consumer_groups.get(group)
        return [] if info is None else info.client_ids()

    def find_consumer_channel(self, group: str, client_id: str) -> ClientChannelInfo | None:
        """The live member of ``group`` with ``client_id`` (for 307/309 forwarding)."""
        info = self.consumer_groups.get(group)
        if info is None:
            return None
        for client in info.channels.values():
            if client.client_id == client_id:
                return client
        return None

    def consumer_groups_of_topic(self, topic: str) -> set[str]:
        """Groups with a live member subscribed to ``topic``."""
        return {group for group, info in self.consumer_groups.items()
                if topic in info.subscriptions}

    def channel_ids(self) -> set[str]:
        """Every registered consumer channel id."""
        return {channel_id for info in self.consumer_groups.values()
                for channel_id in info.channels}

    def expired_channels(self, now_ms: int, limit_ms: int) -> set[str]:
        """Channel ids without a heartbeat for more than ``limit_ms`` at ``now_ms``."""
        return {channel_id for info in self.consumer_groups.values()
                for channel_id, client in info.channels.items()
                if now_ms - client.last_update_ms > limit_ms}

    def snapshot(self) -> dict:
        """This manager's part of a replica snapshot: every group's subscriptions
        (:func:`subscriptions_from_snapshot`)."""
        return {group: [subscription_to_json(s) for s in info.subscriptions.values()]
                for group, info in self.consumer_groups.items() if info.subscriptions}

    # --- writes ---------------------------------------------------------------------------------
    def register_consumer(self, group: str, client: ClientChannelInfo,
                          consume_type: ConsumeType, message_model: MessageModel,
                          consume_from_where: ConsumeFromWhere,
                          subscriptions: Iterable[SubscriptionData] | None,
                          notify_enabled: bool = True) -> bool:
        """Register a consumer's heartbeat; True when the group's membership or
        subscriptions changed (then ``on_ids_changed(group)`` if ``notify_enabled``).
        ``subscriptions`` None = a 5.x "without sub" heartbeat: subscriptions unchanged."""
        now_ms = self.now_ms()
        info = self.consumer_groups.get(group)
        if info is None:
            info = self.consumer_groups[group] = ConsumerGroupInfo(group)
        info.consume_type = ConsumeType(consume_type)
        info.message_model = MessageModel(message_model)
        info.consume_from_where = ConsumeFromWhere(consume_from_where)
        info.last_update_ms = now_ms
        client.last_update_ms = now_ms
        members_changed = self._update_channel(info, client)
        subscriptions_changed = (subscriptions is not None
                                 and self._update_subscriptions(info, subscriptions))
        if (members_changed or subscriptions_changed) and notify_enabled:
            self._ids_changed(info)
        return members_changed or subscriptions_changed

    @staticmethod
    def _update_channel(info: ConsumerGroupInfo, client: ClientChannelInfo) -> bool:
        previous = info.channels.get(client.channel_id)
        info.channels[client.channel_id] = client
        if previous is None:
            log.info("new consumer connected, group: %s %s", info.group_name, client.client_id)
            return True
        if previous.client_id != client.client_id:
            log.error("consumer channel exists with client id %s, new %s", previous.client_id,
                      client.client_id)
        return False

    def _update_subscriptions(self, info: ConsumerGroupInfo,
                              subscriptions: Iterable[SubscriptionData]) -> bool:
        changed, version_changed = False, False
        table = info.subscriptions
        topics = set()
        for subscription in subscriptions:
            topics.add(subscription.topic)
            previous = table.get(subscription.topic)
            if previous is None:
                table[subscription.topic] = subscription
                changed = True
            elif subscription.sub_version > previous.sub_version:
                # A newer expression: kept, but (like Java) not a membership change.
                table[subscription.topic] = subscription
                version_changed = True
        for topic in [topic for topic in table if topic not in topics]:
            del table[topic]
            changed = True
        if changed or version_changed:
            self._subscriptions_changed()
        return changed

    def unregister_consumer(self, group: str, channel_id: str, notify_enabled: bool = True
                            ) -> bool:
        """Remove one channel from ``group`` (UNREGISTER_CLIENT); True if it was there."""
        info = self.consumer_groups.get(group)
        if info is None or info.channels.pop(channel_id, None) is None:
            return False
        if not info.channels:
            self._drop_group(group)
        elif notify_enabled:
            self._ids_changed(info)
        return True

    def remove_channels(self, channel_ids: set[str]) -> None:
        """Drop these channels from every group; the rest of each group is notified."""
        for group, info in list(self.consumer_groups.items()):
            removed = [cid for cid in channel_ids if info.channels.pop(cid, None) is not None]
            if not removed:
                continue
            if not info.channels:
                self._drop_group(group)
            else:
                self._ids_changed(info)

    def _ids_changed(self, info: ConsumerGroupInfo) -> None:
        """Tell the owner a group's members or subscriptions changed, unless the group consumes
        by broadcasting: each member of such a group reads every queue whoever else is there,
        so Java 5.x's ConsumerManager fires no CHANGE for it (4.9.x did). A notified member
        re-balances at once, and a broadcasting one then bumps its subscription version and
        pulls with it before its next heartbeat carries it: every pull meanwhile is answered
        SUBSCRIPTION_NOT_LATEST (seen with rocketmq-proxy 5.3.3's system consumer)."""
        if info.message_model != MessageModel.BROADCASTING:
            self.on_ids_changed(info.group_name)

    def _drop_group(self, group: str) -> None:
        info = self.consumer_groups.pop(group, None)
        log.info("unregister consumer group %s: no live members", group)
        if info is not None and info.subscriptions:
            self._subscriptions_changed()

    def _subscriptions_changed(self) -> None:
        self.subscription_version += 1
        self.on_change()
