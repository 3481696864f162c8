# The NameServer's KV config: string maps by namespace, persisted to kvConfigPath (KVConfigManager).
"""Namespaced key/value settings kept by the NameServer (PUT/GET/DELETE_KV_CONFIG, protocol.md
§2.11).

The file is Java's ``KVConfigSerializeWrapper`` document, ``{"configTable":{namespace:{key:
value}}}``, so a Java NameServer's ``kvConfig.json`` loads here and the reverse. Every change is
written with the store's safe write (tmp + bak + rename, each fsynced); KV changes are rare admin
operations, so writing synchronously is fine.
"""
import logging
import os
from typing import Any

from pybroker.store.config_docs import load_json_document, save_json_document

log = logging.getLogger(__name__)

# Namespace whose values become a route's orderTopicConf when orderMessageEnable is set.
NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


def _decode_document(document: dict[str, Any]) -> dict[str, dict[str, str]]:
    table = document.get("configTable") or {}
    if not isinstance(table, dict):
        raise ValueError("configTable is not an object")
    config: dict[str, dict[str, str]] = {}
    for namespace, entries in table.items():
        if not isinstance(entries, dict):
            raise ValueError(f"configTable[{namespace!r:.60}] is not an object")
        config[str(namespace)] = {str(key): value if isinstance(value, str) else str(value)
                                  for key, value in entries.items()}
    return config


class KVConfigManager:
    """KV config of one NameServer, loaded from and saved to ``kv_config_path``.

    A missing file is an empty config; a corrupt one with no usable ``.bak`` raises
    :class:`~pybroker.errors.StoreCorruptError` from :meth:`load`. Save failures (OSError)
    propagate.
    """

    def __init__(self, kv_config_path: str | os.PathLike):
        self.kv_config_path = os.fspath(kv_config_path)
        self.config_table: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        """Replace the in-memory table with the file's content (or nothing, if absent)."""
        self.config_table = load_json_document(self.kv_config_path, _decode_document, dict)
        log.info("load KV config table from %s, %d namespaces", self.kv_config_path,
                 len(self.config_table))

    def persist(self) -> None:
        """Write the whole table to ``kv_config_path`` durably."""
        save_json_document(self.kv_config_path, {"configTable": self.config_table})

    def put(self, namespace: str, key: str, value: str) -> None:
        """Set ``namespace/key`` to ``value`` and persist."""
        entries = self.config_table.setdefault(namespace, {})
        previous = entries.get(key)
        entries[key] = value
        if previous is None:
            log.info("putKVConfig create new config item, Namespace: %s Key: %s Value: %s",
                     namespace, key, value)
        else:
            log.info("putKVConfig update config item, Namespace: %s Key: %s Value: %s",
                     namespace, key, value)
        self.persist()

    def delete(self, namespace: str, key: str) -> None:
        """Remove ``namespace/key`` (absent is fine) and persist."""
        entries = self.config_table.get(namespace)
        if entries is None or entries.pop(key, None) is None:
            return
        log.info("deleteKVConfig delete a config item, Namespace: %s Key: %s", namespace, key)
        self.persist()

    def get(self, namespace: str, key: str) -> str | None:
        """The value of ``namespace/key``, or None."""
        entries = self.config_table.get(namespace)
        return None if entries is None else entries.get(key)

    def namespace(self, namespace: str) -> dict[str, str] | None:
        """A copy of every key of ``namespace``, or None when the namespace was never used."""
        entries = self.config_table.get(namespace)
        return None if entries is None else dict(entries)
