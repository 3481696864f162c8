# Committed consumer offsets and consumerOffset.json (Java ConsumerOffsetManager).
"""Consumer offsets by (group, topic, queue), persisted in ``config/consumerOffset.json``.

Commits only mark the table dirty; the owner calls :meth:`ConsumerOffsetManager.persist_if_dirty`
every ``flushConsumerOffsetInterval`` ms and at shutdown, as Java's timer does.
"""
from collections.abc import Callable

from pybroker.store import config_docs
from pybroker.store.config_docs import ConsumerOffsetDocument

__all__ = ["ConsumerOffsetManager", "offset_table_key"]


def offset_table_key(group: str, topic: str) -> str:
    """consumerOffset.json's key of a (group, topic): ``topic@group``."""
    return f"{topic}@{group}"


class ConsumerOffsetManager:
    """Committed offsets of one broker (single writer: the metadata service)."""

    def __init__(self, path: str):
        self.path = path
        self.document: ConsumerOffsetDocument = config_docs.load_consumer_offsets(path)
        self.dirty = False
        # Told of every commit but POP's own (commit_popped): the POP state of the queue
        # takes it (broker/pop/directory.py). Arguments: group, topic, queue id, offset, reset.
        self.listener: Callable[[str, str, int, int, bool], None] | None = None

    def commit(self, group: str, topic: str, queue_id: int, consumer_offset: int,
               reset: bool = False) -> None:
        """Record ``consumer_offset`` of (group, topic, queue_id); persisted within the next
        :meth:`persist_if_dirty` (every flushConsumerOffsetInterval ms) or at shutdown.
        ``reset``: an operator's reset (a POP of the queue then starts there even when it was
        further), not a client's commit."""
        self.commit_popped(group, topic, queue_id, consumer_offset)
        if self.listener is not None:
            self.listener(group, topic, queue_id, consumer_offset, reset)

    def commit_popped(self, group: str, topic: str, queue_id: int, consumer_offset: int) -> None:
        """Record an offset POP committed (its own state has it already: no listener)."""
        queues = self.document.offset_table.setdefault(offset_table_key(group, topic), {})
        queues[queue_id] = consumer_offset
        self.dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed consumer offset, or -1 when none was committed."""
        queues = self.document.offset_table.get(offset_table_key(group, topic))
        if queues is None:
            return -1
        return queues.get(queue_id, -1)

    def consumer_offsets(self, group: str, topic: str) -> dict[int, int]:
        """{queue_id: consumer_offset} of (group, topic); empty when none (a copy)."""
        return dict(self.document.offset_table.get(offset_table_key(group, topic), {}))

    def topics_of_group(self, group: str) -> set[str]:
        """Topics ``group`` has committed offsets for."""
        suffix = "@" + group
        return {key[:-len(suffix)] for key in self.document.offset_table if key.endswith(suffix)}

    def groups_of_topic(self, topic: str) -> set[str]:
        """Groups that committed offsets for ``topic``."""
        prefix = topic + "@"
        return {key[len(prefix):] for key in self.document.offset_table
                if key.startswith(prefix)}

    def remove_offsets_of_group(self, group: str) -> None:
        """Forget every offset of ``group`` (DELETE_SUBSCRIPTIONGROUP with removeOffset)."""
        self._remove(lambda key: key.rsplit("@", 1)[-1] == group)

    def remove_offsets_of_topic(self, topic: str) -> None:
        """Forget every offset of ``topic`` (topic deleted)."""
        self._remove(lambda key: key.rsplit("@", 1)[0] == topic)

    def _remove(self, matches: Callable[[str], bool]) -> None:
        table = self.document.offset_table
        doomed = [key for key in table if matches(key)]
        for key in doomed:
            del table[key]
        if doomed:
            self.dirty = True

    def merge_from_master(self, document: ConsumerOffsetDocument) -> None:
        """A slave overwrites the offsets its master has (Java putAll: entries only the slave
        has, e.g. commits made while the master was down, stay); persisted now."""
        self.document.offset_table.update(document.offset_table)
        self.persist()

    def to_json(self) -> dict:
        """consumerOffset.json's content (GET_ALL_CONSUMER_OFFSET's body)."""
        return self.document.to_json()

    def persist_if_dirty(self) -> bool:
        """Write consumerOffset.json when offsets changed since the last write; True if
        written."""
        if not self.dirty:
            return False
        self.dirty = False
        try:
            config_docs.save_consumer_offsets(self.path, self.document)
        except BaseException:
            self.dirty = True
            raise
        return True

    def persist(self) -> None:
        """Write consumerOffset.json now (shutdown)."""
        self.dirty = True
        self.persist_if_dirty()
