# Consumer group configs and subscriptionGroup.json (Java SubscriptionGroupManager).
"""The broker's subscription group configs, persisted in ``config/subscriptionGroup.json``.

Java 4.9's system groups are put in at start. An unknown group is created on first use when
``autoCreateSubscriptionGroup`` is on (or it is a ``CID_RMQ_SYS_`` group), as Java's
``findSubscriptionGroupConfig`` does. Every change bumps the data version, persists at once and
calls ``on_change()``.
"""
import logging
from collections.abc import Callable, Mapping
from typing import Any

from pybroker.broker import attributes
from pybroker.config import BrokerConfig
from pybroker.broker.managers.versioned import VersionedDocumentManager
from pybroker.protocol import constants
from pybroker.store import config_docs
from pybroker.store.config_docs import SubscriptionGroupConfig, SubscriptionGroupDocument

__all__ = ["SubscriptionGroupManager", "group_table_from_snapshot", "auto_created",
           "SYSTEM_GROUP_PREFIX"]

log = logging.getLogger("pybroker.broker.metadata")

SYSTEM_GROUP_PREFIX = constants.SYSTEM_GROUP_PREFIX
# Groups Java 4.9's SubscriptionGroupManager creates at start (all with default settings).
_SYSTEM_GROUPS = ("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP",
                  "CID_ONS-HTTP-PROXY", "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION",
                  "CID_ONSAPI_OWNER")


def auto_created(group: str, auto_create_subscription_group: bool) -> bool:
    """Whether a lookup of unknown ``group`` creates it (Java findSubscriptionGroupConfig)."""
    return auto_create_subscription_group or group.startswith(SYSTEM_GROUP_PREFIX)


def group_table_from_snapshot(value: Any) -> dict[str, SubscriptionGroupConfig]:
    """The group table of a :meth:`SubscriptionGroupManager.snapshot` (a replica's copy)."""
    return SubscriptionGroupDocument.from_json(value).subscription_group_table


class SubscriptionGroupManager(VersionedDocumentManager):
    """Subscription group configs of one broker (single writer: the metadata service)."""

    def __init__(self, path: str, broker: BrokerConfig, on_change: Callable[[], None]):
        self.path = path
        self.broker = broker
        self.on_change = on_change
        self.document: SubscriptionGroupDocument = config_docs.load_subscription_groups(path)
        table = self.document.subscription_group_table
        for group in _SYSTEM_GROUPS:
            table.setdefault(group, SubscriptionGroupConfig(group))

    # --- reads ----------------------------------------------------------------------------------
    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The config of ``group`` when it has one (never creates one)."""
        return self.document.subscription_group_table.get(group)

    def subscription_group(self, group: str) -> SubscriptionGroupConfig | None:
        """The config of ``group``; created (and persisted) when absent and
        autoCreateSubscriptionGroup is on or the group is a ``CID_RMQ_SYS_`` group."""
        found = self.find(group)
        if found is not None:
            return found
        if not auto_created(group, self.broker.auto_create_subscription_group):
            return None
        created = SubscriptionGroupConfig(group)
        self.update_subscription_group(created)
        log.info("auto create a subscription group %s", group)
        return created

    def subscription_groups(self) -> Mapping[str, SubscriptionGroupConfig]:
        """All subscription group configs by name (the live table; do not mutate)."""
        return self.document.subscription_group_table

    def has_subscription_group(self, group: str) -> bool:
        """True when ``group`` has a config (never creates one)."""
        return group in self.document.subscription_group_table

    def to_json(self) -> dict:
        """subscriptionGroup.json's content (GET_ALL_SUBSCRIPTIONGROUP_CONFIG's body)."""
        return self.document.to_json()

    def snapshot(self) -> dict:
        """This manager's part of a replica snapshot (:func:`group_table_from_snapshot`)."""
        return self.document.to_json()

    # --- writes ---------------------------------------------------------------------------------
    def update_subscription_group(self, group_config: SubscriptionGroupConfig,
                                  modification: dict[str, str] | None = None) -> None:
        """Create or replace a group's config; persisted, data version bumped. Its attributes
        are the current ones changed by ``modification`` (signed keys; Java 5.3.3 knows no
        group attribute, so any key raises AttributeRefused and nothing changes);
        ``group_config`` comes without attributes."""
        assert not group_config.attributes, "attributes change through a modification"
        previous = self.find(group_config.group_name)
        group_config.attributes = attributes.apply_modification(
            attributes.GROUP_ATTRIBUTES, previous is None,
            previous.attributes if previous is not None else {}, modification or {})
        self.document.subscription_group_table[group_config.group_name] = group_config
        self._changed()

    def delete_subscription_group(self, group: str) -> SubscriptionGroupConfig | None:
        """Remove a group's config (persisted); returns it, or None when absent."""
        removed = self.document.subscription_group_table.pop(group, None)
        if removed is not None:
            self._changed()
        return removed

    def persist(self) -> None:
        """Write subscriptionGroup.json (safe write)."""
        config_docs.save_subscription_groups(self.path, self.document)
