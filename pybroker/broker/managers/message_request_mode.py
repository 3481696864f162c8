# How each consumer group consumes each topic, PULL or POP (Java 5.x MessageRequestModeManager).
"""The message request modes set by SET_MESSAGE_REQUEST_MODE (401), persisted in
``config/messageRequestMode.json`` and served whole by GET_ALL_MESSAGE_REQUEST_MODE (402).

Only the metadata: who reads a group's mode to consume by POP is the POP service. A slave
takes its master's table with Java's SlaveSynchronize rule (:meth:`replace_from_master`).
"""
import logging

from pybroker.store import config_docs
from pybroker.store.config_docs import MessageRequestModeDocument, RequestMode

__all__ = ["MessageRequestModeManager", "MESSAGE_REQUEST_MODES"]

log = logging.getLogger("pybroker.broker.metadata")

# Java MessageRequestMode.
MESSAGE_REQUEST_MODES = ("PULL", "POP")


class MessageRequestModeManager:
    """Request modes of one broker (single writer: the metadata service)."""

    def __init__(self, path: str):
        self.path = path
        self.document: MessageRequestModeDocument = config_docs.load_message_request_modes(path)

    def mode(self, topic: str, group: str) -> RequestMode | None:
        """The mode set for ``group`` on ``topic``, or None."""
        return self.document.mode_table.get(topic, {}).get(group)

    def set_mode(self, request_mode: RequestMode) -> None:
        """Record a group's mode on a topic (replacing the previous one); persisted."""
        groups = self.document.mode_table.setdefault(request_mode.topic, {})
        groups[request_mode.consumer_group] = request_mode
        log.info("set message request mode %s", request_mode)
        self.persist()

    def to_json(self) -> dict:
        """messageRequestMode.json's content (GET_ALL_MESSAGE_REQUEST_MODE's body)."""
        return self.document.to_json()

    def replace_from_master(self, document: MessageRequestModeDocument) -> bool:
        """A slave's sync (Java SlaveSynchronize.syncMessageRequestMode): topics the master
        does not have are dropped, the master's topics replace ours whole. Persisted when
        that changed anything (Java writes the same content on every sync). True then."""
        table = self.document.mode_table
        merged = {topic: groups for topic, groups in table.items()
                  if topic in document.mode_table}
        merged.update(document.mode_table)
        if merged == table:
            return False
        self.document.mode_table = merged
        self.persist()
        return True

    def persist(self) -> None:
        """Write messageRequestMode.json (safe write)."""
        config_docs.save_message_request_modes(self.path, self.document)
